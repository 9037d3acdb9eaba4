// Wire format v2 (docs/protocol.md, "Wire format v2: sealed batches"): one random 128-bit
// id per batch, sent byte for byte again until answered. Only what a batch needs of
// msgpack: maps, strings, non-negative integers, bin and arrays.

export const CONTENT_TYPE = "application/vnd.ldpkit.v2+msgpack";
export const ID_SIZE = 16;

class Writer {
  constructor() {
    this.chunks = [];
  }
  bytes(b) {
    this.chunks.push(b);
  }
  head(prefix, size, length) {
    const out = new Uint8Array(1 + size);
    const view = new DataView(out.buffer);
    out[0] = prefix;
    if (size === 1) view.setUint8(1, length);
    else if (size === 2) view.setUint16(1, length);
    else if (size === 4) view.setUint32(1, length);
    this.bytes(out);
  }
  uint(n) {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`not a wire integer: ${n}`);
    if (n < 0x80) this.bytes(Uint8Array.of(n));
    else if (n < 0x100) this.head(0xcc, 1, n);
    else if (n < 0x10000) this.head(0xcd, 2, n);
    else if (n < 0x100000000) this.head(0xce, 4, n);
    else {
      const out = new Uint8Array(9);
      out[0] = 0xcf;
      new DataView(out.buffer).setBigUint64(1, BigInt(n));
      this.bytes(out);
    }
  }
  str(s) {
    const b = new TextEncoder().encode(s);
    if (b.length < 32) this.bytes(Uint8Array.of(0xa0 | b.length));
    else if (b.length < 0x100) this.head(0xd9, 1, b.length);
    else if (b.length < 0x10000) this.head(0xda, 2, b.length);
    else this.head(0xdb, 4, b.length);
    this.bytes(b);
  }
  bin(b) {
    if (b.length < 0x100) this.head(0xc4, 1, b.length);
    else if (b.length < 0x10000) this.head(0xc5, 2, b.length);
    else this.head(0xc6, 4, b.length);
    this.bytes(b);
  }
  array(n) {
    if (n < 16) this.bytes(Uint8Array.of(0x90 | n));
    else if (n < 0x10000) this.head(0xdc, 2, n);
    else this.head(0xdd, 4, n);
  }
  map(n) {
    this.bytes(Uint8Array.of(0x80 | n)); // batches and blocks have at most 5 keys
  }
  done() {
    const total = this.chunks.reduce((s, c) => s + c.length, 0);
    const out = new Uint8Array(total);
    let at = 0;
    for (const c of this.chunks) {
      out.set(c, at);
      at += c.length;
    }
    return out;
  }
}

function concat(parts) {
  const total = parts.reduce((s, c) => s + c.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of parts) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * The msgpack bytes of a sealed (v2) batch: `batch` 16 random bytes, `blocks`
 * [{metric, fp, bucket, reports: [Uint8Array]}], in the order of docs/protocol.md's vectors.
 */
export function encodeSealedBatch(batch, blocks) {
  if (!(batch instanceof Uint8Array) || batch.length !== ID_SIZE) throw new RangeError(`a batch id is ${ID_SIZE} bytes`);
  const w = new Writer();
  w.map(3);
  w.str("v");
  w.uint(2);
  w.str("batch");
  w.bin(batch);
  w.str("blocks");
  w.array(blocks.length);
  for (const b of blocks) {
    w.map(5);
    w.str("metric");
    w.str(b.metric);
    w.str("fp");
    w.str(b.fp);
    w.str("bucket");
    w.uint(b.bucket);
    w.str("n");
    w.uint(b.reports.length);
    w.str("reports");
    w.bin(concat(b.reports));
  }
  return w.done();
}

export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function fromHex(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}
