package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

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
}
