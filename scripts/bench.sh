#!/usr/bin/env bash
# make bench: the module's commands against SET NX PX / Lua / Redisson locks,
# and the Redlock client against rslock and an ideal script client, and the
# Node.js package against redlock and redis-semaphore (section 12, through
# scripts/node-bench.sh: needs node and npm), in one run on redis-server
# processes the benchmark starts on loopback and always stops. Prints a table
# of ratios and writes BENCHMARKS.md (+ SVG charts).
#
#   scripts/bench.sh [--only 1,2,...] [--out FILE]    full run (under 15 min)
#   QUICK=1 scripts/bench.sh                           quick run (about 2 min)
#
# Run it on an otherwise idle machine: every figure is also printed with the
# load average at the time it was measured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# redis-benchmark ships in redis-tools, which prereqs.sh installs (or names).
scripts/prereqs.sh

args=()
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    args+=(--quick)
fi
cargo build --release -p redis-lock -p bench
exec cargo run --release --quiet -p bench -- "${args[@]}" "$@"
