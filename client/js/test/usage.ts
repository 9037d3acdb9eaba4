// Type-checked by `npm test` (tsc --noEmit): the README's usage against the declarations.
import { BudgetExceeded, Reporter, deviceCap, seededRandom, type FlushResult, type TokenRole } from "../src/index.js";

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

// Token roles (a device token's batches stay within deviceCap) and held reports.
export async function roles(r: Reporter): Promise<number> {
  const definition = await r.definition("theme");
  const role: TokenRole | null = r.tokenRole;
  const cap: number = deviceCap(definition);
  const { held } = await r.flush();
  return role === "device" ? cap + held : held;
}
