package org.ldpkit.client;

import java.util.Locale;

/**
 * Times as HTTP and the messages write them, without java.text or java.time (not in every
 * Android version the client targets): the IMF-fixdate of {@code Date} and {@code
 * Retry-After} ("Sun, 06 Nov 1994 08:49:37 GMT"), and "YYYY-MM-DD HH:MM UTC".
 */
final class HttpTime {
    private static final String[] MONTHS = {
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"
    };

    private HttpTime() {}

    /** Days since 1970-01-01 of a civil date (Howard Hinnant's days_from_civil). */
    static long daysFromCivil(long y, int m, int d) {
        y -= m <= 2 ? 1 : 0;
        long era = Math.floorDiv(y, 400);
        long yoe = y - era * 400;
        long doy = (153L * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
    }

    /** Unix seconds of an IMF-fixdate, or NaN if {@code value} is none. */
    static double parse(String value) {
        if (value == null) return Double.NaN;
        String[] parts = value.trim().split(" ");
        // "Sun," "06" "Nov" "1994" "08:49:37" "GMT"
        if (parts.length != 6 || !parts[5].equals("GMT")) return Double.NaN;
        try {
            int day = Integer.parseInt(parts[1]);
            int month = -1;
            for (int i = 0; i < 12; i++) if (MONTHS[i].equals(parts[2].toLowerCase(Locale.ROOT))) month = i + 1;
            long year = Long.parseLong(parts[3]);
            String[] hms = parts[4].split(":");
            if (month < 0 || hms.length != 3 || day < 1 || day > 31) return Double.NaN;
            int h = Integer.parseInt(hms[0]);
            int mi = Integer.parseInt(hms[1]);
            int s = Integer.parseInt(hms[2]);
            if (h > 23 || mi > 59 || s > 60 || h < 0 || mi < 0 || s < 0) return Double.NaN;
            return daysFromCivil(year, month, day) * 86400.0 + h * 3600 + mi * 60 + s;
        } catch (NumberFormatException e) {
            return Double.NaN;
        }
    }

    /** Unix seconds as "YYYY-MM-DD HH:MM UTC", as the other clients write a renewal. */
    static String utcMinute(double seconds) {
        long t = (long) Math.floor(seconds);
        long days = Math.floorDiv(t, 86400);
        long rest = t - days * 86400;
        // civil_from_days
        long z = days + 719468;
        long era = Math.floorDiv(z, 146097);
        long doe = z - era * 146097;
        long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        long y = yoe + era * 400;
        long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long mp = (5 * doy + 2) / 153;
        long d = doy - (153 * mp + 2) / 5 + 1;
        long m = mp < 10 ? mp + 3 : mp - 9;
        if (m <= 2) y += 1;
        return String.format(Locale.ROOT, "%04d-%02d-%02d %02d:%02d UTC", y, m, d, rest / 3600, (rest % 3600) / 60);
    }

    /** Seconds to wait from a {@code Retry-After} (seconds or a date), or NaN if none. */
    static double retryAfter(String value, double now) {
        if (value == null) return Double.NaN;
        String v = value.trim();
        if (!v.isEmpty() && v.length() < 10) {
            boolean digits = true;
            for (int i = 0; i < v.length(); i++) digits &= Character.isDigit(v.charAt(i));
            if (digits) return Long.parseLong(v);
        }
        double when = parse(v);
        return Double.isNaN(when) ? Double.NaN : Math.max(0, when - now);
    }
}
