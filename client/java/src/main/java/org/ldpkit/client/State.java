package org.ldpkit.client;

import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What a reporter keeps in its {@link Store} (document "state"), as one JSON object written
 * whole after every change: the JavaScript client's ldpkit-state.json, field for field.
 * The device secret, the budget ledger ("metric|seconds|start" to epsilon spent), the memo
 * (tag to the window's end and the buckets it was queued for), the outbox, the sealed
 * batch being sent, and the times seen.
 */
final class State {
    static final Charset UTF8 = Charset.forName("UTF-8");

    /** One queued report. */
    static final class Queued {
        final long seq;
        final String metric;
        final String fp;
        final long bucket;
        final String report; // hex

        Queued(long seq, String metric, String fp, long bucket, String report) {
            this.seq = seq;
            this.metric = metric;
            this.fp = fp;
            this.bucket = bucket;
            this.report = report;
        }
    }

    /** A memoized value: the end of its window and the buckets it went into. */
    static final class Memo {
        final long until;
        final List<Long> buckets;

        Memo(long until, List<Long> buckets) {
            this.until = until;
            this.buckets = buckets;
        }
    }

    /** A batch sealed (stored) before it is sent: sent again byte for byte until answered. */
    static final class Sealed {
        final String id; // hex
        final String body; // hex
        final List<Long> seqs;

        Sealed(String id, String body, List<Long> seqs) {
            this.id = id;
            this.body = body;
            this.seqs = seqs;
        }
    }

    String secret;
    final Map<String, Double> ledger = new TreeMap<String, Double>();
    final Map<String, Memo> memo = new LinkedHashMap<String, Memo>();
    List<Queued> outbox = new ArrayList<Queued>();
    long seq;
    double lastSeen;
    double anchoredSeen;
    Sealed sealed;
    /** seq to when it was first refused as unknown_version (device clock). */
    final Map<Long, Double> deferred = new LinkedHashMap<Long, Double>();

    byte[] toJson() {
        StringBuilder b = new StringBuilder(256 + outbox.size() * 96);
        b.append("{\"version\":1,\"secret\":");
        JsonText.string(b, secret);
        b.append(",\"ledger\":{");
        String comma = "";
        for (Map.Entry<String, Double> e : ledger.entrySet()) {
            b.append(comma);
            JsonText.string(b, e.getKey());
            b.append(':');
            JsonText.number(b, e.getValue());
            comma = ",";
        }
        b.append("},\"memo\":{");
        comma = "";
        for (Map.Entry<String, Memo> e : memo.entrySet()) {
            b.append(comma);
            JsonText.string(b, e.getKey());
            b.append(":{\"until\":").append(e.getValue().until).append(",\"buckets\":[");
            String c = "";
            for (Long bucket : e.getValue().buckets) {
                b.append(c).append(bucket.longValue());
                c = ",";
            }
            b.append("]}");
            comma = ",";
        }
        b.append("},\"outbox\":[");
        comma = "";
        for (Queued q : outbox) {
            b.append(comma).append("{\"seq\":").append(q.seq).append(",\"metric\":");
            JsonText.string(b, q.metric);
            b.append(",\"fp\":");
            JsonText.string(b, q.fp);
            b.append(",\"bucket\":").append(q.bucket).append(",\"report\":\"").append(q.report).append("\"}");
            comma = ",";
        }
        b.append("],\"seq\":").append(seq).append(",\"lastSeen\":");
        JsonText.number(b, lastSeen);
        b.append(",\"anchoredSeen\":");
        JsonText.number(b, anchoredSeen);
        b.append(",\"sealed\":");
        if (sealed == null) {
            b.append("null");
        } else {
            b.append("{\"id\":\"").append(sealed.id).append("\",\"body\":\"").append(sealed.body).append("\",\"seqs\":[");
            comma = "";
            for (Long s : sealed.seqs) {
                b.append(comma).append(s.longValue());
                comma = ",";
            }
            b.append("]}");
        }
        b.append(",\"deferred\":{");
        comma = "";
        for (Map.Entry<Long, Double> e : deferred.entrySet()) {
            b.append(comma).append('"').append(e.getKey().longValue()).append("\":");
            JsonText.number(b, e.getValue());
            comma = ",";
        }
        b.append("}}");
        return b.toString().getBytes(UTF8);
    }

    /** The state of a stored document (null: a fresh one). */
    @SuppressWarnings("unchecked")
    static State fromJson(byte[] data, String where) {
        State s = new State();
        if (data == null) return s;
        Object parsed;
        try {
            parsed = JsonText.parse(new String(data, UTF8));
        } catch (RuntimeException e) {
            throw new LdpkitException(where + " is not an ldpkit state document: " + e.getMessage());
        }
        if (!(parsed instanceof Map) || !Long.valueOf(1).equals(JsonText.integer(((Map<String, Object>) parsed).get("version")))) {
            throw new LdpkitException(where + " is not an ldpkit state document (version 1)");
        }
        Map<String, Object> m = (Map<String, Object>) parsed;
        s.secret = (String) m.get("secret");
        for (Map.Entry<String, Object> e : map(m.get("ledger")).entrySet()) {
            s.ledger.put(e.getKey(), ((Number) e.getValue()).doubleValue());
        }
        for (Map.Entry<String, Object> e : map(m.get("memo")).entrySet()) {
            Map<String, Object> memo = (Map<String, Object>) e.getValue();
            List<Long> buckets = new ArrayList<Long>();
            for (Object x : (List<Object>) memo.get("buckets")) buckets.add(JsonText.integer(x));
            s.memo.put(e.getKey(), new Memo(JsonText.integer(memo.get("until")), buckets));
        }
        Object outbox = m.get("outbox");
        if (outbox instanceof List) {
            for (Object o : (List<Object>) outbox) {
                Map<String, Object> q = (Map<String, Object>) o;
                s.outbox.add(new Queued(JsonText.integer(q.get("seq")), (String) q.get("metric"), (String) q.get("fp"),
                        JsonText.integer(q.get("bucket")), (String) q.get("report")));
            }
        }
        s.seq = m.get("seq") == null ? 0 : JsonText.integer(m.get("seq"));
        s.lastSeen = number(m.get("lastSeen"));
        s.anchoredSeen = number(m.get("anchoredSeen"));
        Object sealed = m.get("sealed");
        if (sealed instanceof Map) {
            Map<String, Object> x = (Map<String, Object>) sealed;
            List<Long> seqs = new ArrayList<Long>();
            for (Object q : (List<Object>) x.get("seqs")) seqs.add(JsonText.integer(q));
            s.sealed = new Sealed((String) x.get("id"), (String) x.get("body"), seqs);
        }
        for (Map.Entry<String, Object> e : map(m.get("deferred")).entrySet()) {
            s.deferred.put(Long.valueOf(e.getKey()), ((Number) e.getValue()).doubleValue());
        }
        return s;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o) {
        return o instanceof Map ? (Map<String, Object>) o : new LinkedHashMap<String, Object>();
    }

    private static double number(Object o) {
        return o instanceof Number ? ((Number) o).doubleValue() : 0;
    }
}
