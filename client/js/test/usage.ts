// Type-checked by `npm test` (tsc --noEmit): the README's usage against the declarations.
import { BudgetExceeded, Reporter, seededRandom, type FlushResult } from "../src/index.js";

export async function example(token: string): Promise<FlushResult> {
  const r = new Reporter("https://collector.example", { token, stateDir: "./ldpkit-state" });
  try {
    const receipt = await r.report("theme", "dark");
    if (receipt.clipped) console.log("clipped");
  } catch (err) {
    if (err instanceof BudgetExceeded) console.log(err.renewsAt);
  }
  await r.report("minutes", 12.5);
  await r.report("car", { type: "Van", origin: "USA" });
  const left: number = r.budget().metrics.theme.left;
  console.log(left);
  const result = await r.flush();
  await r.close();
  return result;
}

// A simulation's devices: seeded randomness (tests only; a device uses the platform CSPRNG).
export function simulated(token: string, device: number): Reporter {
  return new Reporter("https://collector.example", { token, memoize: false, random: seededRandom(device) });
}
