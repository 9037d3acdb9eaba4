package org.ldpkit.client;

/**
 * Unsigned 128-bit integers, only as much as the discrete Gaussian needs ({@code b^2}
 * and {@code 2 t m} reach about 2^70; java.math is not among the packages this client uses).
 */
final class U128 implements Comparable<U128> {
    static final U128 ZERO = new U128(0, 0);
    static final U128 ONE = new U128(0, 1);
    static final U128 TWO32 = new U128(0, 1L << 32);

    final long hi;
    final long lo;

    U128(long hi, long lo) {
        this.hi = hi;
        this.lo = lo;
    }

    static U128 of(long v) {
        if (v < 0) throw new IllegalArgumentException("negative: " + v);
        return new U128(0, v);
    }

    /** The full product of two unsigned 64-bit integers. */
    static U128 multiply(long a, long b) {
        long a0 = a & 0xffffffffL;
        long a1 = a >>> 32;
        long b0 = b & 0xffffffffL;
        long b1 = b >>> 32;
        long p00 = a0 * b0;
        long p01 = a0 * b1;
        long p10 = a1 * b0;
        long p11 = a1 * b1;
        long middle = (p00 >>> 32) + (p01 & 0xffffffffL) + (p10 & 0xffffffffL);
        long lo = (middle << 32) | (p00 & 0xffffffffL);
        long hi = p11 + (p01 >>> 32) + (p10 >>> 32) + (middle >>> 32);
        return new U128(hi, lo);
    }

    boolean isZero() {
        return hi == 0 && lo == 0;
    }

    U128 shiftLeft1() {
        return new U128((hi << 1) | (lo >>> 63), lo << 1);
    }

    U128 add(U128 o) {
        long l = lo + o.lo;
        long carry = Unsigned.compare(l, lo) < 0 ? 1 : 0;
        return new U128(hi + o.hi + carry, l);
    }

    U128 subtract(U128 o) {
        long l = lo - o.lo;
        long borrow = Unsigned.compare(lo, o.lo) < 0 ? 1 : 0;
        return new U128(hi - o.hi - borrow, l);
    }

    @Override
    public int compareTo(U128 o) {
        int c = Unsigned.compare(hi, o.hi);
        return c != 0 ? c : Unsigned.compare(lo, o.lo);
    }

    int bitLength() {
        return hi != 0 ? 128 - Long.numberOfLeadingZeros(hi) : 64 - Long.numberOfLeadingZeros(lo);
    }

    private boolean bit(int i) {
        return i >= 64 ? ((hi >>> (i - 64)) & 1) != 0 : ((lo >>> i) & 1) != 0;
    }

    /** {quotient, remainder} of this / d, d not zero (shift and subtract). */
    U128[] divide(U128 d) {
        if (d.isZero()) throw new ArithmeticException("division by zero");
        if (hi == 0 && d.hi == 0 && lo >= 0 && d.lo > 0) {
            return new U128[] {new U128(0, lo / d.lo), new U128(0, lo % d.lo)};
        }
        U128 q = ZERO;
        U128 r = ZERO;
        for (int i = bitLength() - 1; i >= 0; i--) {
            r = r.shiftLeft1();
            if (bit(i)) r = new U128(r.hi, r.lo | 1);
            q = q.shiftLeft1();
            if (r.compareTo(d) >= 0) {
                r = r.subtract(d);
                q = new U128(q.hi, q.lo | 1);
            }
        }
        return new U128[] {q, r};
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof U128 && ((U128) o).hi == hi && ((U128) o).lo == lo;
    }

    @Override
    public int hashCode() {
        return (int) (hi * 31 + lo);
    }

    @Override
    public String toString() {
        return "0x" + Long.toHexString(hi) + String.format("%016x", lo);
    }
}
