package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * The exponential mechanism's definitions as ldpkit serves them (client/js/test/
 * definitions.test.js): accepted, a tampered score refused by the fingerprint, a threshold
 * nudged off the exact calibration refused naming it, and every lie the conformance kit
 * serves about an exponential metric refused naming the constant the kit names.
 */
class ExponentialTest {
    private static final String SERVED_CODE = "import json\n"
            + "from ldpkit.metrics import MetricDefinition\n"
            + "specs = {\n"
            + " 'exponential': {'kind': 'categorical', 'categories': ['1', '2', '3', '4', '5'], 'epsilon': 0.1 + 0.2,"
            + " 'mechanism': 'exponential', 'ordered': True, 'score': 'band', 'band': 2},\n"
            + " 'scores': {'kind': 'categorical', 'categories': ['a', 'b'], 'epsilon': 1.0, 'mechanism': 'exponential',"
            + " 'scores': [[1e16, -0.0, 1e-05], [0.1 + 0.2, 1.0, 2.5]]},\n"
            + "}\n"
            + "print(json.dumps({k: MetricDefinition.from_dict(k, v).to_dict() for k, v in specs.items()}))\n";

    private static String servedJson;

    /** A fresh copy of one served definition (Python runs once). */
    private static synchronized Map<String, Object> served(String key) {
        if (servedJson == null) servedJson = Python.run(SERVED_CODE);
        return VectorsTest.object(Json.parseObject(servedJson).get(key));
    }

    @SuppressWarnings("unchecked")
    private static List<Object> row(Map<String, Object> def, int x) {
        return (List<Object>) ((List<Object>) VectorsTest.object(def.get("derived")).get("cumulative")).get(x);
    }

    @Test
    void servedDefinitionsAreAcceptedAndATamperedScoreIsRefused() {
        for (String key : new String[] {"exponential", "scores"}) {
            Definition def = Definitions.prepare(served(key));
            assertEquals("exponential", def.mechanism);
            Map<String, Object> tampered = served(key);
            if (key.equals("exponential")) {
                tampered.put("band", 1L);
            } else {
                @SuppressWarnings("unchecked")
                List<Object> first = (List<Object>) ((List<Object>) tampered.get("scores")).get(0);
                first.set(1, 0.0);
            }
            DefinitionException err = assertThrows(DefinitionException.class, () -> Definitions.prepare(tampered), key);
            assertEquals("fingerprint", err.constant(), err.getMessage());
            Map<String, Object> score = served(key);
            score.put("scores", null);
            score.put("score", "distance");
            err = assertThrows(DefinitionException.class, () -> Definitions.prepare(score), key);
            assertEquals("fingerprint", err.constant(), err.getMessage());
        }
    }

    @Test
    void theThresholdsAreRecomputedANudgedOneIsRefusedNamed() {
        for (String key : new String[] {"exponential", "scores"}) {
            Map<String, Object> nudged = served(key);
            List<Object> row = row(nudged, 1);
            // 2^40 up (a relative 1e-7 or so): still increasing, a channel off the exact calibration.
            long t = Unsigned.parseHex16((String) row.get(0)) + (1L << 40);
            row.set(0, String.format("%016x", t));
            DefinitionException err = assertThrows(DefinitionException.class, () -> Definitions.prepare(nudged), key);
            assertEquals("derived.cumulative[1][0]", err.constant(), err.getMessage());
        }
    }

    @Test
    void everyLieTheKitServesAboutAnExponentialMetricIsRefusedNamed() {
        Object data = Json.parse(Python.run(
                "import json\n"
                + "from ldpkit.conformance import make_plan, served_for_verification\n"
                + "metrics = [m for m in make_plan(200)['metrics'] if m['resolved_mechanism'] == 'exponential']\n"
                + "print(json.dumps([[lie, d] for _, d, lie in served_for_verification(metrics)]))\n"));
        int[] counts = DefinitionsTest.checkServedAndLies(data);
        assertTrue(counts[0] >= 4 && counts[1] >= 20, counts[0] + " honest, " + counts[1] + " lies");
    }
}
