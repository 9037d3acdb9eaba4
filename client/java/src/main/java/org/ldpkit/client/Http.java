package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One request to the collector over {@link HttpURLConnection} (what Android has), bounded:
 * the connect and read timeouts of {@link Timeout}, a total deadline (a watchdog closes the
 * connection when it passes, which ends a read blocked on a dripping answer), and a most
 * bytes of answer read (a declared or streamed answer past it is not read into memory).
 */
final class Http {
    /** A status, the headers the client reads, and the answer's bytes. */
    static final class Answer {
        final int status;
        final String date;
        final String retryAfter;
        final String etag;
        final String role;
        final byte[] body;

        Answer(int status, String date, String retryAfter, String etag, String role, byte[] body) {
            this.status = status;
            this.date = date;
            this.retryAfter = retryAfter;
            this.etag = etag;
            this.role = role;
            this.body = body;
        }
    }

    /** A request that got no usable answer: unreachable, timed out, or an answer over the bound. */
    static final class Failure extends IOException {
        private static final long serialVersionUID = 1L;

        Failure(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private static final ScheduledExecutorService WATCHDOG =
            Executors.newSingleThreadScheduledExecutor(
                    new ThreadFactory() {
                        @Override
                        public Thread newThread(Runnable r) {
                            Thread t = new Thread(r, "ldpkit-deadline");
                            t.setDaemon(true);
                            return t;
                        }
                    });

    private Http() {}

    static Answer request(
            String url, String method, String token, byte[] body, Map<String, String> headers,
            Timeout timeout, int limit) throws Failure {
        final HttpURLConnection conn;
        try {
            conn = (HttpURLConnection) new URL(url).openConnection();
        } catch (IOException | ClassCastException e) {
            throw new Failure("cannot open " + url + ": " + e.getMessage(), e);
        }
        final AtomicBoolean expired = new AtomicBoolean(false);
        ScheduledFuture<?> watchdog =
                WATCHDOG.schedule(
                        new Runnable() {
                            @Override
                            public void run() {
                                expired.set(true);
                                conn.disconnect();
                            }
                        },
                        timeout.millis(timeout.total()),
                        TimeUnit.MILLISECONDS);
        try {
            return exchange(conn, method, token, body, headers, timeout, limit);
        } catch (IOException | RuntimeException e) {
            if (expired.get()) {
                throw new Failure("timed out: no whole answer within the deadline of " + timeout.total() + " s", e);
            }
            if (e instanceof Failure) throw (Failure) e;
            String what = e instanceof java.net.SocketTimeoutException ? "timed out" : "network error";
            throw new Failure(what + ": " + e, e);
        } finally {
            watchdog.cancel(false);
        }
    }

    private static Answer exchange(
            HttpURLConnection conn, String method, String token, byte[] body,
            Map<String, String> headers, Timeout timeout, int limit) throws IOException {
        conn.setConnectTimeout(timeout.millis(timeout.connect()));
        conn.setReadTimeout(timeout.millis(timeout.read()));
        conn.setInstanceFollowRedirects(false);
        conn.setUseCaches(false);
        conn.setRequestMethod(method);
        conn.setRequestProperty("Authorization", "Bearer " + token);
        conn.setRequestProperty("Accept-Encoding", "identity");
        for (Map.Entry<String, String> h : headers.entrySet()) conn.setRequestProperty(h.getKey(), h.getValue());
        if (body != null) {
            conn.setDoOutput(true);
            // Not in streaming mode: a 401 answer's body would be lost (HttpRetryException).
            // The JDK may send a POST again on a dead kept-alive connection: a sealed batch
            // is counted once however often it arrives.
            OutputStream out = conn.getOutputStream();
            try {
                out.write(body);
            } finally {
                out.close();
            }
        }
        int status = conn.getResponseCode();
        if (status < 100) throw new IOException("not an HTTP answer");
        long declared = conn.getContentLengthLong();
        if (declared > limit) {
            conn.disconnect();
            throw new Failure("the answer is larger than " + limit + " bytes (" + declared + " declared)", null);
        }
        InputStream in = status >= 400 ? conn.getErrorStream() : conn.getInputStream();
        byte[] bytes = in == null ? new byte[0] : readLimited(conn, in, limit);
        return new Answer(
                status,
                conn.getHeaderField("Date"),
                conn.getHeaderField("Retry-After"),
                conn.getHeaderField("ETag"),
                conn.getHeaderField("LDPKIT-Token-Role"),
                bytes);
    }

    private static byte[] readLimited(HttpURLConnection conn, InputStream in, int limit) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buffer = new byte[8192];
        try {
            for (;;) {
                int n = in.read(buffer);
                if (n < 0) break;
                if (out.size() + n > limit) {
                    conn.disconnect(); // not read to its end: the connection is not reused
                    throw new Failure("the answer is larger than " + limit + " bytes", null);
                }
                out.write(buffer, 0, n);
            }
        } finally {
            in.close();
        }
        return out.toByteArray();
    }

    static String lower(String s) {
        return s == null ? null : s.toLowerCase(Locale.ROOT);
    }
}
