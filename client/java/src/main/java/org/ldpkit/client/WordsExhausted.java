package org.ldpkit.client;

/** A fixed stream of words ({@link ListWords}) ran out. */
public class WordsExhausted extends LdpkitException {
    private static final long serialVersionUID = 1L;

    public WordsExhausted() {
        super("the word stream ran out");
    }
}
