package org.ldpkit.client;

/** A definition's parameters cannot be written as canonical JSON (its fingerprint cannot be checked). */
public class CanonicalException extends DefinitionException {
    private static final long serialVersionUID = 1L;

    public CanonicalException(String message, String constant) {
        super(message, null, constant);
    }
}
