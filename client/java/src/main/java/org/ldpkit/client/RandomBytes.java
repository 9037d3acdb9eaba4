package org.ldpkit.client;

/** A source of random bytes that fills an array in place (default: the platform's SecureRandom). */
public interface RandomBytes {
    void fill(byte[] bytes);
}
