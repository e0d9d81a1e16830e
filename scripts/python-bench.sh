#!/usr/bin/env bash
# make bench, Python section: builds redislock_native into .venv-bench/ with
# redis-py and pottery (the clients it is compared with) and runs
# bench/python/bench_python.py on servers it starts on loopback and always
# stops. Appends its Markdown section to the report file given as $1
# (BENCHMARKS.md by default). QUICK=1 shortens each figure to 0.5 s and
# measures 16 and 64 threads or tasks only. More arguments go to
# bench_python.py, e.g. `--cases asyncio-one --counts 16,64`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-bench"
OUT="${1:-$ROOT/BENCHMARKS.md}"
if [ $# -gt 0 ]; then shift; fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet 'maturin>=1.5,<2' 'redis>=5,<8' 'pottery>=3,<4'
(cd "$ROOT/python" && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
    "$VENV/bin/maturin" develop --release --quiet)
[ -f "$ROOT/target/release/libredis_lock.so" ] || (cd "$ROOT" && cargo build --release -p redis-lock)

seconds=3
counts=()
if [ -n "${QUICK:-}" ] && [ "${QUICK}" != 0 ]; then
    # The rows with targets only (16 and 64), half a second each.
    seconds=0.5
    counts=(--counts 16,64)
fi
exec "$VENV/bin/python" "$ROOT/bench/python/bench_python.py" \
    --server "${REDIS_LOCK_SERVER:-redis-server}" \
    --module "$ROOT/target/release/libredis_lock.so" \
    --seconds "$seconds" "${counts[@]}" --out "$OUT" "$@"
