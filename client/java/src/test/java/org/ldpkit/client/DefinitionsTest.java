package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * Definitions as ldpkit's collector serves them: every plan metric of the conformance kit
 * is accepted, and every lie the kit serves (each threshold at its far extreme, and each
 * mechanism's own lies) is refused naming the constant the kit names.
 */
class DefinitionsTest {
    @Test
    void everyServedDefinitionIsAcceptedAndEveryLieRefusedNamingItsConstant() {
        Object data = Json.parse(Python.run(
                "import json\n"
                + "from ldpkit.conformance import make_plan, served_for_verification\n"
                + "plan = make_plan(200)\n"
                + "print(json.dumps([[lie, d] for _, d, lie in served_for_verification(plan['metrics'])]))\n"));
        int[] counts = checkServedAndLies(data);
        assertTrue(counts[0] >= 30 && counts[1] >= 50, counts[0] + " honest, " + counts[1] + " lies");
        System.out.println("conformance definitions: " + counts[0] + " accepted, " + counts[1] + " refused");
    }

    /**
     * The recomputed constants (grid bounds, Duchi's index, ss's k, caps, depths, labels,
     * sketch weights, the exponential mechanism's calibration) are ldpkit's over a sweep of
     * epsilons and sizes, the eps = 0.61 edge of the hybrid included: every honest
     * definition is accepted.
     */
    @Test
    void honestDefinitionsOverASweepOfEpsilonsAndSizesAreAccepted() {
        Object data = Json.parse(Python.run("import json\n"
                + "from ldpkit.metrics import MetricDefinition\n"
                + "eps_list = [0.05, 0.1 + 0.2, 1 / 3, 0.5, 0.61, 0.6100001, 0.75, 1.0, 1.3, 2.0, 2.5, 3.7, 5.0, 7.7, 10.0]\n"
                + "out = []\n"
                + "for i, e in enumerate(eps_list):\n"
                + "    for m in ['duchi', 'piecewise', 'hybrid', 'laplace', 'gaussian']:\n"
                + "        spec = {'kind': 'numeric', 'bounds': [0.0, 1.0], 'epsilon': e, 'mechanism': m}\n"
                + "        if m == 'gaussian':\n"
                + "            spec['delta'] = 1e-6\n"
                + "        out.append(MetricDefinition.from_dict(f'{m}-{i}', spec).to_dict())\n"
                + "    for d in (2, 5, 16, 100):\n"
                + "        cats = [f'c{j}' for j in range(d)]\n"
                + "        out.append(MetricDefinition.from_dict(f'ss-{i}-{d}', {'kind': 'categorical', 'categories': cats, 'epsilon': e, 'mechanism': 'ss'}).to_dict())\n"
                + "    for r in (5, 64, 100, 4096):\n"
                + "        out.append(MetricDefinition.from_dict(f'hh-{i}-{r}', {'kind': 'distribution', 'bounds': [0.0, 1.0], 'resolution': r, 'epsilon': e}).to_dict())\n"
                + "    out.append(MetricDefinition.from_dict(f'str-{i}', {'kind': 'strings', 'max_length': 1 + 4 * i, 'k': 4, 'epsilon': e}).to_dict())\n"
                + "    out.append(MetricDefinition.from_dict(f'lv-{i}', {'kind': 'hierarchy', 'categories': ['a/x/1', 'a/x/2', 'a/y', 'b', 'c/z/3/4'], 'epsilon': e, 'mechanism': 'levels', 'oracle': 'ss'}).to_dict())\n"
                + "    out.append(MetricDefinition.from_dict(f'jm-{i}', {'kind': 'table', 'dimensions': [['p', ['1', '2', '3']], ['q', ['x', 'y']], ['r', [str(j) for j in range(9)]]], 'epsilon': e, 'mechanism': 'joint_marginals'}).to_dict())\n"
                + "    band = [[2.0 if x == o else (0.5 if abs(x - o) == 1 else 0.0) for o in range(7)] for x in range(7)]\n"
                + "    for j, score in enumerate([{'score': 'distance', 'ordered': True}, {'score': 'band', 'band': 1, 'ordered': True}, {'score': 'matrix', 'scores': band}]):\n"
                + "        out.append(MetricDefinition.from_dict(f'exp-{i}-{j}', {'kind': 'categorical', 'categories': list('abcdefg'), 'epsilon': e, 'mechanism': 'exponential', **score}).to_dict())\n"
                + "print(json.dumps(out))\n"));
        List<String> problems = new ArrayList<String>();
        for (Object d : (List<?>) data) {
            Map<String, Object> served = VectorsTest.object(d);
            try {
                Definitions.prepare(served);
            } catch (DefinitionException err) {
                problems.add(err.getMessage());
            }
        }
        assertEquals(new ArrayList<String>(), problems);
        assertTrue(((List<?>) data).size() >= 280, "definitions: " + ((List<?>) data).size());
    }

    /** One definition of every kind and mechanism family, with floats a reader may not tell from integers. */
    private static final String SERVED_CODE = "import json\n"
            + "from ldpkit.metrics import MetricDefinition\n"
            + "specs = {\n"
            + " 'numeric': {'kind': 'numeric', 'bounds': [-1e16, 1e-05], 'epsilon': 0.1 + 0.2, 'mechanism': 'laplace'},\n"
            + " 'gaussian': {'kind': 'numeric', 'bounds': [-0.0, 1.0], 'epsilon': 1.0, 'mechanism': 'gaussian', 'delta': 1e-05},\n"
            + " 'categorical': {'kind': 'categorical', 'categories': ['a', '\\U0001f642', '\\u00e9'], 'epsilon': 1e-05, 'mechanism': 'grr'},\n"
            + " 'distribution': {'kind': 'distribution', 'bounds': [-0.0, 1e16], 'resolution': 64, 'epsilon': 0.1 + 0.2},\n"
            + " 'hierarchy': {'kind': 'hierarchy', 'categories': ['MX/Jalisco', 'MX/Sonora', 'US/Texas', 'Per\\u00fa'], 'epsilon': 1.0, 'mechanism': 'levels'},\n"
            + " 'table': {'kind': 'table', 'dimensions': [['type', ['Van', 'Compact', 'Sporty']], ['origin', ['USA', 'non-USA']]], 'epsilon': 0.1 + 0.2, 'mechanism': 'joint_marginals'},\n"
            + " 'rollup': {'kind': 'hierarchy', 'categories': ['a/x', 'a/y', 'b'], 'epsilon': 2.0, 'mechanism': 'rollup', 'oracle': 'oue'},\n"
            + " 'joint': {'kind': 'table', 'dimensions': [['\\u00e4', ['1', '2']], ['b', ['3', '4']]], 'epsilon': 1.5, 'mechanism': 'joint'},\n"
            + " 'strings': {'kind': 'strings', 'max_length': 6, 'k': 4, 'epsilon': 4.0},\n"
            + "}\n"
            + "print(json.dumps({k: MetricDefinition.from_dict(k, v).to_dict() for k, v in specs.items()}))\n";

    private static String servedJson;

    /** The definitions of SERVED_CODE (Python runs once), a fresh copy each call. */
    private static synchronized Map<String, Object> servedAll() {
        if (servedJson == null) servedJson = Python.run(SERVED_CODE);
        return Json.parseObject(servedJson);
    }

    private static Map<String, Object> served(String kind) {
        return VectorsTest.object(servedAll().get(kind));
    }

    private static Map<String, Object> sub(Map<String, Object> m, String key) {
        return VectorsTest.object(m.get(key));
    }

    @SuppressWarnings("unchecked")
    private static List<Object> list(Map<String, Object> m, String key) {
        return (List<Object>) m.get(key);
    }

    @Test
    void theFingerprintOfEveryKindIsCheckedAwkwardFloatsIncluded() {
        Map<String, Object> all = servedAll();
        assertEquals(9, all.size());
        for (Map.Entry<String, Object> e : all.entrySet()) {
            Definition def = Definitions.prepare(VectorsTest.object(e.getValue()));
            assertEquals(VectorsTest.object(e.getValue()).get("fingerprint"), def.fingerprint, e.getKey());
        }
    }

    private static void refusedNaming(Map<String, Object> raw, String constant, String fact) {
        DefinitionException err = assertThrows(DefinitionException.class, () -> Definitions.prepare(raw));
        assertEquals(constant, err.constant(), err.getMessage());
        assertTrue(err.getMessage().contains(fact), err.getMessage());
    }

    @Test
    void aTamperedDefinitionOfEachKindIsRefused() {
        Map<String, Object> all = servedAll();
        // A change to a fingerprinted parameter of each kind, its fingerprint left as served.
        Map<String, Object> d = VectorsTest.object(Json.parse(Json.write(all.get("numeric"))));
        list(d, "bounds").set(1, 2e-05);
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("gaussian"))));
        d.put("delta", 1e-4);
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("categorical"))));
        list(d, "categories").set(2, "e");
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("distribution"))));
        sub(d, "mechanism_params").put("branching", 2L);
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("hierarchy"))));
        VectorsTest.object(list(sub(d, "mechanism_params"), "views").get(0)).put("weight", 0.25);
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("table"))));
        java.util.Collections.reverse(list(d, "dimensions"));
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("joint"))));
        sub(d, "mechanism_params").put("epsilon", 1.25);
        refusedNaming(d, "fingerprint", "fingerprint");
        d = VectorsTest.object(Json.parse(Json.write(all.get("strings"))));
        sub(d, "mechanism_params").put("estimation_share", 0.5);
        refusedNaming(d, "fingerprint", "fingerprint");
        // A number the schema does not know cannot be written canonically: refused too.
        d = VectorsTest.object(Json.parse(Json.write(all.get("distribution"))));
        sub(d, "mechanism_params").put("surprise", 1L);
        refusedNaming(d, "mechanism_params.surprise", "not in the schema");
        d = VectorsTest.object(Json.parse(Json.write(all.get("strings"))));
        d.remove("mechanism_params");
        refusedNaming(d, "mechanism_params", "no mechanism_params");
    }

    @Test
    void servedConstantsMustBeThoseTheFingerprintNames() {
        Map<String, Object> all = servedAll();
        Map<String, Object> d = VectorsTest.object(Json.parse(Json.write(all.get("strings"))));
        sub(d, "derived").put("g", ((Number) sub(d, "derived").get("g")).longValue() + 1);
        refusedNaming(d, "derived.g", "g differs");
        d = VectorsTest.object(Json.parse(Json.write(all.get("hierarchy"))));
        Map<String, Object> view = VectorsTest.object(list(sub(d, "derived"), "views").get(0));
        view.put("size", ((Number) view.get("size")).longValue() + 1);
        refusedNaming(d, "derived.views[0].size", "view 0's size differs");
        d = VectorsTest.object(Json.parse(Json.write(all.get("strings"))));
        sub(d, "derived").put("seed", "0000000000000001");
        refusedNaming(d, "fingerprint", "fingerprint");
        // A Gaussian whose served sigma2 = t m is a quarter of the calibrated one: more than delta.
        d = VectorsTest.object(Json.parse(Json.write(all.get("gaussian"))));
        Map<String, Object> p = sub(d, "derived");
        double s = Math.sqrt(((Number) p.get("t")).doubleValue() * ((Number) p.get("m")).doubleValue()) / 2;
        long t = (long) Math.floor(s) + 1;
        p.put("t", t);
        p.put("m", (long) Math.ceil(s * s / t));
        refusedNaming(d, "derived.t", "more than delta");
        // A constant this client does not know means a newer protocol.
        d = VectorsTest.object(Json.parse(Json.write(all.get("categorical"))));
        sub(d, "derived").put("keep_more", "ffffffffffffffff");
        refusedNaming(d, "derived.keep_more", "does not know");
        d = VectorsTest.object(Json.parse(Json.write(all.get("hierarchy"))));
        VectorsTest.object(list(sub(d, "derived"), "views").get(1)).put("shift", 1L);
        refusedNaming(d, "derived.views[1].shift", "does not know");
        d = VectorsTest.object(Json.parse(Json.write(all.get("distribution"))));
        VectorsTest.object(list(sub(d, "derived"), "depths").get(0)).put("q", "0000000000000000");
        refusedNaming(d, "derived.depths[0].q", "does not know");
    }

    @Test
    void aViewServedWithAnOracleTheCollectorRefusesForViewsIsRefusedFingerprintAndAll() {
        // A consistent lie: mechanism_params and derived both say olh, the fingerprint recomputed.
        Map<String, Object> d = VectorsTest.object(Json.parse(Json.write(served("joint"))));
        VectorsTest.object(list(sub(d, "mechanism_params"), "views").get(0)).put("oracle", "olh");
        Map<String, Object> view = VectorsTest.object(list(sub(d, "derived"), "views").get(0));
        view.put("oracle", "olh");
        view.put("g", 4L);
        d.put("fingerprint", Canonical.fingerprint(d));
        refusedNaming(d, "derived.views[0].oracle", "olh is not a view oracle");
    }

    @Test
    void pyFloatWritesEveryDoubleAsPythonsRepr() {
        String out = Python.run("import json, random, struct\n"
                + "xs = [1.0, 1e16, 1e-05, 0.1 + 0.2, -0.0, 0.0, 1e-4, 0.00012, 9999999999999998.0, 1e15 + 0.5,\n"
                + "      5e-324, 1.7976931348623157e308, 123456789012345680.0, 2.5e-7, -1e100, 0.5, 100.0, 1e22, 1e23]\n"
                + "rnd = random.Random(18)\n"
                + "xs += [struct.unpack('<d', struct.pack('<Q', rnd.getrandbits(64)))[0] for _ in range(3000)]\n"
                + "xs += [rnd.uniform(-1e6, 1e6) for _ in range(500)] + [10.0 ** rnd.randint(-30, 30) for _ in range(300)]\n"
                + "xs += [struct.unpack('<d', struct.pack('<Q', rnd.getrandbits(52)))[0] for _ in range(200)]\n"
                + "print(json.dumps([[struct.pack('<d', x).hex(), repr(x)] for x in xs if x == x and abs(x) != float('inf')]))\n");
        List<?> cases = (List<?>) Json.parse(out);
        assertTrue(cases.size() > 3500);
        int wrong = 0;
        StringBuilder first = new StringBuilder();
        for (Object c : cases) {
            byte[] b = Wire.fromHex((String) ((List<?>) c).get(0));
            long bits = 0;
            for (int i = 7; i >= 0; i--) bits = (bits << 8) | (b[i] & 0xff);
            double x = Double.longBitsToDouble(bits);
            String want = (String) ((List<?>) c).get(1);
            String got = Canonical.pyFloat(x);
            if (!want.equals(got)) {
                if (wrong++ < 5) first.append(want).append(" != ").append(got).append("; ");
            }
        }
        if (wrong > 0) fail(wrong + " of " + cases.size() + " differ from Python's repr: " + first);
    }

    @Test
    void gaussianDeltaAndErfcAgreeWithPython() {
        String out = Python.run("import json, math\n"
                + "from ldpkit.mechanisms.gaussian import gaussian_delta\n"
                + "cases = [(e, s) for e in (5e-05, 0.01, 0.25, 1.0, 3.0, 10.0) for s in (0.05, 0.3, 1.0, 4.0, 100.0, 2e4)]\n"
                + "xs = [-3.0, -0.5, 0.0, 1e-3, 0.7, 1.9999, 2.0, 3.5, 6.0, 12.0, 26.0]\n"
                + "print(json.dumps({'delta': [[e, s, gaussian_delta(e, s)] for e, s in cases], 'erfc': [[x, math.erfc(x)] for x in xs]}))\n");
        Map<String, Object> data = Json.parseObject(out);
        for (Object c : (List<?>) data.get("delta")) {
            List<?> row = (List<?>) c;
            double eps = ((Number) row.get(0)).doubleValue();
            double sigma = ((Number) row.get(1)).doubleValue();
            double want = ((Number) row.get(2)).doubleValue();
            double got = Definitions.gaussianDelta(eps, sigma);
            assertTrue(Math.abs(got - want) <= 1e-12 + 1e-9 * want, "delta(" + eps + ", " + sigma + ") = " + got + ", Python " + want);
        }
        for (Object c : (List<?>) data.get("erfc")) {
            double x = ((Number) ((List<?>) c).get(0)).doubleValue();
            double want = ((Number) ((List<?>) c).get(1)).doubleValue();
            assertTrue(Math.abs(Definitions.erfc(x) - want) <= 1e-13 * want, "erfc(" + x + ") = " + Definitions.erfc(x) + ", Python " + want);
        }
    }

    /**
     * Prepares each {@code [lie, definition]} pair the kit serves: an honest one (lie null)
     * must be accepted, a lying one refused naming one of the constants the kit lied about.
     * Returns {honest accepted, lies refused}; fails listing every problem.
     */
    static int[] checkServedAndLies(Object data) {
        int honest = 0;
        int lies = 0;
        List<String> problems = new ArrayList<String>();
        for (Object item : (List<?>) data) {
            Object lie = ((List<?>) item).get(0);
            Map<String, Object> served = VectorsTest.object(((List<?>) item).get(1));
            String what = served.get("name") + (lie == null ? " (honest)" : " lying about " + lie);
            try {
                Definitions.prepare(served);
                if (lie != null) problems.add("accepted " + what);
                else honest++;
            } catch (DefinitionException err) {
                if (lie == null) problems.add("refused " + what + ": " + err.getMessage());
                else lies++;
                if (lie != null && !java.util.Arrays.asList(((String) lie).split(", ")).contains(err.constant())) {
                    problems.add(what + " refused naming " + err.constant() + ": " + err.getMessage());
                }
            }
        }
        assertEquals(new ArrayList<String>(), problems);
        return new int[] {honest, lies};
    }
}
