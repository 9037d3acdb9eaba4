/**
 * ldpkit's client for Android and the JVM: local differential privacy on the device,
 * speaking docs/protocol.md. Java 8, no runtime dependency, only APIs Android has.
 *
 * <p>The core mirrors the JavaScript client (client/js/src) file for file:
 * {@link org.ldpkit.client.Canonical} (canonical.js: fingerprints),
 * {@link org.ldpkit.client.ChaChaWords} (chacha.js),
 * {@link org.ldpkit.client.Definitions} and {@link org.ldpkit.client.Definition}
 * (definitions.js: verification of served definitions, values),
 * {@link org.ldpkit.client.Sampling} (sampling.js: every mechanism's rule),
 * {@link org.ldpkit.client.Wire} (wire.js: sealed batches) and
 * {@link org.ldpkit.client.Json} (what JSON.parse and JSON.stringify do there).
 * Every error is an {@link org.ldpkit.client.LdpkitException}.
 */
package org.ldpkit.client;
