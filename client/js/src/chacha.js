// ChaCha20 (RFC 8439) as a source of 32-bit words: the memoized reports' randomness,
// synchronous (WebCrypto has no stream cipher that yields words on demand).

const rotl = (x, n) => (x << n) | (x >>> (32 - n));

function quarter(s, a, b, c, d) {
  s[a] = (s[a] + s[b]) | 0;
  s[d] = rotl(s[d] ^ s[a], 16);
  s[c] = (s[c] + s[d]) | 0;
  s[b] = rotl(s[b] ^ s[c], 12);
  s[a] = (s[a] + s[b]) | 0;
  s[d] = rotl(s[d] ^ s[a], 8);
  s[c] = (s[c] + s[d]) | 0;
  s[b] = rotl(s[b] ^ s[c], 7);
}

/** The keystream of ChaCha20 under a 32-byte key, as little-endian 32-bit words. */
export class ChaChaWords {
  constructor(key, { nonce = new Uint8Array(12), counter = 0 } = {}) {
    if (key.length !== 32 || nonce.length !== 12) throw new RangeError("ChaCha20 takes a 32-byte key and a 12-byte nonce");
    const k = new DataView(key.buffer, key.byteOffset, 32);
    const n = new DataView(nonce.buffer, nonce.byteOffset, 12);
    this.input = new Uint32Array(16);
    this.input.set([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);
    for (let i = 0; i < 8; i++) this.input[4 + i] = k.getUint32(4 * i, true);
    this.input[12] = counter;
    for (let i = 0; i < 3; i++) this.input[13 + i] = n.getUint32(4 * i, true);
    this.state = new Int32Array(16);
    this.block = new Uint32Array(16);
    this.pos = 16;
  }
  refill() {
    const s = this.state;
    s.set(this.input);
    for (let i = 0; i < 10; i++) {
      quarter(s, 0, 4, 8, 12);
      quarter(s, 1, 5, 9, 13);
      quarter(s, 2, 6, 10, 14);
      quarter(s, 3, 7, 11, 15);
      quarter(s, 0, 5, 10, 15);
      quarter(s, 1, 6, 11, 12);
      quarter(s, 2, 7, 8, 13);
      quarter(s, 3, 4, 9, 14);
    }
    for (let i = 0; i < 16; i++) this.block[i] = (s[i] + this.input[i]) >>> 0;
    this.input[12] = (this.input[12] + 1) >>> 0;
    this.pos = 0;
  }
  word() {
    if (this.pos === 16) this.refill();
    return this.block[this.pos++];
  }
}

/**
 * A seeded random source for the reporter's `random` option (tests and simulations, never
 * a real device): fills a typed array of whole 32-bit words in place from the ChaCha20
 * keystream under a 32-byte key, or under the key holding `seed` (an integer below 2^32)
 * in its first four bytes.
 */
export function seededRandom(seed) {
  let key = seed;
  if (Number.isInteger(seed) && seed >= 0 && seed < 4294967296) {
    key = new Uint8Array(32);
    new DataView(key.buffer).setUint32(0, seed, true);
  } else if (!(seed instanceof Uint8Array) || seed.length !== 32) {
    throw new TypeError("seededRandom takes an integer in [0, 2^32) or a 32-byte key");
  }
  const words = new ChaChaWords(key);
  return (bytes) => {
    if (bytes.byteLength % 4) throw new RangeError("seededRandom fills whole 32-bit words");
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < bytes.byteLength; i += 4) view.setUint32(i, words.word(), true);
    return bytes;
  };
}
