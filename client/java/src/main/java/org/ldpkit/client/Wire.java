package org.ldpkit.client;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Wire format v2 (docs/protocol.md, "Wire format v2: sealed batches"): one random 128-bit
 * id per batch, sent byte for byte again until answered. Only what a batch needs of
 * msgpack, written here (no dependency): maps, strings, non-negative integers, bin and arrays.
 */
public final class Wire {
    public static final String CONTENT_TYPE = "application/vnd.ldpkit.v2+msgpack";
    public static final int ID_SIZE = 16;

    private Wire() {
    }

    /** One block of a batch: the reports of one metric version and bucket. */
    public static final class Block {
        public final String metric;
        public final String fp;
        public final long bucket;
        public final List<byte[]> reports;

        public Block(String metric, String fp, long bucket, List<byte[]> reports) {
            this.metric = metric;
            this.fp = fp;
            this.bucket = bucket;
            this.reports = Collections.unmodifiableList(new ArrayList<byte[]>(reports));
        }
    }

    /** The msgpack writer (big-endian heads, as msgpack is). */
    static final class Writer {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();

        private void head(int prefix, int size, long length) {
            out.write(prefix);
            for (int i = size - 1; i >= 0; i--) out.write((int) (length >>> (8 * i)) & 0xff);
        }

        void uint(long n) {
            if (n < 0) throw new IllegalArgumentException("not a wire integer: " + n);
            if (n < 0x80) out.write((int) n);
            else if (n < 0x100) head(0xcc, 1, n);
            else if (n < 0x10000) head(0xcd, 2, n);
            else if (n < 0x100000000L) head(0xce, 4, n);
            else head(0xcf, 8, n);
        }

        void str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            if (b.length < 32) out.write(0xa0 | b.length);
            else if (b.length < 0x100) head(0xd9, 1, b.length);
            else if (b.length < 0x10000) head(0xda, 2, b.length);
            else head(0xdb, 4, b.length);
            out.write(b, 0, b.length);
        }

        void bin(byte[] b) {
            if (b.length < 0x100) head(0xc4, 1, b.length);
            else if (b.length < 0x10000) head(0xc5, 2, b.length);
            else head(0xc6, 4, b.length);
            out.write(b, 0, b.length);
        }

        void array(int n) {
            if (n < 16) out.write(0x90 | n);
            else if (n < 0x10000) head(0xdc, 2, n);
            else head(0xdd, 4, n);
        }

        void map(int n) {
            if (n >= 16) throw new IllegalArgumentException("batches and blocks have at most 5 keys");
            out.write(0x80 | n);
        }

        byte[] done() {
            return out.toByteArray();
        }
    }

    /**
     * The msgpack bytes of a sealed (v2) batch: {@code batch} 16 random bytes, then the
     * blocks, in the key order of docs/protocol.md's vectors.
     */
    public static byte[] encodeSealedBatch(byte[] batch, List<Block> blocks) {
        if (batch == null || batch.length != ID_SIZE) throw new IllegalArgumentException("a batch id is " + ID_SIZE + " bytes");
        Writer w = new Writer();
        w.map(3);
        w.str("v");
        w.uint(2);
        w.str("batch");
        w.bin(batch);
        w.str("blocks");
        w.array(blocks.size());
        for (Block b : blocks) {
            w.map(5);
            w.str("metric");
            w.str(b.metric);
            w.str("fp");
            w.str(b.fp);
            w.str("bucket");
            w.uint(b.bucket);
            w.str("n");
            w.uint(b.reports.size());
            w.str("reports");
            w.bin(concat(b.reports));
        }
        return w.done();
    }

    static byte[] concat(List<byte[]> parts) {
        int total = 0;
        for (byte[] p : parts) total += p.length;
        byte[] out = new byte[total];
        int at = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** Lowercase hex of bytes. */
    public static String toHex(byte[] bytes) {
        char[] out = new char[2 * bytes.length];
        for (int i = 0; i < bytes.length; i++) {
            out[2 * i] = HEX[(bytes[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX[bytes[i] & 0xf];
        }
        return new String(out);
    }

    /** Bytes of a hex string (an even number of hex digits). */
    public static byte[] fromHex(String hex) {
        if (hex.length() % 2 != 0) throw new IllegalArgumentException("an odd number of hex digits");
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            int hi = Character.digit(hex.charAt(2 * i), 16);
            int lo = Character.digit(hex.charAt(2 * i + 1), 16);
            if (hi < 0 || lo < 0) throw new IllegalArgumentException("not hex: " + hex);
            out[i] = (byte) (hi << 4 | lo);
        }
        return out;
    }
}
