package org.ldpkit.client;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One {@link Reporter#flush}: seal the next queued reports into a batch (stored before it
 * is sent), POST it byte for byte until it is answered, apply the answer. The reporter's
 * lock is held to seal and to apply, never while sending or waiting.
 */
final class Flusher {
    /** A POST's outcome: an answer accounting for every report, or a failure. */
    private static final class Outcome {
        int status;
        double retryAfter = Double.NaN;
        Map<?, ?> answer;
        Problem problem;
        String reason;
    }

    private final Reporter r;
    private final FlushResult result = new FlushResult();
    private final Set<Long> skip = new HashSet<Long>(); // unknown_version in this flush: not again now
    private Map<String, Long> caps;
    private int size;
    private int failures;

    private Flusher(Reporter r) {
        this.r = r;
        this.size = r.batchSize();
    }

    static FlushResult run(Reporter r) {
        return new Flusher(r).loop();
    }

    private FlushResult loop() {
        synchronized (r.lock()) {
            r.readyState();
            caps = r.deviceCaps();
        }
        for (;;) {
            State.Sealed sealed;
            List<State.Queued> ordered;
            synchronized (r.lock()) {
                State s = r.readyState();
                sealed = s.sealed != null ? s.sealed : seal(s);
                if (sealed == null) break;
                Map<Long, State.Queued> bySeq = new HashMap<Long, State.Queued>();
                for (State.Queued q : s.outbox) bySeq.put(q.seq, q);
                ordered = new ArrayList<State.Queued>();
                for (Long seq : sealed.seqs) {
                    State.Queued q = bySeq.get(seq);
                    ordered.add(q != null ? q : new State.Queued(seq, "?", "", 0, ""));
                }
            }
            Outcome o = post(CoreBridge.unhex(sealed.body), ordered.size());
            if (o.answer != null) {
                failures = 0;
                synchronized (r.lock()) {
                    delivered(o.answer, ordered);
                }
                continue;
            }
            // Refused whole, nothing stored (413: too large; over_device_cap: more of a
            // version and bucket than one device may send): seal the same reports again.
            boolean tooLarge = o.status == 413 && ordered.size() > 1;
            if (tooLarge || (o.status == 400 && lowerCap(o.problem, ordered))) {
                synchronized (r.lock()) {
                    if (tooLarge) size = Math.max(1, ordered.size() / 2);
                    else r.markStale(); // a budget lowered since: the next report() fetches it
                    r.readyState().sealed = null;
                    r.saveState();
                }
                continue;
            }
            double after = Double.isNaN(o.retryAfter) ? -1 : o.retryAfter;
            String error = o.problem == null ? null : o.problem.error;
            String detail = o.problem == null ? null : o.problem.detail;
            if (o.status != 0 && o.status != 408 && o.status != 429 && o.status < 500) {
                String within = "over_device_cap".equals(error) ? " (its reports were within the stated cap already)" : "";
                throw new CollectorRejected("the collector refused the batch (" + o.reason + ")" + within
                        + "; the reports stay queued", o.status, error, detail, after);
            }
            failures += 1;
            if (failures > r.retriesNow()) {
                int queued;
                synchronized (r.lock()) {
                    queued = r.readyState().outbox.size();
                }
                throw new CollectorUnavailable("the collector is unavailable (" + o.reason + ") after " + failures
                        + " attempts; " + queued + " reports stay queued", o.status, error, detail, after);
            }
            double backoff = Math.min(r.maxBackoffMillis(), r.backoffMillis() * Math.pow(2, failures - 1))
                    * (0.5 + Math.random() / 2);
            double wait = Double.isNaN(o.retryAfter) ? backoff
                    : Math.min(r.maxRetryAfterMillis(), Math.max(backoff, o.retryAfter * 1000));
            sleep((long) Math.ceil(wait));
        }
        synchronized (r.lock()) {
            result.remaining = r.readyState().outbox.size();
        }
        return result;
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CollectorUnavailable("interrupted while waiting to retry; the reports stay queued", 0, null, null, -1);
        }
    }

    /**
     * Seal the next queued reports (at most {@code size}; of each version and bucket at most
     * its cap; skipping {@code skip}) and store the batch before it is sent. Null if none.
     */
    private State.Sealed seal(State s) {
        Map<String, List<State.Queued>> groups = new LinkedHashMap<String, List<State.Queued>>();
        Map<String, Integer> taken = new HashMap<String, Integer>();
        int count = 0;
        for (State.Queued q : s.outbox) {
            if (count >= size) break;
            String key = q.metric + "|" + q.fp + "|" + q.bucket;
            Integer n = taken.get(key);
            int had = n == null ? 0 : n;
            Long cap = caps.get(q.fp);
            if (skip.contains(q.seq) || (cap != null && had >= cap)) continue;
            taken.put(key, had + 1);
            List<State.Queued> g = groups.get(key);
            if (g == null) groups.put(key, g = new ArrayList<State.Queued>());
            g.add(q);
            count += 1;
        }
        if (count == 0) return null;
        byte[] id = r.batchId();
        List<Wire.Block> blocks = new ArrayList<Wire.Block>();
        List<Long> seqs = new ArrayList<Long>();
        for (List<State.Queued> g : groups.values()) {
            List<byte[]> reports = new ArrayList<byte[]>();
            for (State.Queued q : g) {
                reports.add(CoreBridge.unhex(q.report));
                seqs.add(q.seq); // the answer's indices count the reports through the blocks in order
            }
            State.Queued first = g.get(0);
            blocks.add(new Wire.Block(first.metric, first.fp, first.bucket, reports));
        }
        s.sealed = new State.Sealed(CoreBridge.hex(id), CoreBridge.hex(CoreBridge.encodeSealedBatch(id, blocks)), seqs);
        r.saveState();
        return s.sealed;
    }

    /** Whether a 400 over_device_cap can be honoured by cutting the batch (see reporter.js). */
    private boolean lowerCap(Problem problem, List<State.Queued> ordered) {
        if (problem == null || problem.fields == null || !"over_device_cap".equals(problem.error)) return false;
        Object version = problem.fields.get("version");
        Object capValue = problem.fields.get("cap");
        if (!(version instanceof String) || !(capValue instanceof Long) || (Long) capValue < 1) return false;
        long cap = (Long) capValue;
        Map<Long, Integer> perBucket = new HashMap<Long, Integer>();
        int most = 0;
        for (State.Queued q : ordered) {
            if (!q.fp.equals(version)) continue;
            Integer n = perBucket.get(q.bucket);
            int next = (n == null ? 0 : n) + 1;
            perBucket.put(q.bucket, next);
            most = Math.max(most, next);
        }
        if (most <= cap) return false;
        caps.put((String) version, cap);
        return true;
    }

    private Outcome post(byte[] body, int n) {
        Outcome o = new Outcome();
        Http.Answer a;
        try {
            a = r.post(body);
        } catch (Http.Failure e) {
            o.status = 0;
            o.reason = e.getMessage();
            return o;
        }
        o.status = a.status;
        o.retryAfter = HttpTime.retryAfter(a.retryAfter, r.clockSeconds());
        if (a.status != 200) {
            o.problem = Problem.of(a.body);
            o.reason = o.problem.reason(a.status);
            return o;
        }
        try {
            o.answer = accountFor(Json.parse(new String(a.body, State.UTF8)), n);
        } catch (RuntimeException e) {
            o.status = 0;
            o.reason = "an answer that does not account for the batch (" + e.getMessage() + ")";
        }
        return o;
    }

    private static boolean count(Object x, long most) {
        return x instanceof Long && (Long) x >= 0 && (Long) x <= most;
    }

    /** The answer, if it accounts for every report sent (else it is a failed request). */
    static Map<?, ?> accountFor(Object parsed, int n) {
        if (!(parsed instanceof Map)) throw new IllegalStateException("not an object");
        Map<?, ?> a = (Map<?, ?>) parsed;
        Object accepted = a.get("accepted");
        Object duplicates = a.get("duplicates");
        Object rejected = a.get("rejected");
        if (!count(accepted, n) || !count(duplicates, n) || !(rejected instanceof List)) throw new IllegalStateException("bad counts");
        if (a.containsKey("held") && !count(a.get("held"), (Long) accepted)) throw new IllegalStateException("bad held");
        Set<Long> seen = new HashSet<Long>();
        for (Object x : (List<?>) rejected) {
            if (!(x instanceof Map)) throw new IllegalStateException("bad rejected entry");
            Object index = ((Map<?, ?>) x).get("index");
            if (!(index instanceof Long) || (Long) index < 0 || (Long) index >= n || !seen.add((Long) index)
                    || !(((Map<?, ?>) x).get("error") instanceof String)) {
                throw new IllegalStateException("bad rejected entry");
            }
        }
        if ((Long) accepted + (Long) duplicates + seen.size() != n) throw new IllegalStateException("the counts do not add up to " + n);
        return a;
    }

    /** Apply an answer: its reports leave the outbox but those kept (unknown_version for a while). */
    private void delivered(Map<?, ?> answer, List<State.Queued> ordered) {
        State s = r.readyState();
        Set<Long> drop = new HashSet<Long>();
        for (State.Queued q : ordered) drop.add(q.seq);
        double now = r.clockSeconds();
        Set<String> staleErrors = Reporter.staleErrors();
        for (Object x : (List<?>) answer.get("rejected")) {
            Map<?, ?> rej = (Map<?, ?>) x;
            State.Queued row = ordered.get(((Long) rej.get("index")).intValue());
            String error = (String) rej.get("error");
            Object d = rej.get("detail");
            boolean kept = false;
            if ("unknown_version".equals(error)) {
                Double first = s.deferred.get(row.seq);
                if (first == null) s.deferred.put(row.seq, first = now);
                if (now - first < Reporter.UNKNOWN_VERSION_GRACE) {
                    drop.remove(row.seq);
                    skip.add(row.seq);
                    kept = true;
                }
            }
            if (staleErrors.contains(error)) r.markStale();
            if (kept) result.deferred += 1;
            else result.rejected += 1;
            result.refusals.add(new FlushResult.Refusal(row.metric, error, d instanceof String ? (String) d : ""));
        }
        for (Long seq : drop) s.deferred.remove(seq);
        List<State.Queued> kept = new ArrayList<State.Queued>();
        for (State.Queued q : s.outbox) if (!drop.contains(q.seq)) kept.add(q);
        s.outbox = kept;
        s.sealed = null; // answered: its kept reports go into a new batch
        r.saveState();
        result.sent += ((Long) answer.get("accepted")).intValue();
        result.duplicates += ((Long) answer.get("duplicates")).intValue();
        Object held = answer.get("held");
        if (held instanceof Long) result.held += ((Long) held).intValue();
    }
}
