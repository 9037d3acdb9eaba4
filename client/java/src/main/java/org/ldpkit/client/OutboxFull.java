package org.ldpkit.client;

/** The outbox holds its maximum number of reports: nothing was recorded, no budget spent. */
public class OutboxFull extends LdpkitException {
    private static final long serialVersionUID = 1L;
    private final int rows;
    private final int limit;

    public OutboxFull(String message, String metric, int rows, int limit) {
        super(message, metric);
        this.rows = rows;
        this.limit = limit;
    }

    public int rows() {
        return rows;
    }

    public int limit() {
        return limit;
    }
}
