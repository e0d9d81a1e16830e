// Compiled by `make node-lint` (tsconfig.types.json), never run: the
// declarations an ES module consumer sees (node16 resolution through the
// package's "exports"), including the default export and `await using`.
import Default, { LockLostError, Redlock, type Lock, type RedlockOptions } from "redislock-native";

const options: RedlockOptions = { ttl: 10_000, tls: { ca: "" }, acknowledge: { replicas: 1 } };
const rl = new Redlock(["redis://127.0.0.1:6379"], options);
const same: typeof Redlock = Default;

export async function use(signal: AbortSignal): Promise<[bigint, number, string, number | null]> {
  await using lock = await rl.lock("orders:1001", { wait: 5_000, signal });
  const token: bigint = await lock.token();
  const n: number = await rl.using("x", async (s: AbortSignal, l: Lock) => (s.aborted ? 0 : l.holds));
  const code: string = new LockLostError("x").code;
  rl.on("lost", (error: LockLostError, lost: Lock) => void [error, lost]);
  void same;
  return [token, n, code, lock.validity];
}
