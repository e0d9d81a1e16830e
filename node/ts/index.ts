// redislock-native: Redlock over redis-lock module nodes for Node.js.
//
// A thin TypeScript layer over the napi-rs addon (node/src/lib.rs), which
// runs redis-lock-client (the Rust client) on a tokio runtime: every lock
// rule (quorum, validity, drift, fencing write-back, re-entry, watchdog)
// lives there, and Node's event loop never waits on the network. This layer
// converts options, maps errors to classes, and turns cancellation and loss
// into AbortSignals and events.

import { EventEmitter } from "node:events";
import type * as Binding from "../native/binding";
import {
  AbortError,
  ConfigError,
  LockExpiredError,
  fromNative,
  LockLostError,
  LockNotAcquiredError,
  NodeOutcome,
  NotHeldError,
  TokenPendingError,
} from "./errors";

export * from "./errors";

// Explicit resource management (`await using`): define the symbol where the
// runtime lacks it (Node 18), as TypeScript's downlevel helpers expect.
if (typeof (Symbol as any).asyncDispose !== "symbol") {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("Symbol.asyncDispose") });
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
const native: typeof Binding = require("../native/binding.js");

/** What a node must confirm after it grants, extends or fences, before it
 * counts (asked in the same write as the command). */
export interface AcknowledgeOptions {
  /** Replicas that must have the write (`WAIT`). */
  replicas?: number;
  /** The node's own AOF fsync (`WAITAOF`; Redis 7.2+ or Valkey). */
  fsync?: boolean;
  /** Replicas that must have fsynced it. */
  replicaFsyncs?: number;
  /** How long to wait for the acknowledgements, ms (default 100). */
  timeout?: number;
}

/** TLS settings for rediss:// nodes: PEM text. */
export interface TlsOptions {
  /** The CA that signed the nodes' certificates. */
  ca?: string;
  /** A client certificate and its key (mutual TLS). */
  cert?: string;
  key?: string;
}

/** Client settings; every duration is in milliseconds. */
export interface RedlockOptions {
  /** Default lease length of locks (default 10 000). */
  ttl?: number;
  /** How long to wait for one node's reply (default 100). */
  nodeTimeout?: number;
  /** Retries after a failed attempt when no `wait` is given (default 3). */
  retryCount?: number;
  /** Base delay before a retry (default 200). */
  retryDelay?: number;
  /** Random extra delay up to this much (default 100). */
  retryJitter?: number;
  /** Overall acquire deadline when no `wait` is given. */
  acquireTimeout?: number;
  /** Clock drift allowance as a fraction of the TTL (default 0.01). */
  driftFactor?: number;
  /** Constant drift allowance (default 2). */
  driftMin?: number;
  /** How often the watchdog renews (default: a third of the TTL). */
  watchdogInterval?: number;
  /** How long before the validity ends the loss is signalled (default 10). */
  watchdogMargin?: number;
  acknowledge?: AcknowledgeOptions;
  /** The nodes are seeds of one Redis Cluster (one logical node). */
  cluster?: boolean;
  tls?: TlsOptions;
  /** The store of `lock.fenced` when none is passed (default: the only
   * node of a single-node client). */
  store?: string;
  /** Fetch every lock's fencing token as part of its acquisition, so that
   * `lock.token` is there at once (default false; see `LockOptions.fenced`). */
  fenced?: boolean;
}

/** Options of one acquisition. */
export interface LockOptions {
  /** Lease length, ms (default: the client's `ttl`). */
  ttl?: number;
  /** Wait up to this long for the lock, ms (retrying with Redlock; FIFO on
   * the server with one node or a cluster). */
  wait?: number;
  /** Abort the acquisition: nothing it was granted stays held. */
  signal?: AbortSignal;
  /** Renew the lease until released (the crate's watchdog); a loss aborts
   * `lock.signal` and emits `lost`. */
  watchdog?: boolean;
  /** Fetch the fencing token before the acquisition resolves (one more
   * round: the token is written back to a quorum), so that `lock.token` is
   * a `bigint` at once. Default: the Redlock's `fenced` option. */
  fenced?: boolean;
}

export interface Acquired {
  /** Time in which the lock is certainly held, ms. */
  validity: number;
  holds: number;
  attempts: number;
}

export interface Extended {
  validity: number;
  confirmed: number;
  notHeld: number;
  quorum: number;
}

export interface Released {
  holdsLeft: number;
  released: number;
  notHeld: number;
  failed: number;
  quorum: number;
  /** Fewer than a quorum can have held it when released: the work overran. */
  lapsed: boolean;
}

type Kind = "exclusive" | "shared" | "permit";

function call<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw fromNative(e);
  }
}

async function wrap<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  try {
    return await p;
  } catch (e) {
    throw fromNative(e, signal);
  }
}

// Acquire, extend and release settle through the addon's completion queue
// (NativeHub): each operation takes the id of its promise here and the
// native call returns at once; the addon queues the outcome and wakes Node's
// loop only when the queue was empty, and `drain` then settles every outcome
// queued by then, in completion order. (A native `async fn` settles each
// promise through a threadsafe function of its own: one wake-up of the loop
// per operation.)
interface Settle {
  resolve: (value: any) => void;
  reject: (error: unknown) => void;
}
const settles = new Map<number, Settle>();
let lastId = 0;
let hub: Binding.NativeHub | undefined;
// The hub's callback is weak: this timer keeps the process alive while an
// operation is pending (ref'd then), as an awaited promise expects.
let keepAlive: ReturnType<typeof setInterval> | undefined;

function theHub(): Binding.NativeHub {
  if (hub === undefined) {
    hub = new native.NativeHub(drain);
    keepAlive = setInterval(() => undefined, 0x7fffffff);
    keepAlive.unref();
  }
  return hub;
}

// A drain's records: RECORD numbers per finished operation (the addon's
// `record`): its promise's id, its kind, then the kind's fields.
const RECORD = 8;
const KIND_ERROR = 0;
const KIND_ACQUIRED = 1;
const KIND_RELEASED = 2;
const KIND_EXTENDED = 3;

/** The outcome in the record at `i`. */
function outcomeAt(r: number[], i: number): Acquired | Released | Extended {
  switch (r[i + 1]) {
    case KIND_ACQUIRED:
      return { validity: r[i + 2], holds: r[i + 3], attempts: r[i + 4] };
    case KIND_RELEASED:
      return {
        holdsLeft: r[i + 2],
        released: r[i + 3],
        notHeld: r[i + 4],
        failed: r[i + 5],
        quorum: r[i + 6],
        lapsed: r[i + 7] !== 0,
      };
    case KIND_EXTENDED:
      return { validity: r[i + 2], confirmed: r[i + 3], notHeld: r[i + 4], quorum: r[i + 5] };
    default:
      throw new Error(`an outcome of unknown kind ${r[i + 1]}`);
  }
}

function drain(): void {
  let records: number[];
  let errors: string[] = [];
  try {
    records = hub?.drain() ?? [];
    for (let i = 0; i < records.length; i += RECORD) {
      if (records[i + 1] === KIND_ERROR) {
        errors = hub?.errors() ?? [];
        break;
      }
    }
  } catch (e) {
    // Nothing may escape into the addon's callback. The outcomes taken
    // did not arrive (none is settled yet): the addon settles them again,
    // as errors (the next drain brings those).
    try {
      hub?.failDrained(String(e));
    } catch {
      // Nothing more to do: the warning says it.
    }
    process.emitWarning(`redislock-native: draining completions failed: ${String(e)}`, "RedisLockWarning");
    return;
  }
  for (let i = 0; i + RECORD <= records.length; i += RECORD) {
    const settle = settles.get(records[i]);
    if (settle === undefined) continue;
    settles.delete(records[i]);
    if (records[i + 1] === KIND_ERROR) {
      settle.reject(new Error(errors[records[i + 2]] ?? "the operation failed (its message was lost)"));
    } else {
      try {
        settle.resolve(outcomeAt(records, i));
      } catch (e) {
        settle.reject(e);
      }
    }
  }
  if (settles.size === 0) keepAlive?.unref();
}

/** Starts a native operation that settles promise `id` through the hub. */
function submit<T>(start: (id: number) => void): Promise<T> {
  lastId = lastId >= 0xffffffff ? 1 : lastId + 1;
  const id = lastId;
  return new Promise<T>((resolve, reject) => {
    // Settled in a later turn of the loop, never during this call.
    start(id);
    settles.set(id, { resolve, reject });
    if (settles.size === 1) keepAlive?.ref();
  });
}

function aborted(signal: AbortSignal): AbortError {
  return new AbortError("the acquisition was aborted; anything it was granted is released", signal.reason);
}

/** @internal Test hook: the next drain of the completion queue fails after
 * taking it, as a failed conversion to JavaScript values does. */
export function _failNextDrain(): void {
  theHub().failNextDrain();
}

/** A store of fenced writes: a Redis or Valkey with the module loaded. */
export class Store {
  /** @internal */
  readonly native: Binding.NativeStore;
  readonly url: string;
  constructor(url: string) {
    this.url = url;
    this.native = call(() => new native.NativeStore(url));
  }
}

let tickets = 0;

/**
 * One lock handle with its own owner id. Get one from `Redlock.lock`,
 * `tryLock`, `readLock`, `Semaphore.permit` or (not yet acquired)
 * `Redlock.handle`. `await using lock = ...` releases it at the block's end.
 *
 * Events: `lost` (a LockLostError) when the watchdog reports the loss.
 */
export class Lock extends EventEmitter {
  readonly #native: Binding.NativeLock;
  readonly #redlock: Redlock;
  // Made when `signal` is first asked for, or on a loss.
  #controller: AbortController | undefined;
  #watching = false;

  /** @internal */
  constructor(redlock: Redlock, handle: Binding.NativeLock) {
    super();
    this.#redlock = redlock;
    this.#native = handle;
  }

  /** The resource (the key on every node). */
  get resource(): string {
    return this.#native.resource;
  }
  /** This handle's owner id, the same on every node. */
  get owner(): string {
    return this.#native.owner;
  }
  /** Lease length, ms. */
  get ttl(): number {
    return this.#native.ttl;
  }
  /** Time left (ms) in which the lock is certainly held, or null. */
  get validity(): number | null {
    return this.#native.validity ?? null;
  }
  /** Held and certainly valid (under a watchdog: and no loss reported). */
  get isHeld(): boolean {
    return this.#native.isHeld;
  }
  /** The watchdog reported the loss, or the validity ended while held. */
  get isLost(): boolean {
    return this.#native.isLost;
  }
  /** Nested acquisitions not yet released (0: not held). */
  get holds(): number {
    return this.#native.holds;
  }
  /** Aborted (with a LockLostError) when the watchdog reports the loss. */
  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** Acquires the lock, or adds a hold when this handle holds it already
   * (re-entry). With `signal`, an abort rejects with AbortError and leaves
   * nothing held by this call. */
  async acquire(options: { signal?: AbortSignal; tryOnce?: boolean } = {}): Promise<Acquired> {
    const { signal, tryOnce = false } = options;
    if (signal?.aborted) throw aborted(signal);
    tickets = (tickets % 0xffffffff) + 1;
    const ticket = tickets;
    const onAbort = () => this.#native.abort(ticket);
    signal?.addEventListener("abort", onAbort, { once: true });
    let result: Acquired;
    try {
      result = await wrap(
        submit<Acquired>((id) => this.#native.acquire(tryOnce, ticket, id)),
        signal,
      );
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
    if (signal?.aborted) {
      // Granted as the abort came: give this hold back.
      await submit<Released>((id) => this.#native.release(false, id)).catch(() => undefined);
      throw aborted(signal);
    }
    if (result.holds === 1 && this.#controller?.signal.aborted) {
      this.#controller = undefined;
    }
    return result;
  }

  /** One attempt, no retry and no wait: true when acquired. */
  async tryAcquire(): Promise<boolean> {
    try {
      await this.acquire({ tryOnce: true });
      return true;
    } catch (e) {
      if (e instanceof LockNotAcquiredError) return false;
      throw e;
    }
  }

  /** @internal Test hook: an operation that panics in the addon. */
  _panicInAddon(): Promise<void> {
    return wrap(submit<void>((id) => this.#native.testPanic(id)));
  }

  /** @internal Test hook: an operation that settles through the addon's
   * runtime and completion queue with the outcome of `kind` (1 acquired,
   * 2 released, 3 extended) made of `fields`, or with `error`. */
  _settle(kind: number, fields: number[], error?: string): Promise<unknown> {
    return wrap(submit<unknown>((id) => this.#native.testSettle(id, kind, fields, error)));
  }

  /** @internal Bench hook: one operation through the addon's runtime and
   * completion queue that does no network work (`make bench` section 12's
   * floor). */
  _roundTrip(): Promise<unknown> {
    return wrap(submit<unknown>((id) => this.#native.benchRoundTrip(id)));
  }

  /** Renews the lease (to `ttl` ms if given) on every node still holding it. */
  extend(ttl?: number): Promise<Extended> {
    return wrap(submit<Extended>((id) => this.#native.extend(ttl, id)));
  }

  /** Releases one hold; the last one releases the lock on every node (and
   * stops the watchdog). */
  release(): Promise<Released> {
    return this.#release(false);
  }

  /** Releases every hold at once. */
  releaseAll(): Promise<Released> {
    return this.#release(true);
  }

  async #release(all: boolean): Promise<Released> {
    const released = await wrap(submit<Released>((id) => this.#native.release(all, id)));
    // The last hold stopped the watchdog: a later acquire starts unwatched.
    if (released.holdsLeft === 0) this.#watching = false;
    return released;
  }

  /**
   * This hold's fencing token, a `bigint` greater than every earlier
   * holder's: `db.update(..., { fence: lock.token })`. There once the
   * token was fetched in this hold: acquire with `{ fenced: true }`, or
   * `await lock.fencingToken()` first. Throws TokenPendingError before
   * that, LockExpiredError once the hold's validity has ended, NotHeldError
   * when nothing is held: never a missing or stale fence.
   */
  get token(): bigint {
    const token = call(() => this.#native.knownToken);
    if (token !== null && token !== undefined) return token;
    if (this.holds === 0) throw new NotHeldError("lock.token: the handle holds nothing: acquire it first");
    if (this.validity === null) {
      throw new LockExpiredError(
        "lock.token: this hold's validity has ended, so its token may no longer be used: acquire the lock again",
      );
    }
    throw new TokenPendingError(
      "lock.token: this hold's fencing token was not fetched yet: acquire with { fenced: true }, or await lock.fencingToken()",
    );
  }

  /** Fetches this hold's fencing token (written back to a quorum on first
   * use in each hold, then cached: `lock.token` returns it from then on). */
  fencingToken(): Promise<bigint> {
    return wrap(this.#native.token());
  }

  /**
   * Sends `LOCK.FENCED fenceKey <token> ...command` to `store` (a URL, a
   * Store, or the client's default store): the store runs the write only if
   * no write through `fenceKey` carried a higher token. Refuses to send
   * without a token (NotHeldError, LockExpiredError, ...); a stale token
   * rejects with StaleTokenError. Resolves with the write's reply (integers
   * beyond 2^53 as strings).
   */
  async fenced(fenceKey: string, command: Array<string | Buffer>, store?: string | Store): Promise<unknown> {
    const target = this.#redlock.storeFor(store);
    const reply = await wrap(this.#native.fenced(target.native, fenceKey, command));
    return JSON.parse(reply);
  }

  /** Hands the lock to the watchdog: renewed until released; a loss aborts
   * `signal` and emits `lost` here and on the Redlock. */
  watch(): this {
    if (this.#watching && this.holds > 0) return this;
    call(() =>
      this.#native.watch((outcomes: string) => {
        this.#lost(outcomes);
      }),
    );
    this.#watching = true;
    return this;
  }

  #lost(outcomesJson: string): void {
    let outcomes: NodeOutcome[] = [];
    try {
      outcomes = JSON.parse(outcomesJson);
    } catch {
      // keep none
    }
    const error = new LockLostError(
      `lock ${JSON.stringify(this.resource)} lost: the watchdog could not renew it on a majority in time; stop the work done under it and acquire it again`,
      undefined,
      undefined,
      outcomes,
    );
    this.#controller ??= new AbortController();
    this.#controller.abort(error);
    // A throwing listener must neither escape into the addon's callback nor
    // end the process: it becomes a warning.
    for (const emit of [() => this.emit("lost", error), () => this.#redlock.emit("lost", error, this)]) {
      try {
        emit();
      } catch (e) {
        process.emitWarning(`a 'lost' listener threw: ${String(e)}`, "RedisLockWarning");
      }
    }
  }

  /** `await using`: releases every hold still held. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.holds === 0) return;
    try {
      await this.releaseAll();
    } catch (e) {
      if (!(e instanceof NotHeldError)) throw e;
    }
  }
}

/** A semaphore of `permits` leased permits on one resource; every user of
 * the resource must give the same number. */
export class Semaphore {
  readonly #redlock: Redlock;
  readonly resource: string;
  readonly permits: number;
  /** @internal */
  constructor(redlock: Redlock, resource: string, permits: number) {
    if (!Number.isInteger(permits) || permits < 1 || permits > 0xffffffff) {
      throw new ConfigError(`a semaphore needs a whole number of permits >= 1, not ${permits}`);
    }
    this.#redlock = redlock;
    this.resource = resource;
    this.permits = permits;
  }
  /** Takes a permit (waiting up to `wait` ms). */
  permit(options: LockOptions = {}): Promise<Lock> {
    return this.#redlock.acquireAs(this.resource, "permit", this.permits, options);
  }
  /** One attempt at a permit: the permit, or null when none is free. */
  tryPermit(options: Omit<LockOptions, "wait"> = {}): Promise<Lock | null> {
    return this.#redlock.tryAs(this.resource, "permit", this.permits, options);
  }
}

/**
 * Redlock over N module-loaded masters (one node: single-node mode with
 * FIFO waiting on the server; `cluster: true`: one Redis Cluster).
 *
 * Events: `lost` (error, lock) when a watched lock is lost.
 */
export class Redlock extends EventEmitter {
  readonly #native: Binding.NativeRedlock;
  readonly #nodes: string[];
  readonly #ttl: number;
  readonly #options: RedlockOptions;
  readonly #stores = new Map<string, Store>();

  constructor(nodes: string | string[], options: RedlockOptions = {}) {
    super();
    this.#nodes = typeof nodes === "string" ? [nodes] : [...nodes];
    this.#options = options;
    this.#ttl = options.ttl ?? 10_000;
    const ack = options.acknowledge ?? {};
    this.#native = call(
      () =>
        new native.NativeRedlock(this.#nodes, theHub(), {
          nodeTimeout: options.nodeTimeout,
          retryCount: options.retryCount,
          retryDelay: options.retryDelay,
          retryJitter: options.retryJitter,
          acquireTimeout: options.acquireTimeout,
          driftFactor: options.driftFactor,
          driftMin: options.driftMin,
          watchdogInterval: options.watchdogInterval,
          watchdogMargin: options.watchdogMargin,
          acknowledgeReplicas: ack.replicas,
          acknowledgeFsync: ack.fsync,
          acknowledgeReplicaFsyncs: ack.replicaFsyncs,
          acknowledgeTimeout: ack.timeout,
          cluster: options.cluster,
          tlsCa: options.tls?.ca,
          tlsCert: options.tls?.cert,
          tlsKey: options.tls?.key,
        }),
    );
  }

  /** Nodes that must agree: N/2 + 1. */
  get quorum(): number {
    return this.#native.quorum;
  }
  /** The nodes' names (host:port). */
  get nodeNames(): string[] {
    return this.#native.nodeNames;
  }

  /** Checks every answering node: the module is loaded (and WAITAOF exists
   * when fsyncs are acknowledged). */
  verify(): Promise<void> {
    return wrap(this.#native.verify());
  }

  /** A handle for `resource` (not yet acquired): `lock.acquire()`. */
  handle(resource: string, options: Omit<LockOptions, "signal" | "watchdog"> = {}): Lock {
    return this.#handle(resource, "exclusive", undefined, options);
  }

  #handle(resource: string, kind: Kind, permits: number | undefined, options: LockOptions): Lock {
    const ttl = options.ttl ?? this.#ttl;
    const handle = call(() => this.#native.handle(resource, ttl, kind, permits, options.wait));
    return new Lock(this, handle);
  }

  /** Acquires an exclusive lock on `resource`. */
  lock(resource: string, options: LockOptions = {}): Promise<Lock> {
    return this.acquireAs(resource, "exclusive", undefined, options);
  }

  /** One attempt at an exclusive lock: the lock, or null when it is held
   * elsewhere. */
  tryLock(resource: string, options: Omit<LockOptions, "wait"> = {}): Promise<Lock | null> {
    return this.tryAs(resource, "exclusive", undefined, options);
  }

  /** Acquires a shared (read) lock: held with other readers, never with a
   * writer (`lock`). */
  readLock(resource: string, options: LockOptions = {}): Promise<Lock> {
    return this.acquireAs(resource, "shared", undefined, options);
  }

  /** A semaphore of `permits` leased permits on `resource`. */
  semaphore(resource: string, permits: number): Semaphore {
    return new Semaphore(this, resource, permits);
  }

  /** @internal */
  async acquireAs(resource: string, kind: Kind, permits: number | undefined, options: LockOptions): Promise<Lock> {
    const lock = this.#handle(resource, kind, permits, options);
    await lock.acquire({ signal: options.signal });
    if (options.watchdog || (options.fenced ?? this.#options.fenced)) await this.#finish(lock, options);
    return lock;
  }

  /** The token and the watchdog an acquisition asked for; if either
   * fails, the lock is released before the error is thrown (the caller
   * never gets the handle, so nobody else would release it). */
  async #finish(lock: Lock, options: LockOptions): Promise<void> {
    try {
      if (options.fenced ?? this.#options.fenced) await lock.fencingToken();
      if (options.watchdog) lock.watch();
    } catch (e) {
      await lock.releaseAll().catch(() => undefined);
      throw e;
    }
  }

  /** @internal */
  async tryAs(resource: string, kind: Kind, permits: number | undefined, options: LockOptions): Promise<Lock | null> {
    const lock = this.#handle(resource, kind, permits, { ...options, wait: undefined });
    if (!(await lock.tryAcquire())) return null;
    await this.#finish(lock, options);
    return lock;
  }

  /**
   * Acquires `resource`, runs `work(signal, lock)` under the watchdog and
   * releases the lock when it settles. `signal` aborts when the lock is
   * lost (or `options.signal` aborts); the promise then rejects with
   * LockLostError at once, and `work`'s own outcome is ignored (it should
   * stop on the signal). Also rejects with LockLostError when the loss came
   * while the work finished: it may have finished outside the lock.
   */
  async using<T>(
    resource: string,
    work: (signal: AbortSignal, lock: Lock) => Promise<T> | T,
    options: Omit<LockOptions, "watchdog"> = {},
  ): Promise<T> {
    const lock = await this.acquireAs(resource, "exclusive", undefined, { ...options, watchdog: true });
    const controller = new AbortController();
    const lost = new Promise<typeof LOST>((resolve) => {
      const onLoss = () => {
        controller.abort(lock.signal.reason);
        resolve(LOST);
      };
      if (lock.signal.aborted) onLoss();
      else lock.signal.addEventListener("abort", onLoss, { once: true });
    });
    const outer = options.signal;
    const onOuter = () => controller.abort(outer?.reason);
    outer?.addEventListener("abort", onOuter, { once: true });
    try {
      const running = Promise.resolve().then(() => work(controller.signal, lock));
      // The work's rejection after a loss is handled here, never unhandled.
      running.catch(() => undefined);
      const first = await Promise.race([running, lost]);
      if (first === LOST || lock.isLost) {
        throw lock.signal.reason instanceof LockLostError
          ? lock.signal.reason
          : new LockLostError("the lock was lost while the work ran; acquire it again");
      }
      return first as T;
    } finally {
      outer?.removeEventListener("abort", onOuter);
      await lock.releaseAll().catch(() => undefined);
    }
  }

  /** @internal */
  storeFor(store?: string | Store): Store {
    if (store instanceof Store) return store;
    const url = store ?? this.#options.store ?? (this.#nodes.length === 1 && !this.#options.cluster ? this.#nodes[0] : undefined);
    if (url === undefined) {
      throw new ConfigError("lock.fenced needs a store: pass its URL (or a Store), or give the Redlock a `store` option");
    }
    let made = this.#stores.get(url);
    if (!made) {
      made = new Store(url);
      this.#stores.set(url, made);
    }
    return made;
  }
}

const LOST: unique symbol = Symbol("lost");

export default Redlock;
