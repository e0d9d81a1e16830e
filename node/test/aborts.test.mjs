// Aborts of concurrent acquisitions on one handle, and worker threads (from the
// adversarial review of the completion queue, NativeHub).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Worker } from "node:worker_threads";

import { AbortError, Redlock } from "redislock-native";
import { command, Servers, waitUntil } from "./servers.mjs";

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
});
