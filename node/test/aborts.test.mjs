// Aborts of concurrent acquisitions on one handle, and worker threads (from the
// adversarial review of the completion queue, NativeHub).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Worker } from "node:worker_threads";

import { createRequire } from "node:module";

import { AbortError, Redlock, RedisLockError } from "redislock-native";
import { command, Servers, waitUntil } from "./servers.mjs";

// A test hook, in the CommonJS build only (not part of the ES module's names).
const { _failNextDrain } = createRequire(import.meta.url)("redislock-native");

const servers = new Servers();
let server;
before(async () => {
  [server] = await servers.start(1);
});
after(() => servers.stopAll());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe("review", () => {
  test("concurrent acquires on one handle, one signal aborted: every one rejects with AbortError while the lock is still held elsewhere", async () => {
    // Each acquire waits for its own ticket on the handle's one watch
    // channel (LockState.cancel): abort(t1) ... abort(tN) in one turn leave
    // only tN there, so a task that had not looked in between misses its
    // abort and keeps waiting (here until the holder releases, or `wait`).
    const rl = new Redlock([server.url], { ttl: 60_000, nodeTimeout: 1_000 });
    const holder = await rl.lock("rev:many-aborts");
    const handle = rl.handle("rev:many-aborts", { wait: 60_000 });
    const controller = new AbortController();
    const N = 10;
    const outcomes = [];
    const pending = Array.from({ length: N }, () =>
      handle.acquire({ signal: controller.signal }).then(() => outcomes.push("granted"), (e) => outcomes.push(e)),
    );
    // The first acquire waits on the server (the others queue on the handle).
    await waitUntil(async () => {
      const reply = (await command(server.port, "LOCK.INFO", "rev:many-aborts")) ?? [];
      const at = reply.indexOf("waiters");
      return at >= 0 && Number(reply[at + 1]) >= 1;
    }, 10_000, "a waiter on the server");
    controller.abort();
    // The holder keeps the lock for 20 s at most; every abort must have
    // settled long before (they take milliseconds when honoured).
    const settledWhileHeld = await waitUntil(async () => outcomes.length === N, 20_000, "every aborted acquire settled").then(() => true, () => false);
    const seen = outcomes.length;
    await holder.release();
    await Promise.all(pending);
    assert.ok(settledWhileHeld, `${seen} of ${N} aborted acquires settled while the lock was held elsewhere`);
    assert.ok(outcomes.every((o) => o instanceof AbortError), outcomes.map(String).join("; "));
    assert.equal(handle.holds, 0);
  });

  test("worker threads: each environment settles its own operations; a terminated worker leaves the main thread working", async () => {
    const code = `
      const { parentPort, workerData } = require("node:worker_threads");
      const { Redlock } = require(workerData.pkg);
      (async () => {
        const rl = new Redlock([workerData.url], { ttl: 10000, nodeTimeout: 1000 });
        let n = 0;
        for (let i = 0; i < 50; i++) {
          const lock = await rl.lock("rev:worker:" + workerData.i, { wait: 10000 });
          await lock.extend();
          await lock.release();
          n++;
        }
        parentPort.postMessage(n);
        if (workerData.hang) {
          // pending forever: the main thread terminates this worker
          await rl.lock("rev:worker:held", { wait: 60000 });
        }
      })().catch((e) => parentPort.postMessage("error: " + e));
    `;
    const pkg = new URL("../dist/index.js", import.meta.url).pathname;
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const held = await rl.lock("rev:worker:held");
    const run = (i, hang) =>
      new Promise((resolve, reject) => {
        const w = new Worker(code, { eval: true, workerData: { pkg, url: server.url, i, hang } });
        w.once("message", (m) => (hang ? w.terminate().then(() => resolve(m)) : resolve(m)));
        w.once("error", reject);
      });
    const results = await Promise.all([run(0, false), run(1, true), run(2, false), run(3, true)]);
    assert.deepEqual(results, [50, 50, 50, 50]);
    // The main thread's operations still settle.
    for (let i = 0; i < 20; i++) {
      const lock = await rl.lock("rev:worker:main");
      await lock.release();
    }
    await held.release();
  });

  test("an operation that panics in the addon rejects with a message that says so", async () => {
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const lock = rl.handle("rev:panic");
    const outcome = await Promise.race([
      lock._panicInAddon().then(() => "resolved", (e) => e),
      sleep(20_000).then(() => "still pending after 20 s"),
    ]);
    assert.ok(outcome instanceof RedisLockError, String(outcome));
    assert.equal(outcome.code, "RUNTIME");
    assert.match(outcome.message, /panicked in the addon \(the package's test hook panics here\)/);
    assert.doesNotMatch(outcome.message, /runtime shut down/);
    // The handle and the addon still work.
    await lock.acquire();
    await lock.release();
  });

  test("every outcome reaches its own promise with its own fields, failures among them", async () => {
    // Outcomes cross from the addon as flat records (8 numbers each) with
    // the failures' messages beside them; hundreds settled in one turn
    // share drains, so a record read at the wrong offset, or a message
    // taken by the wrong index, gives some promise another's outcome.
    const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
    const lock = rl.handle("rev:records");
    const cases = Array.from({ length: 300 }, (_, i) => {
      switch (i % 5) {
        case 0:
          return { kind: 1, fields: [i + 0.25, 0xffffffff - i, i], want: { validity: i + 0.25, holds: 0xffffffff - i, attempts: i } };
        case 1:
          return {
            kind: 2,
            fields: [i, i + 1, i + 2, i + 3, i + 4, 1],
            want: { holdsLeft: i, released: i + 1, notHeld: i + 2, failed: i + 3, quorum: i + 4, lapsed: true },
          };
        case 2:
          return { kind: 3, fields: [i / 8, i + 1, i + 2, i + 3], want: { validity: i / 8, confirmed: i + 1, notHeld: i + 2, quorum: i + 3 } };
        case 3:
          return { kind: 0, fields: [], error: `failure number ${i}` };
        default:
          return {
            kind: 2,
            fields: [0, 1, 0, 0, 1, 0],
            want: { holdsLeft: 0, released: 1, notHeld: 0, failed: 0, quorum: 1, lapsed: false },
          };
      }
    });
    const settled = await Promise.race([
      Promise.all(cases.map((c) => lock._settle(c.kind, c.fields, c.error).then((value) => ({ value }), (error) => ({ error })))),
      sleep(20_000).then(() => "still pending after 20 s"),
    ]);
    assert.ok(Array.isArray(settled), String(settled));
    settled.forEach((got, i) => {
      const c = cases[i];
      if (c.error !== undefined) {
        assert.ok(got.error instanceof RedisLockError, `case ${i}: ${JSON.stringify(got)}`);
        assert.equal(got.error.code, "RUNTIME");
        assert.match(got.error.message, new RegExp(`failure number ${i}(?![0-9])`), `case ${i}`);
      } else {
        assert.deepStrictEqual(got, { value: c.want }, `case ${i}`);
      }
    });
  });

  test("outcomes that cannot be handed to JavaScript reject their promises instead of leaving them pending", async () => {
    const rl = new Redlock([server.url], { ttl: 60_000, nodeTimeout: 1_000 });
    const lock = rl.handle("rev:drain-fails");
    const warned = new Promise((resolve) => process.once("warning", resolve));
    _failNextDrain();
    const outcome = await Promise.race([
      lock.acquire().then(() => "granted", (e) => e),
      sleep(20_000).then(() => "still pending after 20 s"),
    ]);
    assert.ok(outcome instanceof RedisLockError, String(outcome));
    assert.match(outcome.message, /could not be handed to JavaScript/);
    assert.match(String((await warned).message), /draining completions failed/);
    // The acquisition did succeed in the addon: release() frees the lock.
    assert.equal(lock.holds, 1);
    await lock.release();
    assert.equal(await command(server.port, "EXISTS", "rev:drain-fails"), 0n);
    // Later operations settle as usual.
    await lock.acquire();
    await lock.release();
  });
});
