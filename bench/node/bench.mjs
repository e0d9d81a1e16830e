// make bench, section 12: lock+unlock cycles per second and process CPU per
// cycle of the Node.js clients, at 1, 16 and 64 concurrent tasks:
// redislock-native against `redlock` on five masters and against
// `redis-semaphore`'s Mutex on one node, on the same servers in the same run
// (the servers are started by the bench crate and passed in).
//
//   node bench/node/bench.mjs --five URL,URL,URL,URL,URL --one URL \
//       [--warmup MS] [--window MS] [--rounds N]
//
// A fourth client, "redislock-native floor", is the addon's own floor on
// one node: each cycle is two operations through its runtime and completion
// queue that do no network work (the bench hook `_roundTrip`), on a handle
// held since the task's first cycle: what a cycle costs before any command.
//
// Prints one JSON object per line: {client, nodes, tasks, cyclesPerSec,
// cpuUsPerCycle, cycles, failed} (failed cycles are not counted). Every task
// locks and unlocks a key of its own (no contention: the clients' own cost is
// measured). CPU is the whole process's
// (process.cpuUsage(): the addon's runtime threads included), divided by the
// cycles done in the window. With several rounds, each figure is the median.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}
const five = (arg("five") ?? "").split(",").filter(Boolean);
const one = arg("one");
const warmup = Number(arg("warmup", "1000"));
const window = Number(arg("window", "3000"));
const rounds = Number(arg("rounds", "1"));
const TASKS = [1, 16, 64];
const TTL = 10_000;
if (five.length !== 5 || !one) {
  console.error("usage: bench.mjs --five URL,URL,URL,URL,URL --one URL [--warmup MS] [--window MS] [--rounds N]");
  process.exit(2);
}

const { Redlock: Native } = require(path.join(here, "../../node"));
const { default: IORedis } = await import("ioredis");
const redlockPackage = await loadRedlock();
const { Mutex } = await import("redis-semaphore");

/** `redlock` v5 (the last release, a beta); its maintained fork
 * `@sesamecare-oss/redlock` if it does not load. */
async function loadRedlock() {
  for (const name of ["redlock", "@sesamecare-oss/redlock"]) {
    try {
      const m = await import(name);
      const Redlock = m.default?.default ?? m.default ?? m.Redlock;
      if (typeof Redlock === "function") return { name, Redlock };
    } catch (e) {
      console.error(`${name} does not load: ${e.message}`);
    }
  }
  throw new Error("neither redlock nor @sesamecare-oss/redlock loads");
}

function ioredis(url) {
  const u = new URL(url);
  return new IORedis({ host: u.hostname, port: Number(u.port), lazyConnect: false, maxRetriesPerRequest: 1 });
}

/** The clients under test: each a function doing one lock+unlock cycle on
 * `key`, and a close(). */
function makeClients() {
  const fiveRedis = five.map(ioredis);
  const oneRedis = ioredis(one);
  const redlock = new redlockPackage.Redlock(fiveRedis, { retryCount: 0, automaticExtensionThreshold: 500 });
  const nativeFive = new Native(five, { ttl: TTL, retryCount: 0 });
  const nativeOne = new Native([one], { ttl: TTL, retryCount: 0 });
  const floorLocks = new Map();
  /** The floor's handle for `key` (a promise of it), taken once; an
   * acquisition that failed is forgotten, and the next cycle tries again. */
  function floorLock(key) {
    let lock = floorLocks.get(key);
    if (!lock) {
      lock = nativeOne.lock(`${key}:floor`);
      floorLocks.set(key, lock);
      lock.catch(() => {
        if (floorLocks.get(key) === lock) floorLocks.delete(key);
      });
    }
    return lock;
  }
  return [
    {
      client: "redislock-native",
      nodes: 5,
      cycle: async (key) => {
        const lock = await nativeFive.lock(key);
        await lock.release();
      },
    },
    {
      client: redlockPackage.name,
      nodes: 5,
      cycle: async (key) => {
        const lock = await redlock.acquire([key], TTL);
        await lock.release();
      },
    },
    {
      client: "redislock-native",
      nodes: 1,
      cycle: async (key) => {
        const lock = await nativeOne.lock(key);
        await lock.release();
      },
    },
    {
      // The floor of the addon's design: the two operations of a cycle
      // through its runtime and completion queue, without the network (a
      // handle held since the task's first cycle).
      client: "redislock-native floor",
      nodes: 1,
      cycle: async (key) => {
        const lock = await floorLock(key);
        await lock._roundTrip();
        await lock._roundTrip();
      },
    },
    {
      client: "redis-semaphore Mutex",
      nodes: 1,
      cycle: async (key) => {
        // No refresh timer: the lease is not renewed, as with the others.
        const mutex = new Mutex(oneRedis, key, { lockTimeout: TTL, acquireAttemptsLimit: 1, refreshInterval: 0 });
        await mutex.acquire();
        await mutex.release();
      },
    },
  ].map((c) => ({ ...c, close: () => [...fiveRedis, oneRedis].forEach((r) => r.disconnect()) }));
}

/** `tasks` loops of cycles on keys of their own for `ms`: the cycles done
 * and the process CPU (µs) they took. */
async function run(client, tasks, ms, label) {
  let stop = false;
  let cycles = 0;
  let failed = 0;
  let lastError;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const loops = Array.from({ length: tasks }, async (_, i) => {
    const key = `bench:node:${label}:${i}`;
    while (!stop) {
      try {
        await client.cycle(key);
        cycles++;
      } catch (e) {
        // A cycle that failed (a node timeout on a loaded machine) is not
        // counted; a client that fails every cycle is an error.
        failed++;
        lastError = e;
        if (failed > 100 && failed > cycles) {
          stop = true;
        }
      }
    }
  });
  await new Promise((r) => setTimeout(r, ms));
  stop = true;
  const done = cycles;
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  await Promise.all(loops);
  if (failed > 100 && failed > cycles) {
    throw new Error(`${client.client} on ${client.nodes} node(s): ${failed} failed cycles: ${lastError}`);
  }
  return { cycles: done, seconds: elapsed, cpuUs: cpu.user + cpu.system, failed };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const clients = makeClients();
const results = new Map();
for (let round = 0; round < rounds; round++) {
  for (const tasks of TASKS) {
    // Interleaved: every client measured under the same machine load.
    for (const [n, client] of clients.entries()) {
      const label = `${n}:${tasks}`;
      await run(client, tasks, warmup, label);
      const r = await run(client, tasks, window, label);
      const key = `${n}:${tasks}`;
      if (!results.has(key)) results.set(key, { client, tasks, rates: [], cpus: [], cycles: 0, failed: 0 });
      const entry = results.get(key);
      entry.failed += r.failed;
      entry.rates.push(r.cycles / r.seconds);
      entry.cpus.push(r.cpuUs / Math.max(1, r.cycles));
      entry.cycles += r.cycles;
    }
  }
}
for (const { client, tasks, rates, cpus, cycles, failed } of results.values()) {
  console.log(
    JSON.stringify({
      client: client.client,
      nodes: client.nodes,
      tasks,
      cyclesPerSec: median(rates),
      cpuUsPerCycle: median(cpus),
      cycles,
      failed,
    }),
  );
}
clients[0].close();
process.exit(0);
