package org.ldpkit.client;

import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A checked metric definition ({@link Definitions#prepare}) with its sampler. The served
 * keys are in {@link #raw()}; the ones a client uses are fields.
 */
public final class Definition {
    public final String name;
    /** categorical, numeric, distribution, hierarchy, table or strings. */
    public final String kind;
    /** The resolved mechanism (docs/protocol.md's list). */
    public final String mechanism;
    public final double epsilon;
    /** The delta one report spends (0 but for the Gaussian). */
    public final double delta;
    public final double budget;
    public final String bucket;
    public final String budgetPeriod;
    public final String fingerprint;
    /** The categories (categorical, hierarchy), else null. */
    public final List<String> categories;
    /** {lo, hi} (numeric, distribution), else null. */
    public final double[] bounds;
    /** The table's attributes in order (table), else null. */
    public final List<Axis> axes;
    /** The strings metric's max_length in UTF-8 bytes, else 0. */
    public final int maxLength;

    final Map<String, Integer> index;
    private final Sampler sampler;
    private final Map<String, Object> raw;

    /** One attribute of a table: its name and its categories' indices. */
    public static final class Axis {
        public final String axis;
        public final List<String> categories;
        final Map<String, Integer> index;

        Axis(String axis, List<String> categories, Map<String, Integer> index) {
            this.axis = axis;
            this.categories = Collections.unmodifiableList(categories);
            this.index = index;
        }
    }

    Definition(Map<String, Object> raw, String kind, List<String> categories, double[] bounds, List<Axis> axes,
            Map<String, Integer> index, Sampler sampler) {
        this.raw = Collections.unmodifiableMap(raw);
        this.name = (String) raw.get("name");
        this.kind = kind;
        this.mechanism = (String) raw.get("resolved_mechanism");
        this.epsilon = ((Number) raw.get("epsilon")).doubleValue();
        Object d = raw.get("delta");
        this.delta = d instanceof Number ? ((Number) d).doubleValue() : 0.0;
        Object b = raw.get("budget");
        this.budget = b instanceof Number ? ((Number) b).doubleValue() : Double.NaN;
        this.bucket = (String) raw.get("bucket");
        this.budgetPeriod = (String) raw.get("budget_period");
        this.fingerprint = (String) raw.get("fingerprint");
        this.categories = categories == null ? null : Collections.unmodifiableList(categories);
        this.bounds = bounds;
        this.axes = axes == null ? null : Collections.unmodifiableList(axes);
        Object m = raw.get("max_length");
        this.maxLength = m instanceof Number ? ((Number) m).intValue() : 0;
        this.index = index;
        this.sampler = sampler;
    }

    /** The definition as served (GET /v1/metrics), unmodifiable at the top level. */
    public Map<String, Object> raw() {
        return raw;
    }

    /** The served sampler constants. */
    @SuppressWarnings("unchecked")
    public Map<String, Object> derived() {
        return (Map<String, Object>) raw.get("derived");
    }

    /** The report bytes of a mechanism input ({@link Definitions#encodeValue}) from {@code words}. */
    public byte[] sample(Object input, Words words) {
        return sampler.sample(input, words);
    }

    /** The sampler itself. */
    public Sampler sampler() {
        return sampler;
    }

    @Override
    public String toString() {
        return "Definition(" + name + ", " + mechanism + ", epsilon " + epsilon + ", " + fingerprint + ")";
    }
}
