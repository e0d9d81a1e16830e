#!/usr/bin/env bash
# make bench, section 12 (the bench crate runs this with the servers it
# started): builds the Node.js package (scripts/node-test.sh --build-only),
# installs the other clients into bench/node/node_modules (`npm ci` from
# bench/node/package-lock.json: redlock, @sesamecare-oss/redlock,
# redis-semaphore, ioredis) when missing or older than the lock file, and runs
# bench/node/bench.mjs with the arguments given (one JSON line per figure).
# With NODE_BENCH_BUILT=1 nothing is built or installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
cd "$ROOT/bench/node"
# NODE_BENCH_BUILT=1 (the bench crate sets it after the first server's run):
# the package and the clients are taken as they are.
if [ "${NODE_BENCH_BUILT:-0}" != 1 ]; then
    "$ROOT/scripts/node-test.sh" --build-only >&2
    if [ ! -d node_modules/redis-semaphore ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
        npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2
    fi
fi
exec node bench.mjs "$@"
