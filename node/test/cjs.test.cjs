// The CommonJS entry: require() gets the same classes as import.
const assert = require("node:assert/strict");
const { test } = require("node:test");

test("require and import share one copy of the classes", async () => {
  const cjs = require("redislock-native");
  const esm = await import("redislock-native");
  assert.equal(typeof cjs.Redlock, "function");
  assert.equal(cjs.Redlock, esm.Redlock);
  assert.equal(cjs.LockLostError, esm.LockLostError);
  assert.equal(esm.default, esm.Redlock);
  assert.equal(typeof Symbol.asyncDispose, "symbol");
  assert.equal(typeof cjs.Lock.prototype[Symbol.asyncDispose], "function");
});
