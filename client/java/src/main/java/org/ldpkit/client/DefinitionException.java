package org.ldpkit.client;

/**
 * A served definition is refused (docs/protocol.md, "Verification"): {@link #constant()}
 * names what is wrong, e.g. {@code derived.keep} or {@code derived.views[1].keep}
 * (or a definition key such as {@code epsilon}, {@code fingerprint}), and the message says why.
 */
public class DefinitionException extends LdpkitException {
    private static final long serialVersionUID = 1L;
    private final String constant;

    public DefinitionException(String message, String metric, String constant) {
        super(message, metric);
        this.constant = constant;
    }

    /** The key or served constant that is wrong (e.g. "derived.keep"), or null. */
    public String constant() {
        return constant;
    }
}
