package org.ldpkit.client;

/**
 * One definition's sampling rule (docs/protocol.md, "The rules"): the report bytes for a
 * mechanism input ({@link Definitions#encodeValue}: a category or cell index as a
 * {@code Long}, a clipped number as a {@code Double}, a string's UTF-8 bytes as
 * {@code byte[]}), drawing its randomness from {@code words}.
 */
public interface Sampler {
    byte[] sample(Object input, Words words);
}
