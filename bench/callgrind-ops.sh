#!/usr/bin/env bash
# Sections 10 and 11 of `make bench`: the module's commands against the
# server's own commands that do the same job, in instructions per operation
# (callgrind) and in time, on the same module-loaded server.
#
#   anchors (section 11, issue #35): LOCK.RELEASE vs `DELEX key IFEQ v`
#     (Redis 8.4+) and `DELIFEQ key v` (Valkey 9), and vs the Lua
#     compare-and-delete script (every server); LOCK.ACQUIRE on fresh keys vs
#     `SET key v NX PX ttl`; re-entry (LOCK.ACQUIRE of a held lock by its
#     owner) and LOCK.EXTEND vs `SET key v IFEQ v PX ttl` (Redis 8.4+,
#     Valkey 8.1+). Target ≤ 1.0× each.
#   fenced (section 10, issue #31): `LOCK.FENCED fence 1 HSET key f v` vs a
#     plain `HSET key f v` (target ≤ 1.3×) and vs the Lua script that does
#     the same check (GET the fence, compare, SET it, HSET), by EVALSHA
#     (target: ≥ 2× its throughput). The token is the same on every call
#     (the fence is checked and not raised), as in section 10's
#     redis-benchmark rows.
#
# Method (as bench/callgrind-host.sh): each round starts a fresh server
# with the module under valgrind's callgrind; each phase empties it,
# prepares what the command needs (held locks for a release, re-entry or
# extend; the keys for DELEX/DELIFEQ/SET IFEQ; the scripts), zeroes the
# counters, sends OPS pipelined commands through `redis-cli --pipe` and
# dumps the counters: instructions per operation = the command path's
# (`processInputBuffer` and all it calls) / OPS. The two sides of a row
# alternate which goes first from round to round; each figure is the
# median of the rounds. Then the same payloads (TIME_OPS commands) run on
# one native server, interleaved the same way, and the median time per
# command of `redis-cli --pipe` is put beside them (load-dependent).
# A server without a native command gets no row for it.
#
#   bench/callgrind-ops.sh [--set anchors|fenced|all]
#                          [--servers redis7,valkey8,redis8,valkey9]
#                          [--rounds N] [--ops N] [--time-ops N]
#                          [--module PATH] [--tsv FILE]
#   QUICK=1 bench/callgrind-ops.sh      1 round, 2000 ops, 20000 timed ops,
#                                       the base phases on a second server at once
#   KEEP_DUMPS=DIR bench/callgrind-ops.sh   keeps every phase's callgrind dump in DIR
#                                       (SERVER-ops-ROUND.PHASE.PID), for callgrind_annotate
#
# Prints a Markdown table; --tsv also writes one line per server and row:
# set server version ours baseline ir_ours ir_base ratio ns_ours ns_base
# ns_ratio (ir_*: instructions per operation on the command path; ns_*:
# nanoseconds per operation through redis-cli --pipe).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SET=all
SERVERS="redis7,valkey8,redis8,valkey9"
ROUNDS=5
OPS=5000
TIME_OPS=200000
MODULE="$ROOT/target/release/libredis_lock.so"
TSV=""
PARALLEL=0
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    ROUNDS=1
    OPS=2000
    TIME_OPS=20000
    PARALLEL=1
fi
while [ $# -gt 0 ]; do
    case "$1" in
    --set) SET="$2"; shift 2 ;;
    --servers) SERVERS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --ops) OPS="$2"; shift 2 ;;
    --time-ops) TIME_OPS="$2"; shift 2 ;;
    --module) MODULE="$2"; shift 2 ;;
    --tsv) TSV="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$SET" in anchors | fenced | all) ;; *) echo "--set: anchors, fenced or all" >&2; exit 2 ;; esac
[ -f "$MODULE" ] || { echo "no module at $MODULE (cargo build --release -p redis-lock)" >&2; exit 1; }
for tool in valgrind callgrind_control redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (scripts/prereqs.sh)" >&2; exit 1; }
done

# shellcheck source=bench/callgrind-lib.sh
. "$ROOT/bench/callgrind-lib.sh"

# The payloads: NAME.setup (run before each measured phase) and NAME.run
# (measured), N ops each, in RESP.
payloads() {
    local n="$1" dir="$2"
    python3 - "$n" "$dir" <<'EOF'
import hashlib, sys
n, d = int(sys.argv[1]), sys.argv[2]
OWNER = b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c"
TTL = b"600000"
UNLOCK = b"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"
FENCE = b"""local accepted = redis.call('GET', KEYS[1])
if accepted and tonumber(accepted) > tonumber(ARGV[1]) then
    return redis.error_reply('STALE fencing token')
end
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('HSET', KEYS[2], 'status', 'shipped')"""
sha = lambda s: hashlib.sha1(s).hexdigest().encode()
def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
held = lambda k: resp(b"LOCK.ACQUIRE", k, OWNER, TTL)
plain = lambda k: resp(b"SET", k, OWNER)
phases = {
    # name: (what each key needs first, the measured command)
    "ACQUIRE": (None, lambda k: resp(b"LOCK.ACQUIRE", k, OWNER, TTL)),
    "SETNXPX": (None, lambda k: resp(b"SET", k, OWNER, b"NX", b"PX", TTL)),
    "RELEASE": (held, lambda k: resp(b"LOCK.RELEASE", k, OWNER)),
    "DELEX": (plain, lambda k: resp(b"DELEX", k, b"IFEQ", OWNER)),
    "DELIFEQ": (plain, lambda k: resp(b"DELIFEQ", k, OWNER)),
    "LUADEL": (plain, lambda k: resp(b"EVALSHA", sha(UNLOCK), b"1", k, OWNER)),
    "REENTRY": (held, lambda k: resp(b"LOCK.ACQUIRE", k, OWNER, TTL)),
    "EXTEND": (held, lambda k: resp(b"LOCK.EXTEND", k, OWNER, TTL)),
    "SETIFEQ": (plain, lambda k: resp(b"SET", k, OWNER, b"IFEQ", OWNER, b"PX", TTL)),
    "FENCED": (None, lambda k: resp(b"LOCK.FENCED", b"fence", b"1", b"HSET", b"order:" + k, b"status", b"shipped")),
    "HSET": (None, lambda k: resp(b"HSET", b"order:" + k, b"status", b"shipped")),
    "LUAFENCE": (None, lambda k: resp(b"EVALSHA", sha(FENCE), b"2", b"fence:lua", b"order:" + k, b"1")),
}
for name, (setup, run) in phases.items():
    with open(f"{d}/{name}.setup", "wb") as f:
        f.write(resp(b"FLUSHALL", b"SYNC"))
        f.write(resp(b"SCRIPT", b"LOAD", UNLOCK))
        f.write(resp(b"SCRIPT", b"LOAD", FENCE))
        # The fences exist before the measure (the steady state: checked,
        # not created).
        f.write(resp(b"LOCK.FENCED", b"fence", b"1", b"HSET", b"order:warm", b"status", b"shipped"))
        f.write(resp(b"EVALSHA", sha(FENCE), b"2", b"fence:lua", b"order:warm", b"1"))
        if setup:
            for i in range(n):
                f.write(setup(b"key:%d" % i))
    with open(f"{d}/{name}.run", "wb") as f:
        for i in range(n):
            f.write(run(b"key:%d" % i))
EOF
}

# The rows of each set: "set ours baseline target", the baseline's native
# command (to probe for) in the payload's name.
ROWS=()
if [ "$SET" != fenced ]; then
    ROWS+=("anchors RELEASE DELEX 1.0" "anchors RELEASE DELIFEQ 1.0" "anchors RELEASE LUADEL -"
        "anchors ACQUIRE SETNXPX 1.0" "anchors REENTRY SETIFEQ 1.0" "anchors EXTEND SETIFEQ 1.0")
fi
if [ "$SET" != anchors ]; then
    ROWS+=("fenced FENCED HSET 1.3" "fenced FENCED LUAFENCE -")
fi

# Whether the server on PORT runs the payload NAME's command.
supports() {
    local port="$1" name="$2" out
    case "$name" in
    DELEX) out="$(redis-cli -p "$port" DELEX probe:native IFEQ x 2>&1)" ;;
    DELIFEQ) out="$(redis-cli -p "$port" DELIFEQ probe:native x 2>&1)" ;;
    SETIFEQ) out="$(redis-cli -p "$port" SET probe:native x IFEQ x 2>&1)" ;;
    *) return 0 ;;
    esac
    ! grep -qi 'err' <<<"$out"
}

describe() {
    case "$1" in
    RELEASE) echo "LOCK.RELEASE" ;;
    ACQUIRE) echo "LOCK.ACQUIRE (fresh keys)" ;;
    REENTRY) echo "LOCK.ACQUIRE re-entry" ;;
    EXTEND) echo "LOCK.EXTEND" ;;
    SETNXPX) echo "SET NX PX" ;;
    DELEX) echo "DELEX IFEQ" ;;
    DELIFEQ) echo "DELIFEQ" ;;
    SETIFEQ) echo "SET IFEQ PX" ;;
    LUADEL) echo "Lua compare-and-delete (EVALSHA)" ;;
    FENCED) echo "LOCK.FENCED fence 1 HSET" ;;
    HSET) echo "plain HSET" ;;
    LUAFENCE) echo "Lua fence script (EVALSHA)" ;;
    esac
}

mkdir -p "$WORK/ir" "$WORK/ns"
payloads "$OPS" "$WORK/ir"
payloads "$TIME_OPS" "$WORK/ns"

echo "instructions per operation (callgrind, whole server with the module, $OPS pipelined commands" \
    "per phase, the command path, median of $ROUNDS rounds) and time per operation (redis-cli --pipe," \
    "$TIME_OPS commands, median of $ROUNDS), ours vs the server's own command on the same server"
echo
echo "| server | ours | baseline | instr./op ours | baseline | ratio | target | ns/op ours | baseline | ratio | throughput ratio |"
echo "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|"
[ -n "$TSV" ] && : >"$TSV"

IFS=, read -r -a names <<<"$SERVERS"
for name in "${names[@]}"; do
    binary="$(server_binary "$name" || true)"
    if [ -z "$binary" ] || [ ! -x "$binary" ]; then
        echo "| $name | (not available: skipped) | | | | | | | | | |"
        continue
    fi
    declare -A ir=() ns=()
    rows=()
    for round in $(seq "$ROUNDS"); do
        start "$name-ops-$round" "$binary" 1 1
        pid="$SPID" port="$SPORT"
        if [ "$round" = 1 ]; then
            version="$(redis-cli -p "$port" info server | tr -d '\r' | sed -n "s/^valkey_version://p; s/^redis_version://p" | tail -1)"
            for row in "${ROWS[@]}"; do
                read -r _ _ base _ <<<"$row"
                supports "$port" "$base" && rows+=("$row")
            done
        fi
        if [ "$PARALLEL" = 1 ]; then
            # QUICK: the base phases on a second server, at the same time
            # as ours (each phase's setup starts from an empty server).
            start "$name-base-$round" "$binary" 1 1
            bpid="$SPID" bport="$SPORT"
            for row in "${rows[@]}"; do
                read -r _ ours base _ <<<"$row"
                measure_pair "$pid" "$port" "$WORK/ir/$ours" "$WORK/$name-ops-$round" \
                    "$bpid" "$bport" "$WORK/ir/$base" "$WORK/$name-base-$round"
                read -r count _ <<<"$PAIR_A"
                ir[$row/$ours]+="$count "
                read -r count _ <<<"$PAIR_B"
                ir[$row/$base]+="$count "
            done
            stop "$bpid" "$bport"
        else
            for row in "${rows[@]}"; do
                read -r _ ours base _ <<<"$row"
                if [ $((round % 2)) = 1 ]; then order="$ours $base"; else order="$base $ours"; fi
                for phase in $order; do
                    read -r count _ < <(measure_ir "$pid" "$port" "$WORK/ir/$phase" "$WORK/$name-ops-$round")
                    ir[$row/$phase]+="$count "
                done
            done
        fi
        stop "$pid" "$port"
    done
    start "$name-ops-native" "$binary" 1 0
    port="$SPORT"
    for round in $(seq "$ROUNDS"); do
        for row in "${rows[@]}"; do
            read -r _ ours base _ <<<"$row"
            if [ $((round % 2)) = 1 ]; then order="$ours $base"; else order="$base $ours"; fi
            for phase in $order; do
                ns[$row/$phase]+="$(measure_ns "$port" "$WORK/ns/$phase") "
            done
        done
    done
    stop "$SPID" "$SPORT"
    for row in "${rows[@]}"; do
        read -r set ours base target <<<"$row"
        io="$(tr ' ' '\n' <<<"${ir[$row/$ours]}" | grep . | median)"
        ib="$(tr ' ' '\n' <<<"${ir[$row/$base]}" | grep . | median)"
        no="$(tr ' ' '\n' <<<"${ns[$row/$ours]}" | grep . | median)"
        nb="$(tr ' ' '\n' <<<"${ns[$row/$base]}" | grep . | median)"
        line="$(awk -v io="$io" -v ib="$ib" -v no="$no" -v nb="$nb" -v n="$OPS" -v t="$TIME_OPS" \
            'BEGIN { printf "%.1f\t%.1f\t%.4f\t%.1f\t%.1f\t%.3f", io / n, ib / n, io / ib, no / t, nb / t, no / nb }')"
        IFS=$'\t' read -r a b r c d s <<<"$line"
        [ "$target" = - ] && shown="(figure)" || shown="≤ ${target}×"
        printf '| %s %s | %s | %s | %s | %s | **%.3f×** | %s | %s | %s | %s× | %.2f× |\n' "$name" "$version" \
            "$(describe "$ours")" "$(describe "$base")" "$a" "$b" "$r" "$shown" "$c" "$d" "$s" \
            "$(awk -v s="$s" 'BEGIN { print 1 / s }')"
        [ -n "$TSV" ] && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$set" "$name" "$version" "$(describe "$ours")" "$(describe "$base")" "$line" >>"$TSV"
    done
    unset ir ns
done
