package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Running ldpkit's Python side from the Java tests (as client/js/test/python.js):
 * $LDPKIT_PYTHON, else the repository's .venv, else python3 (with ldpkit installed).
 */
final class Python {
    private Python() {
    }

    static String executable() {
        String given = System.getenv("LDPKIT_PYTHON");
        if (given != null && !given.isEmpty()) return given;
        File venv = new File(Docs.root(), ".venv/bin/python");
        return venv.isFile() ? venv.getPath() : "python3";
    }

    /** The standard output of {@code python -c code}; fails the test, saying why, if Python fails. */
    static String run(String code) {
        ProcessBuilder pb = new ProcessBuilder(Arrays.asList(executable(), "-c", code));
        pb.redirectErrorStream(false);
        try {
            Process p = pb.start();
            p.getOutputStream().close();
            final InputStream err = p.getErrorStream();
            final ByteArrayOutputStream errBytes = new ByteArrayOutputStream();
            Thread drain = new Thread(() -> copy(err, errBytes));
            drain.start();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            copy(p.getInputStream(), out);
            int status = p.waitFor();
            drain.join();
            if (status != 0) {
                throw new AssertionError("these tests run ldpkit's Python side with " + executable() + ", which failed "
                        + "(create the repository's venv first: python3 -m venv .venv && .venv/bin/pip install -e '.[dev]', "
                        + "or set LDPKIT_PYTHON):\n" + new String(errBytes.toByteArray(), StandardCharsets.UTF_8));
            }
            return new String(out.toByteArray(), StandardCharsets.UTF_8);
        } catch (IOException | InterruptedException e) {
            throw new AssertionError("cannot run " + executable() + ": " + e, e);
        }
    }

    private static void copy(InputStream in, ByteArrayOutputStream out) {
        byte[] buffer = new byte[65536];
        try {
            for (int n; (n = in.read(buffer)) > 0;) out.write(buffer, 0, n);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    // ---- the reporter's tests: a collector, the conformance kit ------------------------

    static final String PYTHON = executable();

    /** The repository's root. */
    static File repo() {
        return Docs.root();
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
        Thread t = new Thread(() -> copy(errStream, err));
        t.start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        copy(p.getInputStream(), out);
        int status = p.waitFor();
        t.join();
        return new Run(status, new String(out.toByteArray(), StandardCharsets.UTF_8), new String(err.toByteArray(), StandardCharsets.UTF_8));
    }

    /** No LDPKIT_* of the caller's environment reaches the child (as collector.js does). */
    static void clean(ProcessBuilder pb) {
        pb.environment().keySet().removeIf(k -> k.startsWith("LDPKIT_"));
    }

    /** All of {@code in} into {@code out}. */
    static void drain(InputStream in, ByteArrayOutputStream out) {
        copy(in, out);
    }
}
