package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * The reporter on the device: the outbox and the ledger survive a restart in a FileStore,
 * a repeated value is memoized, report() is safe from several threads, and the time it
 * places reports by is the collector's once it has answered.
 */
class ReporterTest {
    static final String ACK = "{\"accepted\": %d, \"duplicates\": 0, \"rejected\": []}";

    /** Answers every POST by accepting all its reports (it counts the blocks' "n"). */
    static LyingCollector accepting(String... headers) throws Exception {
        return accepting(LyingCollectorTest.served(), headers);
    }

    static LyingCollector accepting(final byte[] served, String... headers) throws Exception {
        return new LyingCollector((request, out, server) -> {
            if (request.method.equals("GET")) {
                server.write(out, LyingCollector.answer(200, served, headers));
                return;
            }
            int n = reportsIn(request.body);
            server.write(out, LyingCollector.answer(200, String.format(ACK, n).getBytes(StandardCharsets.UTF_8), headers));
        }, null);
    }

    /** The reports a sealed batch carries: the sum of its blocks' "n" (a minimal msgpack reader). */
    static int reportsIn(byte[] body) {
        int[] at = {0};
        Object batch = unpack(body, at);
        int n = 0;
        for (Object block : (List<?>) ((Map<?, ?>) batch).get("blocks")) n += ((Number) ((Map<?, ?>) block).get("n")).intValue();
        return n;
    }

    static long be(byte[] b, int[] at, int size) {
        long v = 0;
        for (int i = 0; i < size; i++) v = (v << 8) | (b[at[0]++] & 0xff);
        return v;
    }

    static Object unpack(byte[] b, int[] at) {
        int t = b[at[0]++] & 0xff;
        if (t < 0x80) return (long) t;
        if (t >= 0x80 && t <= 0x8f) return map(b, at, t & 0x0f);
        if (t >= 0x90 && t <= 0x9f) return list(b, at, t & 0x0f);
        if (t >= 0xa0 && t <= 0xbf) return str(b, at, t & 0x1f);
        switch (t) {
            case 0xcc: return be(b, at, 1);
            case 0xcd: return be(b, at, 2);
            case 0xce: return be(b, at, 4);
            case 0xcf: return be(b, at, 8);
            case 0xd9: return str(b, at, (int) be(b, at, 1));
            case 0xda: return str(b, at, (int) be(b, at, 2));
            case 0xc4: return skip(at, (int) be(b, at, 1));
            case 0xc5: return skip(at, (int) be(b, at, 2));
            case 0xc6: return skip(at, (int) be(b, at, 4));
            case 0xdc: return list(b, at, (int) be(b, at, 2));
            default: throw new IllegalArgumentException("msgpack type " + Integer.toHexString(t));
        }
    }

    static Object skip(int[] at, int n) {
        at[0] += n;
        return null;
    }

    static String str(byte[] b, int[] at, int n) {
        String s = new String(b, at[0], n, StandardCharsets.UTF_8);
        at[0] += n;
        return s;
    }

    static List<Object> list(byte[] b, int[] at, int n) {
        List<Object> out = new ArrayList<Object>();
        for (int i = 0; i < n; i++) out.add(unpack(b, at));
        return out;
    }

    static Map<Object, Object> map(byte[] b, int[] at, int n) {
        Map<Object, Object> out = new java.util.LinkedHashMap<Object, Object>();
        for (int i = 0; i < n; i++) out.put(unpack(b, at), unpack(b, at));
        return out;
    }

    @Test
    void theOutboxAndTheLedgerSurviveARestartAndAValueIsMemoized() throws Exception {
        File dir = Files.createTempDirectory("ldpkit-java-device-").toFile();
        try (LyingCollector lying = accepting()) {
            Reporter r = Reporter.builder(lying.url, "t").stateDir(dir).build();
            Receipt first = r.report("theme", "dark");
            assertTrue(first.queued());
            assertEquals(1.0, first.epsilon());
            Receipt again = r.report("theme", "dark"); // the same value, the same window
            assertTrue(again.memoized());
            assertFalse(again.queued());
            assertEquals(0.0, again.epsilon());
            r.report("minutes", 1); // minutes: epsilon 0.5, budget 1 an hour
            r.report("minutes", 2);
            assertThrows(BudgetExceeded.class, () -> r.report("minutes", 3));
            assertEquals(3, r.pending());
            r.close(false);

            // A new process on the same folder: the queue and the ledger are still there.
            Reporter later = Reporter.builder(lying.url, "t").stateDir(dir).build();
            assertEquals(3, later.pending());
            assertEquals(1.0, later.budget().metrics().get("theme").spent());
            assertEquals(1.0, later.budget().metrics().get("minutes").spent());
            assertThrows(BudgetExceeded.class, () -> later.report("minutes", 4));
            assertTrue(later.report("theme", "dark").memoized()); // the memo survived too
            FlushResult sent = later.flush();
            assertEquals(3, sent.sent());
            assertEquals(0, later.pending());
            later.close();
        }
        byte[] state = Files.readAllBytes(new File(dir, "ldpkit-state.json").toPath());
        assertTrue(new String(state, StandardCharsets.UTF_8).contains("\"outbox\":[]"));
    }

    @Test
    void reportIsSafeFromSeveralThreads() throws Exception {
        List<Object> defs = LyingCollectorTest.definitions();
        @SuppressWarnings("unchecked")
        Map<String, Object> minutesDef = (Map<String, Object>) defs.get(1);
        minutesDef.put("budget", 50.0); // not fingerprinted: 100 reports of epsilon 0.5 an hour
        try (LyingCollector lying = accepting(ShapesTest.metricsBody(defs))) {
            // of 8 threads x 50 fresh values, 100 fit
            // Time frozen (the device's clock, and the monotonic one from the collector's
            // answer on): an hour starting mid-run would open a fresh budget window.
            Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).memoize(false)
                    .clock(() -> 1.8e9).monotonic(() -> 0.0).build();
            r.refreshDefinitions();
            final AtomicInteger queued = new AtomicInteger();
            final AtomicInteger refused = new AtomicInteger();
            final CountDownLatch go = new CountDownLatch(1);
            List<Thread> threads = new ArrayList<Thread>();
            for (int t = 0; t < 8; t++) {
                final int k = t;
                Thread thread = new Thread(() -> {
                    try {
                        go.await();
                    } catch (InterruptedException e) {
                        return;
                    }
                    for (int i = 0; i < 50; i++) {
                        try {
                            if (r.report("minutes", k * 50 + i).queued()) queued.incrementAndGet();
                        } catch (BudgetExceeded e) {
                            refused.incrementAndGet();
                        }
                    }
                });
                thread.start();
                threads.add(thread);
            }
            go.countDown();
            for (Thread t : threads) t.join();
            assertEquals(100, queued.get());
            assertEquals(300, refused.get());
            assertEquals(100, r.pending());
            assertEquals(50.0, r.budget().metrics().get("minutes").spent(), 1e-9);
            assertEquals(100, r.flush().sent());
            r.close();
        }
    }

    @Test
    void queuedReportsStayPutWhileAnotherThreadFlushes() throws Exception {
        try (LyingCollector lying = accepting()) {
            Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).memoize(false).batchSize(1).build();
            for (String v : new String[] {"dark", "light", "system"}) r.report("theme", v);
            Thread flusher = new Thread(r::flush);
            flusher.start();
            Receipt during = r.report("spend", 40); // while the flush runs (or after): never lost
            flusher.join();
            assertTrue(during.queued());
            r.flush();
            assertEquals(0, r.pending());
            Set<String> metrics = new HashSet<String>();
            for (LyingCollector.Request q : lying.requests) if (q.method.equals("POST")) metrics.add(new String(q.body, StandardCharsets.ISO_8859_1).contains("spend") ? "spend" : "theme");
            assertEquals(new HashSet<String>(java.util.Arrays.asList("spend", "theme")), metrics);
            r.close();
        }
    }

    @Test
    void deviceTimeIsTheCollectorsOnceItAnswered() throws Exception {
        // The collector says 2023-11-14 22:13:20 GMT; the device clock is 400 days ahead.
        double collector = 1700000000;
        final double[] monotonic = {0};
        try (LyingCollector lying = accepting("Date: Tue, 14 Nov 2023 22:13:20 GMT")) {
            Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).clock(() -> collector + 400 * 86400)
                    .monotonic(() -> monotonic[0]).build();
            r.refreshDefinitions(); // an answer: its Date anchors device time
            monotonic[0] = 7200; // two hours later by the monotonic clock
            Receipt receipt = r.report("theme", "dark");
            // 2023-11-15 00:13:20.5: the collector's day (and hour) of 00:00, not the device's
            assertEquals(1700006400L, receipt.bucket());
            Map<String, Object> minutes = r.budget().metrics().get("minutes").toMap();
            assertEquals(1700006400L, (long) (Long) minutes.get("periodStart"));
            r.close(false);
        }
    }
}
