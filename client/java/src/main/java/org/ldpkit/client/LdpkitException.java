package org.ldpkit.client;

/**
 * The root of every error this client raises on purpose (Python's {@code LdpkitError},
 * the JavaScript client's {@code LdpkitError}): an app catches them all in one place.
 *
 * <pre>
 * LdpkitException
 * ├── ParameterException      a value does not fit its metric (Python ParameterError)
 * ├── DefinitionException     a served definition is refused (names the constant)
 * │   └── CanonicalException  a definition cannot be written canonically
 * ├── WordsExhausted          a fixed word stream ran out (tests)
 * ├── BudgetExceeded          a report would overspend the privacy budget
 * ├── OutboxFull              the outbox is at its bound; nothing recorded
 * ├── UnknownMetric           the collector has no such metric
 * └── TransportException      the collector could not be reached or refused
 *     ├── CollectorUnavailable
 *     └── CollectorRejected
 * </pre>
 *
 * {@link #metric()} names the metric concerned, when there is one.
 */
public class LdpkitException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String metric;

    public LdpkitException(String message) {
        this(message, null, null);
    }

    public LdpkitException(String message, String metric) {
        this(message, metric, null);
    }

    public LdpkitException(String message, String metric, Throwable cause) {
        super(message, cause);
        this.metric = metric;
    }

    /** The metric concerned, or null. */
    public String metric() {
        return metric;
    }
}
