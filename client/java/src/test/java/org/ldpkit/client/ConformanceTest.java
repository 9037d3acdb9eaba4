package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BiFunction;
import java.util.function.Function;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The conformance kit against this client (client/js/test/conformance.test.js): {@code
 * ldpkit conformance plan}, this client's samplers, {@code ldpkit conformance check}. A
 * deliberately broken OLH and a Gaussian with half the noise must fail it, and a client
 * trusting the served constants is caught accepting the kit's lying definitions. The
 * plan's device script runs through this client's real {@link Reporter} (its store,
 * ledger and memo), offline, its clock reading each step's time; the same reporter without
 * its memo, and one served a budget of 50, must fail it by name.
 */
class ConformanceTest {
    static File dir;
    static File planPath;
    static Map<String, Object> plan;

    @SuppressWarnings("unchecked")
    @BeforeAll
    static void makePlan() throws Exception {
        dir = Files.createTempDirectory("ldpkit-java-conformance-").toFile();
        planPath = new File(dir, "plan.json");
        Python.Run made = Python.ldpkit("conformance", "plan", "--out", planPath.getPath(), "--reports", "3000");
        assertEquals(0, made.status, made.toString());
        plan = (Map<String, Object>) Json.parse(new String(Files.readAllBytes(planPath.toPath()), StandardCharsets.UTF_8));
    }

    /** Seeded words (a ChaCha20 keystream): each batch here, and so its verdict, is fixed. */
    static Words seededWords(long seed) {
        return new CryptoWords(1024, ChaChaWords.seededRandom(seed));
    }

    /** A uniform double in [0, 1) from two words. */
    static double uniform(Words w) {
        return (w.word() * 2097152.0 + (w.word() >>> 11)) / Math.pow(2, 53);
    }

    /** ((a v + b) mod (2^61 - 1)) mod g with 61-bit keys: well-formed reports, the wrong law. */
    static Function<Object, byte[]> textbookOlh(Definition def, Words words) {
        BigInteger p = BigInteger.ONE.shiftLeft(61).subtract(BigInteger.ONE);
        long g = ((Number) def.derived().get("g")).longValue();
        double e = Math.exp(def.epsilon);
        double keep = e / (e + g - 1);
        return x -> {
            BigInteger a = BigInteger.ONE.add(BigInteger.valueOf((long) Math.floor(uniform(words) * Math.pow(2, 52))).mod(p.subtract(BigInteger.ONE)));
            BigInteger b = BigInteger.valueOf((long) Math.floor(uniform(words) * Math.pow(2, 52)));
            long y = a.multiply(BigInteger.valueOf((Long) x)).add(b).mod(p).mod(BigInteger.valueOf(g)).longValue();
            if (uniform(words) >= keep) {
                long o = (long) Math.floor(uniform(words) * (g - 1));
                y = o + (o >= y ? 1 : 0);
            }
            byte[] out = new byte[20];
            long av = a.longValue();
            long bv = b.longValue();
            for (int i = 0; i < 8; i++) {
                out[i] = (byte) (av >>> (8 * i));
                out[8 + i] = (byte) (bv >>> (8 * i));
            }
            for (int i = 0; i < 4; i++) out[16 + i] = (byte) (y >>> (8 * i));
            return out;
        };
    }

    /** The discrete Gaussian with half the served sigma (a misread calibration). */
    static Function<Object, byte[]> halfNoiseGaussian(Definition def, Words words) {
        Map<String, Object> derived = new LinkedHashMap<String, Object>(def.derived());
        double s = Math.sqrt(((Number) derived.get("t")).doubleValue() * ((Number) derived.get("m")).doubleValue()) / 2;
        long t = (long) Math.floor(s) + 1;
        derived.put("t", t);
        derived.put("m", (long) Math.ceil(s * s / t));
        Map<String, Object> raw = new LinkedHashMap<String, Object>(def.raw());
        raw.put("derived", derived);
        Sampler sampler = Sampling.sampler(raw);
        return x -> sampler.sample(x, words);
    }

    @SuppressWarnings("unchecked")
    static File respond(String name, long seed, String brokenMechanism,
            BiFunction<Definition, Words, Function<Object, byte[]>> broken) throws Exception {
        Words words = seededWords(seed);
        List<Wire.Block> blocks = new ArrayList<Wire.Block>();
        long bucket = ((Number) plan.get("bucket")).longValue();
        for (Object rawDef : (List<Object>) plan.get("metrics")) {
            Definition def = Definitions.prepare((Map<String, Object>) rawDef); // checks the fingerprint and constants
            Function<Object, byte[]> sample = def.mechanism.equals(brokenMechanism) ? broken.apply(def, words)
                    : x -> def.sample(x, words);
            List<byte[]> reports = new ArrayList<byte[]>();
            for (Object in : (List<Object>) plan.get("inputs")) {
                Map<String, Object> input = (Map<String, Object>) in;
                if (!def.name.equals(input.get("metric"))) continue;
                Object x = Definitions.encodeValue(def, input.get("value")).input;
                long count = ((Number) input.get("count")).longValue();
                for (long i = 0; i < count; i++) reports.add(sample.apply(x));
            }
            blocks.add(new Wire.Block(def.name, def.fingerprint, bucket, reports));
        }
        byte[] id = new byte[Wire.ID_SIZE];
        new SecureRandom().nextBytes(id);
        File out = new File(dir, name);
        Files.write(out.toPath(), Wire.encodeSealedBatch(id, blocks));
        return out;
    }

    /** Which of the plan's verify definitions this client accepts (prepare checks them). */
    @SuppressWarnings("unchecked")
    static File verify(boolean trusting) throws Exception {
        List<Object> accepted = new ArrayList<Object>();
        for (Object x : (List<Object>) plan.get("verify")) {
            Map<String, Object> item = (Map<String, Object>) x;
            Map<String, Object> definition = (Map<String, Object>) item.get("definition");
            try {
                if (trusting) {
                    // A client that checks the fingerprint and trusts every served constant.
                    if (!Canonical.fingerprint(definition).equals(definition.get("fingerprint"))) continue;
                } else {
                    Definitions.prepare(definition);
                }
                accepted.add(item.get("id"));
            } catch (DefinitionException e) {
                // refused
            }
        }
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("accepted", accepted);
        File path = new File(dir, trusting ? "trusting.json" : "accepted.json");
        Files.write(path.toPath(), Json.write(doc).getBytes(StandardCharsets.UTF_8));
        return path;
    }

    /**
     * This client's answer to the plan's device script (docs/protocol.md, conformance kit
     * step 4): a real Reporter on a fresh device, served {@code served} by a loopback
     * collector that sends no Date (so the device is offline: no collector time anchors
     * it), its clock reading each step's {@code at}; the batch bodies it sends are kept, each
     * answered as wholly accepted. Writes {@code {"refused": [...], "batches": [hex...]}}.
     */
    @SuppressWarnings("unchecked")
    static File device(String name, boolean memoize, Map<String, Object> served) throws Exception {
        List<Object> steps = (List<Object>) ((Map<String, Object>) plan.get("device")).get("steps");
        final double[] now = {((Number) ((Map<String, Object>) steps.get(0)).get("at")).doubleValue()};
        final List<Object> batches = Collections.synchronizedList(new ArrayList<Object>());
        final Reporter[] reporter = new Reporter[1];
        LyingCollector.Scenario scenario = (request, out, server) -> {
            if (!"POST".equals(request.method)) {
                server.write(out, LyingCollector.answer(404, "{}".getBytes(StandardCharsets.UTF_8)));
                return;
            }
            batches.add(Wire.toHex(request.body));
            int n; // every report accepted: the answer accounts for the batch (the reporter checks it)
            synchronized (reporter[0].lock()) {
                n = reporter[0].readyState().sealed.seqs.size();
            }
            String answer = "{\"accepted\": " + n + ", \"duplicates\": 0, \"held\": 0, \"rejected\": []}";
            server.write(out, LyingCollector.answer(200, answer.getBytes(StandardCharsets.UTF_8)));
        };
        Map<String, Object> metrics = new LinkedHashMap<String, Object>();
        List<Object> one = new ArrayList<Object>();
        one.add(served);
        metrics.put("metrics", one);
        List<Object> refused = new ArrayList<Object>();
        try (LyingCollector collector = new LyingCollector(scenario, Json.write(metrics).getBytes(StandardCharsets.UTF_8))) {
            Reporter r = Reporter.builder(collector.url, "t").store(new MemoryStore()).clock(() -> now[0]).memoize(memoize).build();
            reporter[0] = r;
            for (int i = 0; i < steps.size(); i++) {
                Map<String, Object> step = (Map<String, Object>) steps.get(i);
                now[0] = ((Number) step.get("at")).doubleValue();
                try {
                    r.report((String) served.get("name"), step.get("value"));
                } catch (BudgetExceeded e) {
                    refused.add((long) i);
                }
            }
            r.flush();
            r.close(false);
        }
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("refused", refused);
        doc.put("batches", new ArrayList<Object>(batches));
        File path = new File(dir, name + ".json");
        Files.write(path.toPath(), Json.write(doc).getBytes(StandardCharsets.UTF_8));
        return path;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> servedDevice() {
        return (Map<String, Object>) ((Map<String, Object>) plan.get("device")).get("definition");
    }

    private static File deviceAnswer;

    /** The real reporter's answer (made once, shared by the tests). */
    static synchronized File deviceAnswer() throws Exception {
        if (deviceAnswer == null) deviceAnswer = device("device", true, servedDevice());
        return deviceAnswer;
    }

    static void matches(String regex, String text) {
        assertTrue(Pattern.compile(regex, Pattern.MULTILINE).matcher(text).find(), regex + " in\n" + text);
    }

    @Test
    void thisClientPassesTheKitForEveryMechanism() throws Exception {
        File batch = respond("reports.msgpack", 1, null, null);
        File accepted = verify(false);
        String answer = deviceAnswer().getPath();
        Python.Run checked = Python.ldpkit("conformance", "check", planPath.getPath(), batch.getPath(), "--accepted", accepted.getPath(), "--device", answer);
        assertEquals(0, checked.status, checked.toString());
        matches("PASS", checked.stdout);
        for (String m : Sampling.MECHANISMS) matches("^" + Pattern.quote(m) + " .* pass$", checked.stdout);

        File bad = respond("textbook.msgpack", 2, "olh", ConformanceTest::textbookOlh);
        Python.Run failed = Python.ldpkit("conformance", "check", planPath.getPath(), bad.getPath(), "--accepted", accepted.getPath(), "--device", answer);
        assertEquals(1, failed.status, failed.toString());
        matches("FAIL: olh$", failed.stdout);

        File quiet = respond("half-noise.msgpack", 3, "gaussian", ConformanceTest::halfNoiseGaussian);
        Python.Run loud = Python.ldpkit("conformance", "check", planPath.getPath(), quiet.getPath(), "--accepted", accepted.getPath(), "--device", answer);
        assertEquals(1, loud.status, loud.toString());
        matches("FAIL: gaussian$", loud.stdout);
    }

    @Test
    void aClientTrustingTheServedConstantsFailsTheKitTheLyingConstantNamed() throws Exception {
        File batch = respond("trusted.msgpack", 1, null, null);
        Python.Run trusted = Python.ldpkit("conformance", "check", planPath.getPath(), batch.getPath(), "--accepted", verify(true).getPath(),
                "--device", deviceAnswer().getPath());
        assertEquals(1, trusted.status, trusted.toString());
        matches("^ACCEPTED A LYING DEFINITION: grr-0_5: derived\\.keep ", trusted.stdout);
        matches("^ACCEPTED A LYING DEFINITION: hybrid-0_5: derived\\.pm ", trusted.stdout);
        matches("^ACCEPTED A LYING DEFINITION: levels: derived\\.views\\[0\\]\\.keep ", trusted.stdout);
        matches("^ACCEPTED A LYING DEFINITION: gaussian-0_5: derived\\.t, derived\\.m ", trusted.stdout);
    }

    @Test
    void theRealReporterPassesTheDeviceScriptADeviceWithoutItsMemoOrItsLedgerFailsNamed() throws Exception {
        File batch = respond("device-batch.msgpack", 1, null, null);
        File accepted = verify(false);
        Python.Run real = Python.ldpkit("conformance", "check", planPath.getPath(), batch.getPath(), "--accepted", accepted.getPath(),
                "--device", deviceAnswer().getPath());
        assertFalse(Pattern.compile("^DEVICE:|^FAIL: .*device", Pattern.MULTILINE).matcher(real.stdout).find(), real.toString());
        // The same reporter with memoization off, and one served a budget of 50 (the
        // fingerprint covers no budget: the ledger admits 50 fresh reports a day instead of 2).
        Map<String, Object> generous = new LinkedHashMap<String, Object>(servedDevice());
        generous.put("budget", 50.0);
        File noMemo = device("no-memo", false, servedDevice());
        File noLedger = device("no-ledger", true, generous);
        for (Object[] c : new Object[][] {{noMemo, "memo"}, {noLedger, "ledger"}}) {
            String named = (String) c[1];
            Python.Run got = Python.ldpkit("conformance", "check", planPath.getPath(), batch.getPath(), "--accepted", accepted.getPath(),
                    "--device", ((File) c[0]).getPath());
            assertEquals(1, got.status, got.toString());
            // Named among the failures (only the device's once every lie is refused).
            matches("^FAIL: (.*, )?device " + named + "$", got.stdout);
            matches("^DEVICE: " + named.toUpperCase(java.util.Locale.ROOT) + ": step \\d+", got.stdout);
        }
    }
}
