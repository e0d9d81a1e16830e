#!/usr/bin/env bash
# Builds the Node.js package (node/, `redislock-native`) and runs its
# `node --test` suite against module-loaded servers that the tests start
# themselves. The server binary is $REDIS_LOCK_SERVER (default:
# redis-server); the module is target/release/libredis_lock.so (built here if
# missing). Extra arguments go to `node --test` in place of the test files.
#
# Prerequisites: Node 18+ and npm (installed with apt-get as root when
# missing); npm reaching the package registry for the dev dependencies
# (@napi-rs/cli, typescript, @types/node), installed by `npm ci` into
# node/node_modules/ from node/package-lock.json when it is missing or older
# than the lock file.
#
# The addon is built by `napi build --release` with the shared target/
# directory (the client crate's dependencies are reused); cargo rebuilds
# nothing when nothing changed, so running this once per server builds once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm >&2
    else
        echo "error: the Node tests need Node.js 18+ and npm: sudo apt-get install -y nodejs npm" >&2
        exit 1
    fi
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
    echo "error: the Node package needs Node.js 18 or newer (found $(node --version))" >&2
    exit 1
fi

# --build-only: build, run nothing. With NODE_TEST_BUILT=1 the build is
# taken as done (scripts/test-matrix.py builds once, then runs the suite on
# each server, some at the same time).
build_only=0
if [ "${1:-}" = "--build-only" ]; then
    build_only=1
    shift
fi

cd "$ROOT/node"
export REDIS_LOCK_MODULE="${REDIS_LOCK_MODULE:-$ROOT/target/release/libredis_lock.so}"
if [ "${NODE_TEST_BUILT:-0}" != 1 ]; then
    if [ ! -x node_modules/.bin/napi ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
        npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    fi

    if [ ! -f "$REDIS_LOCK_MODULE" ]; then
        (cd "$ROOT" && cargo build --release -p redis-lock)
    fi

    # The addon (native/redislock-native.<platform>.node, its loader
    # native/binding.js and declarations native/binding.d.ts), then the
    # TypeScript layer (dist/).
    node_modules/.bin/napi build --release --platform --output-dir native \
        --js binding.js --dts binding.d.ts >&2
    node_modules/.bin/tsc -p tsconfig.json
    # The shipped declarations as an ES module and a CommonJS consumer see them.
    node_modules/.bin/tsc -p tsconfig.types.json

fi
[ "$build_only" = 1 ] && exit 0

export REDIS_LOCK_SERVER="${REDIS_LOCK_SERVER:-redis-server}"
echo "== node tests on $("$REDIS_LOCK_SERVER" --version)"
# A test that hangs fails after two minutes instead of stalling the run
# (--test-timeout: Node 20.11+; older Nodes run without it).
timeout=()
if node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 11) ? 0 : 1)'; then
    timeout=(--test-timeout=120000)
fi
if [ "$#" -gt 0 ]; then
    exec node --test "${timeout[@]}" "$@"
fi
exec node --test "${timeout[@]}" test/*.test.mjs test/*.test.cjs
