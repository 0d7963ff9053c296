#!/bin/bash
# install_check.sh BUILD_DIR - `cmake --install` into a scratch prefix lays out every file an
# operator and an engine developer need, the installed unit passes `systemd-analyze verify`
# (when systemd-analyze exists), is a Type=notify service with a watchdog and a reload, and
# keeps `systemd-analyze security` at or below 1.8 (when it can evaluate a unit file offline),
# and a program built only from the installed header and pkg-config file links against
# libkvtier and runs.
set -euo pipefail
build="$1"
prefix=$(mktemp -d /tmp/kvtinst-XXXXXX)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" > /dev/null
for f in sbin/kvtierd bin/kvtierctl bin/kvtier-bench include/kvtier.h etc/kvtier/kvtierd.json \
         lib/systemd/system/kvtierd.service lib/sysusers.d/kvtier.conf share/doc/kvtier/README.md; do
    [ -e "$prefix/$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'kvtier.pc' | head -n1)")
[ -n "$libdir" ] || { echo "kvtier.pc not installed" >&2; exit 1; }
ls "$libdir"/../libkvtier.so.0 "$libdir"/../libkvtier.a > /dev/null

# one version: the installed header's KVT_VERSION_* is what kvtier.pc and kvtierd say
hv=$(awk '/^#define KVT_VERSION_(MAJOR|MINOR|PATCH) /{v = v sep $3; sep = "."} END{print v}' \
    "$prefix/include/kvtier.h")
pv=$(PKG_CONFIG_PATH="$libdir" pkg-config --modversion kvtier)
dv=$("$prefix/sbin/kvtierd" --version)
[ "$hv" = "$pv" ] && [ "kvtierd $hv" = "$dv" ] ||
    { echo "versions differ: kvtier.h $hv, kvtier.pc $pv, $dv" >&2; exit 1; }

unit="$prefix/lib/systemd/system/kvtierd.service"
grep -q "^ExecStart=$prefix/sbin/kvtierd -c $prefix/etc/kvtier/kvtierd.json$" "$unit" ||
    { echo "unit ExecStart not rewritten to the prefix" >&2; exit 1; }
"$prefix/sbin/kvtierd" -c "$prefix/etc/kvtier/kvtierd.json" --check-config > /dev/null
if command -v systemd-analyze > /dev/null; then
    out=$(systemd-analyze verify "$unit" 2>&1 || true)
    if [ -n "$out" ]; then echo "systemd-analyze verify: $out" >&2; exit 1; fi
    if sec=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null); then
        score=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 1.8) }' ||
            { echo "systemd-analyze security: exposure '$score', want <= 1.8" >&2; exit 1; }
    fi
fi
for key in '^Type=notify$' '^NotifyAccess=main$' '^WatchdogSec=' '^ExecReload=/bin/kill -HUP \$MAINPID$' \
           '^TimeoutStopSec=30$'; do
    grep -q "$key" "$unit" || { echo "unit lacks $key" >&2; exit 1; }
done

cat > "$prefix/t.c" <<'C'
#include <kvtier.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    kvt_hash_t h;
    char hex[33];
    if (kvt_hash_parse("000102030405060708090a0b0c0d0e0f", &h) != 0)
        return 1;
    kvt_hash_format(&h, hex);
    puts(kvt_strerror(KVT_ETIMEDOUT));
    return strcmp(hex, "000102030405060708090a0b0c0d0e0f") != 0;
}
C
# the .pc names the configured prefix; point it at the scratch prefix
cc -o "$prefix/t" "$prefix/t.c" $(PKG_CONFIG_PATH="$libdir" pkg-config --define-variable=prefix="$prefix" --cflags --libs kvtier)
LD_LIBRARY_PATH="$libdir/.." "$prefix/t" > /dev/null
echo "install layout ok"
