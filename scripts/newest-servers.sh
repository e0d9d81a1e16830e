#!/usr/bin/env bash
# Fetches the newest Redis 8.x and Valkey 9.x that Debian offers, for
# `make test`'s third and fourth passes, and prints how to start them:
#
#   scripts/newest-servers.sh            prints "redis8 <path>" and "valkey9 <path>"
#   scripts/newest-servers.sh redis8     prints the redis-server path only
#   scripts/newest-servers.sh valkey9    prints the valkey-server path only
#
# The servers are Debian's own packages, pinned for reproducible runs:
# `redis-tools` REDIS_VERSION from experimental and `valkey-tools`
# VALKEY_VERSION from sid (unstable). When a pin is gone from the archive
# (sid keeps only its newest version), the newest version of the same major
# is taken instead and a line on stderr says which. Both packages carry the
# server as `*-check-rdb`, which acts as the server when started under the
# server's name. They need a newer C library (2.38+) and C++ runtime than
# bookworm has, so sid's `libc6`, `libstdc++6` and `libgcc-s1` are unpacked
# beside them and the servers run through sid's own dynamic loader, with the
# machine's libraries (jemalloc, lzf, OpenSSL, which redis-server pulled in)
# after sid's. Nothing is installed system-wide and no apt source is added:
# everything goes into .servers/ in the repository (git-ignored):
#
#   .servers/sid-libs/        sid's C library, C++ runtime and libgcc
#   .servers/redis-8/         redis-tools unpacked; bin/redis-server, bin/redis-cli
#   .servers/valkey-9/        valkey-tools unpacked; bin/valkey-server, bin/valkey-cli
#
# bin/* are small wrappers that `exec` sid's loader with the binary, so the
# wrapper's PID is the server's own (kill -9, SIGSTOP and SIGCONT reach the
# server) and the file names say which server it is (testkit's is_valkey()
# and cli_binary() go by them).
#
# The download is checked the way apt checks it, because apt does it:
# `apt-get update` and `apt-get download` with a private configuration
# (sources, lists and archives in a temporary directory) and Debian's archive
# keyring as the sources' Signed-By, so each suite's InRelease must carry a
# valid signature and each index and package the hash it is given. The
# mirror is the machine's own: the archive URIs of its apt sources
# (/etc/apt/sources.list and sources.list.d/, one-line `deb` entries and
# deb822 `URIs:` fields), in order, the first one that serves sid and
# experimental; DEBIAN_MIRROR=<uri> names one instead (APT_ETC=<dir> reads
# another apt configuration directory).
#
# A second run finds the servers in place (same pins, both start) and only
# prints the paths.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.servers"
REDIS_VERSION="5:8.6.3-1"
VALKEY_VERSION="9.1.2-1"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
LIBS="libc6 libstdc++6 libgcc-s1"
REDIS_SERVER="$DIR/redis-8/bin/redis-server"
VALKEY_SERVER="$DIR/valkey-9/bin/valkey-server"
STAMP="$DIR/pins"
PINS="redis-tools=$REDIS_VERSION valkey-tools=$VALKEY_VERSION"

print_paths() {
    case "${1:-}" in
    redis8) echo "$REDIS_SERVER" ;;
    valkey9) echo "$VALKEY_SERVER" ;;
    "") echo "redis8 $REDIS_SERVER"; echo "valkey9 $VALKEY_SERVER" ;;
    *) echo "usage: $0 [redis8|valkey9]" >&2; exit 2 ;;
    esac
}

case "${1:-}" in redis8 | valkey9 | "") ;; *) print_paths "$1" ;; esac

if [ -r "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$PINS" ] &&
    "$REDIS_SERVER" --version >/dev/null 2>&1 && "$VALKEY_SERVER" --version >/dev/null 2>&1; then
    print_paths "${1:-}"
    exit 0
fi

# apt-get and dpkg-deb come with every Debian system; gpgv checks the
# signatures (apt depends on it, but minimal images may lack it).
if ! command -v gpgv >/dev/null 2>&1 || [ ! -r "$KEYRING" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y gpgv debian-archive-keyring >&2
    else
        echo "error: gpgv and Debian's archive keyring are needed: sudo apt-get install -y gpgv debian-archive-keyring" >&2
        exit 1
    fi
fi
for tool in apt-get apt-cache dpkg-deb dpkg; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "error: $tool is needed to fetch Debian's Redis 8 and Valkey 9 (a Debian or Ubuntu system)" >&2
        exit 1
    }
done

# apt_uris: the Debian archives of the machine's own apt sources.
# shellcheck source=scripts/apt-uris.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt-uris.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
apt_opts=(
    -q -o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
    -o "Dir::Cache::pkgcache=$work/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$work/srcpkgcache.bin"
    -o APT::Sandbox::User=root -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
)

if [ -n "${DEBIAN_MIRROR:-}" ]; then
    candidates="$DEBIAN_MIRROR"
else
    candidates="$(apt_uris | awk '!seen[$0]++')"
fi
mirror=""
while IFS= read -r uri; do
    uri="${uri%/}"
    case "$uri" in http://* | https://*) ;; *) continue ;; esac
    printf 'deb [signed-by=%s] %s sid main\ndeb [signed-by=%s] %s experimental main\n' \
        "$KEYRING" "$uri" "$KEYRING" "$uri" >"$work/sources.list"
    if apt-get "${apt_opts[@]}" --error-on=any update >"$work/update.log" 2>&1; then
        mirror="$uri"
        break
    fi
done <<<"$candidates"
[ -n "$mirror" ] || {
    [ -s "$work/update.log" ] && cat "$work/update.log" >&2
    echo "error: no archive of the apt sources serves Debian sid and experimental with a valid signature (tried: $(echo $candidates)); name one with DEBIAN_MIRROR=<uri>" >&2
    exit 1
}

# The pinned version when the archive still has it, else the newest of the
# same major version (printed).
pick() {
    local package="$1" pinned="$2" major available newest
    available="$(apt-cache "${apt_opts[@]}" madison "$package" | awk -F'|' '{gsub(/ /, "", $2); print $2}')"
    if grep -qxF "$pinned" <<<"$available"; then
        echo "$pinned"
        return
    fi
    major="${pinned#*:}"
    major="${major%%.*}"
    newest=""
    while IFS= read -r v; do
        local upstream="${v#*:}"
        [ "${upstream%%.*}" = "$major" ] || continue
        if [ -z "$newest" ] || dpkg --compare-versions "$v" gt "$newest"; then newest="$v"; fi
    done <<<"$available"
    [ -n "$newest" ] || {
        echo "error: Debian offers no $package $major.x any more (available: $(echo $available))" >&2
        exit 1
    }
    echo "note: $package $pinned is gone from the archive; taking $newest instead" >&2
    echo "$newest"
}
redis_version="$(pick redis-tools "$REDIS_VERSION")"
valkey_version="$(pick valkey-tools "$VALKEY_VERSION")"
echo "Fetching Debian's redis-tools $redis_version, valkey-tools $valkey_version and sid's $LIBS from $mirror into $DIR ..." >&2
libs=()
for lib in $LIBS; do libs+=("$lib/sid"); done
(cd "$work/debs" && apt-get "${apt_opts[@]}" download \
    "redis-tools=$redis_version" "valkey-tools=$valkey_version" "${libs[@]}" >"$work/download.log" 2>&1) || {
    cat "$work/download.log" >&2
    exit 1
}

rm -rf "$DIR"
mkdir -p "$DIR"
for lib in $LIBS; do
    dpkg-deb -x "$work/debs/${lib}"_*.deb "$DIR/sid-libs"
done
dpkg-deb -x "$work/debs"/redis-tools_*.deb "$DIR/redis-8"
dpkg-deb -x "$work/debs"/valkey-tools_*.deb "$DIR/valkey-9"

# wrapper <file> <name> <binary relative to the package's folder>
wrapper() {
    mkdir -p "$(dirname "$1")"
    cat >"$1" <<EOF
#!/bin/sh
# Written by scripts/newest-servers.sh: runs Debian's $2 through sid's loader
# and libraries (see there); exec keeps this PID the server's.
here="\${0%/*}"
libs="\$here/../../sid-libs/usr/lib/x86_64-linux-gnu"
exec "\$libs/ld-linux-x86-64.so.2" --library-path "\$libs:/usr/lib/x86_64-linux-gnu" \\
    --argv0 "$2" "\$here/../$3" "\$@"
EOF
    chmod +x "$1"
}
wrapper "$REDIS_SERVER" redis-server usr/bin/redis-check-rdb
wrapper "$DIR/redis-8/bin/redis-cli" redis-cli usr/bin/redis-cli
wrapper "$VALKEY_SERVER" valkey-server usr/bin/valkey-check-rdb
wrapper "$DIR/valkey-9/bin/valkey-cli" valkey-cli usr/bin/valkey-cli

"$REDIS_SERVER" --version >&2
"$VALKEY_SERVER" --version >&2
{
    echo "$PINS"
    echo "redis-tools $redis_version, valkey-tools $valkey_version;" \
        "sid: $(cd "$work/debs" && ls $(for lib in $LIBS; do echo "${lib}_*.deb"; done) | tr '\n' ' ')"
} >"$STAMP"
print_paths "${1:-}"
