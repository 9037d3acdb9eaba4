package org.ldpkit.client;

/** A stream of uniform 32-bit words (docs/protocol.md, "Randomness and primitives"). */
public interface Words {
    /** The next word, an unsigned 32-bit integer in [0, 2^32). */
    long word();
}
