package org.ldpkit.client;

/**
 * Unsigned 64-bit helpers written out (Android added Java 8's Long.compareUnsigned and
 * friends only at API level 26; these run on any).
 */
final class Unsigned {
    private Unsigned() {
    }

    /** Compare a and b as unsigned 64-bit integers. */
    static int compare(long a, long b) {
        long x = a ^ Long.MIN_VALUE;
        long y = b ^ Long.MIN_VALUE;
        return x < y ? -1 : x == y ? 0 : 1;
    }

    /** 16 lowercase hex digits (checked by the caller) as an unsigned 64-bit integer. */
    static long parseHex16(String hex) {
        long v = 0;
        for (int i = 0; i < 16; i++) v = (v << 4) | Character.digit(hex.charAt(i), 16);
        return v;
    }

    /** The decimal digits of v as an unsigned 64-bit integer. */
    static String toDecimal(long v) {
        if (v >= 0) return Long.toString(v);
        long quotient = (v >>> 1) / 5; // v / 10, exactly, for v >= 2^63
        long remainder = v - quotient * 10;
        return Long.toString(quotient) + remainder;
    }

    /** a + b, or an ArithmeticException past 2^63 - 1 (a, b >= 0). */
    static long addChecked(long a, long b) {
        long s = a + b;
        if (s < 0) throw new ArithmeticException("long overflow");
        return s;
    }

    /** a * b, or an ArithmeticException past 2^63 - 1 (a, b >= 0). */
    static long multiplyChecked(long a, long b) {
        if (a != 0 && b > Long.MAX_VALUE / a) throw new ArithmeticException("long overflow");
        return a * b;
    }
}
