// Mutual exclusion across processes: three Node processes take the same
// lock ten times each; no two are ever inside at once and no update is lost.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { command, Servers } from "./servers.mjs";

const servers = new Servers();
after(() => servers.stopAll());
const worker = path.join(path.dirname(fileURLToPath(import.meta.url)), "worker.mjs");

test("three processes, one holder at a time", async () => {
  const [server] = await servers.start(1);
  const run = () => promisify(execFile)(process.execPath, [worker, server.url, String(server.port), "10"], { timeout: 120_000 });
  const results = await Promise.all([run(), run(), run()]);
  const outs = results.map((r) => JSON.parse(r.stdout));
  assert.deepEqual(outs.map((o) => o.violations), [0, 0, 0]);
  assert.equal(await command(server.port, "GET", "xproc:total"), "30", "no lost update");
  const tokens = outs.flatMap((o) => o.tokens);
  assert.equal(new Set(tokens).size, 30, "every holder a token of its own");
});

test("a process whose only pending work is an acquisition stays alive until it settles", async () => {
  // The addon's completion callback does not keep Node's loop alive; the
  // package does while an operation is pending. The worker waits for a lock
  // held here for a second, with nothing else to keep it running: exiting
  // early would end it with an unsettled top-level await (exit code 13).
  const [server] = await servers.start(1);
  const { Redlock } = await import("redislock-native");
  const rl = new Redlock([server.url], { ttl: 10_000, nodeTimeout: 1_000 });
  const holder = await rl.lock("xproc");
  const child = promisify(execFile)(process.execPath, [worker, server.url, String(server.port), "1"], { timeout: 60_000 });
  await new Promise((r) => setTimeout(r, 1_000));
  await holder.release();
  const out = JSON.parse((await child).stdout);
  assert.equal(out.tokens.length, 1);
  assert.equal(out.violations, 0);
});
