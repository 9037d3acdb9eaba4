package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * 10,000 simulated devices in the JVM report every kind through a real {@code ldpkit
 * serve}; the collector's 99% intervals, read over HTTP, cover the truth. Each device is a
 * Reporter of its own (its secret, ledger and outbox in its own MemoryStore). The first
 * {@link #OWN} deliver their reports themselves; the others' queued reports are forwarded
 * by one relay reporter (their outbox rows moved into its state document, docs/client.md's
 * layout), as a relay does: 10,000 POSTs, each a SQLite commit, would take minutes on a
 * small machine, and the relay's flush is the same code. Each device draws
 * from its own seeded ChaCha20 keystream (the reporter's random, un-memoized), so every run
 * sends the same reports and the verdict is fixed; a correct client on fresh randomness
 * would miss one of these intervals now and then.
 */
class EndToEndTest {
    static final int DEVICES = 10000;
    static final int OWN = 200;
    static final String[] THEMES = {"light", "dark", "système"};
    static final double[] TRUTH = {0.25, 0.55, 0.2};
    static final String[] REGIONS = {"EU/FR/Paris", "EU/FR/Lyon", "EU/DE/Berlin", "NA/US/Boston"};
    static final String LEVEL = "level=0.99";
    static Collector collector;

    @BeforeAll
    static void start() throws Exception {
        StringBuilder pages = new StringBuilder();
        for (int i = 0; i < 40; i++) pages.append(i == 0 ? "" : ", ").append("\"p").append(i).append('"');
        collector = Collector.start(
                "[metrics.theme]\ncategories = [\"light\", \"dark\", \"système\"]\nepsilon = 2.0\n\n"
                + "[metrics.page]\ncategories = [" + pages + "]\nepsilon = 2.0\nmechanism = \"olh\"\n\n"
                + "[metrics.minutes]\nkind = \"numeric\"\nbounds = [0, 100]\nepsilon = 2.0\nmechanism = \"piecewise\"\n\n"
                + "[metrics.spend]\nkind = \"numeric\"\nbounds = [0, 100]\nepsilon = 2.0\nmechanism = \"gaussian\"\ndelta = 1e-3\n\n"
                + "[metrics.load]\nkind = \"distribution\"\nbounds = [0, 100]\nresolution = 64\nepsilon = 2.0\n\n"
                + "[metrics.search]\nkind = \"strings\"\nmax_length = 8\nepsilon = 4.0\n\n"
                + "[metrics.region]\nkind = \"hierarchy\"\ncategories = [\"EU/FR/Paris\", \"EU/FR/Lyon\", \"EU/DE/Berlin\", \"NA/US/Boston\"]\nepsilon = 2.0\n\n"
                + "[metrics.car]\nkind = \"table\"\nepsilon = 2.0\n[metrics.car.dimensions]\ntype = [\"small\", \"large\", \"van\"]\norigin = [\"usa\", \"other\"]\n",
                "");
    }

    @AfterAll
    static void stop() throws Exception {
        if (collector != null) collector.close();
    }

    static void covers(Map<String, Object> item, double truth, String what) {
        double low = ((Number) item.get("low")).doubleValue();
        double high = ((Number) item.get("high")).doubleValue();
        assertTrue(low <= truth && truth <= high, what + ": " + low + ".." + high + " misses " + truth);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> find(Object items, String key, Object value) {
        for (Object x : (List<Object>) items) {
            Map<String, Object> m = (Map<String, Object>) x;
            if (value.equals(m.get(key))) return m;
        }
        throw new AssertionError("no item with " + key + " = " + value + " in " + items);
    }

    @SuppressWarnings("unchecked")
    @Test
    void tenThousandDevicesReportEveryKindAndTheIntervalsCoverTheTruth() throws Exception {
        // Many simulated devices from one address: a relay token (a device token's batches are
        // limited per source address, as a real device's would be).
        Reporter seed = Reporter.builder(collector.url, Collector.RELAY).store(new MemoryStore()).build();
        seed.refreshDefinitions();
        byte[] definitions = seed.cachedDefinitions();
        seed.close(false);
        double sum = 0;
        int pages = 0;
        int meteo = 0;
        int[] regions = new int[REGIONS.length];
        int vans = 0;
        List<Object> relayed = new ArrayList<Object>();
        for (int i = 0; i < DEVICES; i++) {
            MemoryStore store = MemoryStore.withDefinitions(definitions);
            Reporter device = Reporter.builder(collector.url, Collector.RELAY).store(store)
                    .memoize(false).random(ChaChaWords.seededRandom(i)).build();
            String theme = THEMES[i < TRUTH[0] * DEVICES ? 0 : i < (TRUTH[0] + TRUTH[1]) * DEVICES ? 1 : 2];
            device.report("theme", theme);
            String page = i % 4 == 0 ? "p7" : "p" + (i % 40);
            if (page.equals("p7")) pages++;
            device.report("page", page);
            int minutes = (i * 37) % 101;
            sum += minutes;
            device.report("minutes", minutes);
            Receipt spent = device.report("spend", (double) minutes);
            assertEquals(1e-3, spent.delta());
            device.report("load", minutes);
            String term = i % 3 == 0 ? "météo" : "q" + (i % 50);
            if (i % 3 == 0) meteo++;
            device.report("search", term);
            int region = (i * 7) % 10 < 5 ? 0 : (i * 7) % 10 < 7 ? 1 : (i * 7) % 10 < 9 ? 2 : 3;
            regions[region]++;
            device.report("region", REGIONS[region]);
            Map<String, String> car = new LinkedHashMap<String, String>();
            car.put("type", i % 5 == 0 ? "van" : i % 2 == 0 ? "small" : "large");
            car.put("origin", i % 3 == 0 ? "usa" : "other");
            if (i % 5 == 0) vans++;
            device.report("car", car);
            assertEquals(8, device.pending());
            if (i < OWN) {
                FlushResult sent = device.flush();
                assertEquals(8, sent.sent(), sent.toString());
                assertEquals(0, device.pending());
            } else {
                Map<String, Object> state = (Map<String, Object>) Json.parse(new String(store.read("state"), StandardCharsets.UTF_8));
                for (Object row : (List<Object>) state.get("outbox")) {
                    ((Map<String, Object>) row).put("seq", (long) relayed.size() + 1);
                    relayed.add(row);
                }
            }
            definitions = device.cachedDefinitions(); // a device that fetched them again passes them on
            device.close(false);
        }
        MemoryStore relayStore = MemoryStore.withDefinitions(definitions);
        Map<String, Object> relayState = new LinkedHashMap<String, Object>();
        relayState.put("version", 1L);
        relayState.put("outbox", relayed);
        relayState.put("seq", (long) relayed.size());
        relayStore.write("state", Json.write(relayState).getBytes(StandardCharsets.UTF_8));
        Reporter relay = Reporter.builder(collector.url, Collector.RELAY).store(relayStore).batchSize(2000).build();
        FlushResult forwarded = relay.flush();
        assertEquals(8 * (DEVICES - OWN), forwarded.sent(), forwarded.toString());
        assertEquals(0, relay.pending());
        relay.close();
        double mean = sum / DEVICES;

        Map<String, Object> theme = collector.estimates("theme", LEVEL);
        assertEquals(DEVICES, ((Number) theme.get("n")).intValue());
        for (int k = 0; k < THEMES.length; k++) covers(find(theme.get("items"), "category", THEMES[k]), TRUTH[k], THEMES[k]);
        Map<String, Object> page = collector.estimates("page", LEVEL);
        covers(find(page.get("items"), "category", "p7"), pages / (double) DEVICES, "p7");
        Map<String, Object> minutes = collector.estimates("minutes", LEVEL);
        covers(minutes, mean, "minutes (piecewise)");
        Map<String, Object> spend = collector.estimates("spend", LEVEL);
        assertEquals(DEVICES, ((Number) spend.get("n")).intValue());
        covers(spend, mean, "spend (gaussian)");
        // Distributions, strings, hierarchies and tables are maintained off the request path:
        // wait for the estimate of every report sent.
        Map<String, Object> load = collector.estimates("load", LEVEL + "&bins=4&wait=60");
        assertEquals(DEVICES, ((Number) load.get("n")).intValue());
        Map<String, Object> loadMean = new LinkedHashMap<String, Object>();
        loadMean.put("low", load.get("mean_low"));
        loadMean.put("high", load.get("mean_high"));
        covers(loadMean, mean, "load (distribution mean)");
        Map<String, Object> search = collector.estimates("search", LEVEL + "&candidates=m%C3%A9t%C3%A9o&wait=60");
        covers(((List<Map<String, Object>>) search.get("candidates")).get(0), meteo / (double) DEVICES, "météo");
        Map<String, Object> region = collector.estimates("region", LEVEL + "&depth=2&wait=60");
        assertEquals(DEVICES, ((Number) region.get("n")).intValue());
        covers(find(region.get("items"), "category", "EU/FR"), (regions[0] + regions[1]) / (double) DEVICES, "EU/FR");
        Map<String, Object> cars = collector.estimates("car", LEVEL + "&wait=60");
        assertEquals(DEVICES, ((Number) cars.get("n")).intValue());
        List<Object> types = (List<Object>) ((Map<String, Object>) cars.get("marginals")).get("type");
        covers(find(types, "category", "van"), vans / (double) DEVICES, "car type van");
    }
}
