package org.ldpkit.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Metric definitions as served by GET /v1/metrics: checked before use (docs/protocol.md,
 * "Verification"), including that the served sampler constants ({@code derived}) give
 * no more privacy loss than {@code epsilon}: a collector cannot weaken a device's privacy
 * by serving other thresholds. A refused definition raises a {@link DefinitionException}
 * whose {@link DefinitionException#constant()} names the constant.
 */
public final class Definitions {
    private Definitions() {
    }

    /** A metric name: [a-z][a-z0-9_.-]{0,63}. */
    public static boolean validName(Object name) {
        if (!(name instanceof String)) return false;
        String s = (String) name;
        if (s.isEmpty() || s.length() > 64 || s.charAt(0) < 'a' || s.charAt(0) > 'z') return false;
        for (int i = 1; i < s.length(); i++) {
            char c = s.charAt(i);
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-')) return false;
        }
        return true;
    }

    /** 16 lowercase hex digits (a threshold, a seed, a fingerprint). */
    public static boolean isHex16(Object value) {
        if (!(value instanceof String) || ((String) value).length() != 16) return false;
        for (char c : ((String) value).toCharArray()) if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
        return true;
    }
    /** Seconds of each period. */
    public static final Map<String, Long> PERIODS;

    static {
        Map<String, Long> periods = new LinkedHashMap<String, Long>();
        periods.put("hour", 3600L);
        periods.put("day", 86400L);
        periods.put("week", 604800L);
        PERIODS = Collections.unmodifiableMap(periods);
    }

    /**
     * Relative slack when comparing sums of epsilons: the ledger admits a report when
     * spent + epsilon <= budget (1 + BUDGET_SLACK) + BUDGET_SLACK.
     */
    public static final double BUDGET_SLACK = 1e-9;
    private static final int MAX_CATEGORIES = 65536;
    private static final double TOLERANCE = 1e-9; // relative slack between a served threshold and its formula

    /** The kind each mechanism serves (categorical and numeric: their own lists). */
    private static final Map<String, String> KIND_OF = new HashMap<String, String>();

    static {
        KIND_OF.put("hh", "distribution");
        KIND_OF.put("square_wave", "distribution");
        KIND_OF.put("rollup", "hierarchy");
        KIND_OF.put("levels", "hierarchy");
        KIND_OF.put("joint", "table");
        KIND_OF.put("joint_marginals", "table");
        KIND_OF.put("prefix_sketch", "strings");
    }

    private static DefinitionException refuse(String name, String constant, String why) {
        return new DefinitionException("metric " + name + ": " + why, name, constant);
    }

    private static double prob(Map<?, ?> p, String key, String at, String name) {
        Object hex = p.get(key);
        if (!isHex16(hex)) {
            throw refuse(name, at + "." + key, at + "." + key + " must be a threshold (16 lowercase hex digits), got " + shown(hex));
        }
        return Sampling.probability(Unsigned.parseHex16((String) hex));
    }

    private static void near(double served, double formula, String constant, String what, String name) {
        if (!(Math.abs(served - formula) <= TOLERANCE * Math.max(formula, 1e-300))) {
            throw refuse(name, constant, "served " + constant + " " + served + " is not " + formula + " (" + what + ")");
        }
    }

    private static long integer(Object value, long lo, long hi, String constant, String name) {
        Long v = asLong(value);
        if (v == null || v < lo || v > hi) throw refuse(name, constant, constant + " must be an integer in " + lo + ".." + hi + ", got " + shown(value));
        return v;
    }

    private static double real(Object value, String constant, String name) {
        if (!(value instanceof Number) || Double.isNaN(((Number) value).doubleValue()) || Double.isInfinite(((Number) value).doubleValue())) {
            throw refuse(name, constant, constant + " must be a finite number, got " + shown(value));
        }
        return ((Number) value).doubleValue();
    }

    /** An integral JSON number (as JavaScript's Number.isSafeInteger), else null. */
    static Long asLong(Object value) {
        if (value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte) {
            long v = ((Number) value).longValue();
            return Math.abs(v) <= 9007199254740991L ? v : null;
        }
        if (value instanceof Double || value instanceof Float) {
            double x = ((Number) value).doubleValue();
            if (x == Math.floor(x) && Math.abs(x) <= 9007199254740991.0) return (long) x;
        }
        return null;
    }

    private static Map<?, ?> asMap(Object value, String constant, String name) {
        if (!(value instanceof Map)) throw refuse(name, constant, constant + " must be an object");
        return (Map<?, ?>) value;
    }

    private static List<?> asList(Object value, int min, int max, String constant, String name) {
        if (!(value instanceof List) || ((List<?>) value).size() < min || ((List<?>) value).size() > max) {
            throw refuse(name, constant, "bad " + constant + " (a list of " + min + ".." + max + ")");
        }
        return (List<?>) value;
    }

    /** Deep equality of JSON values, numbers by value (1 == 1.0, as JSON.stringify compares them). */
    static boolean same(Object a, Object b) {
        if (a instanceof Number && b instanceof Number) return ((Number) a).doubleValue() == ((Number) b).doubleValue();
        if (a instanceof List && b instanceof List) {
            List<?> x = (List<?>) a;
            List<?> y = (List<?>) b;
            if (x.size() != y.size()) return false;
            for (int i = 0; i < x.size(); i++) if (!same(x.get(i), y.get(i))) return false;
            return true;
        }
        if (a instanceof Map && b instanceof Map) {
            Map<?, ?> x = (Map<?, ?>) a;
            Map<?, ?> y = (Map<?, ?>) b;
            if (!x.keySet().equals(y.keySet())) return false;
            for (Object k : x.keySet()) if (!same(x.get(k), y.get(k))) return false;
            return true;
        }
        return a == null ? b == null : a.equals(b);
    }

    /** The fingerprinted mechanism parameters (other kinds) agree with the served constants. */
    private static void checkMechanismParams(Map<String, Object> def) {
        String name = (String) def.get("name");
        Map<?, ?> mp = asMap(def.get("mechanism_params"), "mechanism_params", name);
        Map<?, ?> p = asMap(def.get("derived"), "derived", name);
        Object mechanism = def.get("resolved_mechanism");
        sameOr(mp.get("mechanism"), mechanism, "mechanism_params.mechanism", "the mechanism", name);
        sameOr(mp.get("epsilon"), def.get("epsilon"), "mechanism_params.epsilon", "epsilon", name);
        if ("hh".equals(mechanism)) {
            sameOr(mp.get("bounds"), def.get("bounds"), "mechanism_params.bounds", "bounds", name);
            sameOr(mp.get("resolution"), p.get("resolution"), "derived.resolution", "resolution", name);
        } else if ("square_wave".equals(mechanism)) {
            sameOr(mp.get("bounds"), def.get("bounds"), "mechanism_params.bounds", "bounds", name);
        } else if (Sampling.VIEW_MECHANISMS.contains(mechanism)) {
            sameViews(mp.get("views"), p.get("views"), name);
            if (def.get("categories") != null) sameOr(mp.get("categories"), def.get("categories"), "categories", "categories", name);
        } else if ("prefix_sketch".equals(mechanism)) {
            for (String key : new String[] {"max_length", "g", "rows", "estimation_rows"}) {
                sameOr(mp.get(key), p.get(key), "derived." + key, key, name);
            }
            sameOr(mp.containsKey("cut") ? mp.get("cut") : "prefix", p.containsKey("cut") ? p.get("cut") : "prefix", "derived.cut", "cut", name);
        }
    }

    private static void sameOr(Object a, Object b, String constant, String what, String name) {
        if (!same(a, b)) throw refuse(name, constant, what + " differs from the fingerprinted parameters (" + constant + ")");
    }

    /** Each served view's name, oracle and size are the fingerprinted view's, named by path. */
    private static void sameViews(Object fingerprinted, Object served, String name) {
        List<?> mine = asList(fingerprinted == null ? new ArrayList<Object>() : fingerprinted, 0, Integer.MAX_VALUE, "mechanism_params.views", name);
        List<?> theirs = asList(served, 0, Integer.MAX_VALUE, "derived.views", name);
        if (mine.size() != theirs.size()) {
            throw refuse(name, "derived.views", "the views differ from the fingerprinted parameters (derived.views: "
                    + theirs.size() + " served, " + mine.size() + " fingerprinted)");
        }
        for (int k = 0; k < mine.size(); k++) {
            String at = "derived.views[" + k + "]";
            Map<?, ?> m = asMap(mine.get(k), "mechanism_params.views[" + k + "]", name);
            Map<?, ?> v = asMap(theirs.get(k), at, name);
            for (String key : new String[] {"name", "oracle", "size"}) {
                sameOr(m.get(key), v.get(key), at + "." + key, "view " + k + "'s " + key, name);
            }
        }
    }

    /** The keys of derived (or of a depth or view of it) each mechanism's sampler knows. */
    private static final Map<String, List<String>> KEYS = new HashMap<String, List<String>>();

    static {
        KEYS.put("grr", Arrays.asList("keep"));
        KEYS.put("rr", Arrays.asList("keep"));
        KEYS.put("sue", Arrays.asList("p", "q"));
        KEYS.put("oue", Arrays.asList("p", "q"));
        KEYS.put("olh", Arrays.asList("g", "keep"));
        KEYS.put("ss", Arrays.asList("k", "in"));
        KEYS.put("hr", Arrays.asList("K", "keep"));
        KEYS.put("exponential", Arrays.asList("cumulative"));
        KEYS.put("square_wave", Arrays.asList("band", "near", "outputs"));
        KEYS.put("duchi", Arrays.asList("flip", "scale"));
        KEYS.put("piecewise", Arrays.asList("outside", "c_plus_1", "c_minus_1", "step", "c", "w_in", "w_out", "bound", "scale"));
        KEYS.put("hybrid", Arrays.asList("outside", "c_plus_1", "c_minus_1", "step", "c", "w_in", "w_out", "bound", "scale",
                "pm", "flip", "duchi_index"));
        KEYS.put("laplace", Arrays.asList("grid_steps", "cap", "digits", "block"));
        KEYS.put("gaussian", Arrays.asList("grid_steps", "cap", "t", "m"));
        KEYS.put("hh", Arrays.asList("resolution", "depths"));
        KEYS.put("depth", Arrays.asList("leaves_per_node", "nodes", "oracle"));
        KEYS.put("views", Arrays.asList("payload", "views"));
        KEYS.put("view", Arrays.asList("name", "oracle", "size", "until", "labels"));
        KEYS.put("prefix_sketch", Arrays.asList("max_length", "rows", "estimation_rows", "g", "seed", "weights", "keep", "cut"));
    }

    /** A served constant this client does not know means a newer protocol: refused, naming it. */
    private static void knownKeys(Map<?, ?> p, String at, String name, String family, String oracle) {
        for (Object key : p.keySet()) {
            if (KEYS.get(family).contains(key) || (oracle != null && KEYS.get(oracle).contains(key))) continue;
            String constant = at + "." + key;
            throw refuse(name, constant, "served " + constant + " is a constant this client does not know (a newer protocol?)");
        }
    }

    /** Check that the served constants realize the mechanism at the definition's epsilon. */
    public static void checkDerived(Map<String, Object> def) {
        String name = (String) def.get("name");
        Map<?, ?> p = asMap(def.get("derived"), "derived", name);
        double eps = ((Number) def.get("epsilon")).doubleValue();
        String mechanism = (String) def.get("resolved_mechanism");
        knownKeys(p, "derived", name, Sampling.VIEW_MECHANISMS.contains(mechanism) ? "views" : mechanism, null);
        if ("hh".equals(mechanism)) {
            checkDepths(def, p, eps, name);
        } else if (Sampling.VIEW_MECHANISMS.contains(mechanism)) {
            checkViews(def, p, eps, name);
        } else if ("prefix_sketch".equals(mechanism)) {
            long maxLength = integer(p.get("max_length"), 1, 64, "derived.max_length", name);
            if (!same(p.get("max_length"), def.get("max_length"))) throw refuse(name, "derived.max_length", "max_length differs");
            integer(p.get("rows"), 1, 1 << 16, "derived.rows", name);
            integer(p.get("estimation_rows"), 1, 1 << 16, "derived.estimation_rows", name);
            Object seed = p.get("seed");
            if (!isHex16(seed)) throw refuse(name, "derived.seed", "bad seed");
            Object cut = p.containsKey("cut") ? p.get("cut") : "prefix";
            if (!"prefix".equals(cut) && !"scaled".equals(cut)) throw refuse(name, "derived.cut", "unknown cut rule " + shown(cut));
            checkSketchWeights(def, p, maxLength, name);
            checkOracle(name, eps, "olh", p, 0, "derived");
        } else if ("gaussian".equals(mechanism)) {
            checkGaussian(def, p, name);
        } else if ("exponential".equals(mechanism)) {
            checkExponential(def, p, name);
        } else if ("square_wave".equals(mechanism)) {
            checkSquareWave(def, p, eps, name);
        } else {
            Object cats = def.get("categories");
            checkOracle(name, eps, mechanism, p, cats instanceof List ? ((List<?>) cats).size() : 0, "derived");
        }
    }

    /**
     * A distribution's depths: the tree of fan-out {@code branching} (fingerprinted) over
     * {@code resolution} leaves, as ldpkit's Tree: the height is the least h with
     * b^h >= resolution, depth t's nodes hold b^(height - t) leaves, and there are
     * ceil(resolution / leaves_per_node) of them.
     */
    private static void checkDepths(Map<String, Object> def, Map<?, ?> p, double eps, String name) {
        List<?> depths = asList(p.get("depths"), 1, 64, "derived.depths", name);
        long resolution = integer(p.get("resolution"), 2, 4096, "derived.resolution", name);
        Map<?, ?> mp = asMap(def.get("mechanism_params"), "mechanism_params", name);
        long branching = integer(mp.get("branching"), 2, resolution, "mechanism_params.branching", name);
        int height = 1;
        while (pow(branching, height) < resolution) height++;
        if (depths.size() != height) {
            throw refuse(name, "derived.depths", "served " + depths.size() + " depths, not the tree's height " + height);
        }
        for (int i = 0; i < depths.size(); i++) {
            String at = "derived.depths[" + i + "]";
            Map<?, ?> depth = asMap(depths.get(i), at, name);
            Object oracle = depth.get("oracle");
            if (!"grr".equals(oracle) && !"olh".equals(oracle)) throw refuse(name, at + ".oracle", "bad depth oracle " + shown(oracle));
            knownKeys(depth, at, name, "depth", (String) oracle);
            long perNode = pow(branching, height - 1 - i);
            exactly(depth.get("leaves_per_node"), perNode, at + ".leaves_per_node", "branching^(height - depth)", name);
            long nodes = (resolution + perNode - 1) / perNode;
            exactly(depth.get("nodes"), nodes, at + ".nodes", "ceil(resolution / leaves_per_node)", name);
            checkOracle(name, eps, (String) oracle, depth, nodes, at);
        }
    }

    /** b^n, saturating at 2^62 (a tree's sizes stay far below). */
    private static long pow(long b, int n) {
        long out = 1;
        for (int i = 0; i < n; i++) out = out > (1L << 62) / b ? 1L << 62 : out * b;
        return out;
    }

    /** An integer constant that must be exactly {@code formula}, else refused naming it. */
    private static void exactly(Object served, long formula, String constant, String what, String name) {
        Long v = asLong(served);
        if (v == null || v != formula) {
            throw refuse(name, constant, "served " + constant + " " + shown(served) + " is not " + formula + " (" + what + ")");
        }
    }

    /**
     * The estimation sketch's weight from its share of devices (round half to even, as
     * Python's round), then 1 per prefix level.
     */
    private static void checkSketchWeights(Map<String, Object> def, Map<?, ?> p, long maxLength, String name) {
        Map<?, ?> mp = asMap(def.get("mechanism_params"), "mechanism_params", name);
        double share = real(mp.get("estimation_share"), "mechanism_params.estimation_share", name);
        if (!(share > 0 && share < 1)) throw refuse(name, "mechanism_params.estimation_share", "bad estimation_share " + shown(share));
        long first = Math.max(1, (long) Math.rint(share * maxLength / (1.0 - share)));
        exactly(mp.get("estimation_weight"), first, "mechanism_params.estimation_weight", "max(1, round(share max_length / (1 - share)))", name);
        List<?> weights = asList(p.get("weights"), (int) maxLength + 1, (int) maxLength + 1, "derived.weights", name);
        for (int i = 0; i < weights.size(); i++) {
            exactly(weights.get(i), i == 0 ? first : 1, "derived.weights[" + i + "]", i == 0 ? "estimation_weight" : "1 per prefix level", name);
        }
    }

    private static void checkViews(Map<String, Object> def, Map<?, ?> p, double eps, String name) {
        int cells = 1;
        if (def.get("categories") != null) {
            cells = ((List<?>) def.get("categories")).size();
        } else {
            for (Object dim : (List<?>) def.get("dimensions")) cells *= ((List<?>) ((List<?>) dim).get(1)).size();
        }
        List<?> views = asList(p.get("views"), 1, 255, "derived.views", name);
        integer(p.get("payload"), 1, 1 << 16, "derived.payload", name);
        Map<?, ?> mp = asMap(def.get("mechanism_params"), "mechanism_params", name);
        List<?> fingerprinted = asList(mp.get("views"), views.size(), views.size(), "mechanism_params.views", name);
        double cumulative = 0;
        long payload = 0;
        for (int k = 0; k < views.size(); k++) {
            String at = "derived.views[" + k + "]";
            Map<?, ?> view = asMap(views.get(k), at, name);
            Object oracle = view.get("oracle");
            // The view oracles (ldpkit's STRUCTURED_ORACLES): the collector refuses any other.
            if (!Arrays.asList("grr", "sue", "oue", "ss").contains(oracle)) {
                throw refuse(name, at + ".oracle", String.valueOf(oracle) + " is not a view oracle");
            }
            knownKeys(view, at, name, "view", (String) oracle);
            long size = integer(view.get("size"), 2, 1 << 24, at + ".size", name);
            // A view is drawn by its weight: `until` is the cumulative share as a threshold
            // (the last view's ffff...), recomputed from the fingerprinted weights.
            Object weight = asMap(fingerprinted.get(k), "mechanism_params.views[" + k + "]", name).get("weight");
            double w = real(weight, "mechanism_params.views[" + k + "].weight", name);
            if (!(w > 0)) throw refuse(name, "mechanism_params.views[" + k + "].weight", "a view's weight must be positive");
            cumulative += w;
            if (k == views.size() - 1) {
                if (!"ffffffffffffffff".equals(view.get("until"))) {
                    throw refuse(name, at + ".until", "the last view's until must be ffffffffffffffff, got " + shown(view.get("until")));
                }
            } else {
                near(prob(view, "until", at, name), Math.min(cumulative, 1.0), at + ".until", "the cumulative weight of views 0.." + k, name);
            }
            checkLabels(def, view, cells, size, at, name);
            checkOracle(name, eps, (String) oracle, view, size, at);
            // The payload holds the largest view report: GRR's u32, a bitmap's ceil(size / 8).
            payload = Math.max(payload, "grr".equals(oracle) ? 4 : (size + 7) / 8);
        }
        exactly(p.get("payload"), payload, "derived.payload", "the largest view report", name);
    }

    /** A view's labels are its cells' groups (null: the cells themselves), and size their count. */
    private static void checkLabels(Map<String, Object> def, Map<?, ?> view, int cells, long size, String at, String name) {
        int[] labels = viewLabels(def, view.get("name"), cells, at, name);
        int groups = 0;
        boolean identity = labels.length == size;
        for (int i = 0; i < labels.length; i++) {
            groups = Math.max(groups, labels[i] + 1);
            identity &= labels[i] == i;
        }
        Object served = view.get("labels");
        if (identity) {
            if (served != null || !view.containsKey("labels")) throw refuse(name, at + ".labels", "the labels of view " + shown(view.get("name")) + " must be null (the cells themselves)");
        } else {
            if (!(served instanceof List) || ((List<?>) served).size() != labels.length) {
                throw refuse(name, at + ".labels", "the labels of view " + shown(view.get("name")) + " are not its " + labels.length + " cells' groups");
            }
            List<?> list = (List<?>) served;
            for (int i = 0; i < labels.length; i++) {
                exactly(list.get(i), labels[i], at + ".labels[" + i + "]", "cell " + i + "'s group in view " + shown(view.get("name")), name);
            }
        }
        if (size != groups) throw refuse(name, at + ".size", "view " + shown(view.get("name")) + " has " + groups + " groups, not size " + size);
    }

    /**
     * Each base cell's group in the view named {@code view} (docs/protocol.md, Derived
     * parameters): a hierarchy's {@code depth d} numbers the nodes at depth d in order of
     * first appearance among the leaves (a leaf above d stays itself); a table's
     * {@code cells} is the cells, and an attribute's view each cell's category of it (cells
     * row-major, the first attribute slowest).
     */
    private static int[] viewLabels(Map<String, Object> def, Object view, int cells, String at, String name) {
        int[] out = new int[cells];
        String v = view instanceof String ? (String) view : "";
        if ("hierarchy".equals(def.get("kind"))) {
            int d = v.startsWith("depth ") ? depthOf(v.substring(6)) : 0;
            if (d < 1) throw refuse(name, at + ".name", "unknown view " + shown(view));
            String sep = def.get("separator") instanceof String ? (String) def.get("separator") : "/";
            Map<String, Integer> index = new HashMap<String, Integer>();
            List<?> leaves = (List<?>) def.get("categories");
            for (int i = 0; i < cells; i++) {
                String leaf = (String) leaves.get(i);
                int cut = -1;
                for (int j = 0; j < d && cut < leaf.length(); j++) {
                    int next = leaf.indexOf(sep, cut + (j == 0 ? 1 : sep.length()));
                    cut = next < 0 ? leaf.length() : next;
                }
                String path = leaf.substring(0, Math.max(cut, 0));
                if (!index.containsKey(path)) index.put(path, index.size());
                out[i] = index.get(path);
            }
            return out;
        }
        if ("cells".equals(v)) {
            for (int i = 0; i < cells; i++) out[i] = i;
            return out;
        }
        List<?> dims = (List<?>) def.get("dimensions");
        int inner = 1;
        for (int a = dims.size() - 1; a >= 0; a--) {
            List<?> dim = (List<?>) dims.get(a);
            int size = ((List<?>) dim.get(1)).size();
            if (v.equals(dim.get(0))) {
                for (int i = 0; i < cells; i++) out[i] = (i / inner) % size;
                return out;
            }
            inner *= size;
        }
        throw refuse(name, at + ".name", "unknown view " + shown(view));
    }

    /** A positive decimal integer without a leading zero, else 0. */
    private static int depthOf(String digits) {
        if (digits.isEmpty() || digits.length() > 6 || digits.charAt(0) == '0') return 0;
        for (char c : digits.toCharArray()) if (c < '0' || c > '9') return 0;
        return Integer.parseInt(digits);
    }

    private static final int MAX_EXPONENTIAL_ITEMS = 64;

    /** The exponential mechanism's score matrix q[x][o] from the definition (docs/protocol.md). */
    private static double[][] scoreMatrix(Map<String, Object> def, String name) {
        int d = ((List<?>) def.get("categories")).size();
        if (d > MAX_EXPONENTIAL_ITEMS) throw refuse(name, "categories", "too many categories for exponential");
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
            long b = integer(band, 0, d - 2, "band", name);
            double[][] q = new double[d][d];
            for (int x = 0; x < d; x++) for (int o = 0; o < d; o++) q[x][o] = Math.abs(x - o) <= b ? 1 : 0;
            return q;
        }
        if ("matrix".equals(score) && band == null && scores instanceof List && ((List<?>) scores).size() == d
                && ((List<?>) scores).get(0) instanceof List) {
            int m = ((List<?>) ((List<?>) scores).get(0)).size();
            double[][] q = new double[d][m];
            boolean ok = m >= d && m <= MAX_EXPONENTIAL_ITEMS;
            for (int x = 0; ok && x < d; x++) {
                Object row = ((List<?>) scores).get(x);
                ok = row instanceof List && ((List<?>) row).size() == m;
                for (int o = 0; ok && o < m; o++) {
                    Object v = ((List<?>) row).get(o);
                    ok = v instanceof Number && !Double.isNaN(((Number) v).doubleValue()) && !Double.isInfinite(((Number) v).doubleValue());
                    if (ok) q[x][o] = ((Number) v).doubleValue();
                }
            }
            if (ok) return q;
        }
        throw refuse(name, "score", "bad score for the exponential mechanism");
    }

    /** log P[x][o] for P[x][o] proportional to exp(s q[x][o]), row by row (log-sum-exp). */
    private static double[][] logChannel(double[][] q, double s) {
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
    private static double privacyLoss(double[][] lp) {
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
     * The exponential mechanism: the served cumulative thresholds are the exact
     * calibration's (relative 1e-9), increasing, and the channel they give spends at most
     * epsilon (1 + 1e-9), every output possible for every input.
     */
    private static void checkExponential(Map<String, Object> def, Map<?, ?> p, String name) {
        double eps = ((Number) def.get("epsilon")).doubleValue();
        double[][] q = scoreMatrix(def, name);
        int d = q.length;
        int m = q[0].length;
        List<?> served = asList(p.get("cumulative"), d, d, "derived.cumulative", name);
        double[][] lp = logChannel(q, exactScale(q, eps, name));
        double[][] channel = new double[d][m];
        for (int x = 0; x < d; x++) {
            List<?> row = asList(served.get(x), m - 1, m - 1, "derived.cumulative[" + x + "]", name);
            long prev = 0;
            double cum = 0;
            for (int o = 0; o < m; o++) {
                String at = "derived.cumulative[" + x + "][" + o + "]";
                long v = 0; // 2^64 after the last threshold
                if (o < m - 1) {
                    Object hex = row.get(o);
                    if (!isHex16(hex)) throw refuse(name, at, at + " must be a threshold (16 lowercase hex digits), got " + shown(hex));
                    v = Unsigned.parseHex16((String) hex);
                    if (Unsigned.compare(v, prev) <= 0) throw refuse(name, at, "cumulative[" + x + "] is not increasing at " + o);
                }
                cum += Math.exp(lp[x][o]);
                if (o < m - 1) near(Sampling.probability(v), cum, at, "the exact calibration's cumulative probability", name);
                // The step v - prev as an unsigned long (the last: 2^64 - prev, prev > 0).
                channel[x][o] = Math.log(Sampling.probability(v - prev));
                prev = v;
            }
        }
        if (!(privacyLoss(channel) <= eps * (1 + TOLERANCE))) {
            throw refuse(name, "derived.cumulative", "the served channel spends more than epsilon " + eps);
        }
    }

    /**
     * Li et al.'s half-width b of the square wave on the unit scale, as ldpkit's
     * optimal_band: (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)), and below
     * eps = 1 the numerator and e^eps - 1 - eps summed as their series (30 terms), which do
     * not cancel.
     */
    public static double squareWaveBand(double eps) {
        if (eps < 1) {
            double term = 1;
            double top = 0;
            double bottom = 0;
            for (int k = 1; k <= 30; k++) {
                term *= eps / k;
                top += (k - 1) * term;
                bottom += k >= 2 ? term : 0.0;
            }
            return top / (2 * Math.exp(eps) * bottom);
        }
        double e = Math.exp(eps);
        return (eps * e - e + 1) / (2 * e * (e - 1 - eps));
    }

    /**
     * The square wave: {@code band} is the optimal half-width at epsilon (relative 1e-9),
     * {@code near} the threshold of the window's probability 2 b p with p = e^eps / (2 b e^eps + 1)
     * (relative 1e-9, as every threshold), {@code outputs} the fingerprinted resolution;
     * and the served pair spends at most epsilon: the window's density near / (2 b) over the
     * rest's 1 - near is at most e^eps.
     */
    private static void checkSquareWave(Map<String, Object> def, Map<?, ?> p, double eps, String name) {
        Map<?, ?> mp = asMap(def.get("mechanism_params"), "mechanism_params", name);
        // d' is the fingerprinted resolution (mechanism_params keep hh's keys).
        long outputs = integer(mp.get("resolution"), 2, 4096, "mechanism_params.resolution", name);
        exactly(p.get("outputs"), outputs, "derived.outputs", "the fingerprinted resolution (d')", name);
        double band = real(p.get("band"), "derived.band", name);
        if (!(band > 0 && band < 1)) throw refuse(name, "derived.band", "served derived.band " + shown(band) + " is not a half-width in (0, 1)");
        double b = squareWaveBand(eps);
        near(band, b, "derived.band", "the optimal half-width at epsilon", name);
        double e = Math.exp(eps);
        double q = 1 / (2 * b * e + 1);
        double window = prob(p, "near", "derived", name);
        near(window, 2 * b * (q * e), "derived.near", "2 b p, the window's probability", name);
        if (!(window / (2 * band * (1 - window)) <= e * (1 + TOLERANCE))) {
            throw refuse(name, "derived.near", "the served derived.near and derived.band spend more than epsilon " + eps);
        }
    }

    private static void checkOracle(String name, double eps, String mechanism, Map<?, ?> p, long d, String at) {
        double e = Math.exp(eps);
        if ("grr".equals(mechanism) || "rr".equals(mechanism)) {
            near(prob(p, "keep", at, name), e / (e + d - 1), at + ".keep", "e^eps / (e^eps + d - 1)", name);
        } else if ("sue".equals(mechanism)) {
            double h = Math.exp(eps / 2);
            near(prob(p, "p", at, name), h / (h + 1), at + ".p", "e^(eps/2) / (e^(eps/2) + 1)", name);
            near(prob(p, "q", at, name), 1 / (h + 1), at + ".q", "1 / (e^(eps/2) + 1)", name);
        } else if ("oue".equals(mechanism)) {
            near(prob(p, "p", at, name), 0.5, at + ".p", "1/2", name);
            near(prob(p, "q", at, name), 1 / (e + 1), at + ".q", "1 / (e^eps + 1)", name);
        } else if ("olh".equals(mechanism)) {
            long g = integer(p.get("g"), 2, 4294967296L, at + ".g", name);
            double keep = prob(p, "keep", at, name);
            double formula = e / (e + g - 1);
            if (!(Math.abs(keep - formula) <= TOLERANCE * formula)) {
                // Which lies: a keep that is the formula's for another g names g.
                double implied = e * (1 - keep) / keep + 1;
                long other = Math.round(implied);
                if (other >= 2 && other != g && Math.abs(implied - other) <= 1e-6 * other) {
                    throw refuse(name, at + ".g", "served " + at + ".g = " + g + " does not fit " + at + ".keep " + keep + ", which is that of g = " + other);
                }
                near(keep, formula, at + ".keep", "e^eps / (e^eps + g - 1)", name);
            }
        } else if ("ss".equals(mechanism)) {
            long k = integer(p.get("k"), 1, d - 1, at + ".k", name);
            exactly(k, optimalSubsetSize(eps, d), at + ".k", "the k in {floor, ceil}(d / (e^eps + 1)) of least variance", name);
            near(prob(p, "in", at, name), (k * e) / (k * e + d - k), at + ".in", "k e^eps / (k e^eps + d - k)", name);
        } else if ("hr".equals(mechanism)) {
            long columns = integer(p.get("K"), d + 1, 2 * d + 2, at + ".K", name);
            if ((columns & (columns - 1)) != 0) throw refuse(name, at + ".K", at + ".K must be a power of 2");
            near(prob(p, "keep", at, name), e / (e + 1), at + ".keep", "e^eps / (e^eps + 1)", name);
        } else if ("duchi".equals(mechanism)) {
            near(prob(p, "flip", at, name), 1 / (e + 1), at + ".flip", "1 / (e^eps + 1)", name);
            // C: what a report of +-1 stands for.
            near(real(p.get("scale"), at + ".scale", name), (e + 1) / (e - 1), at + ".scale", "(e^eps + 1) / (e^eps - 1)", name);
        } else if ("piecewise".equals(mechanism) || "hybrid".equals(mechanism)) {
            checkGrid(name, eps, mechanism, p, at);
        } else if ("laplace".equals(mechanism)) {
            checkLaplace(name, eps, p, at);
        } else {
            throw refuse(name, "resolved_mechanism", "unknown mechanism " + shown(mechanism));
        }
    }

    /** ldpkit's optimal_subset_size: of {floor, ceil}(d / (e^eps + 1)) in 1..d - 1, the k of least variance (the smaller on a tie). */
    static long optimalSubsetSize(double eps, long d) {
        double target = d / (Math.exp(eps) + 1.0);
        long lo = Math.min(d - 1, Math.max(1, (long) Math.floor(target)));
        long hi = Math.min(d - 1, Math.max(1, (long) Math.ceil(target)));
        return subsetVariance(eps, d, hi) < subsetVariance(eps, d, lo) ? hi : lo;
    }

    private static double subsetVariance(double eps, long d, long k) {
        double p = k / (k + (d - k) * Math.exp(-eps));
        double q = (p * (k - 1) + (1.0 - p) * k) / (d - 1);
        return q * (1.0 - q) / ((p - q) * (p - q));
    }

    /** PM's grid: [-C, C] in 2 * HALF_CELLS cells (protocol v1). */
    private static final long HALF_CELLS = 1L << 19;

    /**
     * Piecewise and hybrid: every grid constant recomputed from epsilon alone (C = coth(eps/4),
     * C +- 1, the step, c = C / step, the widths, the bound, the scale; hybrid's flip, pm and
     * Duchi's index), each compared with its own served value, so a lie names itself.
     */
    private static void checkGrid(String name, double eps, String mechanism, Map<?, ?> p, String at) {
        double e = Math.exp(eps);
        double h = Math.exp(eps / 2);
        double q = prob(p, "outside", at, name);
        near(q, 1 / (h + 1), at + ".outside", "1 / (e^(eps/2) + 1)", name);
        double cPm = 1.0 / Math.tanh(eps / 4.0);
        double cPlus1 = 2.0 / -Math.expm1(-eps / 2.0);
        double cMinus1 = 2.0 / Math.expm1(eps / 2.0);
        near(real(p.get("c_plus_1"), at + ".c_plus_1", name), cPlus1, at + ".c_plus_1", "2 / (1 - e^(-eps/2))", name);
        near(real(p.get("c_minus_1"), at + ".c_minus_1", name), cMinus1, at + ".c_minus_1", "2 / (e^(eps/2) - 1)", name);
        double step;
        long bound;
        long duchiIndex = 0;
        if ("hybrid".equals(mechanism)) {
            double flip = prob(p, "flip", at, name);
            near(flip, 1 / (e + 1), at + ".flip", "1 / (e^eps + 1)", name);
            // PM's branch (ldpkit's HYBRID_THRESHOLD: Duchi's branch alone at eps <= 0.61).
            double pm = eps > 0.61 ? -Math.expm1(-eps / 2) : 0;
            double served = prob(p, "pm", at, name);
            if (pm == 0 ? !"0000000000000000".equals(p.get("pm")) : !(Math.abs(served - pm) <= TOLERANCE * pm + Math.pow(2, -52))) {
                throw refuse(name, at + ".pm", "served " + at + ".pm " + served + " is not " + pm);
            }
            // Duchi's outputs +-C_d (C_d = 1 / (1 - 2 flip), the served flip now checked) sit
            // on the grid at +-duchi_index: the step is C_d / duchi_index.
            double cDuchi = 1.0 / (1.0 - 2.0 * flip);
            duchiIndex = Math.max(1, (long) Math.floor(HALF_CELLS * cDuchi / cPm));
            step = cDuchi / duchiIndex;
            bound = (long) Math.ceil(cPm / step);
        } else {
            step = cPm / HALF_CELLS;
            bound = HALF_CELLS;
        }
        double servedStep = real(p.get("step"), at + ".step", name);
        near(servedStep, step, at + ".step", "the grid step", name);
        near(real(p.get("c"), at + ".c", name), cPm / step, at + ".c", "C / step", name);
        double wIn = real(p.get("w_in"), at + ".w_in", name);
        double wOut = real(p.get("w_out"), at + ".w_out", name);
        near(wIn, cMinus1 / step, at + ".w_in", "(C - 1) / step", name);
        near(wOut, cPlus1 / step, at + ".w_out", "(C + 1) / step", name);
        exactly(p.get("bound"), bound, at + ".bound", "ceil(C / step)", name);
        near(real(p.get("scale"), at + ".scale", name), step, at + ".scale", "the grid step", name);
        if ("hybrid".equals(mechanism)) {
            exactly(p.get("duchi_index"), duchiIndex, at + ".duchi_index", "max(1, floor(2^19 C_duchi / C))", name);
        }
        // The density ratio inside/outside is what privacy rests on: at most e^eps.
        double ratio = ((1 - q) / wIn) / (q / wOut);
        if (!(ratio <= e * (1 + TOLERANCE))) throw refuse(name, at + ".w_in", "the served grid gives a ratio above e^eps");
    }

    private static void checkLaplace(String name, double eps, Map<?, ?> p, String at) {
        long steps = integer(p.get("grid_steps"), 65536, 65536, at + ".grid_steps", name);
        double lam = eps / steps;
        Object digits = p.get("digits");
        if (!(digits instanceof List) || ((List<?>) digits).size() > 64) throw refuse(name, at + ".digits", "digits must be a list");
        List<?> list = (List<?>) digits;
        Map<String, Object> one = new HashMap<String, Object>();
        for (int j = 0; j < list.size(); j++) {
            one.put("digit", list.get(j));
            String constant = at + ".digits[" + j + "]";
            double served = prob(one, "digit", at, name);
            near(served, 1 / (1 + Math.exp(lam * Math.pow(2, j))), constant, "1 / (1 + e^(2^j eps / D))", name);
        }
        near(prob(p, "block", at, name), Math.exp(-lam * Math.pow(2, list.size())), at + ".block", "e^(-2^J eps / D)", name);
        double blockRate = lam * Math.pow(2, list.size());
        if (!(blockRate >= Math.log(2) * 0.999 && blockRate < 2 * Math.log(2) * 1.001)) {
            throw refuse(name, at + ".digits", "the geometric's digits do not cover its scale");
        }
        integer(p.get("cap"), 1, 1L << 52, at + ".cap", name);
        // Reports are clamped 48 noise scales out (ldpkit's TAIL_CAP).
        exactly(p.get("cap"), (long) Math.ceil(48.0 / lam), at + ".cap", "ceil(48 / lambda)", name);
    }

    /** erfc(x) to about 1e-14 relative: the series of erf below 2, Lentz's continued fraction above. */
    public static double erfc(double x) {
        if (x < 0) return 2 - erfc(-x);
        if (x < 2) {
            double term = x;
            double sum = x;
            for (int n = 1; Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
                term *= (-x * x) / n;
                sum += term / (2 * n + 1);
            }
            return 1 - (2 / Math.sqrt(Math.PI)) * sum;
        }
        // erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))).
        double tiny = 1e-300;
        double f = x;
        double c = x;
        double d = 0;
        for (int n = 1; n < 500; n++) {
            double a = n / 2.0;
            d = x + a * d;
            d = 1 / (Math.abs(d) < tiny ? tiny : d);
            c = x + a / c;
            double delta = c * d;
            f *= delta;
            if (Math.abs(delta - 1) < 1e-16) break;
        }
        return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
    }

    private static double phi(double z) {
        return 0.5 * erfc(-z / Math.sqrt(2));
    }

    /** Balle and Wang's delta of N(0, sigma^2) noise at sensitivity 1 (docs/statistics.md). */
    public static double gaussianDelta(double epsilon, double sigma) {
        double a = 1 / (2 * sigma);
        double b = epsilon * sigma;
        return Math.max(0, phi(a - b) - Math.exp(epsilon) * phi(-a - b));
    }

    private static void checkGaussian(Map<String, Object> def, Map<?, ?> p, String name) {
        Object delta = def.get("delta");
        if (!(delta instanceof Number) || !(((Number) delta).doubleValue() > 0 && ((Number) delta).doubleValue() < 1)) {
            throw refuse(name, "delta", "the Gaussian needs 0 < delta < 1");
        }
        double epsilon = ((Number) def.get("epsilon")).doubleValue();
        integer(p.get("grid_steps"), 65536, 65536, "derived.grid_steps", name);
        long t = integer(p.get("t"), 1, 9007199254740991L, "derived.t", name);
        long m = integer(p.get("m"), 1, 9007199254740991L, "derived.m", name);
        long cap = integer(p.get("cap"), 1, 9007199254740991L, "derived.cap", name);
        // t = floor(s) + 1 and m = ceil(s^2 / t) put m in t - 2 .. t (else the proposal is
        // far from the noise and rejection slow); privacy rests on sigma2 = t m alone.
        if (m > t || m < t - 2) throw refuse(name, "derived.m", "derived.t and derived.m do not fit one noise parameter");
        double sigma = Math.sqrt((double) t * (double) m) / 65536; // in units of the bounds' width
        double d = ((Number) delta).doubleValue();
        if (!(gaussianDelta(epsilon, sigma) <= d)) {
            throw refuse(name, "derived.t", "the served noise sigma2 = derived.t * derived.m = " + t + " * " + m
                    + " gives more than delta " + d + " at epsilon " + epsilon);
        }
        // Reports are clamped 40 sigma out: cap = isqrt(1600 t m - 1) + 1, that is
        // (cap - 1)^2 < 1600 t m <= cap^2, in exact 128-bit integers.
        U128 n = U128.multiply(1600L * t, m);
        if (!(U128.multiply(cap - 1, cap - 1).compareTo(n) < 0 && U128.multiply(cap, cap).compareTo(n) >= 0)) {
            throw refuse(name, "derived.cap", "served derived.cap " + cap + " is not isqrt(1600 t m - 1) + 1 (about "
                    + (long) Math.ceil(40 * Math.sqrt((double) t * (double) m)) + ")");
        }
    }

    private static boolean strings(Object c) {
        if (!(c instanceof List) || ((List<?>) c).size() < 2 || ((List<?>) c).size() > MAX_CATEGORIES) return false;
        for (Object x : (List<?>) c) if (!(x instanceof String) || ((String) x).isEmpty()) return false;
        return true;
    }

    /** A checked definition with its sampler, or a DefinitionException naming what is wrong. */
    public static Definition prepare(Map<String, Object> raw) {
        if (raw == null) throw new DefinitionException("a definition must be an object", null, null);
        Object rawName = raw.get("name");
        if (!validName(rawName)) {
            String shownName = String.valueOf(rawName);
            throw new DefinitionException("bad metric name " + shownName.substring(0, Math.min(80, shownName.length())), null, "name");
        }
        String name = (String) rawName;
        Object mech = raw.get("resolved_mechanism");
        if (!Sampling.MECHANISMS.contains(mech)) {
            throw refuse(name, "resolved_mechanism", "mechanism " + shown(mech) + " is not supported by this client");
        }
        String mechanism = (String) mech;
        String kind = Sampling.CATEGORICAL.contains(mechanism) ? "categorical" : KIND_OF.containsKey(mechanism) ? KIND_OF.get(mechanism) : "numeric";
        if (!kind.equals(raw.get("kind"))) throw refuse(name, "kind", "kind does not fit its mechanism");
        for (String key : new String[] {"epsilon", "budget"}) {
            Object v = raw.get(key);
            if (!(v instanceof Number) || !(((Number) v).doubleValue() > 0 && ((Number) v).doubleValue() <= 50)) {
                throw refuse(name, key, "bad " + key);
            }
        }
        double epsilon = ((Number) raw.get("epsilon")).doubleValue();
        double budget = ((Number) raw.get("budget")).doubleValue();
        if (budget < epsilon) throw refuse(name, "budget", "budget " + budget + " is smaller than the epsilon of one report");
        if (!PERIODS.containsKey(raw.get("bucket"))) throw refuse(name, "bucket", "bad bucket or budget_period");
        if (!PERIODS.containsKey(raw.get("budget_period"))) throw refuse(name, "budget_period", "bad bucket or budget_period");
        List<String> categories = null;
        double[] bounds = null;
        List<Definition.Axis> axes = null;
        if ("categorical".equals(kind) || "hierarchy".equals(kind)) {
            if (!strings(raw.get("categories"))) throw refuse(name, "categories", "bad categories");
            categories = stringList(raw.get("categories"));
        } else if ("numeric".equals(kind) || "distribution".equals(kind)) {
            bounds = checkBounds(raw.get("bounds"), name);
        } else if ("table".equals(kind)) {
            axes = checkDimensions(raw.get("dimensions"), name);
        } else if (asLong(raw.get("max_length")) == null) {
            throw refuse(name, "max_length", "bad max_length");
        }
        if (!(raw.get("derived") instanceof Map)) throw refuse(name, "derived", "no derived parameters (collector too old?)");
        Object fp = raw.get("fingerprint");
        if (!isHex16(fp)) throw refuse(name, "fingerprint", "bad fingerprint");
        // The fingerprint of every kind: the canonical JSON is rebuilt with the schema of each
        // kind's numbers (floats as Python writes them), then the sampler's constants must be
        // those the fingerprinted parameters name.
        String computed;
        try {
            computed = Canonical.fingerprint(raw);
        } catch (CanonicalException err) {
            throw new DefinitionException("metric " + name + ": cannot check the fingerprint: " + err.getMessage(), name, err.constant());
        } catch (RuntimeException err) {
            throw new DefinitionException("metric " + name + ": cannot check the fingerprint: " + err, name, "fingerprint");
        }
        if (!fp.equals(computed)) {
            throw refuse(name, "fingerprint", "fingerprint " + fp + " is not that of its parameters (" + computed + ")");
        }
        Sampler sampler;
        try {
            if (raw.get("mechanism_params") != null) checkMechanismParams(raw);
            checkDerived(raw);
            sampler = Sampling.sampler(raw);
        } catch (DefinitionException err) {
            throw err;
        } catch (RuntimeException err) {
            throw new DefinitionException("metric " + name + ": bad derived parameters: " + err.getMessage(), name, "derived");
        }
        Map<String, Integer> index = null;
        if (categories != null) index = indexOf(categories);
        return new Definition(new LinkedHashMap<String, Object>(raw), kind, categories, bounds, axes, index, sampler);
    }

    /**
     * A definition built WITHOUT any verification (the sampling test vectors, which carry
     * no fingerprint or budget): never for served definitions, which go through {@link #prepare}.
     */
    static Definition unchecked(Map<String, Object> raw) {
        String kind = (String) raw.get("kind");
        String name = String.valueOf(raw.get("name"));
        List<String> categories = raw.get("categories") == null ? null : stringList(raw.get("categories"));
        double[] bounds = raw.get("bounds") == null ? null : checkBounds(raw.get("bounds"), name);
        List<Definition.Axis> axes = raw.get("dimensions") == null ? null : checkDimensions(raw.get("dimensions"), name);
        return new Definition(new LinkedHashMap<String, Object>(raw), kind, categories, bounds, axes,
                categories == null ? null : indexOf(categories), Sampling.sampler(raw));
    }

    private static double[] checkBounds(Object b, String name) {
        if (!(b instanceof List) || ((List<?>) b).size() != 2) throw refuse(name, "bounds", "bad bounds");
        List<?> list = (List<?>) b;
        for (Object x : list) {
            if (!(x instanceof Number) || Double.isNaN(((Number) x).doubleValue()) || Double.isInfinite(((Number) x).doubleValue())) {
                throw refuse(name, "bounds", "bad bounds");
            }
        }
        double lo = ((Number) list.get(0)).doubleValue();
        double hi = ((Number) list.get(1)).doubleValue();
        if (!(lo < hi)) throw refuse(name, "bounds", "bad bounds");
        return new double[] {lo, hi};
    }

    private static List<Definition.Axis> checkDimensions(Object dims, String name) {
        if (!(dims instanceof List) || ((List<?>) dims).isEmpty()) throw refuse(name, "dimensions", "bad dimensions");
        List<Definition.Axis> axes = new ArrayList<Definition.Axis>();
        for (Object d : (List<?>) dims) {
            if (!(d instanceof List) || ((List<?>) d).size() < 2 || !(((List<?>) d).get(0) instanceof String) || !strings(((List<?>) d).get(1))) {
                throw refuse(name, "dimensions", "bad dimensions");
            }
            List<String> cats = stringList(((List<?>) d).get(1));
            axes.add(new Definition.Axis((String) ((List<?>) d).get(0), cats, indexOf(cats)));
        }
        return axes;
    }

    private static List<String> stringList(Object value) {
        List<String> out = new ArrayList<String>();
        for (Object x : (List<?>) value) out.add((String) x);
        return out;
    }

    private static Map<String, Integer> indexOf(List<String> categories) {
        Map<String, Integer> index = new HashMap<String, Integer>();
        for (int i = 0; i < categories.size(); i++) if (!index.containsKey(categories.get(i))) index.put(categories.get(i), i);
        return index;
    }

    /**
     * The most reports of a definition's version one device's ledger lets it queue for one
     * bucket (docs/protocol.md, "Token roles"), computed exactly as ldpkit's
     * MetricDefinition.device_cap.
     */
    public static long deviceCap(Definition def) {
        double budget = def.budget * (1 + BUDGET_SLACK) + BUDGET_SLACK;
        long fresh = (long) Math.floor((budget / def.epsilon) * (1 + BUDGET_SLACK));
        return fresh * Math.max(1, PERIODS.get(def.bucket) / PERIODS.get(def.budgetPeriod));
    }

    /** A number as JavaScript writes it in a message (1, not 1.0). */
    static String jsNumber(double x) {
        if (x == Math.floor(x) && Math.abs(x) < 1e21) return String.valueOf((long) x);
        return Canonical.pyFloat(x);
    }

    /** A value for an error message: JSON (a string quoted), cut to 80 characters. */
    static String shown(Object value) {
        String text;
        if (value instanceof Number && !(value instanceof Double || value instanceof Float)) {
            text = String.valueOf(value);
        } else if (value instanceof Double || value instanceof Float) {
            double x = ((Number) value).doubleValue();
            text = Double.isNaN(x) || Double.isInfinite(x) ? "null" : jsNumber(x);
        } else {
            try {
                text = Json.write(value);
            } catch (RuntimeException notJson) {
                text = String.valueOf(value);
            }
        }
        return text.length() > 80 ? text.substring(0, 80) : text;
    }

    private static String typeName(Object value) {
        if (value == null) return "object";
        if (value instanceof String) return "string";
        if (value instanceof Boolean) return "boolean";
        if (value instanceof Number) return "number";
        return "object";
    }

    /** A mechanism input: a category or cell index (Long), a clipped number (Double), or UTF-8 bytes. */
    public static final class Encoded {
        public final Object input;
        /** Whether a number was clipped to the bounds. */
        public final boolean clipped;

        Encoded(Object input, boolean clipped) {
            this.input = input;
            this.clipped = clipped;
        }
    }

    /** The mechanism input of a raw value, or a ParameterException in the Python client's words. */
    public static Encoded encodeValue(Definition def, Object value) {
        if ("table".equals(def.kind)) return encodeRow(def, value);
        if ("strings".equals(def.kind)) {
            if (!(value instanceof String) || !wellFormed((String) value)) {
                throw new ParameterException("metric " + def.name + " takes a (well-formed) string, got " + shown(value), def.name);
            }
            byte[] bytes = ((String) value).getBytes(StandardCharsets.UTF_8);
            if (bytes.length > def.maxLength) {
                throw new ParameterException(shown(value) + " is " + bytes.length + " bytes in UTF-8, longer than max_length = "
                        + def.maxLength + "; nothing was recorded", def.name);
            }
            return new Encoded(bytes, false);
        }
        if (def.index != null) {
            if (!(value instanceof String)) {
                throw new ParameterException("metric " + def.name + " takes one of its categories (a string), got " + shown(value), def.name);
            }
            Integer i = def.index.get(value);
            if (i == null) {
                List<String> cats = def.categories;
                StringBuilder expected = new StringBuilder();
                for (int k = 0; k < Math.min(20, cats.size()); k++) expected.append(k > 0 ? ", " : "").append(cats.get(k));
                if (cats.size() > 20) expected.append("...");
                throw new ParameterException(shown(value) + " is not a category of metric " + def.name + "; expected one of " + expected, def.name);
            }
            return new Encoded(Long.valueOf(i), false);
        }
        double lo = def.bounds[0];
        double hi = def.bounds[1];
        if (!(value instanceof Number)) {
            throw new ParameterException("metric " + def.name + " takes a number in [" + jsNumber(lo) + ", " + jsNumber(hi) + "], got "
                    + typeName(value) + " " + shown(value), def.name);
        }
        double x = ((Number) value).doubleValue();
        if (Double.isNaN(x) || Double.isInfinite(x)) {
            throw new ParameterException("metric " + def.name + " takes a finite number, got " + x, def.name);
        }
        double input = Math.min(Math.max(x, lo), hi); // the distribution's leaf comes from it
        return new Encoded(Double.valueOf(input), input != x);
    }

    private static Encoded encodeRow(Definition def, Object value) {
        StringBuilder names = new StringBuilder();
        for (Definition.Axis a : def.axes) names.append(names.length() > 0 ? ", " : "").append(a.axis);
        if (!(value instanceof Map) || ((Map<?, ?>) value).size() != def.axes.size()) {
            throw new ParameterException("metric " + def.name + " takes one category per attribute (" + names + "), got " + shown(value), def.name);
        }
        Map<?, ?> row = (Map<?, ?>) value;
        long cell = 0;
        for (Definition.Axis a : def.axes) {
            Object category = row.get(a.axis);
            Integer i = row.containsKey(a.axis) && category instanceof String ? a.index.get(category) : null;
            if (i == null) {
                throw new ParameterException(shown(category) + " is not a category of attribute " + a.axis + " of metric " + def.name, def.name);
            }
            cell = cell * a.index.size() + i;
        }
        return new Encoded(Long.valueOf(cell), false);
    }

    private static boolean wellFormed(String s) {
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c)) {
                if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) return false;
                i++;
            } else if (Character.isLowSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
