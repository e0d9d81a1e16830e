// Servers for the tests: $REDIS_LOCK_SERVER (default redis-server) with the
// module $REDIS_LOCK_MODULE (default target/release/libredis_lock.so) loaded,
// on free loopback ports, always stopped (the test's `after`, and a kill of
// every one still running when the process exits).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const SERVER = process.env.REDIS_LOCK_SERVER || "redis-server";
export const MODULE = process.env.REDIS_LOCK_MODULE || path.join(ROOT, "target/release/libredis_lock.so");

const running = new Set();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// --- a minimal RESP client (for checks from outside the package) ---------

function encode(args) {
  const parts = [`*${args.length}\r\n`];
  for (const a of args) {
    const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
    parts.push(`$${b.length}\r\n`, b, "\r\n");
  }
  return Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p))));
}

/** Parses one reply at `buf[i..]`: [value, next] or null when incomplete. */
function parse(buf, i = 0) {
  if (i >= buf.length) return null;
  const end = buf.indexOf("\r\n", i);
  if (end < 0) return null;
  const type = String.fromCharCode(buf[i]);
  const line = buf.toString("utf8", i + 1, end);
  const next = end + 2;
  switch (type) {
    case "+":
      return [line, next];
    case "-":
      return [new Error(line), next];
    case ":":
      return [BigInt(line), next];
    case "$": {
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString("utf8", next, next + n), next + n + 2];
    }
    case "*": {
      const n = Number(line);
      if (n < 0) return [null, next];
      const items = [];
      let at = next;
      for (let k = 0; k < n; k++) {
        const r = parse(buf, at);
        if (!r) return null;
        items.push(r[0]);
        at = r[1];
      }
      return [items, at];
    }
    default:
      throw new Error(`unexpected RESP type ${type}`);
  }
}

/** One command to 127.0.0.1:port on a connection of its own; the reply
 * (an error reply as an Error value, not thrown). */
export function command(port, ...args) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    socket.setTimeout(5000, () => socket.destroy(new Error(`no reply from ${port}`)));
    socket.on("connect", () => socket.write(encode(args)));
    socket.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      const r = parse(buf);
      if (r) {
        socket.end();
        resolve(r[0]);
      }
    });
    socket.on("error", reject);
  });
}

export async function waitUntil(predicate, timeoutMs = 20_000, what = "condition") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`${what} not reached in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export class Server {
  constructor(port, dir, extra) {
    this.port = port;
    this.dir = dir;
    this.extra = extra;
    this.binary = SERVER;
    this.child = null;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts (or restarts, on the same port and directory) the server. */
  async start() {
    if (!existsSync(MODULE)) {
      throw new Error(`module not built: ${MODULE} (cargo build --release -p redis-lock)`);
    }
    const log = path.join(this.dir, `server-${this.port}.log`);
    const args = [
      "--port", String(this.port), "--bind", "127.0.0.1", "--loadmodule", MODULE,
      "--save", "", "--dir", this.dir, "--logfile", log, ...this.extra,
    ];
    if (!this.extra.includes("--appendonly")) args.push("--appendonly", "no");
    this.child = spawn(this.binary, args, { stdio: "ignore" });
    running.add(this.child);
    const child = this.child;
    child.on("exit", () => running.delete(child));
    await waitUntil(async () => {
      if (child.exitCode !== null) {
        const text = existsSync(log) ? readFileSync(log, "utf8").slice(-2000) : "";
        throw new Error(`server did not start: ${text}`);
      }
      try {
        return (await command(this.port, "PING")) === "PONG";
      } catch {
        return false;
      }
    }, 20_000, `server on ${this.port}`);
    return this;
  }

  /** kill -9, and wait until it is gone. */
  async kill() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
  }
}

/** A set of servers for one test file; `stopAll()` in its `after`. */
export class Servers {
  constructor() {
    this.dir = mkdtempSync(path.join(tmpdir(), "redislock-node-"));
    this.list = [];
  }
  async start(n = 1, extra = []) {
    const made = [];
    for (let i = 0; i < n; i++) {
      const dir = mkdtempSync(path.join(this.dir, "s-"));
      const server = new Server(await freePort(), dir, extra);
      this.list.push(server);
      made.push(server);
    }
    await Promise.all(made.map((s) => s.start()));
    return made;
  }
  async stopAll() {
    await Promise.all(this.list.map((s) => s.kill()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
