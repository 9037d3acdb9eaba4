package org.ldpkit.client;

import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The sampling rules of docs/protocol.md ("Sampling: how a client makes a report"): one
 * report from a stream of uniform 32-bit words, every constant read from the definition's
 * {@code derived} parameters (never recomputed from Math.exp).
 */
public final class Sampling {
    private Sampling() {
    }

    private static final long TWO32 = 4294967296L;
    private static final double TWO53 = 9007199254740992.0;

    public static final List<String> MECHANISMS = Collections.unmodifiableList(Arrays.asList(
            "grr", "rr", "sue", "oue", "olh", "ss", "hr", "duchi", "piecewise", "hybrid", "laplace",
            "gaussian", "hh", "rollup", "levels", "joint", "joint_marginals", "prefix_sketch", "exponential",
            "square_wave"));
    public static final Set<String> VIEW_MECHANISMS = Collections.unmodifiableSet(new HashSet<String>(Arrays.asList(
            "rollup", "levels", "joint", "joint_marginals")));
    public static final Set<String> CATEGORICAL = Collections.unmodifiableSet(new HashSet<String>(Arrays.asList(
            "grr", "rr", "sue", "oue", "olh", "ss", "hr", "exponential")));

    /** A 64-bit threshold (16 lowercase hex digits) as an unsigned long. */
    public static long threshold(Object hex) {
        if (!Definitions.isHex16(hex)) {
            throw new IllegalArgumentException("a threshold must be 16 lowercase hex digits, got " + hex);
        }
        return Unsigned.parseHex16((String) hex);
    }

    /** A threshold as the probability T / 2^64 (the nearest double). */
    public static double probability(long t) {
        double x = t >= 0 ? (double) t : ((double) ((t >>> 1) | (t & 1))) * 2.0;
        return x / 18446744073709551616.0;
    }

    static long u64(Words w) {
        long lo = w.word();
        long hi = w.word();
        return lo | (hi << 32);
    }

    static boolean coin(Words w, long t) {
        return Unsigned.compare(u64(w), t) < 0;
    }

    static double uniform(Words w) {
        long lo = w.word();
        long hi = w.word();
        return ((hi << 21) + (lo >>> 11)) / TWO53;
    }

    /** Exactly uniform on [0, n), 1 <= n <= 2^32. */
    static long below(Words w, long n) {
        if (n < 1 || n > TWO32) throw new IllegalArgumentException("below(n) takes 1 <= n <= 2^32, got " + n);
        long limit = TWO32 - (TWO32 % n);
        for (;;) {
            long x = w.word();
            if (x < limit) return x % n;
        }
    }

    /** below(n) for any n >= 1 below 2^128: W words (the first least significant), n <= 2^(32 W). */
    static U128 belowBig(Words w, U128 n) {
        if (n.compareTo(U128.TWO32) <= 0) return U128.of(below(w, n.lo));
        int count = Math.max(1, (n.subtract(U128.ONE).bitLength() + 31) / 32);
        U128 top = count == 4 ? new U128(-1L, -1L) : count == 3 ? new U128(0xffffffffL, -1L) : new U128(0, -1L);
        U128 r = top.divide(n)[1].add(U128.ONE).divide(n)[1];
        U128 last = top.subtract(r);
        for (;;) {
            long[] parts = new long[4];
            for (int i = 0; i < count; i++) parts[i] = w.word();
            U128 v = new U128(parts[2] | (parts[3] << 32), parts[0] | (parts[1] << 32));
            if (v.compareTo(last) <= 0) return v.divide(n)[1];
        }
    }

    /** True with probability x / q (0 <= x <= q); no word at 0 or q. */
    static boolean bernoulli(Words w, U128 x, U128 q) {
        if (x.isZero()) return false;
        if (x.compareTo(q) >= 0) return true;
        return belowBig(w, q).compareTo(x) < 0;
    }

    /** True with probability exp(-x / q), 0 <= x <= q: Canonne, Kamath, Steinke Algorithm 1. */
    static boolean taylor(Words w, U128 x, U128 q) {
        long k = 1;
        while (bernoulli(w, x, q) && bernoulli(w, U128.ONE, U128.of(k))) k++;
        return k % 2 == 1;
    }

    /** True with probability exp(-x / q) for any x >= 0: floor(x / q) coins of e^-1, then the rest. */
    static boolean expCoin(Words w, U128 x, U128 q) {
        U128[] qr = x.divide(q);
        for (U128 whole = qr[0]; !whole.isZero(); whole = whole.subtract(U128.ONE)) {
            if (!taylor(w, U128.ONE, U128.ONE)) return false;
        }
        return taylor(w, qr[1], q);
    }

    /** Pr[L = l] proportional to exp(-|l| / t) (CKS Algorithm 2). */
    static long discreteLaplace(Words w, long t) {
        U128 bigT = U128.of(t);
        for (;;) {
            long u = belowBig(w, bigT).lo;
            if (!taylor(w, U128.of(u), bigT)) continue;
            long v = 0;
            while (taylor(w, U128.ONE, U128.ONE)) v++;
            long x = Unsigned.addChecked(u, Unsigned.multiplyChecked(t, v));
            boolean negative = below(w, 2) == 1;
            if (negative && x == 0) continue;
            return negative ? -x : x;
        }
    }

    /** Pr[Z = z] proportional to exp(-z^2 / (2 t m)) (CKS Algorithm 3), t and m positive. */
    public static long discreteGaussian(Words w, long t, long m) {
        U128 twoSigma2 = U128.multiply(t, m).shiftLeft1();
        for (;;) {
            long z = discreteLaplace(w, t);
            long b = Math.abs(Math.abs(z) - m);
            if (expCoin(w, U128.multiply(b, b), twoSigma2)) return z;
        }
    }

    /** OLH's hash: ((((a v + b) mod 2^64) >> 32) * g) >> 32 (unsigned 64-bit arithmetic). */
    public static long olhBucket(long v, long a, long b, long g) {
        long h = (a * v + b) >>> 32;
        return (h * g) >>> 32;
    }

    static long rrItem(Words w, long keep, long d, long x) {
        if (coin(w, keep)) return x;
        long other = below(w, d - 1);
        return other + (other >= x ? 1 : 0);
    }

    static byte[] littleEndian(long value, int size) {
        byte[] out = new byte[size];
        for (int i = 0; i < size; i++) out[i] = (byte) (value >>> (8 * i));
        return out;
    }

    static long index(Object input) {
        if (!(input instanceof Number)) throw new IllegalArgumentException("an item index must be a number, got " + input);
        return ((Number) input).longValue();
    }

    static double number(Object input) {
        if (!(input instanceof Number)) throw new IllegalArgumentException("a numeric input must be a number, got " + input);
        return ((Number) input).doubleValue();
    }

    static Object get(Map<?, ?> p, String key) {
        if (!p.containsKey(key)) throw new IllegalArgumentException("derived parameters without " + key);
        return p.get(key);
    }

    static long integer(Map<?, ?> p, String key) {
        Object v = get(p, key);
        if (v instanceof Long || v instanceof Integer) return ((Number) v).longValue();
        if (v instanceof Double && ((Double) v) == Math.floor((Double) v) && Math.abs((Double) v) <= 9007199254740991.0) {
            return ((Double) v).longValue();
        }
        throw new IllegalArgumentException(key + " must be an integer, got " + v);
    }

    static double real(Map<?, ?> p, String key) {
        Object v = get(p, key);
        if (!(v instanceof Number)) throw new IllegalArgumentException(key + " must be a number, got " + v);
        return ((Number) v).doubleValue();
    }

    static List<?> list(Map<?, ?> p, String key) {
        Object v = get(p, key);
        if (!(v instanceof List)) throw new IllegalArgumentException(key + " must be a list");
        return (List<?>) v;
    }

    static Map<?, ?> map(Object v, String what) {
        if (!(v instanceof Map)) throw new IllegalArgumentException(what + " must be an object");
        return (Map<?, ?>) v;
    }

    /**
     * A sampler for one definition (as served: the keys of GET /v1/metrics, with
     * {@code derived}): thresholds are parsed once.
     */
    public static Sampler sampler(Map<String, Object> definition) {
        Object mechanism = definition.get("resolved_mechanism");
        Object derived = definition.get("derived");
        if (!(derived instanceof Map)) throw new IllegalArgumentException("metric " + definition.get("name") + ": no derived parameters");
        Map<?, ?> p = (Map<?, ?>) derived;
        if (CATEGORICAL.contains(mechanism)) return oracleSampler((String) mechanism, p, ((List<?>) definition.get("categories")).size());
        if (VIEW_MECHANISMS.contains(mechanism)) return viewSampler(p);
        if ("hh".equals(mechanism)) return hhSampler(p, bounds(definition));
        if ("prefix_sketch".equals(mechanism)) return sketchSampler(p);
        return numericSampler(definition, String.valueOf(mechanism), p);
    }

    static double[] bounds(Map<String, Object> definition) {
        List<?> b = (List<?>) definition.get("bounds");
        return new double[] {((Number) b.get(0)).doubleValue(), ((Number) b.get(1)).doubleValue()};
    }

    /** A bitmap of d bits: bit j is 1 << (j % 8) of byte j / 8. */
    static byte[] bitmap(boolean[] bits) {
        byte[] out = new byte[(bits.length + 7) >> 3];
        for (int j = 0; j < bits.length; j++) if (bits[j]) out[j >> 3] |= (byte) (1 << (j & 7));
        return out;
    }

    /** The rule of a frequency oracle over items 0 .. d - 1 (also nested in other kinds). */
    public static Sampler oracleSampler(String name, Map<?, ?> p, final int d) {
        if ("grr".equals(name) || "rr".equals(name)) {
            final long keep = threshold(get(p, "keep"));
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    return littleEndian(rrItem(w, keep, d, index(x)), 4);
                }
            };
        }
        if ("sue".equals(name) || "oue".equals(name)) {
            final long tp = threshold(get(p, "p"));
            final long tq = threshold(get(p, "q"));
            return new Sampler() {
                @Override
                public byte[] sample(Object input, Words w) {
                    int x = (int) index(input);
                    boolean[] bits = new boolean[d];
                    bits[x] = coin(w, tp);
                    for (int j = 0; j < d; j++) if (j != x) bits[j] = coin(w, tq);
                    return bitmap(bits);
                }
            };
        }
        if ("olh".equals(name)) {
            final long g = integer(p, "g");
            final long keep = threshold(get(p, "keep"));
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    long a = u64(w);
                    long b = u64(w);
                    long y = rrItem(w, keep, g, olhBucket(index(x), a, b, g));
                    byte[] out = new byte[20];
                    System.arraycopy(littleEndian(a, 8), 0, out, 0, 8);
                    System.arraycopy(littleEndian(b, 8), 0, out, 8, 8);
                    System.arraycopy(littleEndian(y, 4), 0, out, 16, 4);
                    return out;
                }
            };
        }
        if ("ss".equals(name)) {
            final int k = (int) integer(p, "k");
            final long tin = threshold(get(p, "in"));
            return new Sampler() {
                @Override
                public byte[] sample(Object input, Words w) {
                    int x = (int) index(input);
                    boolean inside = coin(w, tin);
                    int others = k - (inside ? 1 : 0);
                    Set<Integer> chosen = new HashSet<Integer>();
                    for (int j = d - 1 - others; j < d - 1; j++) {
                        int t = (int) below(w, j + 1);
                        chosen.add(chosen.contains(t) ? j : t);
                    }
                    boolean[] bits = new boolean[d];
                    bits[x] = inside;
                    for (int i : chosen) bits[i + (i >= x ? 1 : 0)] = true;
                    return bitmap(bits);
                }
            };
        }
        if ("hr".equals(name)) {
            final long columns = integer(p, "K");
            final long keep = threshold(get(p, "keep"));
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    long row = index(x) + 1;
                    long c = below(w, columns);
                    boolean want = coin(w, keep);
                    boolean inside = Long.bitCount(row & c) % 2 == 0;
                    if (inside != want) c ^= row & -row;
                    return littleEndian(c, 4);
                }
            };
        }
        if ("exponential".equals(name)) {
            // u = u64(); the output is how many of row x's thresholds are <= u.
            List<?> served = (List<?>) get(p, "cumulative");
            final long[][] rows = new long[served.size()][];
            for (int x = 0; x < rows.length; x++) {
                List<?> row = (List<?>) served.get(x);
                rows[x] = new long[row.size()];
                for (int o = 0; o < row.size(); o++) rows[x][o] = threshold(row.get(o));
            }
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    long u = u64(w);
                    long o = 0;
                    for (long t : rows[(int) index(x)]) if (Unsigned.compare(t, u) <= 0) o++;
                    return littleEndian(o, 4);
                }
            };
        }
        throw new IllegalArgumentException("no sampling rule for oracle " + name);
    }

    /** The unit scale t of a clipped value (docs/protocol.md, "Values"). */
    static double unit(double x, double lo, double hi) {
        double half = (hi - lo) / 2;
        return Math.min(Math.max((x - lo) / half - 1, -1), 1);
    }

    /** The grid value u of laplace and gaussian, stochastically rounded. */
    static long gridRound(Words w, double x, double lo, double hi, long steps) {
        double u = Math.min(Math.max(((x - lo) / (hi - lo)) * steps, 0), steps);
        double m = Math.floor(u);
        if (uniform(w) < u - m) m += 1;
        return (long) m;
    }

    private static Sampler numericSampler(Map<String, Object> definition, String name, Map<?, ?> p) {
        double[] b = bounds(definition);
        final double lo = b[0];
        final double hi = b[1];
        if ("duchi".equals(name)) {
            final long flip = threshold(get(p, "flip"));
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    return new byte[] {(byte) (duchiSign(w, flip, unit(number(x), lo, hi)) == 1 ? 1 : 0xff)};
                }
            };
        }
        if ("piecewise".equals(name)) {
            final PmGrid grid = new PmGrid(p);
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    return littleEndian(grid.index(w, unit(number(x), lo, hi)), 4);
                }
            };
        }
        if ("hybrid".equals(name)) {
            final PmGrid grid = new PmGrid(p);
            final long pm = threshold(get(p, "pm"));
            final long flip = threshold(get(p, "flip"));
            final long m = integer(p, "duchi_index");
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    double t = unit(number(x), lo, hi);
                    return littleEndian(coin(w, pm) ? grid.index(w, t) : duchiSign(w, flip, t) * m, 4);
                }
            };
        }
        if ("laplace".equals(name)) return laplaceSampler(p, lo, hi);
        if ("square_wave".equals(name)) return squareWaveSampler(p, lo, hi);
        if ("gaussian".equals(name)) {
            final long steps = integer(p, "grid_steps");
            final long cap = integer(p, "cap");
            final long t = integer(p, "t");
            final long m = integer(p, "m");
            return new Sampler() {
                @Override
                public byte[] sample(Object x, Words w) {
                    long y = gridRound(w, number(x), lo, hi, steps) + discreteGaussian(w, t, m);
                    return littleEndian(Math.min(Math.max(y, -cap), steps + cap), 8);
                }
            };
        }
        throw new IllegalArgumentException("metric " + definition.get("name") + ": no sampling rule for mechanism " + name);
    }

    private static Sampler laplaceSampler(Map<?, ?> p, final double lo, final double hi) {
        final long steps = integer(p, "grid_steps");
        final long cap = integer(p, "cap");
        List<?> served = list(p, "digits");
        final long[] digits = new long[served.size()];
        for (int j = 0; j < digits.length; j++) digits[j] = threshold(served.get(j));
        final long block = threshold(get(p, "block"));
        final long blockSize = 1L << digits.length;
        return new Sampler() {
            long geometric(Words w) {
                long g = 0;
                for (int j = 0; j < digits.length; j++) if (coin(w, digits[j])) g += 1L << j;
                while (coin(w, block)) g += blockSize;
                return g;
            }

            @Override
            public byte[] sample(Object x, Words w) {
                long m = gridRound(w, number(x), lo, hi, steps);
                long g1 = geometric(w);
                long y = m + g1 - geometric(w);
                return littleEndian(Math.min(Math.max(y, -cap), steps + cap), 8);
            }
        };
    }

    /**
     * The square wave: v = (clip(x) - lo) / (hi - lo); near = coin(near); u = uniform();
     * y = v - b + 2 b u if near, else -b + u if u < v, else u + b; the report is y's bucket
     * floor((y + b) / (1 + 2 b) d'), at most d' - 1, as a uint16 (docs/protocol.md).
     */
    private static Sampler squareWaveSampler(Map<?, ?> p, final double lo, final double hi) {
        final long near = threshold(get(p, "near"));
        final double b = real(p, "band");
        final long m = integer(p, "outputs");
        return new Sampler() {
            @Override
            public byte[] sample(Object x, Words w) {
                double c = Math.min(Math.max(number(x), lo), hi);
                double v = (c - lo) / (hi - lo);
                boolean inside = coin(w, near);
                double u = uniform(w);
                double y = inside ? v - b + 2 * b * u : u < v ? -b + u : u + b;
                double k = Math.min(Math.max(Math.floor(((y + b) / (1 + 2 * b)) * m), 0), m - 1);
                return littleEndian((long) k, 2);
            }
        };
    }

    /** The leaf of a clipped value (docs/protocol.md, "Values"). */
    public static int leafOf(double x, double lo, double hi, int resolution) {
        int k = (int) Math.min(Math.max(Math.floor(((x - lo) / (hi - lo)) * resolution), 0), resolution - 1);
        if (k < resolution - 1 && x >= edge(k + 1, lo, hi, resolution)) k += 1;
        if (x < edge(k, lo, hi, resolution)) k -= 1;
        return k;
    }

    private static double edge(int k, double lo, double hi, int resolution) {
        return k == resolution ? hi : lo + ((hi - lo) * k) / resolution;
    }

    private static Sampler hhSampler(Map<?, ?> p, double[] bounds) {
        final double lo = bounds[0];
        final double hi = bounds[1];
        final int resolution = (int) integer(p, "resolution");
        List<?> depths = list(p, "depths");
        final int height = depths.size();
        final Sampler[] samplers = new Sampler[height];
        final long[] leavesPerNode = new long[height];
        final boolean[] olh = new boolean[height];
        for (int i = 0; i < height; i++) {
            Map<?, ?> depth = map(depths.get(i), "a depth");
            String oracle = String.valueOf(get(depth, "oracle"));
            samplers[i] = oracleSampler(oracle, depth, (int) integer(depth, "nodes"));
            leavesPerNode[i] = integer(depth, "leaves_per_node");
            olh[i] = "olh".equals(oracle);
        }
        return new Sampler() {
            @Override
            public byte[] sample(Object x, Words w) {
                int leaf = leafOf(number(x), lo, hi, resolution);
                int t = (int) below(w, height);
                byte[] body = samplers[t].sample(Long.valueOf(leaf / leavesPerNode[t]), w);
                byte[] out = new byte[21];
                out[0] = (byte) (t + 1);
                System.arraycopy(body, 0, out, olh[t] ? 1 : 17, body.length);
                return out;
            }
        };
    }

    private static Sampler viewSampler(Map<?, ?> p) {
        final int payload = (int) integer(p, "payload");
        List<?> served = list(p, "views");
        final int count = served.size();
        final long[] until = new long[count];
        final long[][] labels = new long[count][];
        final Sampler[] samplers = new Sampler[count];
        for (int k = 0; k < count; k++) {
            Map<?, ?> view = map(served.get(k), "a view");
            until[k] = threshold(get(view, "until"));
            Object l = get(view, "labels");
            if (l != null) {
                List<?> ls = (List<?>) l;
                labels[k] = new long[ls.size()];
                for (int i = 0; i < ls.size(); i++) labels[k][i] = ((Number) ls.get(i)).longValue();
            }
            samplers[k] = oracleSampler(String.valueOf(get(view, "oracle")), view, (int) integer(view, "size"));
        }
        return new Sampler() {
            @Override
            public byte[] sample(Object input, Words w) {
                long cell = index(input);
                long draw = u64(w);
                int k = 0;
                while (k < count - 1 && Unsigned.compare(draw, until[k]) >= 0) k++;
                long item = labels[k] == null ? cell : labels[k][(int) cell];
                byte[] body = samplers[k].sample(Long.valueOf(item), w);
                byte[] out = new byte[1 + payload];
                out[0] = (byte) k;
                System.arraycopy(body, 0, out, 1, body.length);
                return out;
            }
        };
    }

    private static final long GOLDEN = 0x9e3779b97f4a7c15L;

    /** SplitMix64 output number i (from 0) from seed. */
    static long splitmix(long seed, long i) {
        long z = seed + (i + 1) * GOLDEN;
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    private static Sampler sketchSampler(Map<?, ?> p) {
        final int maxLength = (int) integer(p, "max_length");
        final int nwords = (maxLength + 1 + 3) / 4;
        final long seed = threshold(get(p, "seed"));
        List<?> served = list(p, "weights");
        final long[] weights = new long[served.size()];
        long sum = 0;
        for (int i = 0; i < weights.length; i++) {
            weights[i] = ((Number) served.get(i)).longValue();
            sum += weights[i];
        }
        final long total = sum;
        final long keep = threshold(get(p, "keep"));
        final long g = integer(p, "g");
        final long rows = integer(p, "rows");
        final long estimationRows = integer(p, "estimation_rows");
        final boolean scaled = "scaled".equals(p.containsKey("cut") ? p.get("cut") : "prefix");
        return new Sampler() {
            @Override
            public byte[] sample(Object input, Words w) {
                byte[] bytes = (byte[]) input;
                if (bytes.length > maxLength) {
                    throw new IllegalArgumentException("a string of " + bytes.length + " bytes is longer than max_length " + maxLength);
                }
                long slot = below(w, total);
                int sketch = 0;
                while (slot >= weights[sketch]) slot -= weights[sketch++];
                long row = below(w, sketch == 0 ? estimationRows : rows);
                long at = sketch == 0 ? row : estimationRows + (sketch - 1) * rows + row; // the global row
                byte[] key = new byte[4 * nwords];
                key[0] = (byte) bytes.length;
                System.arraycopy(bytes, 0, key, 1, bytes.length);
                // bytes 0 .. kept of the key: level s keeps ceil(s len / M) bytes ("scaled"), or s ("prefix")
                int kept = sketch == 0 ? maxLength : scaled ? (sketch * bytes.length + maxLength - 1) / maxLength : sketch;
                for (int i = kept + 1; i < key.length; i++) key[i] = 0;
                long start = at * (nwords + 1);
                long acc = splitmix(seed, start);
                for (int i = 0; i < nwords; i++) {
                    long x = (key[4 * i] & 0xffL) | (key[4 * i + 1] & 0xffL) << 8 | (key[4 * i + 2] & 0xffL) << 16 | (key[4 * i + 3] & 0xffL) << 24;
                    acc += splitmix(seed, start + 1 + i) * x;
                }
                long bucket = ((acc >>> 32) * g) >>> 32;
                return littleEndian(at * g + rrItem(w, keep, g, bucket), 4);
            }
        };
    }

    static int duchiSign(Words w, long flip, double t) {
        boolean upper = uniform(w) < (t + 1) * 0.5;
        return upper != coin(w, flip) ? 1 : -1;
    }

    /** The piecewise grid of piecewise and hybrid. */
    static final class PmGrid {
        final long outside;
        final double cPlus1;
        final double cMinus1;
        final double step;
        final double c;
        final double wIn;
        final double wOut;
        final long bound;

        PmGrid(Map<?, ?> p) {
            outside = threshold(get(p, "outside"));
            cPlus1 = real(p, "c_plus_1");
            cMinus1 = real(p, "c_minus_1");
            step = real(p, "step");
            c = real(p, "c");
            wIn = real(p, "w_in");
            wOut = real(p, "w_out");
            bound = integer(p, "bound");
        }

        long index(Words w, double t) {
            boolean out = coin(w, outside);
            double u = uniform(w);
            double l = (0.5 * cPlus1 * t - 0.5 * cMinus1) / step;
            l = Math.min(Math.max(l, -c), c - wIn);
            double start;
            double offset;
            if (out) {
                double along = u * wOut;
                double left = l + c;
                if (along < left) {
                    start = -c;
                    offset = along;
                } else {
                    start = l + wIn;
                    offset = along - left;
                }
            } else {
                start = l;
                offset = u * wIn;
            }
            double anchor = Math.floor(start);
            double index = anchor + Math.floor(start - anchor + offset + uniform(w));
            return (long) Math.min(Math.max(index, -bound), bound);
        }
    }
}
