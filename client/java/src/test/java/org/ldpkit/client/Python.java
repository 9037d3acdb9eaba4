package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Running ldpkit's Python side from the Java tests (a collector, the conformance kit):
 * $LDPKIT_PYTHON, else the repository's .venv (../../.venv/bin/python from client/java),
 * else python3 with ldpkit installed. The JavaScript tests' python.js.
 */
final class Python {
    static final String PYTHON = find();

    private Python() {}

    private static String find() {
        String env = System.getenv("LDPKIT_PYTHON");
        if (env != null && !env.isEmpty()) return env;
        File venv = new File(repo(), ".venv/bin/python");
        return venv.exists() ? venv.getAbsolutePath() : "python3";
    }

    /** client/java (the tests run from there, or with -Dldpkit.java.dir). */
    static File javaDir() {
        String dir = System.getProperty("ldpkit.java.dir");
        return new File(dir != null ? dir : System.getProperty("user.dir"));
    }

    /** The repository's root. */
    static File repo() {
        String root = System.getProperty("ldpkit.root");
        return root != null ? new File(root) : new File(javaDir(), "../..");
    }

    /** The outcome of {@code ldpkit <args>}. */
    static final class Run {
        final int status;
        final String stdout;
        final String stderr;

        Run(int status, String stdout, String stderr) {
            this.status = status;
            this.stdout = stdout;
            this.stderr = stderr;
        }

        @Override
        public String toString() {
            return "exit " + status + "\n" + stdout + stderr;
        }
    }

    static Run ldpkit(String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<String>(Arrays.asList(PYTHON, "-m", "ldpkit.cli"));
        command.addAll(Arrays.asList(args));
        ProcessBuilder pb = new ProcessBuilder(command);
        clean(pb);
        Process p = pb.start();
        p.getOutputStream().close();
        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        final InputStream errStream = p.getErrorStream();
        Thread t = new Thread(new Runnable() {
            @Override
            public void run() {
                try {
                    copy(errStream, err);
                } catch (IOException e) {
                    // the process went away
                }
            }
        });
        t.start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        copy(p.getInputStream(), out);
        int status = p.waitFor();
        t.join();
        return new Run(status, out.toString("UTF-8"), err.toString("UTF-8"));
    }

    /** No LDPKIT_* of the caller's environment reaches the child (as collector.js does). */
    static void clean(ProcessBuilder pb) {
        pb.environment().keySet().removeIf(k -> k.startsWith("LDPKIT_"));
    }

    static void copy(InputStream in, ByteArrayOutputStream out) throws IOException {
        byte[] buffer = new byte[8192];
        for (int n; (n = in.read(buffer)) >= 0; ) out.write(buffer, 0, n);
    }
}
