#!/usr/bin/env bash
# make bench: the module's commands against SET NX PX / Lua / Redisson locks,
# and the Redlock client against rslock and an ideal script client, in one
# run on redis-server processes the benchmark starts on loopback and always
# stops. Prints a table of ratios and writes BENCHMARKS.md (+ SVG charts).
#
#   scripts/bench.sh [--only 1,2,...] [--out FILE]    full run (under 15 min)
#   QUICK=1 scripts/bench.sh                           quick run (about 2 min)
#
# Run it on an otherwise idle machine: every figure is also printed with the
# load average at the time it was measured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# redis-benchmark ships in redis-tools, like redis-cli (prereqs.sh checks
# redis-cli only); same install pattern as scripts/prereqs.sh.
if ! command -v redis-benchmark >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: redis-benchmark is missing. Install it with:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y redis-tools" >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: redis-benchmark is missing and this is not a Debian/Ubuntu system; install redis-tools with your package manager." >&2
        exit 1
    fi
    echo "Installing redis-tools (redis-benchmark) ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y redis-tools
fi

args=()
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    args+=(--quick)
fi
cargo build --release -p redis-lock -p bench
exec cargo run --release --quiet -p bench -- "${args[@]}" "$@"
