package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.junit.jupiter.api.Test;

/** The hand-written pieces against the JDK's own: unsigned and 128-bit arithmetic, JSON, msgpack heads. */
class CoreTest {
    private static final BigInteger TWO128 = BigInteger.ONE.shiftLeft(128);

    static BigInteger big(U128 x) {
        return new BigInteger(Long.toUnsignedString(x.hi)).shiftLeft(64).add(new BigInteger(Long.toUnsignedString(x.lo)));
    }

    static U128 u128(BigInteger v) {
        return new U128(v.shiftRight(64).longValue(), v.longValue());
    }

    static long edgy(Random r) {
        switch (r.nextInt(5)) {
            case 0: return r.nextLong();
            case 1: return r.nextInt() & 0xffffffffL;
            case 2: return Long.MIN_VALUE + r.nextInt(3) - 1;
            case 3: return -1L - r.nextInt(3);
            default: return r.nextInt(5);
        }
    }

    @Test
    void unsignedAnd128BitArithmeticAgreeWithBigInteger() {
        Random r = new Random(31);
        for (int i = 0; i < 20000; i++) {
            long a = edgy(r);
            long b = edgy(r);
            assertEquals(Integer.signum(Long.compareUnsigned(a, b)), Unsigned.compare(a, b));
            assertEquals(Long.toUnsignedString(a), Unsigned.toDecimal(a));
            assertEquals(a, Unsigned.parseHex16(String.format("%016x", a)));
            U128 p = U128.multiply(a, b);
            BigInteger bp = new BigInteger(Long.toUnsignedString(a)).multiply(new BigInteger(Long.toUnsignedString(b)));
            assertEquals(bp, big(p));
            U128 q = new U128(edgy(r), edgy(r));
            U128 d = new U128(r.nextInt(3) == 0 ? edgy(r) : 0, edgy(r));
            if (d.isZero()) continue;
            U128[] qr = q.divide(d);
            BigInteger[] want = big(q).divideAndRemainder(big(d));
            assertEquals(want[0], big(qr[0]));
            assertEquals(want[1], big(qr[1]));
            assertEquals(big(q).add(big(d)).mod(TWO128), big(q.add(d)));
            assertEquals(big(q).subtract(big(d)).mod(TWO128), big(q.subtract(d)));
            assertEquals(big(q).compareTo(big(d)), Integer.signum(q.compareTo(d)));
            assertEquals(big(q).shiftLeft(1).mod(TWO128), big(q.shiftLeft1()));
            assertEquals(big(q).bitLength(), q.bitLength());
        }
        assertThrows(ArithmeticException.class, () -> Unsigned.multiplyChecked(1L << 32, 1L << 31));
    }

    @Test
    void belowBigIsUniformByRejectionOverSeveralWords() {
        // n just above 2^64: two words are not enough, three are drawn; the first least significant.
        U128 n = new U128(1, 5);
        ListWords w = new ListWords(new long[] {1, 2, 1, 7, 0, 0});
        assertEquals(u128(BigInteger.ONE.shiftLeft(64).add(BigInteger.valueOf(2).shiftLeft(32)).add(BigInteger.ONE).mod(big(n))), Sampling.belowBig(w, n));
        assertEquals(3, w.used());
        // the largest draw of four words is rejected when 2^128 mod n != 0
        U128 m = new U128(1L << 62, 3);
        ListWords all = new ListWords(new long[] {0xffffffffL, 0xffffffffL, 0xffffffffL, 0xffffffffL, 9, 0, 0, 0});
        assertEquals(U128.of(9), Sampling.belowBig(all, m));
        assertEquals(8, all.used());
    }

    @Test
    void jsonReadsAndWritesWhatTheClientNeeds() {
        Map<String, Object> m = Json.parseObject(" {\"a\": [1, -2, 3.5, 1e3, -0.0, 9223372036854775807, 9223372036854775808, true, false, null],"
                + " \"s\": \"\\u00e9\\ud83d\\ude42\\n\\\"\\\\/\", \"e\": {}, \"l\": []} ");
        assertEquals(Arrays.asList(1L, -2L, 3.5, 1000.0, -0.0, Long.MAX_VALUE, 9223372036854775808.0, true, false, null), m.get("a"));
        assertEquals("\u00e9\uD83D\uDE42\n\"\\/", m.get("s"));
        assertEquals(Arrays.asList("a", "s", "e", "l"), new ArrayList<String>(m.keySet()));
        assertEquals("{\"a\":[1,-2,3.5,1000.0,-0.0,9223372036854775807,9.223372036854776e+18,true,false,null],"
                + "\"s\":\"\\u00e9\\ud83d\\ude42\\n\\\"\\\\/\",\"e\":{},\"l\":[]}", Json.write(m));
        assertEquals(m, Json.parse(Json.write(m)));
        for (String bad : new String[] {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\x\"", "\"a\nb\"", "[1] 2", "nul", "{1: 2}", "1e"}) {
            assertThrows(Json.JsonException.class, () -> Json.parse(bad), bad);
        }
        StringBuilder deep = new StringBuilder();
        for (int i = 0; i < 10000; i++) deep.append('[');
        assertThrows(Json.JsonException.class, () -> Json.parse(deep.toString()));
        assertThrows(Json.JsonException.class, () -> Json.write(Double.NaN));
        assertNull(Json.parse("null"));
    }

    @Test
    void msgpackHeadsOfEverySize() {
        List<byte[]> reports = new ArrayList<byte[]>();
        for (int i = 0; i < 300; i++) reports.add(new byte[] {(byte) i});
        String metric = "m" + String.join("", Collections.nCopies(40, "x")); // a str8 (32..255 bytes)
        byte[] bytes = Wire.encodeSealedBatch(new byte[16], Arrays.asList(new Wire.Block(metric, "0123456789abcdef", 70000L, reports)));
        String hex = Wire.toHex(bytes);
        assertTrue(hex.contains("a66d6574726963d929" + Wire.toHex(metric.getBytes(java.nio.charset.StandardCharsets.UTF_8))), "str8");
        assertTrue(hex.contains("a66275636b6574ce00011170"), "uint32 bucket");
        assertTrue(hex.contains("a16ecd012c"), "uint16 n = 300");
        assertTrue(hex.contains("a77265706f727473c5012c00010203"), "bin16 of 300 bytes");
        assertThrows(IllegalArgumentException.class, () -> Wire.encodeSealedBatch(new byte[15], new ArrayList<Wire.Block>()));
        assertArrayEquals(new byte[] {0, (byte) 0xff, 0x10}, Wire.fromHex("00ff10"));
        assertThrows(IllegalArgumentException.class, () -> Wire.fromHex("0g"));
    }
}
