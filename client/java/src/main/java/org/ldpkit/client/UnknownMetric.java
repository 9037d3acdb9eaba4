package org.ldpkit.client;

/** The collector defines no metric of that name ({@link #error()}: "unknown_metric" or "unknown_version"). */
public class UnknownMetric extends LdpkitException {
    private static final long serialVersionUID = 1L;
    private final String error;

    public UnknownMetric(String message, String metric, String error) {
        super(message, metric);
        this.error = error;
    }

    public String error() {
        return error;
    }
}
