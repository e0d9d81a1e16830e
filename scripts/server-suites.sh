#!/usr/bin/env bash
# Runs the servers' own test units that atomic slot migration touches, each
# without the module (the baseline) and with it loaded, and prints their
# figures (ok / err / skipped / exceptions per run):
#
#   scripts/server-suites.sh [WORKDIR]      (default: a new temporary folder)
#
#   Redis 8.6.3:  unit/cluster/atomic-slot-migration
#   Valkey 9.1.2: unit/cluster/cluster-migrateslots, unit/cluster/cli
#
# With the module, a unit runs as `./runtest --config loadmodule <module.so>
# --skiptest "CONFIG sanity" --single <unit>`; the module is this
# repository's target/release/libredis_lock.so (`cargo build --release -p
# redis-lock` first), or REDIS_LOCK_MODULE.
#
# The suites come from Debian's source packages (redis 5:8.6.3-1 from
# experimental, valkey 9.1.2-1 from sid), fetched into WORKDIR with
# `apt-get source` under a private apt configuration (Debian's archive
# keyring as Signed-By; dpkg-source checks the hashes), from the machine's
# own mirror as scripts/newest-servers.sh finds it (scripts/apt-uris.sh;
# DEBIAN_MIRROR=<uri> names one). The servers are the ones that script
# fetches (Debian's binaries run through sid's loader): small wrappers in
# each tree's src/ run them the same way, since the suites start
# src/redis-server, src/redis-cli, src/valkey-server and so on. Redis's unit loads its test
# module, built from the tree (`make -C tests/modules
# atomicslotmigration.so`: needs cc and make). tclsh is needed.
#
# Each run gets its own copy of the tree, because a run empties its tree's
# tests/tmp when it starts (two runs sharing a tree abort with "server
# stdout missing"), and its own port range, apart from the others' cluster
# bus ports (each server's port + 10000). Nothing here is kept in the
# repository: WORKDIR holds the sources, trees and logs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
MODULE="${REDIS_LOCK_MODULE:-$ROOT/target/release/libredis_lock.so}"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
REDIS_SRC="redis=5:8.6.3-1"
VALKEY_SRC="valkey=9.1.2-1"

for tool in apt-get dpkg-source tclsh make cc; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "error: $tool is needed" >&2
        exit 1
    }
done
[ -r "$MODULE" ] || {
    echo "error: no module at $MODULE: cargo build --release -p redis-lock" >&2
    exit 1
}
cp "$MODULE" "$WORK/module.so"
redis_server="$("$ROOT/scripts/newest-servers.sh" redis8)"
valkey_server="$("$ROOT/scripts/newest-servers.sh" valkey9)"
redis_bin="$(dirname "$redis_server")"
valkey_bin="$(dirname "$valkey_server")"

# The sources, once.
# shellcheck source=scripts/apt-uris.sh
. "$ROOT/scripts/apt-uris.sh"
fetch_sources() {
    local apt="$WORK/apt" uri mirror=""
    mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$WORK/src"
    local opts=(
        -q -o "Dir::Etc::sourcelist=$apt/sources.list" -o Dir::Etc::sourceparts=-
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
        -o "Dir::Cache::pkgcache=$apt/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$apt/srcpkgcache.bin"
        -o APT::Sandbox::User=root -o Acquire::Languages=none
    )
    local candidates="${DEBIAN_MIRROR:-$(apt_uris | awk '!seen[$0]++')}"
    while IFS= read -r uri; do
        uri="${uri%/}"
        case "$uri" in http://* | https://*) ;; *) continue ;; esac
        printf 'deb-src [signed-by=%s] %s sid main\ndeb-src [signed-by=%s] %s experimental main\n' \
            "$KEYRING" "$uri" "$KEYRING" "$uri" >"$apt/sources.list"
        if apt-get "${opts[@]}" --error-on=any update >"$apt/update.log" 2>&1; then
            mirror="$uri"
            break
        fi
    done <<<"$candidates"
    [ -n "$mirror" ] || {
        cat "$apt/update.log" >&2
        echo "error: no archive of the apt sources serves Debian's sources for sid and experimental; name one with DEBIAN_MIRROR=<uri>" >&2
        exit 1
    }
    (cd "$WORK/src" && apt-get "${opts[@]}" source --download-only "$REDIS_SRC" "$VALKEY_SRC" >"$apt/source.log" 2>&1) || {
        cat "$apt/source.log" >&2
        exit 1
    }
    (cd "$WORK/src" && dpkg-source -x redis_8.6.3-*.dsc redis && dpkg-source -x valkey_9.1.2-*.dsc valkey) >"$apt/unpack.log" 2>&1 || {
        cat "$apt/unpack.log" >&2
        exit 1
    }
    make -C "$WORK/src/redis/tests/modules" atomicslotmigration.so >"$apt/modules.log" 2>&1 || {
        cat "$apt/modules.log" >&2
        exit 1
    }
}
[ -d "$WORK/src/redis" ] && [ -d "$WORK/src/valkey" ] || fetch_sources

# wrap <tree> <package dir> <name> <binary>: src/<name> runs the package's
# usr/bin/<binary> through sid's loader, as newest-servers.sh's wrappers do,
# but with the wrapper's own absolute path as argv[0]: the server keeps it
# as its executable, so that DEBUG RESTART (which re-executes it) works.
wrap() {
    local tree="$1" pkg="$2" name="$3" binary="$4" libs
    pkg="$(cd "$pkg" && pwd)"
    libs="$(cd "$pkg/../sid-libs/usr/lib/x86_64-linux-gnu" && pwd)"
    printf '#!/bin/sh\nexec "%s/ld-linux-x86-64.so.2" --library-path "%s:/usr/lib/x86_64-linux-gnu" --argv0 "$0" "%s/usr/bin/%s" "$@"\n' \
        "$libs" "$libs" "$pkg" "$binary" >"$tree/src/$name"
    chmod +x "$tree/src/$name"
}

# run <name> <source tree> <base port> <unit> [module]
run() {
    local name="$1" source="$2" port="$3" unit="$4" with="${5:-}" tree="$WORK/run-$1"
    rm -rf "$tree"
    cp -a "$source" "$tree"
    local args=(--clients 1 --baseport "$port" --portcount 1000)
    [ -n "$with" ] && args+=(--config loadmodule "$with" --skiptest "CONFIG sanity")
    echo "$name: ./runtest ${args[*]} --single $unit" >&2
    (cd "$tree" && ./runtest "${args[@]}" --single "$unit") >"$WORK/$name.log" 2>&1 && rc=0 || rc=$?
    local text
    text="$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/$name.log")"
    printf '%-28s ok %3d  err %2d  skipped %2d  exceptions %d  exit %d  (%s)\n' "$name" \
        "$(grep -c '^\[ok\]' <<<"$text" || true)" "$(grep -c '^\[err\]' <<<"$text" || true)" \
        "$(grep -c '^\[skip\]' <<<"$text" || true)" "$(grep -c '^\[exception\]' <<<"$text" || true)" \
        "$rc" "$WORK/$name.log"
    rm -rf "$tree"
}

redis_tree="$WORK/src/redis"
redis_pkg="$redis_bin/.."
wrap "$redis_tree" "$redis_pkg" redis-server redis-check-rdb
for tool in redis-cli redis-benchmark redis-check-aof redis-check-rdb; do
    wrap "$redis_tree" "$redis_pkg" "$tool" "$tool"
done
valkey_tree="$WORK/src/valkey"
valkey_pkg="$valkey_bin/.."
wrap "$valkey_tree" "$valkey_pkg" valkey-server valkey-check-rdb
for tool in valkey-cli valkey-benchmark valkey-check-aof valkey-check-rdb; do
    wrap "$valkey_tree" "$valkey_pkg" "$tool" "$tool"
done

# One run at a time (timing-sensitive units on a shared machine); each in
# its own port range anyway.
run redis-asm-baseline "$redis_tree" 21111 unit/cluster/atomic-slot-migration
run redis-asm-module "$redis_tree" 23111 unit/cluster/atomic-slot-migration "$WORK/module.so"
run valkey-migrateslots-baseline "$valkey_tree" 42111 unit/cluster/cluster-migrateslots
run valkey-migrateslots-module "$valkey_tree" 44111 unit/cluster/cluster-migrateslots "$WORK/module.so"
run valkey-cli-baseline "$valkey_tree" 42111 unit/cluster/cli
run valkey-cli-module "$valkey_tree" 44111 unit/cluster/cli "$WORK/module.so"
