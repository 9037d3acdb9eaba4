package org.ldpkit.client;

import java.util.Map;

/**
 * The JSON object of an error answer ({error, detail, ...}). An answer that is not the
 * collector's JSON (a proxy's 401 page) still says what it is: error "error" and its first
 * 200 characters as the detail, as the Python and JavaScript clients do.
 */
final class Problem {
    final String error;
    final String detail;
    final Map<?, ?> fields; // null when not JSON

    private Problem(String error, String detail, Map<?, ?> fields) {
        this.error = error;
        this.detail = detail;
        this.fields = fields;
    }

    static Problem of(byte[] body) {
        String text = new String(body, State.UTF8);
        try {
            Object data = Json.parse(text);
            if (data instanceof Map) {
                Map<?, ?> m = (Map<?, ?>) data;
                Object error = m.get("error");
                Object detail = m.get("detail");
                return new Problem(error instanceof String ? (String) error : "error",
                        detail instanceof String ? (String) detail : "", m);
            }
        } catch (RuntimeException e) {
            // not JSON: below
        }
        return new Problem("error", text.length() > 200 ? text.substring(0, 200) : text, null);
    }

    /** "401 unauthorized: unknown token" */
    String reason(int status) {
        return (status + " " + error + (detail.isEmpty() ? "" : ": " + detail)).trim();
    }
}
