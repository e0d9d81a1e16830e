#!/usr/bin/env bash
# make bench: the module's commands against SET NX PX / Lua / Redisson locks,
# and the Redlock client against rslock and an ideal script client, and the
# Node.js package against redlock and redis-semaphore (section 12, through
# scripts/node-bench.sh: needs node and npm), in one run on redis-server
# processes the benchmark starts on loopback and always stops. Prints a table
# of ratios and writes BENCHMARKS.md (+ SVG charts); then the Python
# client's section against redis-py and pottery (scripts/python-bench.sh) is
# appended to it.
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
