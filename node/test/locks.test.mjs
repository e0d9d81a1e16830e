// One module-loaded server: the Promise API, re-entry, FIFO waiting,
// read-write and semaphore rules, fencing tokens and fenced writes,
// AbortSignal cancellation, `await using`, errors. Node timeouts are 1 s (the
// default 100 ms is tight for a first connection on a loaded 2-core CI).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AbortError,
  ConfigError,
  LockLostError,
  LockNotAcquiredError,
  NotHeldError,
  Redlock,
  RedisLockError,
  StaleTokenError,
  StoreError,
} from "redislock-native";
import { command, Servers, waitUntil } from "./servers.mjs";

const servers = new Servers();
let server;
before(async () => {
  [server] = await servers.start(1);
});
after(() => servers.stopAll());

async function info(key) {
  const reply = await command(server.port, "LOCK.INFO", key);
  if (reply === null) return null;
  const out = {};
  for (let i = 0; i + 1 < reply.length; i += 2) out[reply[i]] = reply[i + 1];
  return out;
}

describe("single node", () => {
  test("lock, token, release", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const lock = await rl.lock("orders:1001");
    assert.ok(lock.isHeld);
    assert.equal(lock.holds, 1);
    assert.ok(lock.validity > 9_000 && lock.validity <= 10_000, `validity ${lock.validity}`);
    const token = await lock.fencingToken();
    assert.equal(typeof token, "bigint");
    assert.equal(await lock.fencingToken(), token, "stable within a hold");
    const held = await info("orders:1001");
    assert.equal(held.owner, lock.owner);
    assert.equal(held.token, token, "the node's token, exactly");
    const released = await lock.release();
    assert.equal(released.holdsLeft, 0);
    assert.equal(released.lapsed, false);
    assert.ok(!lock.isHeld);
    assert.equal(await command(server.port, "EXISTS", "orders:1001"), 0n);
    await assert.rejects(lock.release(), NotHeldError);
    await assert.rejects(lock.extend(), (e) => e instanceof NotHeldError && e.code === "NOT_HELD" && /acquire it first/.test(e.message));
  });

  test("tryLock returns null while held elsewhere; `await using` releases", async () => {
    // Node 20 has no `await using` syntax: TypeScript compiles it (to the
    // Symbol.asyncDispose protocol), as it does for a user's TS code.
    const ts = (await import("typescript")).default;
    const source = `
      export async function run(rl, seen) {
        {
          await using lock = await rl.lock("scoped");
          seen.push(lock.isHeld, await rl.tryLock("scoped"));
        }
        const again = await rl.tryLock("scoped");
        seen.push(again?.isHeld);
        await again.release();
      }`;
    const js = ts.transpileModule(source, {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
    }).outputText;
    const { run } = await import(`data:text/javascript,${encodeURIComponent(js)}`);
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const seen = [];
    await run(rl, seen);
    assert.deepEqual(seen, [true, null, true]);
  });

  test("tokens increase across holders", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const tokens = [];
    for (let i = 0; i < 5; i++) {
      const lock = await rl.lock("fenced-seq");
      tokens.push(await lock.fencingToken());
      await lock[Symbol.asyncDispose]();
      assert.equal(lock.holds, 0);
    }
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `${tokens}`);
  });

  test("re-entry adds holds; inner releases stay local", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const lock = await rl.lock("nested");
    const again = await lock.acquire();
    assert.equal(again.holds, 2);
    assert.equal(lock.holds, 2);
    assert.equal((await lock.release()).holdsLeft, 1);
    assert.ok(lock.isHeld);
    assert.equal(await rl.tryLock("nested"), null);
    assert.equal((await lock.release()).holdsLeft, 0);
    const other = await rl.tryLock("nested");
    assert.ok(other);
    await other.release();
  });

  test("waiters are served first come, first served", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const holder = await rl.lock("fifo");
    const order = [];
    const waiting = [];
    for (let i = 0; i < 3; i++) {
      waiting.push(
        rl.lock("fifo", { wait: 20_000 }).then(async (lock) => {
          order.push(i);
          await lock.release();
        }),
      );
      // The next one queues only after this one is queued.
      await waitUntil(async () => (await info("fifo"))?.waiters === BigInt(i + 1), 10_000, `waiter ${i} queued`);
    }
    await holder.release();
    await Promise.all(waiting);
    assert.deepEqual(order, [0, 1, 2]);
  });

  test("the event loop runs while an acquisition waits", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const holder = await rl.lock("loop");
    let settled = false;
    const waiter = rl.lock("loop", { wait: 30_000 }).finally(() => {
      settled = true;
    });
    await waitUntil(async () => (await info("loop"))?.waiters === 1n, 10_000, "waiter queued");
    // Timers and other sockets are served while the waiter waits (the wait
    // runs on the addon's runtime, not on this thread).
    for (let i = 0; i < 20; i++) {
      await new Promise((r) => setTimeout(r, 1));
      assert.equal(await command(server.port, "PING"), "PONG");
    }
    assert.equal(settled, false, "still waiting");
    await holder.release();
    await (await waiter).release();
  });

  test("wait runs out with LockNotAcquiredError and per-node detail", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const holder = await rl.lock("busy");
    const err = await rl.lock("busy", { wait: 300 }).then(
      () => assert.fail("acquired a held lock"),
      (e) => e,
    );
    assert.ok(err instanceof LockNotAcquiredError, String(err));
    assert.ok(err instanceof RedisLockError);
    assert.equal(err.code, "NOT_ACQUIRED");
    assert.match(err.message, /wait longer/);
    await holder.release();
  });

  test("read locks share, a writer excludes them", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const r1 = await rl.readLock("report");
    const r2 = await rl.readLock("report");
    assert.ok(r1.isHeld && r2.isHeld);
    assert.equal(await rl.tryLock("report"), null, "no writer while readers hold it");
    const writer = rl.lock("report", { wait: 20_000 });
    await waitUntil(async () => (await info("report"))?.waiters === 1n, 10_000, "writer queued");
    await r1.release();
    await r2.release();
    const w = await writer;
    assert.ok(w.isHeld);
    await w.release();
  });

  test("a semaphore gives at most n permits", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const api = rl.semaphore("api", 3);
    const permits = [await api.permit(), await api.permit(), await api.permit()];
    assert.ok(permits.every((p) => p.isHeld));
    assert.equal(await api.tryPermit(), null, "a fourth permit");
    const tokens = await Promise.all(permits.map((p) => p.fencingToken()));
    assert.equal(new Set(tokens).size, 3, "each permit a token of its own");
    await permits[0].release();
    const fourth = await api.tryPermit();
    assert.ok(fourth?.isHeld);
    for (const p of [...permits.slice(1), fourth]) await p.release();
    await assert.rejects(
      rl.semaphore("api", 3).permit().then(() => rl.semaphore("api", 4).tryPermit()),
      (e) => e instanceof RedisLockError,
      "another number of permits is refused",
    );
    assert.throws(() => rl.semaphore("api", 0), ConfigError);
  });

  test("an abort while waiting leaves nothing held", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const holder = await rl.lock("abort-me");
    const controller = new AbortController();
    const waiter = rl.lock("abort-me", { wait: 30_000, signal: controller.signal });
    await waitUntil(async () => (await info("abort-me"))?.waiters === 1n, 10_000, "waiter queued");
    const reason = new Error("user gave up");
    controller.abort(reason);
    const err = await waiter.then(() => assert.fail("acquired after abort"), (e) => e);
    assert.ok(err instanceof AbortError, String(err));
    assert.equal(err.code, "ABORTED");
    assert.equal(err.cause, reason);
    await waitUntil(async () => (await info("abort-me"))?.waiters === 0n, 10_000, "waiter gone");
    await holder.release();
    // Nobody holds it now: the aborted waiter was not granted on release.
    await waitUntil(async () => (await command(server.port, "EXISTS", "abort-me")) === 0n, 10_000, "lock free");
    // An already aborted signal: nothing is sent.
    await assert.rejects(rl.lock("abort-me", { signal: AbortSignal.abort() }), AbortError);
    assert.equal(await command(server.port, "EXISTS", "abort-me"), 0n);
  });

  test("many acquires, some aborted mid-flight: every grant is released or held by a live task", async () => {
    // The grants come back through one completion queue that wakes Node's
    // loop once for many outcomes: each must reach its own promise (two
    // clients share the queue), an abort at any moment (queued on the node,
    // granted but not yet delivered, delivered) must give back what was
    // granted, and nothing may stay held until the TTL (60 s).
    const clients = [0, 1].map(() => new Redlock([server.url], { ttl: 60_000, nodeTimeout: 2_000 }));
    const KEYS = 8;
    const TASKS = 240;
    const keys = Array.from({ length: KEYS }, (_, k) => `delivery:${k}`);
    const inside = new Set();
    let violations = 0;
    let granted = 0;
    let aborted = 0;
    const wrong = [];
    const tasks = Array.from({ length: TASKS }, async (_, i) => {
      const key = keys[i % KEYS];
      const controller = new AbortController();
      // Two tasks in three are aborted after 0-30 ms, mid-flight.
      const timer = i % 3 === 0 ? undefined : setTimeout(() => controller.abort(), (i * 7) % 31);
      let lock;
      try {
        lock = await clients[i % 2].lock(key, { wait: 30_000, signal: controller.signal });
      } catch (e) {
        if (!(e instanceof AbortError)) wrong.push(`task ${i}: ${e}`);
        aborted++;
        return;
      } finally {
        clearTimeout(timer);
      }
      granted++;
      if (inside.has(key)) violations++;
      inside.add(key);
      // The node agrees that this handle holds it.
      const held = await info(key);
      if (!lock.isHeld || held?.owner !== lock.owner) wrong.push(`task ${i}: granted, but the node's holder is ${held?.owner}, not ${lock.owner}`);
      await new Promise((r) => setTimeout(r, i % 3));
      inside.delete(key);
      const released = await lock.release();
      if (released.holdsLeft !== 0 || released.released !== 1) wrong.push(`task ${i}: release ${JSON.stringify(released)}`);
    });
    await Promise.all(tasks);
    assert.deepEqual(wrong, []);
    assert.equal(violations, 0, "two holders of one key at once");
    assert.equal(granted + aborted, TASKS);
    assert.ok(granted >= TASKS / 3 && aborted > 0, `granted ${granted}, aborted ${aborted}`);
    // Every key free long before the 60 s lease (an aborted grant is
    // released in the background), with no waiter left behind.
    await waitUntil(async () => {
      for (const key of keys) if ((await command(server.port, "EXISTS", key)) !== 0n) return false;
      return true;
    }, 10_000, "every key free");
  });

  test("fenced writes: the store refuses a stale holder", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const first = await rl.lock("lock:order:7");
    assert.equal(await first.fenced("fence:order:7", ["HSET", "order:7", "status", "paid"]), 1);
    // The first holder's lock passes on (as by a lease end or a failover).
    assert.equal(await command(server.port, "DEL", "lock:order:7"), 1n);
    const second = await rl.lock("lock:order:7");
    assert.ok((await second.fencingToken()) > (await first.fencingToken()));
    assert.equal(await second.fenced("fence:order:7", ["HSET", "order:7", "status", "shipped"], server.url), 0);
    const stale = await first.fenced("fence:order:7", ["HSET", "order:7", "status", "refunded"]).then(
      () => assert.fail("a stale write went through"),
      (e) => e,
    );
    assert.ok(stale instanceof StaleTokenError, String(stale));
    assert.equal(stale.code, "STALE");
    assert.equal(await command(server.port, "HGET", "order:7", "status"), "shipped");
    assert.equal(await command(server.port, "LOCK.FENCEGET", "fence:order:7"), await second.fencingToken());
    // The write's own error is a StoreError, not a stale token.
    await assert.rejects(second.fenced("fence:order:7", ["NOSUCHCOMMAND"]), (e) => e instanceof StoreError && !(e instanceof StaleTokenError));
    await assert.rejects(second.fenced("fence:order:7", []), ConfigError);
    await second.release();
    // Without a hold nothing is sent.
    await assert.rejects(second.fenced("fence:order:7", ["HSET", "order:7", "status", "lost"]), NotHeldError);
    assert.equal(await command(server.port, "HGET", "order:7", "status"), "shipped");
  });

  test("extend and validity", async () => {
    const rl = new Redlock([server.url], { ttl: 5_000, nodeTimeout: 1_000 });
    const lock = await rl.lock("lease");
    const extended = await lock.extend(20_000);
    assert.ok(extended.validity > 19_000 && extended.validity <= 20_000);
    assert.ok(lock.validity > 15_000);
    assert.ok((await lock.extend()).validity <= 5_000);
    await assert.rejects(lock.extend(-1), ConfigError);
    assert.equal(await command(server.port, "DEL", "lease"), 1n);
    const lost = await lock.extend().then(() => assert.fail("extended a deleted lock"), (e) => e);
    assert.ok(lost instanceof LockLostError, String(lost));
    assert.equal(lost.quorum, 1);
    assert.equal(lost.confirmed, 0);
    assert.ok(Array.isArray(lost.outcomes) && lost.outcomes[0].node.includes(String(server.port)));
  });

  test("bad settings are refused with ConfigError", () => {
    assert.throws(() => new Redlock([], {}), ConfigError);
    assert.throws(() => new Redlock(["not a url"]), ConfigError);
    assert.throws(() => new Redlock([server.url], { nodeTimeout: -5 }), ConfigError);
    assert.throws(() => new Redlock([server.url], { nodeTimeout: NaN }), ConfigError);
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    assert.throws(() => rl.handle("x", { ttl: 1 }), ConfigError, "a TTL below node timeout plus drift");
  });
});
