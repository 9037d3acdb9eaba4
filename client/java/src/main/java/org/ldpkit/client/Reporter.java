package org.ldpkit.client;

import java.io.File;
import java.io.IOException;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Reports values of an ldpkit collector's metrics with local differential privacy: checks,
 * perturbs and durably queues each value on the device, and delivers the queue in sealed
 * batches with retries. The Python and JavaScript clients' design (docs/client.md): the
 * same budget ledger, memoization, outbox, answers and errors.
 *
 * <pre>
 * Reporter r = Reporter.builder("https://collector.example", token)
 *     .store(new FileStore(new File(context.getFilesDir(), "ldpkit")))
 *     .build();
 * r.report("theme", "dark");   // perturbed and queued: no network needed once defined
 * r.flush();                   // from a background job (WorkManager)
 * </pre>
 *
 * <p><b>Threads.</b> A Reporter is thread-safe: {@link #report}, {@link #budget} and
 * {@link #pending} may be called from any thread; the state (ledger, memo, outbox) is
 * changed under one lock, so two threads' reports never overspend the budget or lose a
 * queued report. One {@link #flush} runs at a time (a second waits for the first); a flush
 * holds the state lock only to seal a batch and to apply its answer, not while it sends or
 * waits to retry, so {@code report()} does not wait for the network, except when the
 * definitions must be fetched (the first report, then at most once a minute). Every call
 * that may use the network blocks: on Android call {@code report()} and {@code flush()} off
 * the main thread.
 */
public final class Reporter implements java.io.Closeable {
    /** This client's version. */
    public static final String VERSION = "0.1.0";

    /** Seconds since 1970 (the device clock), or seconds that only go forward (monotonic). */
    public interface Clock {
        double seconds();
    }

    static final int UNKNOWN_VERSION_GRACE = 600; // seconds a report refused as unknown_version is kept
    static final int MAX_DEFINITIONS_BYTES = 16 * 1024 * 1024;
    static final int MAX_ANSWER_BYTES = 1024 * 1024;
    static final String MEMO_CONTEXT = "ldpkit/memo/js-v1\u0000";
    private static final String[] ROLES = {"device", "relay", "read", "admin"};
    private static final SecureRandom IDS = new SecureRandom(); // batch ids: always the CSPRNG

    private final String url;
    private final String token;
    private final Store store;
    private final Clock clock;
    private final Clock monotonic;
    private final boolean memoize;
    private final double totalBudget; // NaN: none
    private final String totalPeriod;
    private final long totalSeconds;
    private final int batchSize;
    private final int maxOutbox;
    private final Timeout timeout;
    private final int retries;
    private final long backoffMillis;
    private final long maxBackoffMillis;
    private final long maxRetryAfterMillis;
    private final RandomBytes random;

    private final Object lock = new Object();
    private final Object flushLock = new Object();
    private State state;
    private Mac mac;
    private Map<String, Definition> defs = new TreeMap<String, Definition>();
    private List<String> warnings = new ArrayList<String>();
    private String etag;
    private List<Object> cachedList;
    private boolean stale = true;
    private double lastRefresh = Double.NEGATIVE_INFINITY;
    private String tokenRole;
    private double[] anchor; // [the collector's time, monotonic()] at its latest answer
    private volatile boolean closed;
    private int retriesNow;

    private Reporter(Builder b) {
        this.url = b.url;
        this.token = b.token;
        this.clock = b.clock;
        this.monotonic = b.monotonic;
        this.memoize = b.memoize;
        this.totalBudget = b.totalBudget;
        this.totalPeriod = b.totalPeriod;
        this.totalSeconds = CoreBridge.seconds(b.totalPeriod);
        this.batchSize = b.batchSize;
        this.maxOutbox = b.maxOutbox;
        this.timeout = b.timeout;
        this.retries = b.retries;
        this.retriesNow = b.retries;
        this.backoffMillis = b.backoffMillis;
        this.maxBackoffMillis = b.maxBackoffMillis;
        this.maxRetryAfterMillis = b.maxRetryAfterMillis;
        this.random = b.random;
        this.store = b.store;
    }

    /** A builder for a reporter of the collector at {@code url} with its ingest {@code token}. */
    public static Builder builder(String url, String token) {
        return new Builder(url, token);
    }

    /** The reporter's settings; {@link #build()} checks them once. */
    public static final class Builder {
        private final String url;
        private final String token;
        private Store store;
        private File stateDir;
        private Clock clock = new Clock() {
            @Override
            public double seconds() {
                return System.currentTimeMillis() / 1000.0;
            }
        };
        private Clock monotonic = new Clock() {
            @Override
            public double seconds() {
                return System.nanoTime() / 1e9;
            }
        };
        private boolean memoize = true;
        private double totalBudget = Double.NaN;
        private String totalPeriod = "day";
        private int batchSize = 500;
        private int maxOutbox = 10000;
        private Timeout timeout = Timeout.DEFAULT;
        private int retries = 4;
        private long backoffMillis = 500;
        private long maxBackoffMillis = 30000;
        private long maxRetryAfterMillis = 300000;
        private RandomBytes random = CryptoWords.CRYPTO_RANDOM;

        private Builder(String url, String token) {
            this.url = url;
            this.token = token;
        }

        /** Where the state lives (default: {@link #stateDir}, else memory). */
        public Builder store(Store store) {
            this.store = store;
            return this;
        }

        /** A {@link FileStore} in this folder. */
        public Builder stateDir(File dir) {
            this.stateDir = dir;
            return this;
        }

        /** The device clock (unix seconds); tests. */
        public Builder clock(Clock clock) {
            this.clock = clock;
            return this;
        }

        /** Seconds that only go forward (default System.nanoTime); tests. */
        public Builder monotonic(Clock monotonic) {
            this.monotonic = monotonic;
            return this;
        }

        /** Whether a value repeated within a budget window sends the same report (default true). */
        public Builder memoize(boolean memoize) {
            this.memoize = memoize;
            return this;
        }

        /** A budget over all metrics together per {@code period} (hour, day, week). */
        public Builder totalBudget(double budget, String period) {
            this.totalBudget = budget;
            this.totalPeriod = period;
            return this;
        }

        /** Most reports a batch (default 500). */
        public Builder batchSize(int n) {
            this.batchSize = n;
            return this;
        }

        /** Most reports queued (default 10,000): past it report() throws OutboxFull. */
        public Builder maxOutbox(int n) {
            this.maxOutbox = n;
            return this;
        }

        /** The bounds of each request (default {@link Timeout#DEFAULT}). */
        public Builder timeout(Timeout timeout) {
            this.timeout = timeout;
            return this;
        }

        /**
         * Retries of a failed batch (default 4) after {@code backoffMillis} doubling up to
         * {@code maxBackoffMillis} (with jitter); a {@code Retry-After} is honoured up to
         * {@code maxRetryAfterMillis}.
         */
        public Builder retries(int retries, long backoffMillis, long maxBackoffMillis, long maxRetryAfterMillis) {
            this.retries = retries;
            this.backoffMillis = backoffMillis;
            this.maxBackoffMillis = maxBackoffMillis;
            this.maxRetryAfterMillis = maxRetryAfterMillis;
            return this;
        }

        /**
         * The randomness of the device secret and of un-memoized reports (default the
         * platform CSPRNG, SecureRandom). Only tests and simulations pass another
         * ({@link ChaChaWords#seededRandom}); batch ids always come from SecureRandom.
         */
        public Builder random(RandomBytes random) {
            this.random = random;
            return this;
        }

        /** The reporter; an IllegalArgumentException names a bad setting. */
        public Reporter build() {
            if (url == null || !(url.startsWith("http://") || url.startsWith("https://"))) {
                throw new IllegalArgumentException("the collector URL must be http(s)://..., got " + url);
            }
            if (token == null || token.isEmpty()) throw new IllegalArgumentException("token (the collector's ingest token) is required");
            if (clock == null || monotonic == null || random == null || timeout == null) {
                throw new IllegalArgumentException("clock, monotonic, random and timeout must not be null");
            }
            if (!Double.isNaN(totalBudget) && !(totalBudget > 0 && !Double.isInfinite(totalBudget))) {
                throw new IllegalArgumentException("the total budget must be a positive number");
            }
            if (!CoreBridge.knownPeriod(totalPeriod)) throw new IllegalArgumentException("the total period must be hour, day or week, got " + totalPeriod);
            if (batchSize < 1 || maxOutbox < 1 || retries < 0 || backoffMillis < 1 || maxBackoffMillis < 1 || maxRetryAfterMillis < 0) {
                throw new IllegalArgumentException("batchSize, maxOutbox and the backoffs must be positive, retries at least 0");
            }
            if (store == null) {
                try {
                    store = stateDir != null ? new FileStore(stateDir) : new MemoryStore();
                } catch (IOException e) {
                    throw new IllegalArgumentException("cannot use the folder " + stateDir + ": " + e.getMessage(), e);
                }
            } else if (stateDir != null) {
                throw new IllegalArgumentException("give a store or a stateDir, not both");
            }
            String trimmed = url;
            while (trimmed.endsWith("/")) trimmed = trimmed.substring(0, trimmed.length() - 1);
            return new Reporter(new Builder(trimmed, token).copy(this));
        }

        private Builder copy(Builder o) {
            store = o.store;
            clock = o.clock;
            monotonic = o.monotonic;
            memoize = o.memoize;
            totalBudget = o.totalBudget;
            totalPeriod = o.totalPeriod;
            batchSize = o.batchSize;
            maxOutbox = o.maxOutbox;
            timeout = o.timeout;
            retries = o.retries;
            backoffMillis = o.backoffMillis;
            maxBackoffMillis = o.maxBackoffMillis;
            maxRetryAfterMillis = o.maxRetryAfterMillis;
            random = o.random;
            return this;
        }
    }

    // ---- state -------------------------------------------------------------------------

    private void checkOpen() {
        if (closed) throw new LdpkitException("the reporter is closed");
    }

    /** Load the state (and cached definitions) from the store; called under the lock. */
    private void ready() {
        if (state != null) return;
        State s;
        try {
            s = State.fromJson(store.read("state"), "the stored state");
        } catch (IOException e) {
            throw new LdpkitException("cannot read the reporter's state: " + e.getMessage(), null, e);
        }
        if (s.secret == null) {
            byte[] secret = new byte[32];
            random.fill(secret);
            s.secret = CoreBridge.hex(secret);
            save(s);
        }
        try {
            mac = Mac.getInstance("HmacSHA512");
            mac.init(new SecretKeySpec(CoreBridge.unhex(s.secret), "HmacSHA512"));
        } catch (GeneralSecurityException e) {
            throw new LdpkitException("HMAC-SHA512 is not available: " + e.getMessage(), null, e);
        }
        state = s;
        byte[] cached;
        try {
            cached = store.read("definitions");
        } catch (IOException e) {
            throw new LdpkitException("cannot read the cached definitions: " + e.getMessage(), null, e);
        }
        if (cached != null) {
            Object doc = Json.parse(new String(cached, State.UTF8));
            if (doc instanceof Map) {
                Object list = ((Map<?, ?>) doc).get("list");
                Object tag = ((Map<?, ?>) doc).get("etag");
                etag = tag instanceof String ? (String) tag : null;
                // Fetched less than a minute ago (by this device's clock): not again at once.
                Object fetched = ((Map<?, ?>) doc).get("fetched");
                if (fetched instanceof Number && ((Number) fetched).doubleValue() <= clock.seconds()) {
                    lastRefresh = ((Number) fetched).doubleValue();
                }
                Object role = ((Map<?, ?>) doc).get("role"); // what that fetch said the token is
                for (String known : ROLES) if (known.equals(role)) tokenRole = known;
                if (list instanceof List) {
                    @SuppressWarnings("unchecked")
                    List<Object> l = (List<Object>) list;
                    cachedList = l;
                    install(l);
                }
            }
        }
    }

    private void save(State s) {
        try {
            store.write("state", s.toJson());
        } catch (IOException e) {
            throw new LdpkitException("cannot store the reporter's state: " + e.getMessage(), null, e);
        }
    }

    private void install(List<Object> list) {
        Map<String, Definition> next = new TreeMap<String, Definition>();
        List<String> refused = new ArrayList<String>();
        for (Object raw : list) {
            try {
                Definition def = CoreBridge.prepare(raw);
                next.put(def.name, def);
            } catch (DefinitionException e) {
                refused.add(e.getMessage());
            }
        }
        defs = next;
        warnings = refused;
    }

    /** Definitions the collector served that this client refused, with the reason (latest fetch). */
    public List<String> warnings() {
        synchronized (lock) {
            return new ArrayList<String>(warnings);
        }
    }

    /** The definitions document as stored ({"list", "etag"}), or null before the first fetch. */
    public byte[] cachedDefinitions() {
        synchronized (lock) {
            return cachedList == null ? null : cachedDefinitions0();
        }
    }

    // ---- time --------------------------------------------------------------------------

    /** Anchor device time to the collector's answer (its Date, whole seconds). */
    private void observe(Http.Answer answer) {
        double seen = HttpTime.parse(answer.date);
        if (Double.isNaN(seen) || seen <= 0) return;
        synchronized (lock) {
            anchor = new double[] {seen + 0.5, monotonic.seconds()};
            if (state != null) state.anchoredSeen = Math.max(state.anchoredSeen, anchor[0]);
        }
    }

    /** [the time reports are placed by, 1 if it is the collector's]. */
    private double[] time() {
        if (anchor == null) return new double[] {clock.seconds(), 0};
        return new double[] {anchor[0] + Math.max(0, monotonic.seconds() - anchor[1]), 1};
    }

    private double ledgerTime(double now, boolean anchored) {
        return Math.max(now, anchored ? state.anchoredSeen : state.lastSeen);
    }

    // ---- definitions -------------------------------------------------------------------

    private Http.Answer request(String method, String path, byte[] body, Map<String, String> headers, int limit)
            throws Http.Failure {
        Http.Answer answer = Http.request(url + path, method, token, body, headers, timeout, limit);
        observe(answer);
        return answer;
    }

    /** Fetch the definitions now (GET /v1/metrics with the cached ETag). */
    public void refreshDefinitions() {
        synchronized (lock) {
            checkOpen();
            ready();
            refresh();
        }
    }

    private void refresh() {
        Map<String, String> headers = new HashMap<String, String>();
        if (etag != null && !defs.isEmpty()) headers.put("If-None-Match", etag);
        Http.Answer answer;
        try {
            answer = request("GET", "/v1/metrics", null, headers, MAX_DEFINITIONS_BYTES);
        } catch (Http.Failure e) {
            throw new CollectorUnavailable("cannot reach " + url + ": " + e.getMessage(), 0, null, null, -1);
        }
        lastRefresh = clock.seconds();
        if (answer.status == 200 || answer.status == 304) {
            tokenRole = null;
            for (String role : ROLES) if (role.equals(answer.role)) tokenRole = role;
        }
        if (answer.status == 304) {
            stale = false;
            return;
        }
        if (answer.status != 200) {
            Problem p = Problem.of(answer.body);
            String message = "GET /v1/metrics answered " + answer.status + " " + p.error + (p.detail.isEmpty() ? "" : ": " + p.detail);
            double after = HttpTime.retryAfter(answer.retryAfter, clock.seconds());
            if (answer.status >= 500 || answer.status == 429) {
                throw new CollectorUnavailable(message, answer.status, p.error, p.detail, Double.isNaN(after) ? -1 : after);
            }
            throw new CollectorRejected(message, answer.status, p.error, p.detail, Double.isNaN(after) ? -1 : after);
        }
        Object list;
        try {
            Object doc = Json.parse(new String(answer.body, State.UTF8));
            list = doc instanceof Map ? ((Map<?, ?>) doc).get("metrics") : null;
        } catch (LdpkitException e) {
            throw new CollectorUnavailable("GET /v1/metrics did not answer JSON: " + e.getMessage(), 200, null, null, -1);
        }
        if (!(list instanceof List)) throw new CollectorRejected("GET /v1/metrics: no list of metrics", 200, null, null, -1);
        @SuppressWarnings("unchecked")
        List<Object> metrics = (List<Object>) list;
        install(metrics);
        etag = answer.etag;
        cachedList = metrics;
        stale = false;
        try {
            store.write("definitions", cachedDefinitions0());
        } catch (IOException e) {
            throw new LdpkitException("cannot store the definitions: " + e.getMessage(), null, e);
        }
    }

    private byte[] cachedDefinitions0() {
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("list", cachedList);
        doc.put("etag", etag);
        doc.put("fetched", lastRefresh);
        doc.put("role", tokenRole);
        return Json.write(doc).getBytes(State.UTF8);
    }

    private Definition definition(String metric) {
        ready();
        if (stale && clock.seconds() - lastRefresh > 60) {
            // At start (cached definitions may be old) and after a refusal saying they are.
            try {
                refresh();
            } catch (TransportException e) {
                if (defs.isEmpty()) throw e;
                lastRefresh = clock.seconds(); // offline: report with the cached definitions
            }
        }
        Definition def = defs.get(metric);
        if (def == null && clock.seconds() - lastRefresh > 60) {
            refresh();
            def = defs.get(metric);
        }
        if (def == null) {
            String known = defs.isEmpty() ? "none" : CoreBridge.join(defs.keySet());
            String shown = Json.write(String.valueOf(metric));
            if (shown.length() > 80) shown = shown.substring(0, 80);
            throw new UnknownMetric("unknown metric " + shown + "; the collector defines " + known, metric, "unknown_metric");
        }
        return def;
    }

    // ---- report ------------------------------------------------------------------------

    /**
     * Check, perturb and durably queue one value: a category (String), a number, a string
     * (strings metrics), or a {@code Map<String, String>} (tables, one category per
     * attribute). Returns once the report is in the store's outbox. Throws {@link
     * BudgetExceeded}, {@link UnknownMetric}, {@link ParameterException} (a bad value),
     * {@link OutboxFull}, or {@link TransportException} when the definitions cannot be
     * fetched (never fetched before, or the metric is new).
     */
    public Receipt report(String metric, Object value) {
        synchronized (lock) {
            checkOpen();
            return reportNow(metric, value);
        }
    }

    private Receipt reportNow(String metric, Object value) {
        Definition def = definition(metric);
        CoreBridge.Encoded encoded = CoreBridge.encode(def, value);
        State s = state;
        double[] t = time();
        double now = t[0];
        boolean anchored = t[1] > 0;
        double ledgerNow = ledgerTime(now, anchored);
        long bucketSeconds = CoreBridge.seconds(def.bucket);
        long budgetSeconds = CoreBridge.seconds(def.budgetPeriod);
        // The bucket and memo window are the report's own time's; the budget windows the ledger's.
        long bucket = floor(now, bucketSeconds);
        long memoWindow = floor(now, budgetSeconds);
        long window = floor(ledgerNow, budgetSeconds);
        long totalWindow = floor(ledgerNow, totalSeconds);
        if (anchored) s.anchoredSeen = Math.max(s.anchoredSeen, now);
        prune(s.anchoredSeen > 0 ? s.anchoredSeen : ledgerNow);
        String name = def.name;
        String fp = def.fingerprint;
        double epsilon = def.epsilon;
        double delta = def.delta;
        String message = fp + "|" + valueKey(def, encoded.input) + "|" + memoWindow;
        // One HMAC-SHA512 a report: bytes 0-15 are the stored memo tag, bytes 32-63 key the
        // report's permanent randomness (ChaCha20): parts of one PRF output.
        byte[] digest = memoize ? mac.doFinal((MEMO_CONTEXT + message).getBytes(State.UTF8)) : null;
        String tag = digest == null ? "" : CoreBridge.hex(java.util.Arrays.copyOfRange(digest, 0, 16));
        State.Memo memo = memoize ? s.memo.get(tag) : null;
        if (memo != null && memo.buckets.contains(bucket)) {
            return new Receipt(name, fp, bucket, true, false, 0, 0, encoded.clipped); // already queued or sent
        }
        if (s.outbox.size() >= maxOutbox) {
            throw new OutboxFull("the outbox holds " + s.outbox.size() + " reports (maxOutbox); flush first", name,
                    s.outbox.size(), maxOutbox);
        }
        Words words = digest != null
                ? new ChaChaWords(java.util.Arrays.copyOfRange(digest, 32, 64))
                : new CryptoWords(64, random);
        byte[] report = CoreBridge.sample(def, encoded.input, words);
        double spentEpsilon = 0;
        double spentDelta = 0;
        if (memo == null) {
            String metricKey = name + "|" + budgetSeconds + "|" + window;
            String totalKey = "*|" + totalSeconds + "|" + totalWindow;
            double spent = overlapping(s.ledger, name, window, budgetSeconds, false);
            double totalSpent = overlapping(s.ledger, "*", totalWindow, totalSeconds, false);
            double budget = def.budget;
            if (!fits(spent, epsilon, budget)) {
                double left = BudgetStatus.leftOf(spent, budget);
                long renews = window + budgetSeconds;
                throw new BudgetExceeded("privacy budget of metric " + Json.write(name) + " exhausted: a report costs epsilon "
                        + JsonText.shown(epsilon) + " and " + JsonText.shown(left) + " of its " + JsonText.shown(budget) + " per "
                        + def.budgetPeriod + " is left; it renews at " + HttpTime.utcMinute(renews),
                        name, "metric", budget, left, epsilon, renews);
            }
            if (!Double.isNaN(totalBudget) && !fits(totalSpent, epsilon, totalBudget)) {
                double left = BudgetStatus.leftOf(totalSpent, totalBudget);
                long renews = totalWindow + totalSeconds;
                throw new BudgetExceeded("total privacy budget exhausted: a report of metric " + Json.write(name) + " costs epsilon "
                        + JsonText.shown(epsilon) + " and " + JsonText.shown(left) + " of the total " + JsonText.shown(totalBudget)
                        + " per " + totalPeriod + " (all metrics together) is left; it renews at " + HttpTime.utcMinute(renews),
                        name, "total", totalBudget, left, epsilon, renews);
            }
            s.ledger.put(metricKey, get(s.ledger, metricKey) + epsilon);
            s.ledger.put(totalKey, get(s.ledger, totalKey) + epsilon);
            spentEpsilon = epsilon;
            if (delta > 0) {
                // (epsilon, delta) reports spend delta beside epsilon (basic composition).
                s.ledger.put(metricKey + "|delta", get(s.ledger, metricKey + "|delta") + delta);
                s.ledger.put(totalKey + "|delta", get(s.ledger, totalKey + "|delta") + delta);
                spentDelta = delta;
            }
        }
        if (memoize) {
            List<Long> buckets = new ArrayList<Long>(memo == null ? Collections.<Long>emptyList() : memo.buckets);
            buckets.add(bucket);
            s.memo.put(tag, new State.Memo(memoWindow + budgetSeconds, buckets));
        }
        s.outbox.add(new State.Queued(++s.seq, name, fp, bucket, CoreBridge.hex(report)));
        s.lastSeen = Math.max(s.lastSeen, now);
        save(s);
        return new Receipt(name, fp, bucket, memo != null, true, spentEpsilon, spentDelta, encoded.clipped);
    }

    private static long floor(double t, long seconds) {
        return (long) Math.floor(t / seconds) * seconds;
    }

    /** A week, the longest period: a ledger entry is kept that long past its window's end. */
    private static final long LONGEST_PERIOD = 604800;

    /**
     * The spending recorded under {@code name} ("*" for the total; its delta if {@code delta})
     * in every window overlapping [start, start + seconds): when a period changes (day to
     * week), what was spent under the old one counts in the new (the Python client's
     * ledger.overlapping).
     */
    private static double overlapping(Map<String, Double> ledger, String name, long start, long seconds, boolean delta) {
        double sum = 0;
        for (Map.Entry<String, Double> e : ledger.entrySet()) {
            String[] parts = e.getKey().split("\\|");
            if (!parts[0].equals(name) || (parts.length == 4) != delta) continue;
            long from = Long.parseLong(parts[2]);
            if (from < start + seconds && start < from + Long.parseLong(parts[1])) sum += e.getValue();
        }
        return sum;
    }

    private static double get(Map<String, Double> ledger, String key) {
        Double v = ledger.get(key);
        return v == null ? 0 : v;
    }

    private static boolean fits(double spent, double needed, double budget) {
        return spent + needed <= budget * (1 + CoreBridge.BUDGET_SLACK) + CoreBridge.BUDGET_SLACK;
    }

    /** The memo's name of a mechanism input: "s" + UTF-8 hex, "f" + float64 (LE) hex, "i" + index. */
    private static String valueKey(Definition def, Object input) {
        if (input instanceof byte[]) return "s" + CoreBridge.hex((byte[]) input);
        if (input instanceof Double) {
            long bits = Double.doubleToLongBits((Double) input);
            byte[] le = new byte[8];
            for (int i = 0; i < 8; i++) le[i] = (byte) (bits >>> (8 * i));
            return "f" + CoreBridge.hex(le);
        }
        return "i" + input;
    }

    private void prune(double now) {
        Iterator<Map.Entry<String, Double>> it = state.ledger.entrySet().iterator();
        while (it.hasNext()) {
            String[] parts = it.next().getKey().split("\\|");
            // Kept a week (the longest period) past its window's end: until then it may
            // overlap a window of a period that changed.
            if (Long.parseLong(parts[2]) + Long.parseLong(parts[1]) + LONGEST_PERIOD <= now) it.remove();
        }
        Iterator<Map.Entry<String, State.Memo>> memos = state.memo.entrySet().iterator();
        while (memos.hasNext()) if (memos.next().getValue().until <= now) memos.remove();
    }

    // ---- budget, pending ---------------------------------------------------------------

    /** Epsilon spent and left per metric (and in total) in the current windows. */
    public BudgetStatus budget() {
        synchronized (lock) {
            Map<String, BudgetStatus.Metric> metrics = new TreeMap<String, BudgetStatus.Metric>();
            if (state == null) return new BudgetStatus(metrics, null);
            double[] t = time();
            double now = ledgerTime(t[0], t[1] > 0);
            for (Definition def : defs.values()) {
                long seconds = CoreBridge.seconds(def.budgetPeriod);
                long start = floor(now, seconds);
                metrics.put(def.name, new BudgetStatus.Metric(def.name, def.epsilon, def.budget,
                        overlapping(state.ledger, def.name, start, seconds, false), def.budgetPeriod, start, start + seconds, def.delta,
                        overlapping(state.ledger, def.name, start, seconds, true)));
            }
            BudgetStatus.Total total = null;
            if (!Double.isNaN(totalBudget)) {
                long start = floor(now, totalSeconds);
                total = new BudgetStatus.Total(totalBudget, overlapping(state.ledger, "*", start, totalSeconds, false), totalPeriod,
                        start, start + totalSeconds, overlapping(state.ledger, "*", start, totalSeconds, true));
            }
            return new BudgetStatus(metrics, total);
        }
    }

    /** Reports queued and not yet acknowledged (loads the state if not yet loaded). */
    public int pending() {
        synchronized (lock) {
            ready();
            return state.outbox.size();
        }
    }

    // ---- flush -------------------------------------------------------------------------

    /**
     * Send every queued report, in sealed batches carrying at most one device's cap of each
     * version and bucket (unless the token is a relay one). Retries network errors, 408,
     * 429 and 5xx with backoff, honouring {@code Retry-After}; a batch refused as
     * over_device_cap goes again within the stated cap; a 413 halves the batches. Throws
     * {@link CollectorUnavailable} when it gives up, {@link CollectorRejected} on other
     * refusals. Queued reports are never lost: only those the collector acknowledged (held
     * ones included) or refused for good leave the outbox.
     */
    public FlushResult flush() {
        synchronized (flushLock) {
            checkOpen();
            return Flusher.run(this);
        }
    }

    /**
     * Flush once without retries (unless {@code flush} is false), then release the store.
     * Reports that could not be sent stay in the store for the next reporter.
     */
    public void close(boolean flush) {
        synchronized (flushLock) {
            if (closed) return;
            if (flush) {
                boolean some;
                synchronized (lock) {
                    some = state != null && !state.outbox.isEmpty();
                }
                if (some) {
                    retriesNow = 0;
                    try {
                        Flusher.run(this);
                    } catch (LdpkitException e) {
                        // kept in the outbox for next time
                    } finally {
                        retriesNow = retries;
                    }
                }
            }
            synchronized (lock) {
                closed = true;
                try {
                    store.close();
                } catch (IOException e) {
                    throw new LdpkitException("cannot close the store: " + e.getMessage(), null, e);
                }
            }
        }
    }

    /** {@code close(true)}. */
    @Override
    public void close() {
        close(true);
    }

    // ---- what the flusher needs (package-private, called with flushLock held) -----------

    Object lock() {
        return lock;
    }

    State readyState() {
        ready();
        return state;
    }

    void saveState() {
        save(state);
    }

    int batchSize() {
        return batchSize;
    }

    int retriesNow() {
        return retriesNow;
    }

    long backoffMillis() {
        return backoffMillis;
    }

    long maxBackoffMillis() {
        return maxBackoffMillis;
    }

    long maxRetryAfterMillis() {
        return maxRetryAfterMillis;
    }

    double clockSeconds() {
        return clock.seconds();
    }

    void markStale() {
        stale = true;
    }

    byte[] batchId() {
        byte[] id = new byte[CoreBridge.ID_SIZE];
        synchronized (IDS) {
            IDS.nextBytes(id);
        }
        return id;
    }

    /** The most reports a batch may carry per version (fingerprint) and bucket. */
    Map<String, Long> deviceCaps() {
        Map<String, Long> caps = new HashMap<String, Long>();
        if (!"relay".equals(tokenRole)) {
            for (Definition def : defs.values()) caps.put(def.fingerprint, CoreBridge.deviceCap(def));
        }
        return caps;
    }

    Http.Answer post(byte[] body) throws Http.Failure {
        Map<String, String> headers = new HashMap<String, String>();
        headers.put("Content-Type", CoreBridge.CONTENT_TYPE);
        return request("POST", "/v1/reports", body, headers, MAX_ANSWER_BYTES);
    }

    static Set<String> staleErrors() {
        return new HashSet<String>(java.util.Arrays.asList("unknown_metric", "unknown_version", "retired_metric"));
    }
}
