// Redlock over three module-loaded masters: fencing tokens across a quorum
// and a restart, the watchdog past three TTLs, loss signalled (AbortSignal
// and event, no unhandled rejection) when a majority is killed.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { LockLostError, Redlock } from "redislock-native";
import { command, Servers, waitUntil } from "./servers.mjs";

const servers = new Servers();
after(() => servers.stopAll());

const unhandled = [];
process.on("unhandledRejection", (e) => unhandled.push(e));

describe("three masters", () => {
  test("tokens grow across holders whose majorities differ, and across a restart", async () => {
    const nodes = await servers.start(3, ["--appendonly", "yes", "--appendfsync", "always"]);
    const rl = new Redlock(nodes.map((s) => s.url), { ttl: 10_000, nodeTimeout: 1_000 });
    assert.equal(rl.quorum, 2);
    // Push one node's counter far ahead: the next holder's token must pass it.
    const a = await rl.lock("fence:q");
    const ta = await a.token();
    await a.release();
    for (let i = 0; i < 20; i++) {
      assert.equal(typeof (await command(nodes[0].port, "LOCK.ACQUIRE", "fence:q", `other-${i}`, "10000")), "bigint");
      // The reply is the holds left.
      assert.equal(await command(nodes[0].port, "LOCK.RELEASE", "fence:q", `other-${i}`), 0n);
    }
    const b = await rl.lock("fence:q");
    const tb = await b.token();
    assert.ok(tb > ta, `${tb} > ${ta}`);
    await b.release();
    // Node 0 restarts from its AOF; node 1 is down: the majority is 0 and 2.
    await nodes[0].kill();
    await nodes[0].start();
    await nodes[1].kill();
    const c = await rl.lock("fence:q", { wait: 20_000 });
    const tc = await c.token();
    assert.ok(tc > tb, `${tc} > ${tb} after the restart`);
    await c.release();
    await nodes[1].start();
  });

  test("an abort during Redlock retries leaves no grant behind", async () => {
    const nodes = await servers.start(3);
    // Another owner holds two of the three nodes: every attempt wins only
    // the third, and retries until the abort.
    for (const node of nodes.slice(0, 2)) {
      assert.equal(typeof (await command(node.port, "LOCK.ACQUIRE", "contended", "other", "60000")), "bigint");
    }
    const rl = new Redlock(nodes.map((s) => s.url), { ttl: 10_000, nodeTimeout: 1_000, retryDelay: 20, retryJitter: 20 });
    const controller = new AbortController();
    const pending = rl.lock("contended", { wait: 60_000, signal: controller.signal });
    await waitUntil(async () => (await command(nodes[2].port, "EXISTS", "contended")) === 1n, 10_000, "a partial grant");
    controller.abort();
    await assert.rejects(pending, (e) => e.code === "ABORTED");
    await waitUntil(async () => (await command(nodes[2].port, "EXISTS", "contended")) === 0n, 10_000, "the partial grant released");
    for (const node of nodes.slice(0, 2)) {
      const info = await command(node.port, "LOCK.INFO", "contended");
      assert.equal(info[info.indexOf("owner") + 1], "other", "the other owner's holds untouched");
    }
  });

  test("acknowledged grants: a grant counts once a replica has it", async () => {
    const [primary] = await servers.start(1);
    const [replica] = await servers.start(1, ["--replicaof", "127.0.0.1", String(primary.port)]);
    await waitUntil(async () => (await command(replica.port, "INFO", "replication")).includes("master_link_status:up"), 20_000, "replica in sync");
    const acked = new Redlock([primary.url], { ttl: 10_000, nodeTimeout: 2_000, acknowledge: { replicas: 1, timeout: 1_000 } });
    const lock = await acked.lock("acked");
    // Acknowledged: the replica has the grant when the lock is returned.
    const info = await command(replica.port, "LOCK.INFO", "acked");
    assert.equal(info[info.indexOf("owner") + 1], lock.owner);
    await lock.release();
    // Two replicas asked, one there: the grant never counts.
    const unmet = new Redlock([primary.url], { ttl: 10_000, nodeTimeout: 2_000, retryCount: 0, acknowledge: { replicas: 2, timeout: 200 } });
    await assert.rejects(unmet.lock("acked"), (e) => e.code === "NOT_ACQUIRED" || e.code === "NODE_ERROR");
  });

  test("the watchdog keeps a lock past three TTLs; a killed majority aborts its signal", async () => {
    const nodes = await servers.start(3);
    const rl = new Redlock(nodes.map((s) => s.url), { ttl: 2_000, nodeTimeout: 300 });
    const events = [];
    rl.on("lost", (error, lock) => events.push([error, lock]));
    const lock = await rl.lock("wd", { watchdog: true });
    const lockEvents = [];
    lock.on("lost", (e) => lockEvents.push(e));
    // A listener's bug does not end the process (it becomes a warning).
    const warnings = [];
    const onWarning = (w) => warnings.push(w);
    process.on("warning", onWarning);
    lock.on("lost", () => {
      throw new Error("listener bug");
    });
    const started = Date.now();
    await waitUntil(() => Date.now() - started > 3 * 2_000 + 500, 20_000, "three TTLs");
    assert.ok(lock.isHeld && !lock.isLost && !lock.signal.aborted, "renewed past three TTLs");
    assert.equal(await rl.tryLock("wd"), null);
    // Kill a majority: the loss is signalled, before the validity ends.
    await nodes[0].kill();
    await nodes[1].kill();
    await waitUntil(() => lock.signal.aborted, 10_000, "loss signal");
    assert.ok(lock.signal.reason instanceof LockLostError);
    assert.ok(lock.isLost && !lock.isHeld);
    await waitUntil(() => events.length === 1 && lockEvents.length === 1, 5_000, "lost events");
    assert.equal(events[0][1], lock);
    assert.ok(events[0][0].outcomes.length > 0, "per-node detail");
    await waitUntil(() => warnings.some((w) => /listener bug/.test(w.message)), 5_000, "the warning");
    process.off("warning", onWarning);
    await lock.releaseAll();
    await Promise.all([nodes[0].start(), nodes[1].start()]);
  });

  test("using(): the work's signal aborts on loss and the call rejects with LockLostError", async () => {
    const nodes = await servers.start(3);
    const rl = new Redlock(nodes.map((s) => s.url), { ttl: 2_000, nodeTimeout: 300 });
    // Work that finishes: its value, and the lock is free afterwards.
    const value = await rl.using("job", async (signal, lock) => {
      assert.ok(!signal.aborted && lock.isHeld);
      return 42;
    });
    assert.equal(value, 42);
    assert.ok(await rl.tryLock("job").then((l) => l?.release()));
    // Work that outlives the lock: its rejection after the loss is handled.
    let sawAbort = false;
    const run = rl.using("job", (signal) =>
      new Promise((_, reject) => {
        signal.addEventListener("abort", () => {
          sawAbort = true;
          setTimeout(() => reject(new Error("work stopped")), 10);
        });
      }),
    );
    await waitUntil(async () => (await command(nodes[2].port, "EXISTS", "job")) === 1n, 10_000, "held");
    await nodes[0].kill();
    await nodes[1].kill();
    await assert.rejects(run, LockLostError);
    assert.ok(sawAbort);
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(unhandled, [], "no unhandled rejection");
  });
});
