package org.ldpkit.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * The outbox under a killed JVM: a child process reporting into a FileStore is killed
 * (SIGKILL) in the middle of its flush; a new Reporter over the same folder flushes what is
 * left; the collector counted every report the child queued exactly once: nothing
 * acknowledged was lost, nothing was counted twice (the sealed batch in flight at the kill
 * is sent again byte for byte and counted as duplicates).
 */
class KillTest {
    static final int REPORTS = 400;

    @Test
    void aKilledFlushLosesNothingAndCountsNothingTwice() throws Exception {
        try (Collector collector = Collector.start(
                "[metrics.clicks]\ncategories = [\"a\", \"b\"]\nepsilon = 0.1\nbudget = 50.0\n", "")) {
            File dir = Files.createTempDirectory("ldpkit-kill-").toFile();
            String java = new File(new File(System.getProperty("java.home"), "bin"), "java").getPath();
            ProcessBuilder pb = new ProcessBuilder(Arrays.asList(java, "-cp", classPath(),
                    KillChild.class.getName(), collector.url, dir.getPath(), String.valueOf(REPORTS)));
            pb.redirectErrorStream(true);
            Process child = pb.start();
            int queued = 0;
            boolean flushing = false;
            StringBuilder said = new StringBuilder();
            try (BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = out.readLine()) != null; ) {
                    if (line.startsWith("queued ")) queued++;
                    else said.append(line).append('\n');
                    if (line.equals("flushing")) {
                        flushing = true;
                        break;
                    }
                }
                assertTrue(flushing, "the child never flushed:\n" + said);
                // Kill it once the collector counted some of its batches, not all of them.
                long counted = 0;
                while (counted == 0) counted = count(collector);
                child.destroyForcibly();
                child.waitFor();
            }
            assertEquals(REPORTS, queued);
            long before = count(collector);
            assertTrue(before > 0 && before < REPORTS, "killed mid-flush: " + before + " of " + REPORTS + " counted");

            Reporter after = Reporter.builder(collector.url, Collector.RELAY).stateDir(dir).build();
            int left = after.pending();
            assertTrue(left > 0 && left <= REPORTS - before + 5, left + " left with " + before + " counted");
            FlushResult sent = after.flush();
            assertEquals(0, sent.remaining());
            assertEquals(0, after.pending());
            assertEquals(REPORTS, count(collector), "every queued report counted exactly once");
            assertEquals(left, sent.sent() + sent.duplicates(), sent.toString());
            after.close();
        }
    }

    /** The classes of the library and of the tests (the console launcher's class path). */
    static String classPath() throws Exception {
        return new File(Reporter.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath()
                + File.pathSeparator
                + new File(KillChild.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath();
    }

    static long count(Collector collector) throws Exception {
        return ((Number) collector.estimates("clicks", "").get("n")).longValue();
    }
}
