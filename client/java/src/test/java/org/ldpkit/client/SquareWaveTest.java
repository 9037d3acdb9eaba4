package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The square wave (distribution metrics, mechanism "square_wave"): the cases of
 * tests/fixtures/square_wave_cases.json, written by ldpkit's core (portable_report,
 * served_constants; tests/shared/test_square_wave_clients.py) and read by the JS client's
 * test too. Each served definition is verified, then sampled byte for byte; band and near
 * are recomputed at every epsilon of the sweep; each lie is refused naming its constant.
 */
class SquareWaveTest {
    private static final Map<String, Object> CASES = Json.parseObject(Docs.read("tests/fixtures/square_wave_cases.json"));

    static List<Map<String, Object>> sampling() {
        List<Map<String, Object>> out = new ArrayList<Map<String, Object>>();
        for (Object c : (List<?>) CASES.get("sampling")) out.add(VectorsTest.object(c));
        return out;
    }

    /** A fresh copy of a case's served definition. */
    private static Map<String, Object> served(Map<String, Object> c) {
        return Json.parseObject(Json.write(c.get("served")));
    }

    @TestFactory
    List<DynamicTest> theCoresBucketsFromTheSameWords() {
        List<DynamicTest> tests = new ArrayList<DynamicTest>();
        for (final Map<String, Object> c : sampling()) {
            tests.add(DynamicTest.dynamicTest("square wave case " + c.get("name"), () -> {
                Definition def = Definitions.prepare(served(c)); // verified as served, then sampled
                String[] hex = ((String) c.get("words")).trim().split("\\s+");
                long[] words = new long[hex.length];
                for (int i = 0; i < hex.length; i++) words[i] = Long.parseLong(hex[i], 16);
                ListWords w = new ListWords(words);
                StringBuilder reports = new StringBuilder();
                for (Object value : (List<?>) c.get("values")) {
                    reports.append(Wire.toHex(def.sample(Definitions.encodeValue(def, value).input, w)));
                }
                assertEquals(c.get("reports"), reports.toString());
                assertEquals(w.size(), w.used(), "every word used, no more");
            }));
        }
        assertTrue(tests.size() >= 6);
        return tests;
    }

    /** ceil(x 2^64) capped at 2^64 - 1, as 16 hex digits (exact: x is a double). */
    private static String ceil64(double x) {
        BigInteger t = new BigDecimal(x).multiply(new BigDecimal(BigInteger.ONE.shiftLeft(64))).setScale(0, RoundingMode.CEILING).toBigInteger();
        BigInteger max = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);
        return String.format("%016x", t.min(max));
    }

    @Test
    void bandAndNearAtEveryEpsilonOfTheSweep() {
        for (Object o : (List<?>) CASES.get("verification")) {
            Map<String, Object> v = VectorsTest.object(o);
            double eps = ((Number) v.get("epsilon")).doubleValue();
            double served = ((Number) v.get("band")).doubleValue();
            double b = Definitions.squareWaveBand(eps);
            assertTrue(Math.abs(b - served) <= 1e-9 * served, "band at " + eps);
            // The port is Python's formula, operation by operation: the same doubles here,
            // and the same threshold (verification allows 1e-9, as for every threshold).
            assertEquals(served, b, 0.0, "band at " + eps);
            double e = Math.exp(eps);
            double q = 1 / (2 * b * e + 1);
            assertEquals(v.get("near"), ceil64(2 * b * (q * e)), "near at " + eps);
        }
    }

    private interface Change {
        void apply(Map<String, Object> def);
    }

    private static DefinitionException refused(Map<String, Object> c, Change change) {
        final Map<String, Object> raw = served(c);
        change.apply(raw);
        raw.put("fingerprint", Canonical.fingerprint(raw)); // the collector signs its lie
        return assertThrows(DefinitionException.class, () -> Definitions.prepare(raw));
    }

    private static Map<String, Object> derived(Map<String, Object> def) {
        return VectorsTest.object(def.get("derived"));
    }

    private static String nudge(Object hex, long sign) {
        long t = Unsigned.parseHex16((String) hex);
        return String.format("%016x", t + sign * (t >>> 20));
    }

    @Test
    void theHonestDefinitionIsAcceptedEachLieRefusedByName() {
        for (Map<String, Object> c : sampling()) {
            Definitions.prepare(served(c));
            DefinitionException err = refused(c, d -> derived(d).put("band", ((Number) derived(d).get("band")).doubleValue() * (1 + 1e-6)));
            assertEquals("derived.band", err.constant(), err.getMessage());
            err = refused(c, d -> derived(d).put("near", "ffffffffffffff00"));
            assertEquals("derived.near", err.constant(), err.getMessage());
            err = refused(c, d -> derived(d).put("outputs", ((Number) derived(d).get("outputs")).longValue() + 1));
            assertEquals("derived.outputs", err.constant(), err.getMessage());
            for (final long sign : new long[] {1, -1}) {
                err = refused(c, d -> derived(d).put("near", nudge(derived(d).get("near"), sign)));
                assertEquals("derived.near", err.constant(), err.getMessage());
            }
            err = refused(c, d -> derived(d).put("band", Definitions.squareWaveBand(2 * ((Number) d.get("epsilon")).doubleValue())));
            assertEquals("derived.band", err.constant(), err.getMessage());
            err = refused(c, d -> VectorsTest.object(d.get("mechanism_params")).put("resolution", 5000L));
            assertEquals("mechanism_params.resolution", err.constant(), err.getMessage());
            // The fingerprint's schema has no output_buckets: a definition carrying one is refused.
            final Map<String, Object> extra = served(c);
            VectorsTest.object(extra.get("mechanism_params")).put("output_buckets", derived(extra).get("outputs"));
            err = assertThrows(DefinitionException.class, () -> Definitions.prepare(extra));
            assertTrue(err.getMessage().contains("output_buckets"), err.getMessage());
            err = refused(c, d -> derived(d).put("window", 1L));
            assertEquals("derived.window", err.constant(), err.getMessage());
        }
    }
}
