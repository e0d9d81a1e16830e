// The ES module entry: the CommonJS build's exports under their names, so
// that `import` and `require` share one copy of the classes (an error thrown
// by one is `instanceof` the other's class).
import cjs from "../dist/index.js";

export const {
  Redlock,
  Lock,
  Semaphore,
  Store,
  RedisLockError,
  LockNotAcquiredError,
  LockLostError,
  LockExpiredError,
  NodeError,
  NotHeldError,
  ConfigError,
  StaleTokenError,
  StoreError,
  AbortError,
} = cjs;
export default Redlock;
