package org.ldpkit.client;

import java.io.IOException;

/**
 * Where a {@link Reporter} keeps what must survive the process: the device secret, the
 * budget ledger, the memo and the outbox of reports not yet acknowledged (document
 * {@code "state"}, written after every change), and the cached definitions (document
 * {@code "definitions"}, written when they change). Both are UTF-8 JSON.
 *
 * <p>This is the hook an Android app plugs its own storage into (a Room table, a
 * {@code DataStore}, an encrypted file): implement two methods. The contract is what makes
 * "nothing acknowledged lost, nothing counted twice" hold across a crash:
 *
 * <ul>
 *   <li>{@link #write} is atomic and durable: once it returns, {@link #read} answers the new
 *       bytes even after the process (or the phone) dies; if it dies during the write,
 *       {@link #read} answers the previous bytes, never a mix.
 *   <li>{@link #read} answers {@code null} for a document never written.
 * </ul>
 *
 * The reporter calls a store from one thread at a time (it holds its lock). {@link
 * FileStore} (a folder: temporary file, fsync, atomic rename) and {@link MemoryStore}
 * (nothing survives the process: tests, simulations) are the two given here.
 */
public interface Store {
    /** The bytes last written under {@code name}, or {@code null} if none were. */
    byte[] read(String name) throws IOException;

    /** Replace the document {@code name} with {@code data}, atomically and durably. */
    void write(String name, byte[] data) throws IOException;

    /** Release what the store holds (the reporter calls it from {@code close()}). */
    void close() throws IOException;
}
