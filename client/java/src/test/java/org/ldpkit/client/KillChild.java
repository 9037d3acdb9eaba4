package org.ldpkit.client;

import java.io.File;

/**
 * The child JVM of {@link KillTest}: reports {@code n} values into a FileStore (printing
 * "queued i" once each report() returned), prints "flushing", then flushes in small
 * batches until it is killed (or done: "done").
 */
public final class KillChild {
    private KillChild() {}

    public static void main(String[] args) {
        String url = args[0];
        File dir = new File(args[1]);
        int n = Integer.parseInt(args[2]);
        Reporter r = Reporter.builder(url, Collector.RELAY).stateDir(dir).memoize(false).batchSize(2).build();
        for (int i = 0; i < n; i++) {
            r.report("clicks", i % 3 == 0 ? "a" : "b");
            System.out.println("queued " + i);
        }
        System.out.println("flushing");
        System.out.flush();
        r.flush();
        System.out.println("done");
    }
}
