package org.ldpkit.client;

/**
 * The reporter's side of JSON: reading through {@link Json} (the core's reader), and the
 * few writes its state document needs, done directly (it is written on every report).
 */
final class JsonText {
    private JsonText() {}

    static Object parse(String text) {
        return Json.parse(text);
    }

    /** An integer of a JSON document (a Long, or a Double that is whole), else an error. */
    static Long integer(Object o) {
        if (o instanceof Long || o instanceof Integer) return ((Number) o).longValue();
        if (o instanceof Double) {
            double d = (Double) o;
            if (d == Math.rint(d) && Math.abs(d) < 9.007199254740992E15) return (long) d;
        }
        throw new LdpkitException("not an integer: " + o);
    }

    static void string(StringBuilder b, String s) {
        if (s == null) {
            b.append("null");
            return;
        }
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        b.append('"');
    }

    /** A finite number, exactly (an integer without a fraction, else the shortest repr). */
    static void number(StringBuilder b, double d) {
        if (Double.isNaN(d) || Double.isInfinite(d)) throw new IllegalArgumentException("not a JSON number: " + d);
        if (d == Math.rint(d) && Math.abs(d) < 1e15) {
            b.append((long) d);
        } else {
            b.append(Double.toString(d));
        }
    }

    /** A number as the other clients' messages show it: 1 not 1.0, 0.5. */
    static String shown(double d) {
        StringBuilder b = new StringBuilder();
        number(b, d);
        return b.toString();
    }
}
