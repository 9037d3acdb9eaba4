package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The test vectors of docs/protocol.md, byte for byte, read from the document itself (as
 * client/js/test/vectors.test.js reads them): sampling (words in, reports out),
 * fingerprints (canonical JSON and hash), sealed batches, and the definitions every
 * client must refuse, each refused naming the lying constant.
 */
class VectorsTest {
    private static final Map<String, String> VECTORS = Docs.vectors();

    private static final Map<String, String> AUTO = new java.util.HashMap<String, String>();

    static {
        AUTO.put("distribution", "hh");
        AUTO.put("strings", "prefix_sketch");
    }

    /** A definition as PUT takes it, as GET /v1/metrics would serve it (the keys a sampler reads). */
    static Map<String, Object> served(String name, Map<String, Object> definition) {
        Map<String, Object> out = new java.util.LinkedHashMap<String, Object>();
        out.put("name", name);
        out.put("kind", definition.get("kind"));
        Object mechanism = definition.get("mechanism");
        out.put("resolved_mechanism", mechanism == null || "auto".equals(mechanism) ? AUTO.get(definition.get("kind")) : mechanism);
        out.put("epsilon", definition.get("epsilon"));
        out.put("bucket", definition.containsKey("bucket") ? definition.get("bucket") : "day");
        for (String key : new String[] {"categories", "dimensions", "max_length", "resolution", "mechanism_params", "delta", "derived"}) {
            if (definition.containsKey(key)) out.put(key, definition.get(key));
        }
        if (definition.containsKey("bounds")) {
            List<Object> bounds = new ArrayList<Object>();
            for (Object b : (List<?>) definition.get("bounds")) bounds.add(((Number) b).doubleValue());
            out.put("bounds", bounds);
        }
        return out;
    }

    private static List<Map.Entry<String, String>> withPrefix(String prefix) {
        List<Map.Entry<String, String>> out = new ArrayList<Map.Entry<String, String>>();
        for (Map.Entry<String, String> e : VECTORS.entrySet()) if (e.getKey().startsWith(prefix)) out.add(e);
        return out;
    }

    @Test
    void theDocumentHasASamplingVectorForEveryMechanism() {
        TreeSet<String> mechanisms = new TreeSet<String>();
        for (Map.Entry<String, String> e : withPrefix("json sample ")) {
            Map<String, Object> v = Json.parseObject(e.getValue());
            mechanisms.add((String) served("m", object(v.get("definition"))).get("resolved_mechanism"));
        }
        assertEquals(new TreeSet<String>(Sampling.MECHANISMS), mechanisms);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(Object o) {
        return (Map<String, Object>) o;
    }

    @TestFactory
    List<DynamicTest> samplingVectors() {
        List<DynamicTest> tests = new ArrayList<DynamicTest>();
        for (final Map.Entry<String, String> e : withPrefix("json sample ")) {
            tests.add(DynamicTest.dynamicTest("sampling vector " + e.getKey().substring(12), () -> {
                Map<String, Object> v = Json.parseObject(e.getValue());
                Map<String, Object> def = served("m", object(v.get("definition")));
                def.put("derived", v.get("derived"));
                Definition prepared = Definitions.unchecked(def);
                String[] hex = ((String) v.get("words")).trim().split("\\s+");
                long[] words = new long[hex.length];
                for (int i = 0; i < hex.length; i++) words[i] = Long.parseLong(hex[i], 16);
                ListWords w = new ListWords(words);
                StringBuilder reports = new StringBuilder();
                for (Object value : (List<?>) v.get("values")) {
                    reports.append(Wire.toHex(prepared.sample(Definitions.encodeValue(prepared, value).input, w)));
                }
                assertEquals(v.get("reports"), reports.toString());
                assertEquals(w.size(), w.used(), "every word used, no more");
            }));
        }
        assertTrue(tests.size() >= 18);
        return tests;
    }

    @TestFactory
    List<DynamicTest> fingerprintVectors() {
        final String section = Docs.section();
        List<DynamicTest> tests = new ArrayList<DynamicTest>();
        for (final Map.Entry<String, String> e : withPrefix("json definition ")) {
            final String name = e.getKey().substring(16);
            tests.add(DynamicTest.dynamicTest("fingerprint vector " + name, () -> {
                Map<String, Object> def = served(name, Json.parseObject(e.getValue()));
                assertEquals(VECTORS.get("text canonical " + name), Canonical.canonicalParameters(def));
                Matcher m = Pattern.compile("`([0-9a-f]{16})` \\(fingerprint " + Pattern.quote(name) + "\\)").matcher(section);
                assertTrue(m.find(), "no fingerprint for " + name);
                assertEquals(m.group(1), Canonical.fingerprint(def));
            }));
        }
        assertTrue(tests.size() >= 9);
        return tests;
    }

    @Test
    void theDocumentHasAFingerprintVectorForEveryKind() {
        TreeSet<String> kinds = new TreeSet<String>();
        for (Map.Entry<String, String> e : withPrefix("json definition ")) kinds.add((String) Json.parseObject(e.getValue()).get("kind"));
        assertEquals(new TreeSet<String>(Arrays.asList("categorical", "distribution", "hierarchy", "numeric", "strings", "table")), kinds);
    }

    @TestFactory
    List<DynamicTest> sealedBatchVectors() {
        List<DynamicTest> tests = new ArrayList<DynamicTest>();
        for (final Map.Entry<String, String> e : VECTORS.entrySet()) {
            final Matcher m = Pattern.compile("^hex v2 ([a-z0-9-]+)$").matcher(e.getKey());
            if (!m.matches()) continue;
            final String name = m.group(1);
            tests.add(DynamicTest.dynamicTest("sealed batch vector " + name, () -> {
                Map<String, Object> want = Json.parseObject(VECTORS.get("json v2 " + name));
                List<Wire.Block> blocks = new ArrayList<Wire.Block>();
                for (Object o : (List<?>) want.get("blocks")) {
                    Map<String, Object> b = object(o);
                    byte[] reports = Wire.fromHex((String) b.get("reports"));
                    int n = ((Number) b.get("n")).intValue();
                    int size = reports.length / n;
                    List<byte[]> parts = new ArrayList<byte[]>();
                    for (int i = 0; i < n; i++) parts.add(Arrays.copyOfRange(reports, i * size, (i + 1) * size));
                    blocks.add(new Wire.Block((String) b.get("metric"), (String) b.get("fp"), ((Number) b.get("bucket")).longValue(), parts));
                }
                byte[] bytes = Wire.encodeSealedBatch(Wire.fromHex((String) want.get("batch")), blocks);
                assertEquals(e.getValue().replaceAll("\\s+", ""), Wire.toHex(bytes));
            }));
        }
        assertTrue(tests.size() >= 3);
        return tests;
    }

    @TestFactory
    List<DynamicTest> refusedDefinitions() {
        List<DynamicTest> tests = new ArrayList<DynamicTest>();
        for (final Map.Entry<String, String> e : withPrefix("json refuse ")) {
            final String name = e.getKey().substring(12);
            tests.add(DynamicTest.dynamicTest("this client refuses the lying definition " + name + ", naming the constant", () -> {
                Map<String, Object> served = Json.parseObject(e.getValue());
                assertEquals(served.get("fingerprint"), Canonical.fingerprint(served), "the fingerprint is right");
                String lie = VECTORS.get("text lie " + name);
                assertNotNull(lie, "the document names the lie of " + name);
                DefinitionException err = assertThrows(DefinitionException.class, () -> Definitions.prepare(served));
                assertEquals(lie, err.constant(), err.getMessage());
                assertTrue(err.getMessage().contains(lie), err.getMessage());
                assertEquals(served.get("name"), err.metric());
            }));
        }
        assertTrue(tests.size() >= 5, "the document has definitions to refuse");
        return tests;
    }

    @Test
    void chacha20BlockOfRfc8439Section232() {
        byte[] key = new byte[32];
        for (int i = 0; i < 32; i++) key[i] = (byte) i;
        byte[] nonce = {0, 0, 0, 9, 0, 0, 0, 0x4a, 0, 0, 0, 0};
        ChaChaWords words = new ChaChaWords(key, nonce, 1);
        List<String> got = new ArrayList<String>();
        for (int i = 0; i < 16; i++) got.add(String.format("%08x", words.word()));
        assertEquals(Arrays.asList(
                "e4e7f110", "15593bd1", "1fdd0f50", "c47120a3", "c7f4d1c7", "0368c033", "9aaa2204", "4e6cd4c3",
                "466482d2", "09aa9f07", "05d7c214", "a2028bd9", "d19c12b5", "b94e16de", "e883d0cb", "4e3c50a2"), got);
    }

    @Test
    void chacha20KeystreamOfRfc8439Section242() {
        // RFC 8439 2.4.2: the keystream of key 00..1f, nonce 000000000000004a00000000, counter 1,
        // is the plaintext XOR the ciphertext; its first block's first bytes are these.
        byte[] key = new byte[32];
        for (int i = 0; i < 32; i++) key[i] = (byte) i;
        byte[] nonce = {0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0};
        ChaChaWords words = new ChaChaWords(key, nonce, 1);
        byte[] plain = "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it."
                .getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        byte[] cipher = new byte[plain.length];
        long w = 0;
        for (int i = 0; i < plain.length; i++) {
            if (i % 4 == 0) w = words.word();
            cipher[i] = (byte) (plain[i] ^ (w >>> (8 * (i % 4))));
        }
        assertEquals("6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
                + "f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8"
                + "07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
                + "5af90bbf74a35be6b40b8eedf2785e42874d", Wire.toHex(cipher));
    }

    @Test
    void seededRandomFillsLittleEndianKeystreamWords() {
        ChaChaWords words = new ChaChaWords(ChaChaWords.seedKey(7));
        byte[] bytes = new byte[8];
        ChaChaWords.seededRandom(7).fill(bytes);
        CryptoWords again = new CryptoWords(2, ChaChaWords.seededRandom(7));
        long first = words.word();
        assertEquals(first, again.word());
        assertEquals(words.word(), again.word());
        assertEquals(first & 0xff, bytes[0] & 0xff);
        assertThrows(IllegalArgumentException.class, () -> ChaChaWords.seededRandom(7).fill(new byte[3]));
    }

    @Test
    void theOlhHashVectorOfTheDocument() {
        String doc = Docs.read("docs/protocol.md");
        Matcher m = Pattern.compile("`a = 0x([0-9A-F]+)`, `b = 0x([0-9A-F]+)`,\\s+`g = (\\d+)` puts items\\s+`([0-9, ]+)` in buckets `([0-9, ]+)`").matcher(doc);
        assertTrue(m.find(), "the OLH hash vector is in docs/protocol.md");
        long a = Long.parseUnsignedLong(m.group(1), 16);
        long b = Long.parseUnsignedLong(m.group(2), 16);
        long g = Long.parseLong(m.group(3));
        String[] items = m.group(4).split(",\\s*");
        String[] buckets = m.group(5).split(",\\s*");
        assertEquals(items.length, buckets.length);
        for (int i = 0; i < items.length; i++) {
            assertEquals(Long.parseLong(buckets[i]), Sampling.olhBucket(Long.parseLong(items[i]), a, b, g), "item " + items[i]);
        }
    }

    @Test
    void floatsAndStringsAsPythonsJsonWritesThem() {
        Object[][] cases = {{1.0, "1.0"}, {0.5, "0.5"}, {1000.0, "1000.0"}, {1e-4, "0.0001"}, {1e-5, "1e-05"}, {1.5e-7, "1.5e-07"},
            {1e16, "1e+16"}, {-2.5e100, "-2.5e+100"}, {123456789012345.6, "123456789012345.6"}, {9999999999999998.0, "9999999999999998.0"},
            {0.1, "0.1"}, {-0.0, "-0.0"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
            {0.30000000000000004, "0.30000000000000004"}, {2e-323, "2e-323"}, {1e23, "1e+23"}, {1e22, "1e+22"}};
        for (Object[] c : cases) assertEquals(c[1], Canonical.pyFloat((Double) c[0]), String.valueOf(c[0]));
        assertEquals("\"\\u00e9\\\"\\\\\\u007f\\u2028\\ud83d\\ude42\\t/\"", Canonical.pyString("é\"\\\u007f\u2028\uD83D\uDE42\t/"));
    }
}
