package org.ldpkit.client;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What {@link Reporter#report} did: the report is durably queued ({@link #queued()}), or
 * its value was memoized and already queued for this bucket; the epsilon and delta it
 * spent (0 for a memoized value), and whether the value was clipped to the bounds.
 */
public final class Receipt {
    private final String metric;
    private final String fingerprint;
    private final long bucket;
    private final boolean memoized;
    private final boolean queued;
    private final double epsilon;
    private final double delta;
    private final boolean clipped;

    Receipt(String metric, String fingerprint, long bucket, boolean memoized, boolean queued,
            double epsilon, double delta, boolean clipped) {
        this.metric = metric;
        this.fingerprint = fingerprint;
        this.bucket = bucket;
        this.memoized = memoized;
        this.queued = queued;
        this.epsilon = epsilon;
        this.delta = delta;
        this.clipped = clipped;
    }

    public String metric() {
        return metric;
    }

    public String fingerprint() {
        return fingerprint;
    }

    /** The start of the report's bucket (unix seconds). */
    public long bucket() {
        return bucket;
    }

    public boolean memoized() {
        return memoized;
    }

    public boolean queued() {
        return queued;
    }

    public double epsilon() {
        return epsilon;
    }

    public double delta() {
        return delta;
    }

    public boolean clipped() {
        return clipped;
    }

    /** The JavaScript client's receipt object, key for key. */
    public Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("metric", metric);
        m.put("fingerprint", fingerprint);
        m.put("bucket", bucket);
        m.put("memoized", memoized);
        m.put("queued", queued);
        m.put("epsilon", epsilon);
        m.put("delta", delta);
        m.put("clipped", clipped);
        return m;
    }

    @Override
    public String toString() {
        return "Receipt" + toMap();
    }
}
