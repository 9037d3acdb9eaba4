package org.ldpkit.client;

import java.security.SecureRandom;

/** Words from a random source (default: the platform CSPRNG, SecureRandom), buffered. */
public final class CryptoWords implements Words {
    private static final SecureRandom SECURE = new SecureRandom();
    /** The platform CSPRNG as a {@link RandomBytes}. */
    public static final RandomBytes CRYPTO_RANDOM = new RandomBytes() {
        @Override
        public void fill(byte[] bytes) {
            SECURE.nextBytes(bytes);
        }
    };

    private final byte[] buffer;
    private final RandomBytes random;
    private int pos;

    public CryptoWords() {
        this(1024, CRYPTO_RANDOM);
    }

    /** {@code size} words at a time from {@code random}. */
    public CryptoWords(int size, RandomBytes random) {
        if (size < 1) throw new IllegalArgumentException("size must be positive");
        if (random == null) throw new IllegalArgumentException("random must not be null");
        this.buffer = new byte[4 * size];
        this.random = random;
        this.pos = buffer.length;
    }

    @Override
    public long word() {
        if (pos >= buffer.length) {
            random.fill(buffer);
            pos = 0;
        }
        long w = (buffer[pos] & 0xffL) | (buffer[pos + 1] & 0xffL) << 8 | (buffer[pos + 2] & 0xffL) << 16 | (buffer[pos + 3] & 0xffL) << 24;
        pos += 4;
        return w;
    }
}
