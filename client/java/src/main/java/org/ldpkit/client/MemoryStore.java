package org.ldpkit.client;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Keeps the documents in memory: nothing survives the process (tests, simulations). A
 * document written before the reporter starts is read like a stored one, so simulated
 * devices can share one fetch of the definitions ({@link #withDefinitions}).
 */
public final class MemoryStore implements Store {
    private final Map<String, byte[]> documents = new HashMap<String, byte[]>();

    /** An empty store. */
    public MemoryStore() {}

    /** A store that already holds {@code definitions} (another store's "definitions" document). */
    public static MemoryStore withDefinitions(byte[] definitions) {
        MemoryStore store = new MemoryStore();
        if (definitions != null) store.documents.put("definitions", definitions.clone());
        return store;
    }

    @Override
    public synchronized byte[] read(String name) {
        byte[] data = documents.get(name);
        return data == null ? null : Arrays.copyOf(data, data.length);
    }

    @Override
    public synchronized void write(String name, byte[] data) {
        documents.put(name, Arrays.copyOf(data, data.length));
    }

    @Override
    public void close() {}
}
