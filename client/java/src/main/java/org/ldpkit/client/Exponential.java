package org.ldpkit.client;

import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * The {@code exponential} mechanism of docs/protocol.md (client/js/src/sampling.js and
 * definitions.js): its sampling rule (u = u64(); the output is how many of the input's
 * served cumulative thresholds are {@code <= u}), its verification (the exact calibration
 * recomputed by the same bisection, the served thresholds within relative 1e-9 of it and
 * rising, the channel they give spending at most epsilon (1 + 1e-9)) and its fingerprint
 * keys.
 */
final class Exponential {
    private Exponential() {
    }

    /** The definition keys a categorical metric's fingerprint covers when given (not null). */
    static final List<String> FINGERPRINT_KEYS = Collections.unmodifiableList(Arrays.asList("ordered", "score", "band", "scores"));
    /** The keys of its {@code derived}. */
    static final List<String> DERIVED_KEYS = Collections.unmodifiableList(Arrays.asList("cumulative"));

    private static final int MAX_ITEMS = 64;
    private static final double TOLERANCE = 1e-9;

    /** The rule: {@code uint32 o}, o the count of row x's thresholds {@code <= u64()}. */
    static Sampler sampler(Map<?, ?> p) {
        List<?> served = Sampling.list(p, "cumulative");
        final long[][] rows = new long[served.size()][];
        for (int x = 0; x < rows.length; x++) {
            Object row = served.get(x);
            if (!(row instanceof List)) throw new IllegalArgumentException("cumulative[" + x + "] must be a list");
            List<?> r = (List<?>) row;
            rows[x] = new long[r.size()];
            for (int o = 0; o < r.size(); o++) rows[x][o] = Sampling.threshold(r.get(o));
        }
        return new Sampler() {
            @Override
            public byte[] sample(Object input, Words w) {
                long[] row = rows[(int) Sampling.index(input)];
                long u = Sampling.u64(w);
                long o = 0;
                for (long t : row) if (Unsigned.compare(t, u) <= 0) o++;
                return Sampling.littleEndian(o, 4);
            }
        };
    }

    private static DefinitionException refuse(String name, String constant, String why) {
        return new DefinitionException("metric " + name + ": " + why, name, constant);
    }

    /** The score matrix q[x][o] the definition names (docs/protocol.md). */
    static double[][] scoreMatrix(Map<String, Object> def, String name) {
        int d = ((List<?>) def.get("categories")).size();
        if (d > MAX_ITEMS) throw refuse(name, "categories", "too many categories for exponential (" + d + " > " + MAX_ITEMS + ")");
        Object score = def.get("score");
        boolean ordered = Boolean.TRUE.equals(def.get("ordered"));
        Object band = def.get("band");
        Object scores = def.get("scores");
        if ("distance".equals(score) && ordered && band == null && scores == null) {
            double[][] q = new double[d][d];
            for (int x = 0; x < d; x++) for (int o = 0; o < d; o++) q[x][o] = -Math.abs(x - o);
            return q;
        }
        if ("band".equals(score) && ordered && scores == null) {
            Long b = Definitions.asLong(band);
            if (b == null || b < 0 || b > d - 2) throw refuse(name, "band", "band must be an integer in 0.." + (d - 2) + ", got " + Definitions.shown(band));
            double[][] q = new double[d][d];
            for (int x = 0; x < d; x++) for (int o = 0; o < d; o++) q[x][o] = Math.abs(x - o) <= b ? 1 : 0;
            return q;
        }
        if ("matrix".equals(score) && band == null && scores instanceof List && ((List<?>) scores).size() == d) {
            double[][] q = matrix((List<?>) scores, d);
            if (q != null) return q;
        }
        throw refuse(name, "score", "bad score for the exponential mechanism");
    }

    /** A served scores matrix: d rows of m finite numbers, d <= m <= 64; else null. */
    private static double[][] matrix(List<?> rows, int d) {
        if (!(rows.get(0) instanceof List)) return null;
        int m = ((List<?>) rows.get(0)).size();
        if (m < d || m > MAX_ITEMS) return null;
        double[][] q = new double[d][m];
        for (int x = 0; x < d; x++) {
            if (!(rows.get(x) instanceof List) || ((List<?>) rows.get(x)).size() != m) return null;
            List<?> row = (List<?>) rows.get(x);
            for (int o = 0; o < m; o++) {
                Object v = row.get(o);
                if (!(v instanceof Number)) return null;
                double s = ((Number) v).doubleValue();
                if (Double.isNaN(s) || Double.isInfinite(s)) return null;
                q[x][o] = s;
            }
        }
        return q;
    }

    /** log P[x][o] for P[x][o] proportional to exp(s q[x][o]), row by row (log-sum-exp). */
    static double[][] logChannel(double[][] q, double s) {
        double[][] out = new double[q.length][];
        for (int x = 0; x < q.length; x++) {
            double[] a = new double[q[x].length];
            double top = Double.NEGATIVE_INFINITY;
            for (int o = 0; o < a.length; o++) {
                a[o] = s * q[x][o];
                top = Math.max(top, a[o]);
            }
            double sum = 0;
            for (double v : a) sum += Math.exp(v - top);
            double lse = top + Math.log(sum);
            for (int o = 0; o < a.length; o++) a[o] -= lse;
            out[x] = a;
        }
        return out;
    }

    /** The largest log-ratio of a channel given as log probabilities: per output, max - min. */
    static double privacyLoss(double[][] lp) {
        double loss = 0;
        for (int o = 0; o < lp[0].length; o++) {
            double hi = Double.NEGATIVE_INFINITY;
            double lo = Double.POSITIVE_INFINITY;
            for (double[] row : lp) {
                hi = Math.max(hi, row[o]);
                lo = Math.min(lo, row[o]);
            }
            loss = Math.max(loss, hi - lo);
        }
        return loss;
    }

    /** The exact calibration of docs/protocol.md: bisection on [eps / R, 2 eps / R]. */
    static double exactScale(double[][] q, double eps, String name) {
        double r = 0;
        for (double[] x : q) {
            for (double[] y : q) {
                double hi = Double.NEGATIVE_INFINITY;
                double lo = Double.POSITIVE_INFINITY;
                for (int o = 0; o < x.length; o++) {
                    hi = Math.max(hi, x[o] - y[o]);
                    lo = Math.min(lo, x[o] - y[o]);
                }
                r = Math.max(r, hi - lo);
            }
        }
        if (!(r > 0)) throw refuse(name, "score", "the score gives every input the same channel");
        double lo = eps / r;
        double hi = (2 * eps) / r;
        if (privacyLoss(logChannel(q, hi)) <= eps) return hi;
        for (int i = 0; i < 200; i++) {
            double mid = 0.5 * (lo + hi);
            if (mid == lo || mid == hi) break;
            if (privacyLoss(logChannel(q, mid)) <= eps) lo = mid;
            else hi = mid;
        }
        return lo;
    }

    /**
     * The served cumulative thresholds are the exact calibration's (relative 1e-9), rising,
     * and the channel they give spends at most epsilon (1 + 1e-9), every output possible for
     * every input.
     */
    static void check(Map<String, Object> def, Map<?, ?> p, double eps, String name) {
        double[][] q = scoreMatrix(def, name);
        int d = q.length;
        int m = q[0].length;
        Object served = p.get("cumulative");
        boolean ok = served instanceof List && ((List<?>) served).size() == d;
        for (int x = 0; ok && x < d; x++) {
            Object row = ((List<?>) served).get(x);
            ok = row instanceof List && ((List<?>) row).size() == m - 1;
        }
        if (!ok) throw refuse(name, "derived.cumulative", "bad cumulative thresholds (" + d + " lists of " + (m - 1) + ")");
        double[][] lp = logChannel(q, exactScale(q, eps, name));
        double[][] channel = new double[d][m];
        for (int x = 0; x < d; x++) {
            List<?> row = (List<?>) ((List<?>) served).get(x);
            long[] t = new long[m - 1];
            for (int o = 0; o < m - 1; o++) {
                String at = "derived.cumulative[" + x + "][" + o + "]";
                if (!Definitions.isHex16(row.get(o))) {
                    throw refuse(name, at, at + " must be a threshold (16 lowercase hex digits), got " + Definitions.shown(row.get(o)));
                }
                t[o] = Unsigned.parseHex16((String) row.get(o));
            }
            double cum = 0;
            for (int o = 0; o < m; o++) {
                String at = "derived.cumulative[" + x + "][" + Math.min(o, m - 2) + "]";
                long below = o == 0 ? 0 : t[o - 1];
                if (o < m - 1 && Unsigned.compare(t[o], below) <= 0) throw refuse(name, at, "cumulative[" + x + "] is not increasing");
                // step = next - below over 2^64, the last's next being 2^64 itself
                double step = o < m - 1 ? Sampling.probability(t[o] - below) : below == 0 ? 1.0 : Sampling.probability(-below);
                cum += Math.exp(lp[x][o]);
                if (o < m - 1) {
                    double formula = cum;
                    double got = Sampling.probability(t[o]);
                    if (!(Math.abs(got - formula) <= TOLERANCE * Math.max(formula, 1e-300))) {
                        throw refuse(name, at, "served " + at + " " + got + " is not " + formula + " (the exact calibration's cumulative probability)");
                    }
                }
                channel[x][o] = Math.log(step);
            }
        }
        if (!(privacyLoss(channel) <= eps * (1 + TOLERANCE))) {
            throw refuse(name, "derived.cumulative", "the served channel spends more than epsilon " + eps);
        }
    }
}
