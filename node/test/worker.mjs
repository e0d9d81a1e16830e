// A contender for the cross-process exclusion test: takes the lock
// `iterations` times; under it, checks that nobody else is inside (a counter
// on the server) and does a read-modify-write that loses updates unless the
// holders are exclusive. Prints its fencing tokens as JSON.
import { Redlock } from "redislock-native";
import { command } from "./servers.mjs";

const [url, port, iterations] = process.argv.slice(2);
const rl = new Redlock([url], { ttl: 10_000, nodeTimeout: 1_000 });
const tokens = [];
let violations = 0;
for (let i = 0; i < Number(iterations); i++) {
  const lock = await rl.lock("xproc", { wait: 60_000 });
  try {
    tokens.push(String(await lock.token()));
    if ((await command(port, "INCR", "xproc:inside")) !== 1n) violations++;
    const seen = Number((await command(port, "GET", "xproc:total")) ?? 0);
    await new Promise((r) => setTimeout(r, 5));
    await command(port, "SET", "xproc:total", String(seen + 1));
    await command(port, "DECR", "xproc:inside");
  } finally {
    await lock.release();
  }
}
process.stdout.write(JSON.stringify({ tokens, violations }) + "\n");
