// The errors of redislock-native: one class per error of the Rust crate
// (redis-lock-client's `Error`), each with a stable `code` and a message
// that says what to do.

/** What one node answered (or why it did not). */
export interface NodeOutcome {
  /** host:port */
  node: string;
  /** The node's answer or failure, as text. */
  detail: string;
  /** The node failed (timeout, refused connection, error reply). */
  failed: boolean;
}

/** Every error this package throws; `code` says which. */
export class RedisLockError extends Error {
  readonly code: string;
  constructor(message: string, code = "REDISLOCK", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "RedisLockError";
    this.code = code;
  }
}

/** No attempt won a majority before the retries or `wait` ran out. */
export class LockNotAcquiredError extends RedisLockError {
  readonly attempts: number;
  readonly elapsedMs: number;
  /** The last attempt's answers, per node. */
  readonly outcomes: NodeOutcome[];
  constructor(message: string, attempts = 0, elapsedMs = 0, outcomes: NodeOutcome[] = []) {
    super(message, "NOT_ACQUIRED");
    this.name = "LockNotAcquiredError";
    this.attempts = attempts;
    this.elapsedMs = elapsedMs;
    this.outcomes = outcomes;
  }
}

/** The lock is lost: fewer than a majority confirm it, or the watchdog
 * reported the loss. Stop the work done under it. */
export class LockLostError extends RedisLockError {
  readonly confirmed: number | undefined;
  readonly quorum: number | undefined;
  readonly outcomes: NodeOutcome[];
  constructor(message: string, confirmed?: number, quorum?: number, outcomes: NodeOutcome[] = []) {
    super(message, "LOCK_LOST");
    this.name = "LockLostError";
    this.confirmed = confirmed;
    this.quorum = quorum;
    this.outcomes = outcomes;
  }
}

/** The lock's validity ended before the operation could be confirmed. */
export class LockExpiredError extends RedisLockError {
  constructor(message: string) {
    super(message, "EXPIRED");
    this.name = "LockExpiredError";
  }
}

/** The only node (single node, cluster) failed, or the nodes refused the
 * command itself. */
export class NodeError extends RedisLockError {
  readonly node: string;
  readonly detail: string;
  constructor(message: string, node = "", detail = "") {
    super(message, "NODE_ERROR");
    this.name = "NodeError";
    this.node = node;
    this.detail = detail;
  }
}

/** The handle holds nothing (never acquired, or already released). */
export class NotHeldError extends RedisLockError {
  constructor(message: string) {
    super(message, "NOT_HELD");
    this.name = "NotHeldError";
  }
}

/** A setting or argument that can never work. */
export class ConfigError extends RedisLockError {
  constructor(message: string) {
    super(message, "CONFIG");
    this.name = "ConfigError";
  }
}

/** The store refused a fenced write: a write with a higher fencing token
 * went through the same fence key, so this holder is stale. */
export class StaleTokenError extends RedisLockError {
  constructor(message: string) {
    super(message, "STALE");
    this.name = "StaleTokenError";
  }
}

/** The store answered a fenced write with an error of the write itself. */
export class StoreError extends RedisLockError {
  constructor(message: string) {
    super(message, "STORE");
    this.name = "StoreError";
  }
}

/** The operation was aborted through its AbortSignal; nothing it was
 * granted stays held. `cause` is the signal's reason. */
export class AbortError extends RedisLockError {
  constructor(message: string, cause?: unknown) {
    super(message, "ABORTED", { cause });
    this.name = "AbortError";
  }
}

const PREFIX = "REDISLOCK:";

/** The addon's coded error (`REDISLOCK:{json}`) as its class; anything else
 * as it is. */
export function fromNative(error: unknown, signal?: AbortSignal): unknown {
  if (!(error instanceof Error) || !error.message.startsWith(PREFIX)) {
    return error;
  }
  let p: Record<string, any>;
  try {
    p = JSON.parse(error.message.slice(PREFIX.length));
  } catch {
    return error;
  }
  const message = String(p.message ?? error.message);
  switch (p.code) {
    case "NOT_ACQUIRED":
      return new LockNotAcquiredError(message, p.attempts, p.elapsedMs, p.outcomes ?? []);
    case "LOCK_LOST":
      return new LockLostError(message, p.confirmed, p.quorum, p.outcomes ?? []);
    case "EXPIRED":
      return new LockExpiredError(message);
    case "NODE_ERROR":
      return new NodeError(message, p.node, p.detail);
    case "NOT_HELD":
      return new NotHeldError(message);
    case "CONFIG":
      return new ConfigError(message);
    case "STALE":
      return new StaleTokenError(message);
    case "STORE":
      return new StoreError(message);
    case "ABORTED":
      return new AbortError(message, signal?.reason);
    default:
      return new RedisLockError(message, String(p.code ?? "REDISLOCK"));
  }
}
