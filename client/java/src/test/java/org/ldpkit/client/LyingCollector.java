package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A collector that lies (tests/client/lying.py): a loopback HTTP server whose answers a
 * test scripts. Each request (head and Content-Length body) goes to the scenario, which
 * writes whatever it likes on the socket; {@link #sent} counts the bytes written, so a
 * test can tell how much of an answer the client read.
 */
final class LyingCollector implements AutoCloseable {
    static final class Request {
        final String method;
        final String path;
        final Map<String, String> headers;
        final byte[] body;

        Request(String method, String path, Map<String, String> headers, byte[] body) {
            this.method = method;
            this.path = path;
            this.headers = headers;
            this.body = body;
        }
    }

    interface Scenario {
        void answer(Request request, OutputStream out, LyingCollector server) throws IOException;
    }

    final String url;
    final AtomicLong sent = new AtomicLong();
    final List<Request> requests = Collections.synchronizedList(new ArrayList<Request>());
    private final ServerSocket socket;
    private final Scenario scenario;
    private final byte[] definitions; // the GET /v1/metrics answer's body, or null
    private volatile boolean stopped;
    private final List<Thread> threads = Collections.synchronizedList(new ArrayList<Thread>());
    private final List<Socket> sockets = Collections.synchronizedList(new ArrayList<Socket>());

    LyingCollector(Scenario scenario, byte[] definitions) throws IOException {
        this.scenario = scenario;
        this.definitions = definitions;
        this.socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        this.url = "http://127.0.0.1:" + socket.getLocalPort();
        Thread accepting = new Thread(this::accept, "lying-accept");
        accepting.setDaemon(true);
        accepting.start();
        threads.add(accepting);
    }

    boolean stopped() {
        return stopped;
    }

    void write(OutputStream out, byte[] data) throws IOException {
        out.write(data);
        out.flush();
        sent.addAndGet(data.length);
    }

    static byte[] answer(int status, byte[] body, String... headers) {
        StringBuilder head = new StringBuilder("HTTP/1.1 " + status + " X\r\nContent-Type: application/json\r\n");
        for (String h : headers) head.append(h).append("\r\n");
        head.append("Content-Length: ").append(body.length).append("\r\n\r\n");
        byte[] h = head.toString().getBytes(StandardCharsets.ISO_8859_1);
        byte[] out = new byte[h.length + body.length];
        System.arraycopy(h, 0, out, 0, h.length);
        System.arraycopy(body, 0, out, h.length, body.length);
        return out;
    }

    /** Every request answered with the same bytes. */
    static Scenario fixed(int status, byte[] body, String... headers) {
        final byte[] data = answer(status, body, headers);
        return (request, out, server) -> server.write(out, data);
    }

    /** {@code data} one byte every {@code everyMillis} (until the client goes away). */
    static Scenario drip(byte[] data, long everyMillis) {
        return (request, out, server) -> {
            for (int i = 0; i < data.length && !server.stopped(); i++) {
                server.write(out, new byte[] {data[i]});
                try {
                    Thread.sleep(everyMillis);
                } catch (InterruptedException e) {
                    return;
                }
            }
        };
    }

    /** A 200 answer of {@code total} bytes of filler, as fast as the client reads. */
    static Scenario flood(long total, boolean chunked) {
        return (request, out, server) -> {
            String head = chunked ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    : "HTTP/1.1 200 OK\r\nContent-Length: " + total + "\r\n\r\n";
            server.write(out, head.getBytes(StandardCharsets.ISO_8859_1));
            byte[] block = new byte[65536];
            java.util.Arrays.fill(block, (byte) ' ');
            byte[] chunkHead = (Integer.toHexString(block.length) + "\r\n").getBytes(StandardCharsets.ISO_8859_1);
            for (long left = total; left > 0 && !server.stopped(); left -= block.length) {
                if (chunked) server.write(out, chunkHead);
                server.write(out, block);
                if (chunked) server.write(out, "\r\n".getBytes(StandardCharsets.ISO_8859_1));
            }
        };
    }

    private void accept() {
        while (!stopped) {
            final Socket conn;
            try {
                conn = socket.accept();
            } catch (IOException e) {
                return;
            }
            sockets.add(conn);
            Thread t = new Thread(() -> serve(conn), "lying-serve");
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
    }

    private void serve(Socket conn) {
        try (Socket c = conn) {
            c.setSoTimeout(30000);
            InputStream in = c.getInputStream();
            OutputStream out = c.getOutputStream();
            while (!stopped) {
                String head = readHead(in);
                if (head == null) return;
                String[] lines = head.split("\r\n");
                Map<String, String> headers = new LinkedHashMap<String, String>();
                for (int i = 1; i < lines.length; i++) {
                    int colon = lines[i].indexOf(':');
                    if (colon > 0) headers.put(lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT), lines[i].substring(colon + 1).trim());
                }
                int length = Integer.parseInt(headers.getOrDefault("content-length", "0"));
                byte[] body = new byte[length];
                for (int at = 0; at < length; ) {
                    int n = in.read(body, at, length - at);
                    if (n < 0) return;
                    at += n;
                }
                String[] first = lines[0].split(" ");
                Request request = new Request(first[0], first[1], headers, body);
                requests.add(request);
                if (first[0].equals("GET") && first[1].endsWith("/v1/metrics") && definitions != null) {
                    write(out, answer(200, definitions));
                    continue;
                }
                scenario.answer(request, out, this);
            }
        } catch (IOException e) {
            // the client went away
        }
    }

    private static String readHead(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int matched = 0;
        for (int b; (b = in.read()) >= 0; ) {
            head.write(b);
            matched = (b == '\r' || b == '\n') ? (matched + 1) : 0;
            if (matched == 4) return new String(head.toByteArray(), StandardCharsets.ISO_8859_1).trim();
        }
        return null;
    }

    @Override
    public void close() throws IOException, InterruptedException {
        stopped = true;
        socket.close();
        synchronized (sockets) {
            for (Socket s : sockets) s.close();
        }
        List<Thread> all;
        synchronized (threads) {
            all = new ArrayList<Thread>(threads);
        }
        for (Thread t : all) t.join(5000);
    }
}
