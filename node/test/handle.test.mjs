// The handle's own bookkeeping, on one module-loaded lock node and a second
// server as the store of fenced writes: one client whatever the waits, a
// handle re-watched after a release that raced a fenced write, a store that
// reconnects, nothing left held when the watchdog or the token cannot be
// set up, and `lock.token` as a synchronous bigint.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { AbortError, Lock, LockExpiredError, NotHeldError, Redlock, TokenPendingError } from "redislock-native";
import { command, Servers, waitUntil } from "./servers.mjs";

const servers = new Servers();
let server;
let store;
before(async () => {
  [server, store] = await servers.start(2);
});
after(() => servers.stopAll());

/** Clients connected to `port`, this check's own connection excluded. */
async function connections(port) {
  const list = await command(port, "CLIENT", "LIST");
  return list.split("\n").filter((line) => line.trim() !== "").length - 1;
}

/** The lease left on the node (LOCK.INFO's pttl), ms; -1 when free. */
async function pttl(key) {
  const info = await command(server.port, "LOCK.INFO", key);
  return Array.isArray(info) ? Number(info[info.indexOf("pttl") + 1]) : -1;
}

describe("handles", () => {
  test("distinct waits share one client: the connections do not grow", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const first = await rl.lock("waits:0", { wait: 1_000 });
    await first.release();
    const before = await connections(server.port);
    for (let i = 1; i <= 20; i++) {
      // Each a wait of its own: before the fix, a client (and a connection) each.
      const lock = await rl.lock(`waits:${i}`, { wait: 1_000 + i });
      await lock.release();
    }
    const afterwards = await connections(server.port);
    assert.ok(afterwards - before <= 2, `connections ${before} -> ${afterwards} after 20 distinct waits`);
    // The wait still bounds the acquisition.
    const holder = await rl.lock("waits:busy");
    await assert.rejects(rl.lock("waits:busy", { wait: 300 }), (e) => e.code === "NOT_ACQUIRED");
    await holder.release();
  });

  test("a release racing a fenced write: the next hold is watched again", async () => {
    const rl = new Redlock([server.url], { ttl: 3_000, nodeTimeout: 1_000, store: store.url });
    const lock = rl.handle("rewatch");
    await lock.acquire();
    lock.watch();
    // The token and the store's connection are ready: the next write goes
    // straight to the store, where it waits out the pause.
    assert.equal(await lock.fenced("fence:rewatch", ["SET", "rewatch", "1"]), "OK");
    assert.equal(await command(store.port, "CLIENT", "PAUSE", "1500", "WRITE"), "OK");
    const write = lock.fenced("fence:rewatch", ["SET", "rewatch", "2"]).catch((e) => e);
    // The write is in flight (the store holds it) while the lock is released.
    await waitUntil(async () => (await command(store.port, "CLIENT", "LIST")).includes("cmd=lock.fenced"), 1_000, "write held by the store");
    assert.equal((await lock.release()).holdsLeft, 0);
    await write;
    // The handle is reused: a new hold, handed to the watchdog again.
    await lock.acquire();
    lock.watch();
    let low = await pttl("rewatch");
    // Renewed within a TTL (every ttl/3): the key's PTTL goes back up.
    await waitUntil(async () => {
      const now = await pttl("rewatch");
      if (now > low + 200) return true;
      low = Math.min(low, now);
      return false;
    }, 2_500, "a renewal of the new hold");
    assert.ok(lock.isHeld);
    await lock.release();
  });

  test("an acquire aborted while it stops an earlier hold's watchdog leaves the handle usable", async () => {
    const rl = new Redlock([server.url], { ttl: 3_000, nodeTimeout: 1_000, store: store.url });
    const lock = rl.handle("unwatch-abort");
    // Each round leaves the handle with the watchdog of a released hold (a
    // release that raced a fenced write cannot stop it), then aborts an
    // acquire at once: the abort comes while that acquire stops the
    // watchdog. Before the fix the abort could drop it halfway, with the
    // handle out of its slot: every later operation was NotHeld.
    for (let round = 0; round < 10; round++) {
      await lock.acquire();
      lock.watch();
      assert.equal(await lock.fenced("fence:unwatch-abort", ["SET", "unwatch-abort", String(round)]), "OK");
      assert.equal(await command(store.port, "CLIENT", "PAUSE", "300", "WRITE"), "OK");
      const write = lock.fenced("fence:unwatch-abort", ["SET", "unwatch-abort", "x"]).catch((e) => e);
      await waitUntil(async () => (await command(store.port, "CLIENT", "LIST")).includes("cmd=lock.fenced"), 2_000, "write held by the store");
      assert.equal((await lock.release()).holdsLeft, 0);
      await write;
      const controller = new AbortController();
      const attempt = lock.acquire({ signal: controller.signal });
      controller.abort();
      const err = await attempt.then(() => null, (e) => e);
      assert.ok(err instanceof AbortError, `round ${round}: ${err}`);
      assert.equal(lock.holds, 0, `round ${round}: the aborted acquire holds nothing`);
      // The handle still works: a new hold, released.
      const again = await lock.acquire().catch((e) => e);
      assert.ok(!(again instanceof Error), `round ${round}: the handle after the abort: ${again}`);
      assert.ok(lock.isHeld);
      await lock.release();
    }
    assert.equal(await command(server.port, "EXISTS", "unwatch-abort"), 0n);
  });

  test("the store reconnects after its connection breaks", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000, store: store.url });
    const lock = await rl.lock("reconnect");
    assert.equal(await lock.fenced("fence:reconnect", ["SET", "reconnect", "1"]), "OK");
    // Every client of the store is disconnected (the package's among them).
    assert.ok((await command(store.port, "CLIENT", "KILL", "TYPE", "normal")) >= 1n);
    let failures = 0;
    await waitUntil(async () => {
      try {
        return (await lock.fenced("fence:reconnect", ["SET", "reconnect", "2"])) === "OK";
      } catch {
        failures++;
        return false;
      }
    }, 5_000, "a fenced write after the break");
    assert.ok(failures <= 1, `${failures} failed writes after the break`);
    assert.equal(await command(store.port, "GET", "reconnect"), "2");
    await lock.release();
  });

  test("a watchdog that cannot start leaves nothing held", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const watch = Lock.prototype.watch;
    Lock.prototype.watch = function () {
      throw new Error("injected watch failure");
    };
    try {
      await assert.rejects(rl.lock("watch-fails", { watchdog: true }), /injected watch failure/);
      await assert.rejects(rl.tryLock("watch-fails", { watchdog: true }), /injected watch failure/);
    } finally {
      Lock.prototype.watch = watch;
    }
    assert.equal(await command(server.port, "EXISTS", "watch-fails"), 0n, "released before the error");
  });

  test("lock.token: a bigint once fetched, never a missing fence", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const plain = await rl.lock("token:sync");
    assert.throws(() => plain.token, TokenPendingError);
    const fetched = await plain.fencingToken();
    assert.equal(plain.token, fetched);
    await plain.release();
    assert.throws(() => plain.token, NotHeldError);
    // { fenced: true }: there as soon as the lock is.
    const fenced = await rl.lock("token:sync", { fenced: true });
    assert.equal(typeof fenced.token, "bigint");
    assert.ok(fenced.token > fetched);
    const info = await command(server.port, "LOCK.INFO", "token:sync");
    assert.equal(info[info.indexOf("token") + 1], fenced.token, "the node's token, exactly");
    await fenced.release();
    // The client's default, and a new hold of the same handle.
    const always = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000, fenced: true });
    const again = await always.lock("token:sync");
    const first = again.token;
    await again.release();
    await again.acquire();
    assert.throws(() => again.token, TokenPendingError, "a new hold's token is fetched again");
    assert.ok((await again.fencingToken()) > first);
    await again.release();
    // A hold whose validity ended (left to lapse): its token is refused.
    const short = await rl.lock("token:lapse", { ttl: 2_000, fenced: true });
    assert.equal(typeof short.token, "bigint");
    const until = Date.now() + 10_000;
    while (short.validity !== null && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(short.validity, null, "the validity never ended");
    assert.throws(() => short.token, LockExpiredError);
  });
});
