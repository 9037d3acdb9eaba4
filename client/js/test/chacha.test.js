// ChaCha20's block function against RFC 8439, section 2.3.2.
import { test } from "node:test";
import assert from "node:assert/strict";

import { ChaChaWords } from "../src/chacha.js";

test("ChaCha20 block: RFC 8439 2.3.2", () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i);
  const nonce = Uint8Array.of(0, 0, 0, 9, 0, 0, 0, 0x4a, 0, 0, 0, 0);
  const words = new ChaChaWords(key, { nonce, counter: 1 });
  const got = Array.from({ length: 16 }, () => words.word().toString(16).padStart(8, "0"));
  assert.deepEqual(got, [
    "e4e7f110", "15593bd1", "1fdd0f50", "c47120a3", "c7f4d1c7", "0368c033", "9aaa2204", "4e6cd4c3",
    "466482d2", "09aa9f07", "05d7c214", "a2028bd9", "d19c12b5", "b94e16de", "e883d0cb", "4e3c50a2",
  ]);
});
