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
                if (lie != null && !java.util.Arrays.asList(((String) lie).split(", ")).contains(err.constant())) problems.add(what + " refused naming " + err.constant() + ": " + err.getMessage());
            }
        }
        assertEquals(new ArrayList<String>(), problems);
        assertTrue(honest >= 30 && lies >= 50, honest + " honest, " + lies + " lies");
        System.out.println("conformance definitions: " + honest + " accepted, " + lies + " refused");
    }
}
