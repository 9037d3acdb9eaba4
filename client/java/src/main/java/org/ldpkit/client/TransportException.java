package org.ldpkit.client;

/**
 * The collector could not be reached, or refused: {@link #status()} (0: no usable
 * answer), the problem's {@link #error()} and {@link #detail()}, and the
 * {@link #retryAfter()} seconds it asked for (negative: none).
 */
public class TransportException extends LdpkitException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String error;
    private final String detail;
    private final double retryAfter;

    public TransportException(String message, int status, String error, String detail, double retryAfter) {
        super(message);
        this.status = status;
        this.error = error;
        this.detail = detail;
        this.retryAfter = retryAfter;
    }

    public int status() {
        return status;
    }

    public String error() {
        return error;
    }

    public String detail() {
        return detail;
    }

    public double retryAfter() {
        return retryAfter;
    }
}
