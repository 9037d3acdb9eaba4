package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * One shape for the Python, JavaScript and Java clients: the cases of
 * tests/fixtures/client_shapes.json (shapes.test.js, test_shapes.py). The fixture's keys
 * are the Python client's (snake_case); this client's toMap() keys are the same names in
 * camelCase, and its errors' fields are accessors of those names.
 */
class ShapesTest {
    @SuppressWarnings("unchecked")
    static final Map<String, Object> CASES = load();

    @SuppressWarnings("unchecked")
    private static Map<String, Object> load() {
        try {
            File f = new File(Python.repo(), "tests/fixtures/client_shapes.json");
            return (Map<String, Object>) Json.parse(new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8));
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** snake_case keys to camelCase, all the way down. */
    @SuppressWarnings("unchecked")
    static Object camel(Object value) {
        if (value instanceof List) {
            List<Object> out = new ArrayList<Object>();
            for (Object x : (List<Object>) value) out.add(camel(x));
            return out;
        }
        if (!(value instanceof Map)) return value;
        Map<String, Object> out = new LinkedHashMap<String, Object>();
        for (Map.Entry<String, Object> e : ((Map<String, Object>) value).entrySet()) {
            StringBuilder k = new StringBuilder();
            String key = e.getKey();
            for (int i = 0; i < key.length(); i++) {
                if (key.charAt(i) == '_' && i + 1 < key.length()) k.append(Character.toUpperCase(key.charAt(++i)));
                else k.append(key.charAt(i));
            }
            out.put(k.toString(), camel(e.getValue()));
        }
        return out;
    }

    /** Deep equality, numbers by value (1 and 1.0 are one number, as in JSON). */
    @SuppressWarnings("unchecked")
    static void same(Object expected, Object actual, String where) {
        if (expected instanceof Number && actual instanceof Number) {
            assertEquals(((Number) expected).doubleValue(), ((Number) actual).doubleValue(), 0.0, where);
        } else if (expected instanceof Map && actual instanceof Map) {
            Map<String, Object> e = (Map<String, Object>) expected;
            Map<String, Object> a = (Map<String, Object>) actual;
            assertEquals(e.keySet(), a.keySet(), where);
            for (String k : e.keySet()) same(e.get(k), a.get(k), where + "." + k);
        } else if (expected instanceof List && actual instanceof List) {
            List<Object> e = (List<Object>) expected;
            List<Object> a = (List<Object>) actual;
            assertEquals(e.size(), a.size(), where);
            for (int i = 0; i < e.size(); i++) same(e.get(i), a.get(i), where + "[" + i + "]");
        } else {
            assertEquals(expected, actual, where);
        }
    }

    static byte[] metricsBody(Object definitions) {
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("metrics", definitions);
        return Json.write(doc).getBytes(StandardCharsets.UTF_8);
    }

    static Reporter.Clock fixedClock(Object seconds) {
        final double t = ((Number) seconds).doubleValue();
        return () -> t;
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> cases(String name) {
        return (List<Map<String, Object>>) (List<?>) CASES.get(name);
    }

    @SuppressWarnings("unchecked")
    static void reportAll(Reporter r, Object reports) {
        for (Object x : (List<Object>) reports) {
            List<Object> pair = (List<Object>) x;
            r.report((String) pair.get(0), pair.get(1));
        }
    }

    @TestFactory
    Stream<DynamicTest> budgetShapes() {
        return cases("budget").stream().map(c -> DynamicTest.dynamicTest("budget() shape: " + c.get("name"), () -> {
            try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(c.get("definitions")))) {
                Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).clock(fixedClock(c.get("clock")))
                        .totalBudget(((Number) c.get("total_budget")).doubleValue(), (String) c.get("total_period")).build();
                reportAll(r, c.get("reports"));
                same(camel(c.get("budget")), r.budget().toMap(), "budget()");
                r.close(false);
            }
        }));
    }

    @Test
    void camelMapsTheFixturesNames() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("period_start", 1L);
        m.put("ledger_lost", null);
        assertEquals("{periodStart=1, ledgerLost=null}", camel(m).toString());
    }

    @SuppressWarnings("unchecked")
    @TestFactory
    Stream<DynamicTest> errorShapes() {
        Map<String, Object> base = cases("budget").get(0);
        return cases("errors").stream().map(c -> DynamicTest.dynamicTest("error shape: " + c.get("name"), () -> {
            Map<String, Object> answer = (Map<String, Object>) c.get("answer");
            LyingCollector.Scenario scenario = answer == null ? LyingCollector.fixed(500, new byte[0])
                    : LyingCollector.fixed(((Number) answer.get("status")).intValue(),
                            ((String) answer.get("body")).getBytes(StandardCharsets.UTF_8));
            try (LyingCollector lying = new LyingCollector(scenario, metricsBody(base.get("definitions")))) {
                Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).clock(fixedClock(base.get("clock")))
                        .totalBudget(((Number) base.get("total_budget")).doubleValue(), (String) base.get("total_period"))
                        .retries(1, 1, 1, 1).build();
                reportAll(r, c.get("reports"));
                Exception error = null;
                try {
                    if (answer != null) {
                        r.flush();
                    } else {
                        List<Object> one = (List<Object>) c.get("report");
                        r.report((String) one.get(0), one.get(1));
                    }
                } catch (LdpkitException e) {
                    error = e;
                }
                assertNotNull(error, "no error");
                String js = (String) c.get("js");
                String expected = js.equals("TypeError") ? "ParameterException" : js;
                assertEquals(expected, error.getClass().getSimpleName(), error.getMessage());
                for (Object fact : (List<Object>) c.get("facts")) {
                    assertTrue(Pattern.compile((String) fact).matcher(error.getMessage()).find(), fact + " in " + error.getMessage());
                }
                for (Map.Entry<String, Object> f : ((Map<String, Object>) camel(c.get("fields"))).entrySet()) {
                    Object value = error.getClass().getMethod(f.getKey()).invoke(error);
                    same(f.getValue(), value, f.getKey());
                }
                r.close(false);
            }
        }));
    }

    /**
     * spent + epsilon <= budget (1 + 1e-9) + 1e-9, the Python client's rule: a budget a
     * relative 1e-10 under three reports' epsilon takes the third (sums of epsilons are not
     * exact), one 1e-8 under it does not. The budget is not fingerprinted: served as is.
     */
    @SuppressWarnings("unchecked")
    @Test
    void theLedgerAdmitsAReportWithinItsSlackOfTheBudgetAndNoneBeyond() throws Exception {
        Map<String, Object> base = cases("budget").get(0);
        Map<String, Object> theme = theme(base);
        double epsilon = ((Number) theme.get("epsilon")).doubleValue();
        double[][] budgets = {{-1e-10, 3}, {-1e-8, 2}};
        for (double[] c : budgets) {
            Map<String, Object> served = new LinkedHashMap<String, Object>(theme);
            served.put("budget", 3 * epsilon * (1 + c[0]));
            try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(Collections.singletonList(served)))) {
                Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).clock(fixedClock(base.get("clock"))).build();
                int admitted = 0;
                for (String value : new String[] {"light", "dark", "system"}) {
                    try {
                        r.report("theme", value);
                        admitted += 1;
                    } catch (BudgetExceeded e) {
                        // refused: counted by its absence
                    }
                }
                assertEquals((int) c[1], admitted, "budget " + served.get("budget"));
                r.close(false);
            }
        }
    }

    /**
     * A memo is of one metric version (docs/protocol.md, "What a client keeps on the
     * device"): the same value under another fingerprint (here the categories reordered:
     * the same keep, another version) is a fresh report, which the ledger counts.
     */
    @SuppressWarnings("unchecked")
    @Test
    void aMemoIsOfOneMetricVersion() throws Exception {
        Map<String, Object> base = cases("budget").get(0);
        Map<String, Object> theme = theme(base);
        double epsilon = ((Number) theme.get("epsilon")).doubleValue();
        Map<String, Object> reordered = new LinkedHashMap<String, Object>(theme);
        List<Object> categories = new ArrayList<Object>((List<Object>) theme.get("categories"));
        Collections.reverse(categories);
        reordered.put("categories", categories);
        reordered.put("fingerprint", Canonical.fingerprint(reordered));
        assertTrue(!reordered.get("fingerprint").equals(theme.get("fingerprint")));
        MemoryStore store = new MemoryStore();
        try (LyingCollector first = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(Collections.singletonList(theme)));
                LyingCollector second = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(Collections.singletonList(reordered)))) {
            Reporter r = Reporter.builder(first.url, "t").store(store).clock(fixedClock(base.get("clock"))).build();
            Receipt fresh = r.report("theme", "dark");
            Receipt again = r.report("theme", "dark");
            assertEquals(Arrays.asList(false, epsilon, true, 0.0, false),
                    Arrays.asList(fresh.memoized(), fresh.epsilon(), again.memoized(), again.epsilon(), again.queued()));
            r.close(false);
            // The same device (its store: secret, ledger, memo), the metric's new version.
            Reporter s = Reporter.builder(second.url, "t").store(store).clock(fixedClock(base.get("clock"))).build();
            s.refreshDefinitions();
            Receipt other = s.report("theme", "dark");
            assertEquals(Arrays.asList(reordered.get("fingerprint"), false, epsilon, true),
                    Arrays.asList(other.fingerprint(), other.memoized(), other.epsilon(), other.queued()));
            assertEquals(2 * epsilon, s.budget().metrics().get("theme").spent(), 0.0);
            s.close(false);
        }
    }

    /**
     * Once the collector answers, its time dates the budget windows (docs/client.md, "Device
     * time"): after a clock that ran ahead offline (here another metric reported 400 days
     * ahead), the first answer anchors the time and the real windows apply with their
     * spending intact. A spent day must stay spent.
     */
    @SuppressWarnings("unchecked")
    @Test
    void onceTheCollectorAnswersItsTimeDatesTheBudgetWindows() throws Exception {
        final long day = 86400;
        Map<String, Object> base = cases("budget").get(0);
        List<Object> served = new ArrayList<Object>();
        for (Object d : (List<Object>) base.get("definitions")) {
            Map<String, Object> def = new LinkedHashMap<String, Object>((Map<String, Object>) d);
            if ("theme".equals(def.get("name"))) def.put("budget", def.get("epsilon")); // one report a day
            served.add(def);
        }
        final byte[] body = metricsBody(served);
        final double t0 = ((Number) base.get("clock")).doubleValue();
        final double[] collectorTime = {t0};
        final double[] deviceClock = {t0};
        LyingCollector.Scenario dated = (request, out, server) -> {
            String date = java.time.format.DateTimeFormatter.RFC_1123_DATE_TIME.format(
                    java.time.Instant.ofEpochMilli((long) (collectorTime[0] * 1000)).atOffset(java.time.ZoneOffset.UTC));
            server.write(out, LyingCollector.answer(200, body, "Date: " + date));
        };
        MemoryStore store = new MemoryStore();
        try (LyingCollector collector = new LyingCollector(dated, null)) {
            Reporter first = Reporter.builder(collector.url, "t").store(store).clock(() -> deviceClock[0]).monotonic(() -> 0.0).build();
            assertTrue(first.report("theme", "dark").queued()); // anchored at t0: today's budget spent
            first.close(false);
            deviceClock[0] = t0 + 400 * day;
            Reporter away = Reporter.builder("http://127.0.0.1:9", "t").store(store).clock(() -> deviceClock[0]).monotonic(() -> 0.0)
                    .retries(1, 1, 1, 1).build(); // offline: the cached definitions, the device's clock
            assertTrue(away.report("minutes", 12.5).queued());
            away.close(false);
            collectorTime[0] = t0 + 3600; // the same real day
            Reporter back = Reporter.builder(collector.url, "t").store(store).clock(() -> deviceClock[0]).monotonic(() -> 0.0).build();
            back.refreshDefinitions();
            try {
                back.report("theme", "light");
                fail("a second fresh report in a spent real day");
            } catch (BudgetExceeded e) {
                assertEquals(0.0, e.left(), 0.0);
            }
            back.close(false);
        }
    }

    /**
     * Spending counts in every window it overlaps (docs/client.md, "Privacy budget"), as in
     * the Python client: a budget_period changed from day to week (not fingerprinted: one
     * version) keeps today's spending, and so does the total's period.
     */
    @SuppressWarnings("unchecked")
    @Test
    void spendingCountsInEveryWindowItOverlaps() throws Exception {
        Map<String, Object> base = cases("budget").get(0);
        Map<String, Object> theme = theme(base);
        double epsilon = ((Number) theme.get("epsilon")).doubleValue();
        Map<String, Object> daily = new LinkedHashMap<String, Object>(theme);
        daily.put("budget", epsilon);
        daily.put("budget_period", "day");
        Map<String, Object> weekly = new LinkedHashMap<String, Object>(daily);
        weekly.put("budget_period", "week");
        MemoryStore store = new MemoryStore();
        try (LyingCollector first = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(Collections.singletonList(daily)));
                LyingCollector second = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(Collections.singletonList(weekly)))) {
            Reporter r = Reporter.builder(first.url, "t").store(store).clock(fixedClock(base.get("clock"))).build();
            assertEquals(epsilon, r.report("theme", "dark").epsilon(), 0.0);
            r.close(false);
            Reporter s = Reporter.builder(second.url, "t").store(store).clock(fixedClock(base.get("clock"))).build();
            s.refreshDefinitions();
            try {
                s.report("theme", "light");
                fail("today's spending forgotten under the weekly budget");
            } catch (BudgetExceeded e) {
                assertEquals(Arrays.asList("metric", 0.0), Arrays.asList(e.scope(), e.left()));
            }
            BudgetStatus.Metric status = s.budget().metrics().get("theme");
            assertEquals(Arrays.asList("week", epsilon, 0.0), Arrays.asList(status.period(), status.spent(), status.left()));
            s.close(false);
        }
        // The total budget's period likewise (an option of the reporter: a new one on the same store).
        MemoryStore device = new MemoryStore();
        try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(500, new byte[0]), metricsBody(base.get("definitions")))) {
            Reporter day = Reporter.builder(lying.url, "t").store(device).clock(fixedClock(base.get("clock"))).totalBudget(epsilon, "day").build();
            day.report("theme", "dark");
            day.close(false);
            Reporter week = Reporter.builder(lying.url, "t").store(device).clock(fixedClock(base.get("clock"))).totalBudget(epsilon, "week").build();
            try {
                week.report("theme", "light");
                fail("today's spending forgotten under the weekly total");
            } catch (BudgetExceeded e) {
                assertEquals("total", e.scope());
            }
            assertEquals(epsilon, week.budget().total().spent(), 0.0);
            week.close(false);
        }
    }

    @TestFactory
    Stream<DynamicTest> flushShapes() {
        Map<String, Object> base = cases("budget").get(0);
        return cases("flush").stream().map(c -> DynamicTest.dynamicTest("flush() shape: " + c.get("name"), () -> {
            byte[] answer = Json.write(c.get("answer")).getBytes(StandardCharsets.UTF_8);
            try (LyingCollector lying = new LyingCollector(LyingCollector.fixed(200, answer), metricsBody(base.get("definitions")))) {
                Reporter r = Reporter.builder(lying.url, "t").store(new MemoryStore()).clock(fixedClock(base.get("clock")))
                        .retries(1, 1, 1, 1).build();
                reportAll(r, c.get("reports"));
                same(camel(c.get("flush")), r.flush().toMap(), "flush()");
                long posts = lying.requests.stream().filter(q -> q.method.equals("POST")).count();
                if (posts != 1) fail(posts + " POSTs");
                r.close(false);
            }
        }));
    }

    /** The ``theme`` definition of a case (the budget cases all have one). */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> theme(Map<String, Object> c) {
        for (Object d : (List<Object>) c.get("definitions")) {
            if ("theme".equals(((Map<String, Object>) d).get("name"))) return (Map<String, Object>) d;
        }
        throw new AssertionError("no theme definition in the case");
    }
}
