package org.ldpkit.client;

/** Words from a fixed list (test vectors, or a precomputed keystream). */
public final class ListWords implements Words {
    private final long[] words;
    private int used;

    public ListWords(long[] words) {
        this.words = words.clone();
    }

    @Override
    public long word() {
        if (used >= words.length) throw new WordsExhausted();
        return words[used++];
    }

    /** How many words were drawn. */
    public int used() {
        return used;
    }

    /** How many words the list holds. */
    public int size() {
        return words.length;
    }
}
