#!/usr/bin/env bash
# Installs what building and testing redis-lock needs, on Debian/Ubuntu:
# redis-server (and redis-tools for redis-cli, redis-benchmark) and
# libclang-dev (bindgen, used by the redis-module crate). As root it runs
# apt-get itself; otherwise it prints the exact command and stops.
set -euo pipefail

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
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed. Install Rust from https://rustup.rs (rustup), then run make again." >&2
    exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

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
