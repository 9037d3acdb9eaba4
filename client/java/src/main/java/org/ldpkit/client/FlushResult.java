package org.ldpkit.client;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What {@link Reporter#flush} delivered (the Python client's {@code FlushResult}, the
 * JavaScript client's object): reports the collector counted ({@link #sent()}), already had
 * ({@link #duplicates()}), holds for review ({@link #held()}, delivered), refused for good
 * ({@link #rejected()}) or for now ({@link #deferred()}: kept, sent again later), what
 * stays queued ({@link #remaining()}), and each refusal.
 */
public final class FlushResult {
    /** One report the collector refused: its metric and the collector's error and detail. */
    public static final class Refusal {
        private final String metric;
        private final String error;
        private final String detail;

        Refusal(String metric, String error, String detail) {
            this.metric = metric;
            this.error = error;
            this.detail = detail;
        }

        public String metric() {
            return metric;
        }

        public String error() {
            return error;
        }

        public String detail() {
            return detail;
        }

        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<String, Object>();
            m.put("metric", metric);
            m.put("error", error);
            m.put("detail", detail);
            return m;
        }
    }

    int sent;
    int duplicates;
    int held;
    int rejected;
    int remaining;
    int deferred;
    final List<Refusal> refusals = new ArrayList<Refusal>();

    FlushResult() {}

    public int sent() {
        return sent;
    }

    public int duplicates() {
        return duplicates;
    }

    public int held() {
        return held;
    }

    public int rejected() {
        return rejected;
    }

    public int remaining() {
        return remaining;
    }

    public int deferred() {
        return deferred;
    }

    public List<Refusal> refusals() {
        return Collections.unmodifiableList(refusals);
    }

    /** The Python client's {@code to_dict()} in camelCase (the JavaScript client's keys). */
    public Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("sent", (long) sent);
        m.put("duplicates", (long) duplicates);
        m.put("held", (long) held);
        m.put("rejected", (long) rejected);
        m.put("remaining", (long) remaining);
        m.put("deferred", (long) deferred);
        List<Object> list = new ArrayList<Object>();
        for (Refusal r : refusals) list.add(r.toMap());
        m.put("refusals", list);
        return m;
    }

    @Override
    public String toString() {
        return "FlushResult" + toMap();
    }
}
