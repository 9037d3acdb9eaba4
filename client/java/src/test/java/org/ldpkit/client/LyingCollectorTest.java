package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * A lying or broken collector cannot hurt the app (tests/client/test_lying_collector.py):
 * served constants that give more privacy loss than epsilon are refused, an answer that
 * cannot be true acknowledges nothing, a dripped or endless answer ends at its bound, a
 * proxy's 401 page is reported as what it is, and Retry-After is honoured.
 */
class LyingCollectorTest {
    static final Timeout QUICK = new Timeout(2, 5, 3);

    /** The fixture's definitions (theme: grr, epsilon 1, budget 3; minutes; spend). */
    @SuppressWarnings("unchecked")
    static List<Object> definitions() {
        return (List<Object>) Json.parse(Json.write(ShapesTest.cases("budget").get(0).get("definitions")));
    }

    static byte[] served() {
        return ShapesTest.metricsBody(definitions());
    }

    static Reporter reporter(LyingCollector lying) {
        return Reporter.builder(lying.url, "t").store(new MemoryStore()).retries(0, 1, 1, 1).timeout(QUICK).build();
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String nested(int depth) {
        char[] open = new char[depth];
        char[] close = new char[depth];
        Arrays.fill(open, '[');
        Arrays.fill(close, ']');
        return new String(open) + new String(close);
    }

    @SuppressWarnings("unchecked")
    @Test
    void servedConstantsThatLeakMoreThanEpsilonAreRefused() throws Exception {
        List<Object> defs = definitions();
        Map<String, Object> theme = (Map<String, Object>) defs.get(0);
        // keep 1 - 2^-64: a report that is nearly always the true value, under the same fingerprint
        ((Map<String, Object>) theme.get("derived")).put("keep", "ffffffffffffffff");
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(500, new byte[0]), ShapesTest.metricsBody(defs))) {
            Reporter r = reporter(lying);
            UnknownMetric refused = assertThrows(UnknownMetric.class, () -> r.report("theme", "dark"));
            assertTrue(refused.getMessage().contains("minutes, spend"), refused.getMessage());
            assertEquals(1, r.warnings().size(), r.warnings().toString());
            assertTrue(r.warnings().get(0).contains("theme"), r.warnings().toString());
            assertEquals(0, r.pending());
            assertEquals(true, r.report("minutes", 3).queued()); // the honest ones still work
            r.close(false);
        }
    }

    @Test
    void deeplyNestedAnswersAreCollectorErrors() throws Exception {
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(200, utf8(nested(100000))), served())) {
            Reporter r = reporter(lying);
            r.report("theme", "dark");
            assertThrows(CollectorUnavailable.class, r::flush);
            assertEquals(1, r.pending());
            r.close(false);
        }
        byte[] body = utf8("{\"metrics\": " + nested(100000) + "}");
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(200, body), null)) {
            Reporter r = reporter(lying);
            assertThrows(CollectorUnavailable.class, () -> r.report("theme", "dark"));
            assertThrows(CollectorUnavailable.class, r::refreshDefinitions);
            r.close(false);
        }
    }

    @Test
    void impossibleCountsDropNothing() throws Exception {
        String[] answers = {
            "{\"accepted\": -1, \"duplicates\": 4, \"rejected\": []}",
            "{\"accepted\": 4, \"duplicates\": -1, \"rejected\": []}",
            "{\"accepted\": true, \"duplicates\": 2, \"rejected\": []}",
            "{\"accepted\": 3.0, \"duplicates\": 0, \"rejected\": []}",
            "{\"accepted\": 2, \"duplicates\": 0, \"rejected\": [{\"index\": true, \"error\": \"x\"}]}",
            "{\"accepted\": 2, \"duplicates\": 0, \"rejected\": [{\"index\": 0, \"error\": [\"x\"]}]}",
            "{\"accepted\": 2, \"duplicates\": 0, \"rejected\": [{\"index\": 0}]}",
            "{\"accepted\": 2, \"duplicates\": 0, \"rejected\": [{\"index\": 3, \"error\": \"x\"}]}",
            "{\"accepted\": 1, \"duplicates\": 0, \"rejected\": [{\"index\": 0, \"error\": \"x\"}, {\"index\": 0, \"error\": \"x\"}]}",
            "{\"accepted\": 0, \"duplicates\": 0, \"rejected\": \"all of them\"}",
            "{\"accepted\": 4, \"duplicates\": 0, \"rejected\": []}",
            "{\"accepted\": 2, \"duplicates\": 0, \"rejected\": []}",
            "{\"accepted\": 2, \"duplicates\": 0, \"held\": 3, \"rejected\": [{\"index\": 0, \"error\": \"x\"}]}",
            "{\"accepted\": 3, \"duplicates\": 0, \"rejected\": [], \"extra\": " + nested(40000) + "}",
        };
        for (String answer : answers) {
            try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(200, utf8(answer)), served())) {
                Reporter r = reporter(lying);
                for (String v : new String[] {"dark", "light", "system"}) r.report("theme", v);
                assertThrows(CollectorUnavailable.class, r::flush, answer);
                assertEquals(3, r.pending(), answer);
                r.close(false);
            }
        }
    }

    @Test
    void aDrippingAnswerEndsAtTheDeadline() throws Exception {
        StringBuilder pad = new StringBuilder();
        for (int i = 0; i < 600; i++) pad.append(' ');
        byte[] dripped = LyingCollector.answer(200, utf8("{\"accepted\": 1, \"duplicates\": 0, \"rejected\": [], \"x\": \"" + pad + "\"}"));
        try (LyingCollector lying = new LyingCollector(LyingCollector.drip(dripped, 200), served())) {
            Reporter r = reporter(lying); // 0.2 s a byte: over two minutes in all; the deadline is 3 s
            r.report("theme", "dark");
            // the definitions' answer (not lying.sent now: the server counts its bytes after
            // writing them, maybe after the reporter has read them)
            long before = LyingCollector.answer(200, served()).length;
            CollectorUnavailable e = assertThrows(CollectorUnavailable.class, r::flush);
            // ended by its deadline, not by the answer's end: no wall-clock bound needed
            assertTrue(lying.sent.get() - before < dripped.length, "flush() waited for the whole dripped answer: " + (lying.sent.get() - before) + " of " + dripped.length + " bytes; " + e);
            assertTrue(e.getMessage().contains("deadline") || e.getMessage().contains("timed out"), e.getMessage());
            assertEquals(1, r.pending());
            r.close(); // one more try, bounded the same way
            assertTrue(lying.sent.get() - before < 2 * dripped.length);
        }
    }

    @Test
    void anEndlessAnswerIsNotReadIntoMemory() throws Exception {
        for (boolean chunked : new boolean[] {false, true}) {
            try (LyingCollector lying = new LyingCollector(LyingCollector.flood(300L << 20, chunked), served())) {
                Reporter r = reporter(lying);
                r.report("theme", "dark");
                CollectorUnavailable e = assertThrows(CollectorUnavailable.class, r::flush);
                assertTrue(e.getMessage().contains("larger than"), e.getMessage());
                assertEquals(1, r.pending());
                r.close(false);
                lying.close();
                assertTrue(lying.sent.get() < Reporter.MAX_ANSWER_BYTES + (32L << 20), "sent " + lying.sent.get()); // not 300 MB
            }
        }
    }

    @Test
    void a401WithAProxysPageSaysWhatItIs() throws Exception {
        byte[] page = utf8("<html>401 Authorization Required</html>");
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(401, page), null)) {
            Reporter r = reporter(lying);
            CollectorRejected e = assertThrows(CollectorRejected.class, () -> r.report("theme", "dark"));
            assertEquals(401, e.status());
            assertEquals("error", e.error());
            assertEquals("<html>401 Authorization Required</html>", e.detail());
            assertTrue(e.getMessage().contains("401 error: <html>401 Authorization Required</html>"), e.getMessage());
            r.close(false);
        }
    }

    @Test
    void retryAfterIsHonouredAndNothingUnacknowledgedIsDropped() throws Exception {
        final AtomicInteger posts = new AtomicInteger();
        final List<Long> at = new ArrayList<Long>();
        LyingCollector.Scenario busy = (request, out, server) -> {
            at.add(System.nanoTime());
            int n = posts.incrementAndGet();
            if (n <= 2) {
                String error = n == 1 ? "source_rate_limited" : "too_many_requests";
                server.write(out, LyingCollector.answer(429, utf8("{\"error\": \"" + error + "\", \"detail\": \"d\"}"), "Retry-After: 1"));
            } else {
                server.write(out, LyingCollector.answer(200, utf8("{\"accepted\": 1, \"duplicates\": 0, \"rejected\": []}")));
            }
        };
        try (LyingCollector lying = new LyingCollector(busy, served())) {
            // a backoff of 1 ms: only Retry-After can make it wait a second
            Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).retries(4, 1, 1, 300000).build();
            r.report("minutes", 42);
            FlushResult sent = r.flush();
            assertEquals(1, sent.sent());
            assertEquals(3, posts.get());
            assertTrue(at.get(1) - at.get(0) >= 900_000_000L, "waited Retry-After: " + (at.get(1) - at.get(0)) / 1e6 + " ms");
            assertTrue(at.get(2) - at.get(1) >= 900_000_000L, "waited Retry-After: " + (at.get(2) - at.get(1)) / 1e6 + " ms");
            // the same sealed batch each time, byte for byte
            List<LyingCollector.Request> bodies = new ArrayList<LyingCollector.Request>();
            for (LyingCollector.Request q : lying.requests) if (q.method.equals("POST")) bodies.add(q);
            assertTrue(Arrays.equals(bodies.get(0).body, bodies.get(2).body));
            r.close(false);
        }
        // Given up: the report stays queued, the error carries the collector's words.
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(503,
                utf8("{\"error\": \"unavailable\", \"detail\": \"maintenance\"}"), "Retry-After: 0"), served())) {
            Reporter r = reporter(lying);
            r.report("minutes", 1);
            CollectorUnavailable e = assertThrows(CollectorUnavailable.class, r::flush);
            assertEquals(503, e.status());
            assertEquals("unavailable", e.error());
            assertEquals(0.0, e.retryAfter());
            assertEquals(1, r.pending());
            r.close(false);
        }
    }
}
