#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ (the pure lock logic of the core
# crate: argument parsing, sequences of lock operations, and the decoding of
# saved lock values).
#
#   scripts/fuzz.sh short            about 40 s of fuzzing in all (`make test`)
#   scripts/fuzz.sh long             10 minutes in all (`make fuzz`);
#                                    FUZZ_SECONDS=N sets the total instead
#   scripts/fuzz.sh MODE TARGET...   only these targets (see `cargo fuzz list`)
#
# The time is shared evenly between the targets and does not include the
# build. Each target's corpus grows in fuzz/corpus/TARGET (not in git),
# starting from fuzz/seeds/TARGET. A failure stops the run with status 1 and
# leaves the input in fuzz/artifacts/TARGET/; the script prints the command
# that replays it.
#
# cargo-fuzz is installed when missing (cargo install --locked cargo-fuzz).
# It needs nightly compiler features: on a stable toolchain this script sets
# RUSTC_BOOTSTRAP=1 for its own builds. The targets are built without a
# sanitizer: the core crate has no unsafe code (#![forbid(unsafe_code)]), and
# overflow checks and debug assertions stay on.
set -euo pipefail

cd "$(dirname "$0")/.."

mode=${1:-short}
[ $# -gt 0 ] && shift
case "$mode" in
short) total=40 ;;
long) total=${FUZZ_SECONDS:-600} ;;
*)
    echo "usage: $0 short|long [TARGET...]" >&2
    exit 2
    ;;
esac

if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed. Install Rust from https://rustup.rs, then run this again." >&2
    exit 1
fi
# libfuzzer-sys compiles libFuzzer, which is C++.
if ! command -v c++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "Installing g++ (libFuzzer is built from C++) ..."
        DEBIAN_FRONTEND=noninteractive apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y g++
    else
        echo "error: a C++ compiler is needed to build libFuzzer: sudo apt-get install -y g++" >&2
        exit 1
    fi
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "Installing cargo-fuzz ..."
    cargo install --locked cargo-fuzz
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
[ ${#targets[@]} -gt 0 ] || { echo "error: no fuzz targets found" >&2; exit 1; }
seconds=$(( total / ${#targets[@]} ))
[ "$seconds" -ge 1 ] || seconds=1

flags=(--sanitizer none)
mkdir -p fuzz/target/logs
echo "fuzz: building ${targets[*]} ..."
if ! cargo fuzz build "${flags[@]}" >fuzz/target/logs/build.log 2>&1; then
    cat fuzz/target/logs/build.log >&2
    exit 1
fi
status=0
for target in "${targets[@]}"; do
    corpus=fuzz/corpus/$target
    mkdir -p "$corpus"
    inputs=("$corpus")
    [ -d "fuzz/seeds/$target" ] && inputs+=("fuzz/seeds/$target")
    options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    [ -f "fuzz/$target.dict" ] && options+=(-dict="fuzz/$target.dict")
    log=fuzz/target/logs/$target.log
    echo "fuzz: $target for ${seconds} s (log: $log) ..."
    if cargo fuzz run "${flags[@]}" "$target" "${inputs[@]}" -- "${options[@]}" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
        size=$(find "$corpus" -type f | wc -l)
        echo "fuzz: $target: ok, ${runs:-?} runs (${speed:-?}/s), corpus $size inputs"
    else
        status=1
        echo "fuzz: $target FAILED (full output: $log):" >&2
        grep -m1 -A3 'panicked at' "$log" >&2 || tail -40 "$log" >&2
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        if [ -n "$artifact" ]; then
            echo "fuzz: replay it with: RUSTC_BOOTSTRAP=1 cargo fuzz run ${flags[*]} $target $artifact" >&2
        fi
    fi
done
exit $status
