// Benchmarks (figures, not tests): the browser bundle's size, minified and gzipped, and
// report() latency in Node (p50/p90 over many reports, memory store, no network).
//   node bench/report.mjs
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

import { MemoryStore, Reporter, prepare, CryptoWords } from "../src/index.js";

const entry = fileURLToPath(new URL("../src/index.js", import.meta.url));
const bundle = await build({ entryPoints: [entry], bundle: true, minify: true, format: "esm", platform: "browser", external: ["node:*"], write: false });
const bytes = bundle.outputFiles[0].contents;
console.log(`browser bundle: ${bytes.length} bytes minified, ${gzipSync(bytes, { level: 9 }).length} bytes gzipped`);

// Definitions as a collector serves them (from the Python side would need a process: these
// are fixed copies of what `ldpkit conformance plan` serves).
const plan = JSON.parse(process.argv[2] ? (await import("node:fs")).readFileSync(process.argv[2], "utf8") : "null");
const definitions = plan ? plan.metrics : null;
if (!definitions) {
  console.log("pass a conformance plan (ldpkit conformance plan --out plan.json) for the report() timings");
  process.exit(0);
}
const fakeFetch = async () => new Response(JSON.stringify({ metrics: definitions }), { status: 200 });
for (const memoize of [true, false]) {
  const rows = [];
  for (const raw of definitions) {
    const def = await prepare(raw);
    const value = plan.inputs.find((input) => input.metric === def.name).value;
    const times = [];
    for (let i = 0; i < 400; i++) {
      const store = new MemoryStore();
      const r = new Reporter("http://127.0.0.1:9", { token: "t", store, fetch: fakeFetch, memoize });
      await r.definition(def.name);
      const start = performance.now();
      await r.report(def.name, value);
      times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    rows.push([def.name, times[200] * 1000, times[360] * 1000]);
  }
  console.log(`report() with memoize=${memoize} (microseconds, memory store):`);
  for (const [name, p50, p90] of rows) console.log(`  ${name.padEnd(14)} p50 ${p50.toFixed(0).padStart(6)}  p90 ${p90.toFixed(0).padStart(6)}`);
  const words = new CryptoWords();
  const def = await prepare(definitions.find((d) => d.resolved_mechanism === "laplace"));
  const t0 = performance.now();
  for (let i = 0; i < 10000; i++) def.sample(3.3, words);
  console.log(`  laplace sampling alone: ${((performance.now() - t0) / 10).toFixed(2)} us per report`);
}
