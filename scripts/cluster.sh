#!/usr/bin/env bash
# Five independent module-loaded Redis masters on loopback, for the Redlock
# client's examples and demo.
#
#   scripts/cluster.sh start    start them in the background, wait for PING
#   scripts/cluster.sh stop     shut them down
#   scripts/cluster.sh status   show which are running
#
# Environment:
#   PORTS        ports to use, space- or comma-separated (default 7101..7105)
#   BASE_PORT    or: five consecutive ports from this one
#   RUN_DIR      data, logs and pid files (default .redis-cluster/ in the repo)
#   REDIS_LOCK_MODULE  the module (default target/release/libredis_lock.so,
#                built with cargo if missing)
#   MODULE_ARGS  extra module arguments, e.g. "max-ttl 60000"
#   REDIS_CLUSTER=1  instead: a Redis Cluster of three masters with one
#                replica each (default ports 7201..7206), made with
#                redis-cli --cluster create, for Redlock::cluster (the
#                client's `cluster` example)
#
# The nodes are independent masters (no replication between them), as
# Redlock requires, and each logs every write to its AOF with fsync on every
# write, the persistence a lock node should have: a node that forgets a lock
# on restart could grant it a second time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="${RUN_DIR:-$ROOT/.redis-cluster}"
MODULE="${REDIS_LOCK_MODULE:-$ROOT/target/release/libredis_lock.so}"

CLUSTER_MODE="${REDIS_CLUSTER:-}"
[[ "$CLUSTER_MODE" == 0 ]] && CLUSTER_MODE=""
if [[ -n "$CLUSTER_MODE" ]]; then
    RUN_DIR="${RUN_DIR:-$ROOT/.redis-cluster}/redis-cluster"
fi

if [[ -n "${PORTS:-}" ]]; then
    read -r -a PORT_LIST <<<"${PORTS//,/ }"
elif [[ -n "$CLUSTER_MODE" ]]; then
    base="${BASE_PORT:-7201}"
    PORT_LIST=()
    for i in 0 1 2 3 4 5; do PORT_LIST+=($((base + i))); done
else
    base="${BASE_PORT:-7101}"
    PORT_LIST=("$base" $((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)))
fi

die() { echo "cluster.sh: $*" >&2; exit 1; }

need() {
    command -v "$1" >/dev/null 2>&1 || die "$1 is not installed (apt-get install redis-server)"
}

pid_of() {
    local pidfile="$RUN_DIR/$1/redis.pid"
    [[ -s "$pidfile" ]] || return 1
    local pid
    pid="$(cat "$pidfile")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

ping() {
    [[ "$(redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null)" == "PONG" ]]
}

# Polls until "$@" succeeds, for up to $TIMEOUT seconds (default 10).
wait_for() {
    local deadline=$((SECONDS + ${TIMEOUT:-10}))
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.05
    done
}

stopped() { ! pid_of "$1" >/dev/null; }

start() {
    need redis-server
    need redis-cli
    if [[ ! -f "$MODULE" ]]; then
        [[ -z "${REDIS_LOCK_MODULE:-}" ]] || die "module not found: $MODULE"
        echo "building the module (cargo build --release -p redis-lock)"
        (cd "$ROOT" && cargo build --release -p redis-lock)
    fi
    mkdir -p "$RUN_DIR"
    # Keep the run directory out of git without touching the repo's ignores.
    [[ -f "$RUN_DIR/.gitignore" ]] || echo '*' >"$RUN_DIR/.gitignore"
    local port
    for port in "${PORT_LIST[@]}"; do
        if pid="$(pid_of "$port")"; then
            echo "node $port already running (pid $pid)"
            continue
        fi
        if ping "$port"; then
            die "port $port is taken by a server this script did not start"
        fi
        mkdir -p "$RUN_DIR/$port"
        local cluster_args=()
        if [[ -n "$CLUSTER_MODE" ]]; then
            cluster_args=(--cluster-enabled yes --cluster-config-file nodes.conf)
        fi
        # shellcheck disable=SC2086 # MODULE_ARGS is a word list on purpose
        redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
            --dir "$RUN_DIR/$port" --pidfile "$RUN_DIR/$port/redis.pid" \
            --logfile "$RUN_DIR/$port/redis.log" \
            --save "" --appendonly yes --appendfsync always \
            "${cluster_args[@]}" --loadmodule "$MODULE" ${MODULE_ARGS:-}
    done
    for port in "${PORT_LIST[@]}"; do
        if ! wait_for ping "$port"; then
            tail -n 20 "$RUN_DIR/$port/redis.log" >&2 || true
            die "node $port did not answer PING (log above)"
        fi
    done
    if [[ -n "$CLUSTER_MODE" ]]; then
        if ! redis-cli -p "${PORT_LIST[0]}" CLUSTER INFO | grep -q cluster_state:ok; then
            redis-cli --cluster create "${PORT_LIST[@]/#/127.0.0.1:}" \
                --cluster-replicas 1 --cluster-yes >"$RUN_DIR/create.log" 2>&1 ||
                { cat "$RUN_DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
        fi
        cluster_ok() { redis-cli -p "${PORT_LIST[0]}" CLUSTER INFO | grep -q cluster_state:ok; }
        TIMEOUT=30 wait_for cluster_ok || die "the cluster never reached cluster_state:ok"
        replicas_synced() {
            local port synced=0
            for port in "${PORT_LIST[@]}"; do
                if redis-cli -p "$port" INFO replication | grep -q '^master_link_status:up'; then
                    synced=$((synced + 1))
                fi
            done
            ((synced == 3))
        }
        TIMEOUT=30 wait_for replicas_synced || die "the replicas never synced"
        echo "Redis Cluster up: ${PORT_LIST[*]/#/127.0.0.1:} (3 masters, 1 replica each; data in $RUN_DIR)"
        echo "export REDIS_LOCK_CLUSTER=$(printf 'redis://127.0.0.1:%s,' "${PORT_LIST[@]}" | sed 's/,$//')"
        return
    fi
    echo "cluster up: ${PORT_LIST[*]/#/127.0.0.1:} (data in $RUN_DIR)"
    echo "export REDIS_LOCK_NODES=$(printf 'redis://127.0.0.1:%s,' "${PORT_LIST[@]}" | sed 's/,$//')"
}

stop() {
    local port pid
    for port in "${PORT_LIST[@]}"; do
        if ! pid="$(pid_of "$port")"; then
            echo "node $port not running"
            continue
        fi
        redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
        if ! wait_for stopped "$port"; then
            kill -9 "$pid" 2>/dev/null || true
        fi
        echo "node $port stopped"
    done
}

status() {
    local port pid running=0
    for port in "${PORT_LIST[@]}"; do
        if pid="$(pid_of "$port")" && ping "$port"; then
            echo "node $port: running (pid $pid)"
            running=$((running + 1))
        else
            echo "node $port: stopped"
        fi
    done
    echo "$running of ${#PORT_LIST[@]} running"
    ((running == ${#PORT_LIST[@]}))
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
