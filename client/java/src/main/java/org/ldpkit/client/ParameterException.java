package org.ldpkit.client;

/** A value does not fit its metric (not a category, not a number, too long): nothing was recorded. */
public class ParameterException extends LdpkitException {
    private static final long serialVersionUID = 1L;

    public ParameterException(String message, String metric) {
        super(message, metric);
    }
}
