package org.ldpkit.client;

/** A network failure, a timeout or a 5xx after every retry: the reports stay queued. */
public class CollectorUnavailable extends TransportException {
    private static final long serialVersionUID = 1L;

    public CollectorUnavailable(String message, int status, String error, String detail, double retryAfter) {
        super(message, status, error, detail, retryAfter);
    }
}
