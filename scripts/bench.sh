#!/usr/bin/env bash
# make bench: the module's commands against SET NX PX / Lua / Redisson locks
# and the servers' own lock commands, the Redlock client against rslock, an
# ideal script client and etcd's lock service, on each of the four servers
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
cargo build --release -p redis-lock -p bench
# A further section that is a script of its own (the Python and Node
# packages' benchmarks) is run by the bench program, per server, the way
# sections 8 and 11 run bench/callgrind-*.sh (bench/src/callgrind.rs: the
# script gets --servers NAME and --tsv FILE, prints its Markdown table and
# writes one row per line), so that its rows land in that server's table;
# anything it needs installed goes above.
exec cargo run --release --quiet -p bench -- "${args[@]}" "$@"
