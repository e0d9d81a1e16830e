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
