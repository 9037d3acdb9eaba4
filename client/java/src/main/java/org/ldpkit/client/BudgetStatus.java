package org.ldpkit.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Epsilon spent and left per metric, and in total, in the current windows ({@link
 * Reporter#budget}): the Python client's {@code budget()}, the JavaScript client's object.
 * {@link #ledgerLost()} is always null: this client does not detect a lost store.
 */
public final class BudgetStatus {
    /** What is left of a budget: 0 within the ledger's slack of it (the Python client's left_of), not a rounding residue. */
    static double leftOf(double spent, double budget) {
        double left = budget - spent;
        return left < budget * CoreBridge.BUDGET_SLACK + CoreBridge.BUDGET_SLACK ? 0 : left;
    }

    /** One metric's window. */
    public static final class Metric {
        final String metric;
        final double epsilon;
        final double budget;
        final double spent;
        final String period;
        final long periodStart;
        final long renewsAt;
        final double delta;
        final double deltaSpent;

        Metric(String metric, double epsilon, double budget, double spent, String period, long periodStart,
                long renewsAt, double delta, double deltaSpent) {
            this.metric = metric;
            this.epsilon = epsilon;
            this.budget = budget;
            this.spent = spent;
            this.period = period;
            this.periodStart = periodStart;
            this.renewsAt = renewsAt;
            this.delta = delta;
            this.deltaSpent = deltaSpent;
        }

        public String metric() { return metric; }
        public double epsilon() { return epsilon; }
        public double budget() { return budget; }
        public double spent() { return spent; }
        public double left() { return leftOf(spent, budget); }
        public String period() { return period; }
        public long periodStart() { return periodStart; }
        public long renewsAt() { return renewsAt; }
        public double delta() { return delta; }
        public double deltaSpent() { return deltaSpent; }
        /** The delta the epsilon budget allows: budget / epsilon reports of delta each. */
        public double deltaBudget() { return budget / epsilon * delta; }

        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<String, Object>();
            m.put("metric", metric);
            m.put("epsilon", epsilon);
            m.put("budget", budget);
            m.put("spent", spent);
            m.put("left", left());
            m.put("period", period);
            m.put("periodStart", periodStart);
            m.put("renewsAt", renewsAt);
            m.put("delta", delta);
            m.put("deltaSpent", deltaSpent);
            m.put("deltaBudget", deltaBudget());
            return m;
        }
    }

    /** The total budget's window (all metrics together). */
    public static final class Total {
        final double budget;
        final double spent;
        final String period;
        final long periodStart;
        final long renewsAt;
        final double deltaSpent;

        Total(double budget, double spent, String period, long periodStart, long renewsAt, double deltaSpent) {
            this.budget = budget;
            this.spent = spent;
            this.period = period;
            this.periodStart = periodStart;
            this.renewsAt = renewsAt;
            this.deltaSpent = deltaSpent;
        }

        public double budget() { return budget; }
        public double spent() { return spent; }
        public double left() { return leftOf(spent, budget); }
        public String period() { return period; }
        public long periodStart() { return periodStart; }
        public long renewsAt() { return renewsAt; }
        public double deltaSpent() { return deltaSpent; }

        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<String, Object>();
            m.put("budget", budget);
            m.put("spent", spent);
            m.put("left", left());
            m.put("period", period);
            m.put("periodStart", periodStart);
            m.put("renewsAt", renewsAt);
            m.put("deltaSpent", deltaSpent);
            return m;
        }
    }

    private final Map<String, Metric> metrics;
    private final Total total;

    BudgetStatus(Map<String, Metric> metrics, Total total) {
        this.metrics = Collections.unmodifiableMap(metrics);
        this.total = total;
    }

    /** Per metric name (sorted). */
    public Map<String, Metric> metrics() {
        return metrics;
    }

    /** The total budget's window, or null without a total budget. */
    public Total total() {
        return total;
    }

    /** Always null (the Python client names a lost ledger; this client cannot tell). */
    public Object ledgerLost() {
        return null;
    }

    /** The Python client's {@code budget().to_dict()} in camelCase. */
    public Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        Map<String, Object> per = new LinkedHashMap<String, Object>();
        for (Map.Entry<String, Metric> e : metrics.entrySet()) per.put(e.getKey(), e.getValue().toMap());
        m.put("metrics", per);
        m.put("total", total == null ? null : total.toMap());
        m.put("ledgerLost", null);
        return m;
    }

    @Override
    public String toString() {
        return "BudgetStatus" + toMap();
    }
}
