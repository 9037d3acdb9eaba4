package org.ldpkit.client;

/** A 4xx answer (bad token, bad request): the reports stay queued. */
public class CollectorRejected extends TransportException {
    private static final long serialVersionUID = 1L;

    public CollectorRejected(String message, int status, String error, String detail, double retryAfter) {
        super(message, status, error, detail, retryAfter);
    }
}
