package org.ldpkit.client;

/**
 * How long one request to the collector may take, in seconds (the Python client's {@code
 * Timeout}): {@code connect} to open the connection, {@code read} for each read of the
 * answer, and {@code total} for the whole request, answer included. The total is what ends
 * an answer dripped a byte at a time (each read within {@code read}): the connection is
 * closed at the deadline and the request fails as "timed out".
 */
public final class Timeout {
    /** 5 s to connect, 10 s a read, 30 s in all. */
    public static final Timeout DEFAULT = new Timeout(5, 10, 30);

    private final double connect;
    private final double read;
    private final double total;

    /** Each in seconds, positive and finite; {@code total} at least {@code connect}. */
    public Timeout(double connect, double read, double total) {
        check("connect", connect);
        check("read", read);
        check("total", total);
        this.connect = connect;
        this.read = read;
        this.total = total;
    }

    private static void check(String name, double value) {
        if (!(value > 0 && value <= 86400)) {
            throw new IllegalArgumentException("Timeout " + name + " must be in (0, 86400] seconds, got " + value);
        }
    }

    public double connect() {
        return connect;
    }

    public double read() {
        return read;
    }

    public double total() {
        return total;
    }

    int millis(double seconds) {
        return (int) Math.max(1, Math.ceil(seconds * 1000));
    }

    @Override
    public String toString() {
        return "Timeout(connect=" + connect + ", read=" + read + ", total=" + total + ")";
    }
}
