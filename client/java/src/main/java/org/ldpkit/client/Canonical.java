package org.ldpkit.client;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Fingerprints (docs/protocol.md, "Fingerprint"): the canonical JSON exactly as Python's
 * {@code json.dumps(sort_keys=True, separators=(",", ":"))} writes it, hashed with SHA-256.
 */
public final class Canonical {
    private Canonical() {
    }

    /** A string as Python's json writes it with ensure_ascii: pure ASCII. */
    public static String pyString(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2);
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"') out.append("\\\"");
            else if (c == '\\') out.append("\\\\");
            else if (c == '\b') out.append("\\b");
            else if (c == '\t') out.append("\\t");
            else if (c == '\n') out.append("\\n");
            else if (c == '\f') out.append("\\f");
            else if (c == '\r') out.append("\\r");
            else if (c < 0x20 || c > 0x7e) {
                String hex = Integer.toHexString(c);
                out.append("\\u");
                for (int k = hex.length(); k < 4; k++) out.append('0');
                out.append(hex);
            } else out.append(c);
        }
        return out.append('"').toString();
    }

    /** A float as Python's repr writes it: the shortest digits that round-trip (the nearest of those). */
    public static String pyFloat(double x) {
        if (Double.isNaN(x) || Double.isInfinite(x)) throw new IllegalArgumentException("not a finite number: " + x);
        if (x == 0) return (Double.doubleToRawLongBits(x) < 0) ? "-0.0" : "0.0";
        String sign = x < 0 ? "-" : "";
        double ax = Math.abs(x);
        String[] exact = exactDecimal(ax); // digits, exponent of the first digit
        String digits = exact[0];
        int e = Integer.parseInt(exact[1]);
        String[] shortest = null;
        for (int n = 1; n <= 17 && shortest == null; n++) {
            if (digits.length() <= n) {
                shortest = new String[] {digits, String.valueOf(e)};
                break;
            }
            String down = digits.substring(0, n);
            String[] up = increment(down, e);
            boolean downOk = roundTrips(down, e, ax);
            boolean upOk = roundTrips(up[0], Integer.parseInt(up[1]), ax);
            if (downOk && upOk) {
                int cmp = compareToHalf(digits.substring(n));
                boolean pickUp = cmp > 0 || (cmp == 0 && (down.charAt(n - 1) - '0') % 2 == 1);
                shortest = pickUp ? up : new String[] {down, String.valueOf(e)};
            } else if (downOk) {
                shortest = new String[] {down, String.valueOf(e)};
            } else if (upOk) {
                shortest = up;
            }
        }
        if (shortest == null) throw new IllegalStateException("no shortest repr of " + x);
        return sign + format(stripZeros(shortest[0]), Integer.parseInt(shortest[1]));
    }

    private static String stripZeros(String digits) {
        int end = digits.length();
        while (end > 1 && digits.charAt(end - 1) == '0') end--;
        return digits.substring(0, end);
    }

    /** Python's repr layout of digits d1 d2 ... with d1 at 10^e. */
    private static String format(String digits, int e) {
        StringBuilder out = new StringBuilder();
        if (e >= -4 && e < 16) {
            if (e < 0) {
                out.append("0.");
                for (int i = 0; i < -e - 1; i++) out.append('0');
                return out.append(digits).toString();
            }
            StringBuilder whole = new StringBuilder(digits.substring(0, Math.min(e + 1, digits.length())));
            while (whole.length() < e + 1) whole.append('0');
            String frac = digits.length() > e + 1 ? digits.substring(e + 1) : "0";
            return out.append(whole).append('.').append(frac).toString();
        }
        out.append(digits.charAt(0));
        if (digits.length() > 1) out.append('.').append(digits, 1, digits.length());
        out.append('e').append(e < 0 ? '-' : '+');
        int ae = Math.abs(e);
        if (ae < 10) out.append('0');
        return out.append(ae).toString();
    }

    private static boolean roundTrips(String digits, int e, double x) {
        double y = Double.parseDouble(digits + "E" + (e - digits.length() + 1));
        return Double.doubleToRawLongBits(y) == Double.doubleToRawLongBits(x);
    }

    /** digits + 1 in the last place: {digits, exponent of the first digit} (a carry adds a digit in front). */
    private static String[] increment(String digits, int e) {
        char[] d = digits.toCharArray();
        int i = d.length - 1;
        while (i >= 0 && d[i] == '9') d[i--] = '0';
        if (i >= 0) {
            d[i]++;
            return new String[] {new String(d), String.valueOf(e)};
        }
        return new String[] {"1" + new String(d, 0, d.length - 1), String.valueOf(e + 1)};
    }

    /** The sign of (0.rest - 0.5): rest holds the digits after the cut. */
    private static int compareToHalf(String rest) {
        int first = rest.charAt(0) - '0';
        if (first != 5) return first > 5 ? 1 : -1;
        for (int i = 1; i < rest.length(); i++) if (rest.charAt(i) != '0') return 1;
        return 0;
    }

    /** The exact decimal value of a finite positive double: {significant digits, exponent of the first}. */
    static String[] exactDecimal(double x) {
        long bits = Double.doubleToRawLongBits(x);
        int biased = (int) ((bits >>> 52) & 0x7ff);
        long mantissa = bits & ((1L << 52) - 1);
        long m = biased == 0 ? mantissa : mantissa | (1L << 52);
        int e2 = biased == 0 ? -1074 : biased - 1075;
        // Little-endian limbs of base 10^9.
        int[] limbs = new int[120];
        int n = 0;
        while (m > 0) {
            limbs[n++] = (int) (m % 1000000000L);
            m /= 1000000000L;
        }
        int scale = 0; // the value is limbs * 10^scale
        if (e2 >= 0) {
            for (int k = e2; k > 0; k -= 29) n = multiply(limbs, n, 1L << Math.min(29, k));
        } else {
            for (int k = -e2; k > 0; k -= 13) n = multiply(limbs, n, pow5(Math.min(13, k)));
            scale = e2;
        }
        StringBuilder s = new StringBuilder(Integer.toString(limbs[n - 1]));
        for (int i = n - 2; i >= 0; i--) {
            String part = Integer.toString(limbs[i]);
            for (int k = part.length(); k < 9; k++) s.append('0');
            s.append(part);
        }
        String digits = stripZeros(s.toString());
        int exponent = s.length() - 1 + scale;
        return new String[] {digits, String.valueOf(exponent)};
    }

    private static long pow5(int k) {
        long p = 1;
        for (int i = 0; i < k; i++) p *= 5;
        return p;
    }

    private static int multiply(int[] limbs, int n, long by) {
        long carry = 0;
        for (int i = 0; i < n; i++) {
            long v = limbs[i] * by + carry;
            limbs[i] = (int) (v % 1000000000L);
            carry = v / 1000000000L;
        }
        while (carry > 0) {
            limbs[n++] = (int) (carry % 1000000000L);
            carry /= 1000000000L;
        }
        return n;
    }

    /**
     * Which numbers of the fingerprint's input are floats (written as Python's repr writes
     * them) and which are integers, by path ("*" for any list index). JSON cannot tell
     * {@code 1.0} from {@code 1} once parsed by every reader, so the client knows the
     * schema; a number anywhere else cannot be written canonically and is refused.
     */
    private static final Set<String> FLOATS = new HashSet<String>(Arrays.asList(
            "epsilon", "delta", "bounds.*", "scores.*.*",
            "mechanism_params.epsilon", "mechanism_params.bounds.*", "mechanism_params.views.*.weight",
            "mechanism_params.estimation_share"));
    private static final Set<String> INTEGERS = new HashSet<String>(Arrays.asList(
            "protocol", "band",
            "mechanism_params.resolution", "mechanism_params.branching", "mechanism_params.views.*.size",
            "mechanism_params.max_length", "mechanism_params.k", "mechanism_params.seed", "mechanism_params.g",
            "mechanism_params.rows", "mechanism_params.estimation_rows", "mechanism_params.estimation_weight"));

    /** A number written as it is (a 64-bit unsigned seed). */
    private static final class RawNumber {
        final String text;

        RawNumber(String text) {
            this.text = text;
        }
    }

    /** Python's sort_keys order: by code point (not by UTF-16 unit, which differs past U+FFFF). */
    static final Comparator<String> BY_CODE_POINT = new Comparator<String>() {
        @Override
        public int compare(String a, String b) {
            int i = 0;
            int j = 0;
            while (i < a.length() && j < b.length()) {
                int x = a.codePointAt(i);
                int y = b.codePointAt(j);
                if (x != y) return x < y ? -1 : 1;
                i += Character.charCount(x);
                j += Character.charCount(y);
            }
            return (a.length() - i) - (b.length() - j);
        }
    };

    /** json.dumps(value, sort_keys=True, separators=(",", ":")) with the schema's number types. */
    public static String pyJson(Object value) {
        StringBuilder out = new StringBuilder();
        pyJson(out, value, "");
        return out.toString();
    }

    private static void pyJson(StringBuilder out, Object value, String path) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean) {
            out.append(((Boolean) value).booleanValue() ? "true" : "false");
        } else if (value instanceof String) {
            out.append(pyString((String) value));
        } else if (value instanceof RawNumber) {
            out.append(((RawNumber) value).text);
        } else if (value instanceof Number) {
            out.append(number((Number) value, path));
        } else if (value instanceof List) {
            out.append('[');
            String at = path.isEmpty() ? "*" : path + ".*";
            boolean first = true;
            for (Object item : (List<?>) value) {
                if (!first) out.append(',');
                first = false;
                pyJson(out, item, at);
            }
            out.append(']');
        } else if (value instanceof Map) {
            List<String> keys = new ArrayList<String>();
            for (Object k : ((Map<?, ?>) value).keySet()) {
                if (!(k instanceof String)) throw new CanonicalException("a key at " + where(path) + " is not a string", path);
                keys.add((String) k);
            }
            Collections.sort(keys, BY_CODE_POINT);
            out.append('{');
            boolean first = true;
            for (String k : keys) {
                if (!first) out.append(',');
                first = false;
                out.append(pyString(k)).append(':');
                pyJson(out, ((Map<?, ?>) value).get(k), path.isEmpty() ? k : path + "." + k);
            }
            out.append('}');
        } else {
            throw new CanonicalException("cannot write a " + value.getClass().getSimpleName() + " at " + where(path), path);
        }
    }

    private static String where(String path) {
        return path.isEmpty() ? "the top" : path;
    }

    private static String number(Number n, String path) {
        boolean integral = n instanceof Long || n instanceof Integer || n instanceof Short || n instanceof Byte;
        if (FLOATS.contains(path)) {
            double x = n.doubleValue();
            if (Double.isNaN(x) || Double.isInfinite(x)) throw new CanonicalException(path + " must be a finite number", path);
            return pyFloat(x);
        }
        if (INTEGERS.contains(path)) {
            if (integral) return String.valueOf(n.longValue());
            double x = n.doubleValue();
            if (x == Math.floor(x) && Math.abs(x) <= 9007199254740991.0) return String.valueOf((long) x);
            throw new CanonicalException(path + " must be an integer, got " + x, path);
        }
        throw new CanonicalException("a number at " + where(path) + " is not in the schema of fingerprints", path);
    }

    /** The fingerprint's input: the canonical JSON of a definition's parameters (a definition as served). */
    public static String canonicalParameters(Map<String, Object> definition) {
        Map<String, Object> params = new LinkedHashMap<String, Object>();
        params.put("protocol", 1L);
        params.put("name", definition.get("name"));
        params.put("kind", definition.get("kind"));
        params.put("mechanism", definition.get("resolved_mechanism"));
        params.put("epsilon", definition.get("epsilon"));
        params.put("bucket", definition.get("bucket"));
        if (definition.containsKey("categories")) params.put("categories", definition.get("categories"));
        // A categorical metric's order and score (the exponential mechanism's), when given.
        for (String key : new String[] {"ordered", "score", "band", "scores"}) {
            if (definition.get(key) != null) params.put(key, definition.get(key));
        }
        if (definition.containsKey("bounds")) params.put("bounds", definition.get("bounds"));
        Object delta = definition.get("delta");
        if (delta instanceof Number && ((Number) delta).doubleValue() != 0) params.put("delta", delta);
        else if (delta != null && !(delta instanceof Number) && !Boolean.FALSE.equals(delta) && !"".equals(delta)) params.put("delta", delta);
        if (definition.containsKey("dimensions")) params.put("dimensions", definition.get("dimensions"));
        Object kind = definition.get("kind");
        if (!"categorical".equals(kind) && !"numeric".equals(kind)) {
            Object served = definition.get("mechanism_params");
            if (!(served instanceof Map)) {
                throw new CanonicalException("metric " + definition.get("name") + ": no mechanism_params (collector too old?)", "mechanism_params");
            }
            Map<String, Object> mp = new LinkedHashMap<String, Object>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) served).entrySet()) mp.put(String.valueOf(e.getKey()), e.getValue());
            // A hash seed is a 64-bit integer: JSON numbers lose it past 2^53 in some
            // readers, the served hex in `derived` does not (and the fingerprint then vouches for it).
            if ("prefix_sketch".equals(definition.get("resolved_mechanism")) && mp.containsKey("seed")) {
                Object derived = definition.get("derived");
                Object hex = derived instanceof Map ? ((Map<?, ?>) derived).get("seed") : null;
                if (!Definitions.isHex16(hex)) {
                    throw new CanonicalException("metric " + definition.get("name") + ": derived.seed must be 16 hex digits", "derived.seed");
                }
                mp.put("seed", new RawNumber(Unsigned.toDecimal(Unsigned.parseHex16((String) hex))));
            }
            params.put("mechanism_params", mp);
        }
        return pyJson(params);
    }

    /** 16 hex digits: the first 8 bytes of the SHA-256 of the canonical parameters. */
    public static String fingerprint(Map<String, Object> definition) {
        byte[] digest = sha256(canonicalParameters(definition).getBytes(StandardCharsets.UTF_8));
        return Wire.toHex(Arrays.copyOf(digest, 8));
    }

    static byte[] sha256(byte[] bytes) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(bytes);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("this platform has no SHA-256", e);
        }
    }
}
