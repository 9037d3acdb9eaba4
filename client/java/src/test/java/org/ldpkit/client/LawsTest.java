package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * The samplers' output laws against theory, with seeded ChaCha20 words (so each run is the
 * same): chi-square of GRR's items and OUE's bits, the e^eps ratio of GRR and Duchi, the
 * discrete Gaussian's mean and variance. Bounds come from the laws' own variances at a
 * false-failure probability of about 1e-6 (chi-square critical values from scipy's
 * chi2.isf(1e-6, df); 5 standard errors for the normal ones).
 */
class LawsTest {
    private static final int N = 100000;
    private static final double Z = 5.0;

    /** floor(p 2^64) as an unsigned long (hex). */
    static String threshold(double p) {
        double x = p * 18446744073709551616.0;
        long t = x >= 9.223372036854775808E18 ? ((long) (x - 9.223372036854775808E18)) ^ Long.MIN_VALUE : (long) x;
        return String.format("%016x", t);
    }

    static long u32(byte[] b) {
        return (b[0] & 0xffL) | (b[1] & 0xffL) << 8 | (b[2] & 0xffL) << 16 | (b[3] & 0xffL) << 24;
    }

    static Sampler grr(double eps, int d) {
        Map<String, Object> p = new HashMap<String, Object>();
        double e = Math.exp(eps);
        p.put("keep", threshold(e / (e + d - 1)));
        return Sampling.oracleSampler("grr", p, d);
    }

    @Test
    void grrItemsFollowTheirLaw() {
        double eps = 1.0;
        int d = 4;
        double e = Math.exp(eps);
        double p = e / (e + d - 1);
        double q = (1 - p) / (d - 1);
        Sampler s = grr(eps, d);
        Words w = new ChaChaWords(ChaChaWords.seedKey(1));
        long[] counts = new long[d];
        for (int i = 0; i < N; i++) counts[(int) u32(s.sample(2L, w))]++;
        double chi2 = 0;
        for (int y = 0; y < d; y++) {
            double expected = N * (y == 2 ? p : q);
            chi2 += (counts[y] - expected) * (counts[y] - expected) / expected;
        }
        assertTrue(chi2 < 30.66, "chi-square " + chi2 + " (df 3) of counts " + java.util.Arrays.toString(counts));
    }

    @Test
    void oueBitsFollowTheirLaw() {
        double eps = 1.0;
        int d = 6;
        double q = 1 / (Math.exp(eps) + 1);
        Map<String, Object> params = new HashMap<String, Object>();
        params.put("p", threshold(0.5));
        params.put("q", threshold(q));
        Sampler s = Sampling.oracleSampler("oue", params, d);
        Words w = new ChaChaWords(ChaChaWords.seedKey(2));
        long[] ones = new long[d];
        for (int i = 0; i < N; i++) {
            byte[] r = s.sample(4L, w);
            assertTrue(r.length == 1 && (r[0] & 0xc0) == 0, "six bits in one byte, padding zero");
            for (int j = 0; j < d; j++) if ((r[0] >> j & 1) == 1) ones[j]++;
        }
        double chi2 = 0; // independent bits: the sum of their squared z-scores has df = d
        for (int j = 0; j < d; j++) {
            double pj = j == 4 ? 0.5 : q;
            chi2 += Math.pow(ones[j] - N * pj, 2) / (N * pj * (1 - pj));
        }
        assertTrue(chi2 < 38.26, "chi-square " + chi2 + " (df 6) of bit counts " + java.util.Arrays.toString(ones));
    }

    /** |log(a/b) - eps| within Z standard errors (delta method) of two frequencies a, b of N draws. */
    static void ratioIsExpEps(long hitsA, long hitsB, double pa, double pb, double eps, String what) {
        double a = (double) hitsA / N;
        double b = (double) hitsB / N;
        double se = Math.sqrt((1 - pa) / (N * pa) + (1 - pb) / (N * pb));
        double got = Math.log(a / b);
        assertTrue(Math.abs(got - eps) <= Z * se, what + ": log ratio " + got + ", eps " + eps + " (se " + se + ")");
    }

    @Test
    void grrSupportsTheTrueItemEToTheEpsTimesMoreOften() {
        double eps = 0.7;
        int d = 5;
        double e = Math.exp(eps);
        double p = e / (e + d - 1);
        double q = (1 - p) / (d - 1);
        Sampler s = grr(eps, d);
        Words w = new ChaChaWords(ChaChaWords.seedKey(3));
        long fromZero = 0;
        long fromOne = 0;
        for (int i = 0; i < N; i++) {
            if (u32(s.sample(0L, w)) == 0) fromZero++;
            if (u32(s.sample(1L, w)) == 0) fromOne++;
        }
        ratioIsExpEps(fromZero, fromOne, p, q, eps, "Pr[y = 0 | x = 0] / Pr[y = 0 | x = 1]");
    }

    @Test
    void duchiReportsPlusOneEToTheEpsTimesMoreOftenAtTheTopThanAtTheBottom() {
        double eps = 1.2;
        double e = Math.exp(eps);
        Map<String, Object> def = new HashMap<String, Object>();
        Map<String, Object> derived = new HashMap<String, Object>();
        // flip rounded up as the collector does (a flip never less likely than the formula)
        derived.put("flip", String.format("%016x", Long.parseUnsignedLong(threshold(1 / (e + 1)), 16) + 1));
        def.put("resolved_mechanism", "duchi");
        def.put("derived", derived);
        def.put("bounds", java.util.Arrays.asList(0.0, 10.0));
        Sampler s = Sampling.sampler(def);
        Words w = new ChaChaWords(ChaChaWords.seedKey(4));
        long top = 0;
        long bottom = 0;
        for (int i = 0; i < N; i++) {
            if (s.sample(10.0, w)[0] == 1) top++;
            if (s.sample(0.0, w)[0] == 1) bottom++;
        }
        ratioIsExpEps(top, bottom, e / (e + 1), 1 / (e + 1), eps, "Pr[+1 | t = 1] / Pr[+1 | t = -1]");
    }

    @Test
    void theDiscreteGaussianHasItsMeanAndVariance() {
        long t = 11;
        long m = 10;
        double sigma2 = t * m; // the discrete Gaussian's variance is sigma2 to within e^(-2 pi^2 sigma2)
        int n = 40000;
        Words w = new ChaChaWords(ChaChaWords.seedKey(5));
        double sum = 0;
        double squares = 0;
        for (int i = 0; i < n; i++) {
            long z = Sampling.discreteGaussian(w, t, m);
            sum += z;
            squares += (double) z * z;
        }
        double mean = sum / n;
        double variance = squares / n - mean * mean;
        assertTrue(Math.abs(mean) <= Z * Math.sqrt(sigma2 / n), "mean " + mean);
        assertTrue(Math.abs(variance - sigma2) <= Z * sigma2 * Math.sqrt(2.0 / n), "variance " + variance + ", sigma2 " + sigma2);
    }
}
