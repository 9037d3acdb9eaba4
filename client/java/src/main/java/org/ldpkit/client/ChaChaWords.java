package org.ldpkit.client;

/**
 * ChaCha20 (RFC 8439) as a source of 32-bit words: the memoized reports' randomness,
 * and seeded randomness for tests and simulations ({@link #seededRandom(long)}).
 */
public final class ChaChaWords implements Words {
    private final int[] input = new int[16];
    private final int[] state = new int[16];
    private final int[] block = new int[16];
    private int pos = 16;

    /** The keystream under a 32-byte key, nonce zero, counter zero. */
    public ChaChaWords(byte[] key) {
        this(key, new byte[12], 0);
    }

    public ChaChaWords(byte[] key, byte[] nonce, int counter) {
        if (key == null || nonce == null || key.length != 32 || nonce.length != 12) {
            throw new IllegalArgumentException("ChaCha20 takes a 32-byte key and a 12-byte nonce");
        }
        input[0] = 0x61707865;
        input[1] = 0x3320646e;
        input[2] = 0x79622d32;
        input[3] = 0x6b206574;
        for (int i = 0; i < 8; i++) input[4 + i] = littleEndian(key, 4 * i);
        input[12] = counter;
        for (int i = 0; i < 3; i++) input[13 + i] = littleEndian(nonce, 4 * i);
    }

    private static int littleEndian(byte[] b, int at) {
        return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8 | (b[at + 2] & 0xff) << 16 | (b[at + 3] & 0xff) << 24;
    }

    private static void quarter(int[] s, int a, int b, int c, int d) {
        s[a] += s[b];
        s[d] = Integer.rotateLeft(s[d] ^ s[a], 16);
        s[c] += s[d];
        s[b] = Integer.rotateLeft(s[b] ^ s[c], 12);
        s[a] += s[b];
        s[d] = Integer.rotateLeft(s[d] ^ s[a], 8);
        s[c] += s[d];
        s[b] = Integer.rotateLeft(s[b] ^ s[c], 7);
    }

    private void refill() {
        int[] s = state;
        System.arraycopy(input, 0, s, 0, 16);
        for (int i = 0; i < 10; i++) {
            quarter(s, 0, 4, 8, 12);
            quarter(s, 1, 5, 9, 13);
            quarter(s, 2, 6, 10, 14);
            quarter(s, 3, 7, 11, 15);
            quarter(s, 0, 5, 10, 15);
            quarter(s, 1, 6, 11, 12);
            quarter(s, 2, 7, 8, 13);
            quarter(s, 3, 4, 9, 14);
        }
        for (int i = 0; i < 16; i++) block[i] = s[i] + input[i];
        input[12] += 1;
        pos = 0;
    }

    @Override
    public long word() {
        if (pos == 16) refill();
        return block[pos++] & 0xffffffffL;
    }

    /** The 32-byte key holding {@code seed} (an integer in [0, 2^32)) little-endian in its first four bytes. */
    public static byte[] seedKey(long seed) {
        if (seed < 0 || seed >= 4294967296L) throw new IllegalArgumentException("a seed is an integer in [0, 2^32)");
        byte[] key = new byte[32];
        for (int i = 0; i < 4; i++) key[i] = (byte) (seed >>> (8 * i));
        return key;
    }

    /**
     * A seeded random source (tests and simulations, never a real device): fills whole
     * 32-bit words of the ChaCha20 keystream, little-endian, under the key of {@code seed}.
     */
    public static RandomBytes seededRandom(long seed) {
        return seededRandom(seedKey(seed));
    }

    /** {@link #seededRandom(long)} under a 32-byte key. */
    public static RandomBytes seededRandom(byte[] key) {
        final ChaChaWords words = new ChaChaWords(key);
        return new RandomBytes() {
            @Override
            public void fill(byte[] bytes) {
                if (bytes.length % 4 != 0) throw new IllegalArgumentException("seededRandom fills whole 32-bit words");
                for (int i = 0; i < bytes.length; i += 4) {
                    long w = words.word();
                    for (int j = 0; j < 4; j++) bytes[i + j] = (byte) (w >>> (8 * j));
                }
            }
        };
    }
}
