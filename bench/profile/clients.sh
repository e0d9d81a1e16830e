#!/usr/bin/env bash
# Profiles section 5's clients (client CPU per lock+unlock cycle) with perf
# and splits each client's samples into kinds of work (classes.py).
#
#     bench/profile/clients.sh [TASKS] [CLIENTS]
#
# TASKS defaults to 16, CLIENTS to "ours rslock ideal". Each client runs
# alone (BENCH_CLIENTS, BENCH_TASKS, QUICK=1) under `perf record -g`; the
# figures are of the benchmark's client threads only (the servers run in
# the same recording but are left out). Needs perf (apt-get install -y
# linux-perf) and root or kernel.perf_event_paranoid <= 1 for kernel frames.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TASKS="${1:-16}"
CLIENTS="${2:-ours rslock ideal}"
command -v perf >/dev/null || { echo "perf is needed: apt-get install -y linux-perf" >&2; exit 1; }
cd "$ROOT"
cargo build --release -q -p redis-lock -p bench
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for client in $CLIENTS; do
    BENCH_CLIENTS=$client BENCH_TASKS=$TASKS QUICK=1 perf record -q -F 2000 -g \
        -o "$out/$client.data" -- target/release/redis-lock-bench --only 5 \
        --out "$out/$client.md" >/dev/null 2>&1
    echo "== $client, $TASKS tasks: $(grep -E "^\| $TASKS \|" "$out/$client.md" | awk -F'|' '{print $4 " cycles/s, " $7 " µs client CPU per cycle"}')"
    python3 bench/profile/classes.py "$out/$client.data"
done
