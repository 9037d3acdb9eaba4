// A benchmark (figures, not a test): report() latency of the Java client, p50 and p99 over
// 2,000 fresh reports per metric, each on a fresh device (its definitions already cached,
// its state loaded: the timed call checks the value, derives the memo key (HMAC-SHA512),
// perturbs, spends the budget and stores the state). No network.
//
//   bash client/java/build.sh --no-test
//   .venv/bin/ldpkit conformance plan --out /tmp/plan.json --reports 200
//   javac -cp client/java/build/classes -d /tmp/bench client/java/bench/ReportBench.java
//   java -cp client/java/build/classes:/tmp/bench ReportBench /tmp/plan.json
//
// The Python client's figure on the same machine: .venv/bin/python benchmarks/client.py --no-delivery

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.ldpkit.client.FileStore;
import org.ldpkit.client.Json;
import org.ldpkit.client.MemoryStore;
import org.ldpkit.client.Reporter;
import org.ldpkit.client.Store;

public final class ReportBench {
    static final int N = 2000;
    static final int WARMUP = 500;
    static final String[] METRICS = {"grr-d16-1_0", "olh-d16-1_0", "oue-d16-1_0", "laplace-2_0", "hh-1_0", "joint", "prefix-sketch"};

    interface Stores {
        Store make(byte[] definitions) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        @SuppressWarnings("unchecked")
        Map<String, Object> plan = (Map<String, Object>) Json.parse(new String(Files.readAllBytes(new File(args[0]).toPath()), StandardCharsets.UTF_8));
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("list", plan.get("metrics"));
        doc.put("etag", null);
        doc.put("fetched", System.currentTimeMillis() / 1000.0);
        byte[] definitions = Json.write(doc).getBytes(StandardCharsets.UTF_8);
        Stores memory = MemoryStore::withDefinitions;
        final File root = Files.createTempDirectory("ldpkit-bench-").toFile();
        final int[] made = {0};
        Stores files = d -> {
            FileStore s = new FileStore(new File(root, "d" + made[0]++));
            s.write("definitions", d);
            return s;
        };
        System.out.println("report() of the Java client, microseconds over " + N + " fresh reports (after " + WARMUP + " not counted), no network");
        for (String metric : METRICS) row(plan, definitions, metric, "MemoryStore", memory);
        row(plan, definitions, "grr-d16-1_0", "FileStore (fsync, rename)", files);
    }

    @SuppressWarnings("unchecked")
    static void row(Map<String, Object> plan, byte[] definitions, String metric, String store, Stores stores) throws Exception {
        Object value = null;
        for (Object in : (List<Object>) plan.get("inputs")) {
            Map<String, Object> input = (Map<String, Object>) in;
            if (metric.equals(input.get("metric"))) value = input.get("value");
        }
        List<Long> times = new ArrayList<Long>();
        for (int i = 0; i < WARMUP + N; i++) {
            Reporter r = Reporter.builder("http://127.0.0.1:9", "t").store(stores.make(definitions)).build();
            r.pending(); // loads the state and the cached definitions
            long t0 = System.nanoTime();
            r.report(metric, value);
            long t = System.nanoTime() - t0;
            if (i >= WARMUP) times.add(t);
            r.close(false);
        }
        long[] sorted = new long[times.size()];
        for (int i = 0; i < sorted.length; i++) sorted[i] = times.get(i);
        Arrays.sort(sorted);
        System.out.printf("  %-14s %-26s p50 %7.1f  p99 %7.1f%n", metric, store, sorted[N / 2] / 1e3, sorted[N * 99 / 100] / 1e3);
    }
}
