// A Redis Cluster of three module-loaded masters (one logical node: FIFO
// waiting on the server, fencing); and TLS with a private CA made here.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, test } from "node:test";

import { Redlock } from "redislock-native";
import { command, freePort, Server, Servers, waitUntil } from "./servers.mjs";

const servers = new Servers();
after(() => servers.stopAll());

test("a Redis Cluster as the lock service", async () => {
  const nodes = await servers.start(3, ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"]);
  // Slots split in three, then the nodes meet.
  const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
  for (const [i, node] of nodes.entries()) {
    const [from, to] = ranges[i];
    assert.equal(await command(node.port, "CLUSTER", "ADDSLOTSRANGE", String(from), String(to)), "OK");
  }
  for (const node of nodes.slice(1)) {
    assert.equal(await command(node.port, "CLUSTER", "MEET", "127.0.0.1", String(nodes[0].port)), "OK");
  }
  for (const node of nodes) {
    await waitUntil(async () => {
      const info = await command(node.port, "CLUSTER", "INFO");
      return info.includes("cluster_state:ok") && info.includes("cluster_known_nodes:3");
    }, 30_000, `cluster ok on ${node.port}`);
  }
  const rl = new Redlock([nodes[0].url], { ttl: 10_000, nodeTimeout: 1_000, cluster: true });
  assert.equal(rl.quorum, 1);
  const keys = ["a", "b", "c", "orders:1", "orders:2", "orders:3"];
  const tokens = [];
  for (const key of keys) {
    const lock = await rl.lock(key);
    assert.equal(await rl.tryLock(key), null);
    tokens.push(await lock.token());
    await lock.release();
  }
  assert.ok(tokens.every((t) => typeof t === "bigint" && t > 0n));
  // Waiting on the server: the second waiter gets the lock when it is freed.
  const holder = await rl.lock("orders:9");
  const waiter = rl.lock("orders:9", { wait: 20_000 });
  await waitUntil(async () => {
    for (const node of nodes) {
      const info = await command(node.port, "LOCK.INFO", "orders:9");
      if (Array.isArray(info) && info[info.indexOf("waiters") + 1] === 1n) return true;
    }
    return false;
  }, 10_000, "waiter queued on the shard");
  const t1 = await holder.token();
  await holder.release();
  const next = await waiter;
  assert.ok((await next.token()) > t1);
  await next.release();
});

test("TLS nodes with a private CA", async (t) => {
  const binary = process.env.REDIS_LOCK_TLS_SERVER || process.env.REDIS_LOCK_SERVER || "redis-server";
  const dir = servers.dir;
  const openssl = (...args) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=redislock test CA");
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
  writeFileSync(path.join(dir, "san.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n");
  openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext");
  const tlsPort = await freePort();
  const server = new Server(await freePort(), dir, [
    "--tls-port", String(tlsPort),
    "--tls-cert-file", path.join(dir, "server.crt"),
    "--tls-key-file", path.join(dir, "server.key"),
    "--tls-ca-cert-file", path.join(dir, "ca.crt"),
    "--tls-auth-clients", "no",
  ]);
  server.binary = binary;
  servers.list.push(server);
  await server.start();
  const ca = readFileSync(path.join(dir, "ca.crt"), "utf8");
  const rl = new Redlock([`rediss://127.0.0.1:${tlsPort}`], { ttl: 10_000, nodeTimeout: 2_000, tls: { ca } });
  const lock = await rl.lock("tls:1");
  const token = await lock.token();
  const held = await command(server.port, "LOCK.INFO", "tls:1");
  assert.equal(held[held.indexOf("owner") + 1], lock.owner, "held on the node, seen over plain TCP");
  assert.equal(held[held.indexOf("token") + 1], token);
  await lock.release();
  assert.equal(await command(server.port, "EXISTS", "tls:1"), 0n);
  // Without the CA the node's certificate is refused: not acquired.
  const untrusting = new Redlock([`rediss://127.0.0.1:${tlsPort}`], { ttl: 10_000, nodeTimeout: 2_000, retryCount: 0 });
  await assert.rejects(untrusting.lock("tls:1"), (e) => e.code === "NOT_ACQUIRED" || e.code === "NODE_ERROR");
});
