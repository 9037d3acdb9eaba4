package org.ldpkit.client;

/**
 * A report would spend more privacy budget than is left in its period: nothing was
 * queued. The fields are the Python client's (tests/fixtures/client_shapes.json).
 */
public class BudgetExceeded extends LdpkitException {
    private static final long serialVersionUID = 1L;
    private final String scope;
    private final double budget;
    private final double left;
    private final double needed;
    private final long renewsAt;

    public BudgetExceeded(String message, String metric, String scope, double budget, double left, double needed, long renewsAt) {
        super(message, metric);
        this.scope = scope;
        this.budget = budget;
        this.left = left;
        this.needed = needed;
        this.renewsAt = renewsAt;
    }

    /** "metric" (the metric's own budget) or "total" (all metrics together). */
    public String scope() {
        return scope;
    }

    public double budget() {
        return budget;
    }

    public double left() {
        return left;
    }

    public double needed() {
        return needed;
    }

    /** Unix seconds (UTC) when the period ends and the budget renews. */
    public long renewsAt() {
        return renewsAt;
    }
}
