#!/usr/bin/env bash
# Builds the Python package (python/, `redislock-native`) into a venv under
# .venv-python/ and runs its pytest suite against module-loaded servers that
# the tests start themselves. The server binary is $REDIS_LOCK_SERVER
# (default: redis-server); the module is target/release/libredis_lock.so
# (built here if missing). Extra arguments go to pytest.
#
# Prerequisites: python3 with venv (installed with apt-get as root when
# missing, like scripts/prereqs.sh does), and pip reaching the package index
# for maturin, pytest and redis-py (the store client of the fenced-write tests).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-python"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# --build-only: build (and install the tools), run nothing. With
# PYTHON_TEST_BUILT=1 the build is taken as done (scripts/test-matrix.py
# builds once, then runs the suite on each server, some at the same time).
build_only=0
if [ "${1:-}" = "--build-only" ]; then
    build_only=1
    shift
fi

if [ "${PYTHON_TEST_BUILT:-0}" != 1 ]; then
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get update >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y python3 python3-venv >&2
        else
            echo "error: the Python tests need python3 with venv: sudo apt-get install -y python3-venv" >&2
            exit 1
        fi
    fi

    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install --quiet 'maturin>=1.5,<2' pytest 'redis>=5,<8'

    if [ ! -f "$ROOT/target/release/libredis_lock.so" ]; then
        (cd "$ROOT" && cargo build --release -p redis-lock)
    fi

    # `maturin develop` builds the extension (release) into the venv.
    (cd "$ROOT/python" && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
        "$VENV/bin/maturin" develop --release --quiet)

fi
[ "$build_only" = 1 ] && exit 0

export REDIS_LOCK_SERVER="${REDIS_LOCK_SERVER:-redis-server}"
export REDIS_LOCK_MODULE="${REDIS_LOCK_MODULE:-$ROOT/target/release/libredis_lock.so}"
echo "== python tests on $("$REDIS_LOCK_SERVER" --version)"
cd "$ROOT/python"
exec "$VENV/bin/python" -m pytest -q "$@"
