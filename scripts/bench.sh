#!/usr/bin/env bash
# make bench: the module's commands against SET NX PX / Lua / Redisson locks
# and the servers' own lock commands, the Redlock client against rslock, an
# ideal script client and etcd's lock service (section 13), the Node.js
# package against redlock and redis-semaphore (section 12, through
# scripts/node-bench.sh: needs node and npm), on each of the four servers
# of `make test` in turn (processes the benchmark starts on loopback and
# always stops). Prints a table of ratios per server and writes
# BENCHMARKS.md (one results table per server, + SVG charts).
#
#   scripts/bench.sh [--only 1,2,...] [--out FILE]    full run
#   QUICK=1 scripts/bench.sh                           quick run (under 5 min)
#   BENCH_SERVERS="redis7 valkey8" scripts/bench.sh    some servers only
#
# Servers (BENCH_SERVERS, default all four): redis7 (Debian's redis-server
# 7.0), valkey8 (Valkey 8.1, the wheel prereqs.sh puts in .valkey/), redis8
# and valkey9 (the newest, fetched by scripts/newest-servers.sh).
#
# Run it on an otherwise idle machine: every figure is also printed with the
# load average at the time it was measured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BENCH_SERVERS="${BENCH_SERVERS:-redis7 valkey8 redis8 valkey9}"
export BENCH_SERVERS

# redis-benchmark ships in redis-tools, etcd in etcd-server/etcd-client;
# prereqs.sh installs them (or names them), and Valkey 8.1 into .valkey/.
scripts/prereqs.sh bench >/dev/null
# The newest servers, fetched once into .servers/ (as make test does).
for name in ${BENCH_SERVERS//,/ }; do
    case "$name" in
    redis8 | valkey9) scripts/newest-servers.sh "$name" >/dev/null ;;
    esac
done

args=()
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    args+=(--quick)
fi
# Two builds, not one: built together, the bench's dependencies would
# unify features with the module's and the module would be relinked here
# and again by the next plain `cargo build --release -p redis-lock`.
cargo build --release -p redis-lock
cargo build --release -p bench
# The Node.js package's section (12) is run by the bench program
# (scripts/node-bench.sh). The Python package's is a script appended after
# (it does not yet run per server).
cargo run --release --quiet -p bench -- "${args[@]}" "$@"

# The Python client's section (scripts/python-bench.sh), appended to the
# report the bench crate just wrote; skipped with PYTHON_BENCH=0.
if [ "${PYTHON_BENCH:-1}" != 0 ]; then
    out="$ROOT/BENCHMARKS.md"
    prev=""
    for arg in "$@"; do
        [ "$prev" = "--out" ] && out="$arg"
        prev="$arg"
    done
    scripts/python-bench.sh "$out"
fi
