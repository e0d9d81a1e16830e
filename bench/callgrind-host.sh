#!/usr/bin/env bash
# Section 8 of `make bench`: what loading the module costs the server's
# other commands, in instructions (callgrind) and in time.
#
# For each server, two servers are started under valgrind's callgrind, one
# with the module loaded and one without. For each plain command, a phase
# empties the server, prepares what the command needs (keys for GET, EXPIRE,
# DEL; the script for EVALSHA), zeroes the counters (`callgrind_control
# -z`), sends OPS pipelined commands through `redis-cli --pipe`, and dumps
# the counters (`callgrind_control -d`): instructions per command = the
# instructions of the command path (`processInputBuffer` and everything it
# calls) / OPS, and the whole server's beside them (a MULTI/EXEC op is
# `MULTI`, `SET`, `EXEC`). Rounds interleave the two servers (with, without; then without,
# with), each round on two fresh servers (a server seeds its hash tables
# at random, which moves counts by up to ~3% from one process to the
# next), and each figure is the median of the rounds. Instruction counts do
# not depend on the machine's load. Then the same payloads (TIME_OPS
# commands) run on the servers without valgrind, interleaved the same way,
# and the median time per command of `redis-cli --pipe` is put beside them
# (that one does depend on the load).
#
#   bench/callgrind-host.sh [--servers redis7,valkey8,redis8,valkey9]
#                           [--rounds N] [--ops N] [--time-ops N]
#                           [--module PATH] [--tsv FILE] [--commands DEL,SET,...]
#   QUICK=1 bench/callgrind-host.sh     1 round, 2000 ops, 20000 timed ops, the
#                                       two servers' phases at once: a
#                                       smoke check (one pair of processes: their
#                                       hash seeds move counts by a few %)
#
# Prints a Markdown table; --tsv also writes one line per server and command:
# server version command ir_with ir_without ratio ns_with ns_without ns_ratio
# all_with all_without all_ratio (ir_*: instructions per command on the
# command path, processInputBuffer and all it calls; all_*: the whole
# server's, which also counts the cron, whose work grows with the time a
# phase takes under valgrind; ns_*: nanoseconds per command).
# Every server this starts is stopped on exit (by its PID).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SERVERS="redis7,valkey8,redis8,valkey9"
ROUNDS=9
OPS=5000
TIME_OPS=200000
MODULE="$ROOT/target/release/libredis_lock.so"
TSV=""
ONLY=""
PARALLEL=0
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    ROUNDS=1
    OPS=2000
    TIME_OPS=20000
    PARALLEL=1
fi
while [ $# -gt 0 ]; do
    case "$1" in
    --servers) SERVERS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --ops) OPS="$2"; shift 2 ;;
    --time-ops) TIME_OPS="$2"; shift 2 ;;
    --module) MODULE="$2"; shift 2 ;;
    --tsv) TSV="$2"; shift 2 ;;
    --commands) ONLY="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -f "$MODULE" ] || { echo "no module at $MODULE (cargo build --release -p redis-lock)" >&2; exit 1; }
for tool in valgrind callgrind_control redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (scripts/prereqs.sh)" >&2; exit 1; }
done

# shellcheck source=bench/callgrind-lib.sh
. "$ROOT/bench/callgrind-lib.sh"

# The payloads: PREFIX.setup (run before each measured phase) and
# PREFIX.run (measured), N ops each, in RESP.
SHA=""
payloads() {
    local n="$1" dir="$2"
    python3 - "$n" "$dir" <<'EOF'
import hashlib, sys
n, d = int(sys.argv[1]), sys.argv[2]
script = b"return redis.call('SET', KEYS[1], ARGV[1])"
sha = hashlib.sha1(script).hexdigest().encode()
def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
def write(name, gen):
    with open(f"{d}/{name}", "wb") as f:
        for i in range(n):
            f.write(gen(b"key:%d" % i))
keys = lambda k: resp(b"SET", k, b"value")
phases = {
    "SET": (None, keys),
    "GET": (keys, lambda k: resp(b"GET", k)),
    "INCR": (None, lambda k: resp(b"INCR", k)),
    "EXPIRE": (keys, lambda k: resp(b"EXPIRE", k, b"100000")),
    "DEL": (keys, lambda k: resp(b"DEL", k)),
    "MULTI/EXEC": (None, lambda k: resp(b"MULTI") + resp(b"SET", k, b"value") + resp(b"EXEC")),
    "EVALSHA": (None, lambda k: resp(b"EVALSHA", sha, b"1", k, b"value")),
}
for name, (setup, run) in phases.items():
    file = name.replace("/", "_")
    with open(f"{d}/{file}.setup", "wb") as f:
        f.write(resp(b"FLUSHALL", b"SYNC"))
        f.write(resp(b"SCRIPT", b"LOAD", script))
        if setup:
            for i in range(n):
                f.write(setup(b"key:%d" % i))
    write(f"{file}.run", run)
EOF
}
COMMANDS=(SET GET INCR EXPIRE DEL MULTI/EXEC EVALSHA)
if [ -n "$ONLY" ]; then
    IFS=, read -r -a COMMANDS <<<"$ONLY"
fi

mkdir -p "$WORK/ir" "$WORK/ns"
payloads "$OPS" "$WORK/ir"
payloads "$TIME_OPS" "$WORK/ns"

echo "instructions per command (callgrind, whole server, $OPS pipelined commands per phase," \
    "median of $ROUNDS interleaved rounds) and time per command (redis-cli --pipe, $TIME_OPS" \
    "commands, median of $ROUNDS), with the module loaded vs without"
echo
echo "| server | command | command path, instr./cmd with | without | ratio | whole server, instr./cmd with | without | ratio | ns/cmd with | without | ratio |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
[ -n "$TSV" ] && : >"$TSV"

IFS=, read -r -a names <<<"$SERVERS"
for name in "${names[@]}"; do
    binary="$(server_binary "$name" || true)"
    if [ -z "$binary" ] || [ ! -x "$binary" ]; then
        echo "| $name | (not available: skipped) | | | | | | | | | |"
        continue
    fi
    declare -A ir_with=() ir_without=() all_with=() all_without=() ns_with=() ns_without=()
    for round in $(seq "$ROUNDS"); do
        # Fresh servers each round: a server seeds its hash tables at
        # random when it starts, and how keys collide moves a command's
        # instructions by up to ~3% from one process to the next.
        start "$name-with-$round" "$binary" 1 1
        wpid="$SPID" wport="$SPORT"
        start "$name-without-$round" "$binary" 0 1
        opid="$SPID" oport="$SPORT"
        version="$(redis-cli -p "$wport" info server | tr -d '\r' | sed -n "s/^valkey_version://p; s/^redis_version://p" | tail -1)"
        for command in "${COMMANDS[@]}"; do
            file="$WORK/ir/${command//\//_}"
            if [ "$PARALLEL" = 1 ]; then
                # Both servers' phases at once (QUICK).
                measure_pair "$wpid" "$wport" "$file" "$WORK/$name-with-$round" \
                    "$opid" "$oport" "$file" "$WORK/$name-without-$round"
                read -r ir all <<<"$PAIR_A"
                ir_with[$command]+="$ir "
                all_with[$command]+="$all "
                read -r ir all <<<"$PAIR_B"
                ir_without[$command]+="$ir "
                all_without[$command]+="$all "
                continue
            fi
            if [ $((round % 2)) = 1 ]; then order="with without"; else order="without with"; fi
            for which in $order; do
                if [ "$which" = with ]; then
                    read -r ir all < <(measure_ir "$wpid" "$wport" "$file" "$WORK/$name-with-$round")
                    ir_with[$command]+="$ir "
                    all_with[$command]+="$all "
                else
                    read -r ir all < <(measure_ir "$opid" "$oport" "$file" "$WORK/$name-without-$round")
                    ir_without[$command]+="$ir "
                    all_without[$command]+="$all "
                fi
            done
        done
        stop "$wpid" "$wport"
        stop "$opid" "$oport"
    done
    start "$name-with-native" "$binary" 1 0
    wpid="$SPID" wport="$SPORT"
    start "$name-without-native" "$binary" 0 0
    opid="$SPID" oport="$SPORT"
    for round in $(seq "$ROUNDS"); do
        for command in "${COMMANDS[@]}"; do
            file="$WORK/ns/${command//\//_}"
            if [ $((round % 2)) = 1 ]; then order="with without"; else order="without with"; fi
            for which in $order; do
                if [ "$which" = with ]; then
                    ns_with[$command]+="$(measure_ns "$wport" "$file") "
                else
                    ns_without[$command]+="$(measure_ns "$oport" "$file") "
                fi
            done
        done
    done
    stop "$wpid" "$wport"
    stop "$opid" "$oport"
    for command in "${COMMANDS[@]}"; do
        iw="$(tr ' ' '\n' <<<"${ir_with[$command]}" | grep . | median)"
        io="$(tr ' ' '\n' <<<"${ir_without[$command]}" | grep . | median)"
        nw="$(tr ' ' '\n' <<<"${ns_with[$command]}" | grep . | median)"
        no="$(tr ' ' '\n' <<<"${ns_without[$command]}" | grep . | median)"
        aw="$(tr ' ' '\n' <<<"${all_with[$command]}" | grep . | median)"
        ao="$(tr ' ' '\n' <<<"${all_without[$command]}" | grep . | median)"
        line="$(awk -v iw="$iw" -v io="$io" -v nw="$nw" -v no="$no" -v aw="$aw" -v ao="$ao" -v n="$OPS" -v t="$TIME_OPS" \
            'BEGIN { printf "%.1f\t%.1f\t%.4f\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.4f", iw / n, io / n, iw / io, nw / t, no / t, nw / no, aw / n, ao / n, aw / ao }')"
        IFS=$'\t' read -r a b r c d s e f g <<<"$line"
        printf '| %s %s | %s | %s | %s | **%.3f×** | %s | %s | %.3f× | %s | %s | %s× |\n' "$name" "$version" "$command" "$a" "$b" "$r" "$e" "$f" "$g" "$c" "$d" "$s"
        [ -n "$TSV" ] && printf '%s\t%s\t%s\t%s\n' "$name" "$version" "$command" "$line" >>"$TSV"
    done
    unset ir_with ir_without all_with all_without ns_with ns_without
done
