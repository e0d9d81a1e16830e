# Sourced by the scripts that fetch Debian packages (valkey-tls.sh,
# newest-servers.sh): no repository names a mirror's host, so the mirror
# comes from the machine's own apt sources at run time.

# The `deb` archive URIs of the machine's apt sources, in the order apt reads
# them, one per line (deb822 stanzas with `Enabled: no` are skipped).
apt_uris() {
    local etc="${APT_ETC:-/etc/apt}" f
    for f in "$etc/sources.list" "$etc"/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk '$1 == "deb" {
                 i = 2
                 if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                 if (i <= NF) print $i
             }' "$f"
    done
    for f in "$etc"/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk 'function flush() {
                 if (deb && enabled && uris != "") { n = split(uris, u, " "); for (j = 1; j <= n; j++) print u[j] }
                 deb = 0; enabled = 1; uris = ""
             }
             BEGIN { flush() }
             /^[ \t]*#/ { next }
             /^[ \t]*$/ { flush(); next }
             tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
             tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
             tolower($1) == "uris:" { for (i = 2; i <= NF; i++) uris = uris " " $i }
             END { flush() }' "$f"
    done
}
