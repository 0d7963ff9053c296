#!/bin/bash
# install_check.sh BUILD_DIR - `cmake --install` into a scratch prefix lays out every file an
# operator and an engine developer need, the installed unit passes `systemd-analyze verify`
# (when systemd-analyze exists), is a Type=notify service with a watchdog and a reload, and
# keeps `systemd-analyze security` at or below 1.8 (when it can evaluate a unit file offline),
# a program built only from the installed header and pkg-config file links against libkvtier
# and runs, and install_consumer.c, built the same way, keeps 8 saves and 8 loads in flight
# from two threads against the installed kvtierd (shared-memory and frames path) and reads back
# every byte.
set -euo pipefail
build="$1"
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtinst cc pkg-config curl
prefix=$dir/prefix
arena=/dev/shm/kvtier-install.$$.$RANDOM.arena
testlib_files+=("$arena" "$arena.d")

cmake --install "$build" --prefix "$prefix" > /dev/null
for f in sbin/kvtierd bin/kvtierctl bin/kvtier-bench include/kvtier.h etc/kvtier/kvtierd.json \
         lib/systemd/system/kvtierd.service lib/sysusers.d/kvtier.conf share/doc/kvtier/README.md; do
    [ -e "$prefix/$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'kvtier.pc' | head -n1)")
[ -n "$libdir" ] || { echo "kvtier.pc not installed" >&2; exit 1; }
# SONAME: major.minor while the major is 0 (client/CMakeLists.txt)
soname=$(awk '/^#define KVT_VERSION_(MAJOR|MINOR) /{v = v sep $3; sep = "."} END{print v}' \
    "$prefix/include/kvtier.h")
ls "$libdir/../libkvtier.so.$soname" "$libdir"/../libkvtier.a > /dev/null

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
pc() { PKG_CONFIG_PATH="$libdir" pkg-config --define-variable=prefix="$prefix" "$@" kvtier; }
# shellcheck disable=SC2046
cc -o "$prefix/t" "$prefix/t.c" $(pc --cflags --libs)
LD_LIBRARY_PATH="$libdir/.." "$prefix/t" > /dev/null

# the consumer: only the installed header and pkg-config file, against the installed daemon
# shellcheck disable=SC2046
cc -O2 -o "$prefix/consumer" "$(dirname "$0")/install_consumer.c" $(pc --cflags --libs) -pthread
sock=$dir/status.sock
cat > "$dir/kvtierd.json" <<JSON
{"server": {"endpoint": "ipc://$dir/kvt.zmq", "status_socket": "$sock"},
 "ram": {"capacity_bytes": "64MiB", "arena_path": "$arena", "max_chunk_bytes": "1MiB"},
 "disk": {"dir": "$dir/disk"}}
JSON
testlib_start_daemon "$prefix/sbin/kvtierd" "$dir/kvtierd.json" "$sock"
testlib_logs+=(consumer.log)
for path in auto frames; do
    LD_LIBRARY_PATH="$libdir/.." "$prefix/consumer" "ipc://$dir/kvt.zmq" $path 64 \
        >> "$dir/consumer.log" 2>&1 || fail "install_consumer ($path) failed"
done
grep -q '^install_consumer: shm path, 64 chunks loaded back byte-exact' "$dir/consumer.log" ||
    fail "the consumer did not take the shared-memory path"
grep -q '^install_consumer: frames path, 64 chunks loaded back byte-exact' "$dir/consumer.log" ||
    fail "the consumer did not take the frames path"
testlib_stop_daemon
echo "install layout ok; $(grep -c 'loaded back byte-exact' "$dir/consumer.log") consumer runs ok"
