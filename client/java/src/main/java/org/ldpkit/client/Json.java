package org.ldpkit.client;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The small JSON this client needs, with no dependency: {@link #parse(String)} gives
 * {@code Map<String, Object>} (a LinkedHashMap, keys in document order),
 * {@code List<Object>}, {@code String}, {@code Long} (an integer literal that fits) or
 * {@code Double} (any other number, correctly rounded), {@code Boolean} and {@code null};
 * {@link #write(Object)} writes those back (and any {@code Number}, arrays of them).
 */
public final class Json {
    private static final int MAX_DEPTH = 512;

    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /** Thrown for text that is not JSON. */
    public static final class JsonException extends LdpkitException {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    /** The value of a JSON text (RFC 8259; nothing but whitespace may follow it). */
    public static Object parse(String text) {
        if (text == null) throw new JsonException("no JSON text");
        Json p = new Json(text);
        p.space();
        Object value = p.value(0);
        p.space();
        if (p.at != text.length()) throw p.error("trailing characters");
        return value;
    }

    /** {@link #parse(String)} of a text that must be an object. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(String text) {
        Object value = parse(text);
        if (!(value instanceof Map)) throw new JsonException("the JSON text is not an object");
        return (Map<String, Object>) value;
    }

    private JsonException error(String what) {
        return new JsonException("bad JSON at character " + at + ": " + what);
    }

    private void space() {
        while (at < text.length()) {
            char c = text.charAt(at);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
            at++;
        }
    }

    private char peek() {
        if (at >= text.length()) throw error("unexpected end");
        return text.charAt(at);
    }

    private void expect(String word) {
        if (!text.startsWith(word, at)) throw error("expected " + word);
        at += word.length();
    }

    private Object value(int depth) {
        if (depth > MAX_DEPTH) throw error("nested too deep");
        char c = peek();
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                expect("true");
                return Boolean.TRUE;
            case 'f':
                expect("false");
                return Boolean.FALSE;
            case 'n':
                expect("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) return number();
                throw error("unexpected character '" + c + "'");
        }
    }

    private Map<String, Object> object(int depth) {
        Map<String, Object> out = new LinkedHashMap<String, Object>();
        at++;
        space();
        if (peek() == '}') {
            at++;
            return out;
        }
        for (;;) {
            space();
            if (peek() != '"') throw error("expected a key");
            String key = string();
            space();
            if (peek() != ':') throw error("expected ':'");
            at++;
            space();
            out.put(key, value(depth + 1));
            space();
            char c = peek();
            at++;
            if (c == '}') return out;
            if (c != ',') throw error("expected ',' or '}'");
        }
    }

    private List<Object> array(int depth) {
        List<Object> out = new ArrayList<Object>();
        at++;
        space();
        if (peek() == ']') {
            at++;
            return out;
        }
        for (;;) {
            space();
            out.add(value(depth + 1));
            space();
            char c = peek();
            at++;
            if (c == ']') return out;
            if (c != ',') throw error("expected ',' or ']'");
        }
    }

    private String string() {
        at++;
        StringBuilder out = new StringBuilder();
        for (;;) {
            char c = peek();
            at++;
            if (c == '"') return out.toString();
            if (c < 0x20) throw error("a control character in a string");
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = peek();
            at++;
            switch (e) {
                case '"': out.append('"'); break;
                case '\\': out.append('\\'); break;
                case '/': out.append('/'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u': out.append(hex4()); break;
                default: throw error("bad escape \\" + e);
            }
        }
    }

    private char hex4() {
        if (at + 4 > text.length()) throw error("unexpected end");
        int v = 0;
        for (int i = 0; i < 4; i++) {
            int d = Character.digit(text.charAt(at + i), 16);
            if (d < 0) throw error("bad \\u escape");
            v = v * 16 + d;
        }
        at += 4;
        return (char) v;
    }

    private Object number() {
        int start = at;
        if (peek() == '-') at++;
        if (peek() == '0') at++;
        else digits();
        boolean integer = true;
        if (at < text.length() && text.charAt(at) == '.') {
            integer = false;
            at++;
            digits();
        }
        if (at < text.length() && (text.charAt(at) == 'e' || text.charAt(at) == 'E')) {
            integer = false;
            at++;
            if (at < text.length() && (text.charAt(at) == '+' || text.charAt(at) == '-')) at++;
            digits();
        }
        String literal = text.substring(start, at);
        if (integer && literal.length() <= 19) {
            try {
                return Long.valueOf(Long.parseLong(literal));
            } catch (NumberFormatException tooBig) {
                // a 19-digit integer beyond 2^63: a double, below
            }
        }
        return Double.valueOf(Double.parseDouble(literal));
    }

    private void digits() {
        int start = at;
        while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') at++;
        if (at == start) throw error("expected a digit");
    }

    /** The JSON text of a value (strings with non-ASCII characters escaped, doubles as Python writes them). */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, 0);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value, int depth) {
        if (depth > MAX_DEPTH) throw new JsonException("a value nested too deep for JSON");
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            out.append(Canonical.pyString((String) value));
        } else if (value instanceof Boolean) {
            out.append(((Boolean) value).booleanValue() ? "true" : "false");
        } else if (value instanceof Double || value instanceof Float) {
            double x = ((Number) value).doubleValue();
            if (Double.isNaN(x) || Double.isInfinite(x)) throw new JsonException("JSON has no " + x);
            out.append(Canonical.pyFloat(x));
        } else if (value instanceof Number) {
            out.append(((Number) value).longValue());
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!(e.getKey() instanceof String)) throw new JsonException("a JSON object's keys are strings");
                if (!first) out.append(',');
                first = false;
                out.append(Canonical.pyString((String) e.getKey())).append(':');
                write(out, e.getValue(), depth + 1);
            }
            out.append('}');
        } else if (value instanceof Iterable) {
            out.append('[');
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) out.append(',');
                first = false;
                write(out, item, depth + 1);
            }
            out.append(']');
        } else if (value instanceof long[]) {
            out.append('[');
            long[] xs = (long[]) value;
            for (int i = 0; i < xs.length; i++) out.append(i > 0 ? "," : "").append(xs[i]);
            out.append(']');
        } else if (value instanceof double[]) {
            List<Object> xs = new ArrayList<Object>();
            for (double x : (double[]) value) xs.add(x);
            write(out, xs, depth + 1);
        } else if (value instanceof Object[]) {
            List<Object> xs = new ArrayList<Object>();
            for (Object x : (Object[]) value) xs.add(x);
            write(out, xs, depth + 1);
        } else {
            throw new JsonException("cannot write a " + value.getClass().getName() + " as JSON");
        }
    }
}
