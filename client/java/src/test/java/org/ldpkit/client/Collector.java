package org.ldpkit.client;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * A real {@code ldpkit serve} on loopback for the tests (collector.js): started with the
 * repository's Python, ready when its log says where it listens (no fixed sleep), stopped
 * with SIGTERM.
 */
final class Collector implements AutoCloseable {
    static final String INGEST = "java-ingest"; // a device token: one device's reports a batch
    static final String RELAY = "java-relay"; // many devices' (the simulations)
    static final String READ = "java-read";
    static final String ADMIN = "java-admin";

    final String url;
    final File dir;
    private final Process process;
    private final StringBuffer log = new StringBuffer();

    private Collector(String url, File dir, Process process) {
        this.url = url;
        this.dir = dir;
        this.process = process;
    }

    /** {@code settings}: more lines of the [collector] table. */
    static Collector start(String metricsToml, String settings) throws IOException, InterruptedException {
        File dir = Files.createTempDirectory("ldpkit-java-").toFile();
        String tokens = "[tokens]\ningest = [\"" + INGEST + "\"]\nrelay = [\"" + RELAY + "\"]\nread = [\"" + READ
                + "\"]\nadmin = [\"" + ADMIN + "\"]";
        String toml = "[collector]\ndatabase = \"collector.sqlite3\"\n" + settings + "\n\n" + tokens + "\n\n" + metricsToml;
        Files.write(new File(dir, "collector.toml").toPath(), toml.getBytes(StandardCharsets.UTF_8));
        ProcessBuilder pb = new ProcessBuilder(Arrays.asList(Python.PYTHON, "-m", "ldpkit.cli", "serve", "--host",
                "127.0.0.1", "--port", "0", "--config", "collector.toml", "--no-access-log"));
        pb.directory(dir);
        Python.clean(pb);
        pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(dir, "stdout.log")));
        Process p = pb.start();
        p.getOutputStream().close();
        final CompletableFuture<String> listening = new CompletableFuture<String>();
        final StringBuffer log = new StringBuffer();
        final InputStream err = p.getErrorStream();
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(err, StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    log.append(line).append('\n');
                    int at = line.indexOf("listening on http://127.0.0.1:");
                    if (at >= 0) {
                        String rest = line.substring(at + "listening on ".length());
                        int end = "http://127.0.0.1:".length();
                        while (end < rest.length() && Character.isDigit(rest.charAt(end))) end++;
                        listening.complete(rest.substring(0, end));
                    }
                }
            } catch (IOException e) {
                // the collector stopped
            }
            listening.completeExceptionally(new IOException("the collector exited:\n" + log));
        }, "collector-log");
        reader.setDaemon(true);
        reader.start();
        try {
            return new Collector(listening.get(), dir, p);
        } catch (ExecutionException e) {
            p.destroy();
            throw new IOException(e.getCause().getMessage());
        }
    }

    /** GET /v1/estimates/{metric}?{query} with the read token: its JSON. */
    @SuppressWarnings("unchecked")
    Map<String, Object> estimates(String metric, String query) throws IOException {
        return (Map<String, Object>) Json.parse(get("/v1/estimates/" + metric + "?" + query, READ));
    }

    String get(String path, String token) throws IOException {
        HttpURLConnection c = (HttpURLConnection) new URL(url + path).openConnection();
        c.setRequestProperty("Authorization", "Bearer " + token);
        int status = c.getResponseCode();
        InputStream in = status >= 400 ? c.getErrorStream() : c.getInputStream();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Python.drain(in, out);
        String body = out.toString("UTF-8");
        if (status != 200) throw new IOException(path + ": " + status + " " + body);
        return body;
    }

    @Override
    public void close() throws InterruptedException {
        process.destroy(); // SIGTERM
        process.waitFor();
    }
}
