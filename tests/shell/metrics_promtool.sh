#!/usr/bin/env bash
# metrics_promtool.sh KVTIERD KVTIERCTL - `promtool check metrics` (Debian package prometheus,
# installed by scripts/bootstrap.sh) accepts a live daemon's GET /metrics with no warning at all:
# a daemon with the disk tier on, after saves, loads, lookups and a tally with a reason (so the
# conditional families are there: sessions, namespaces, reasons, the disk tier and its recovery),
# and one namespace named with characters a label value must escape. Also checks what promtool
# does not: every family has exactly one HELP and one TYPE line, no family appears twice, and the
# number of exported namespaces is capped (40 declared, 32 exported, the cap of stats.c).
# Skipped (exit 77) only when promtool is not installed.
set -euo pipefail

kvtierd=${1:?usage: metrics_promtool.sh KVTIERD KVTIERCTL}
kvtierctl=${2:?usage: metrics_promtool.sh KVTIERD KVTIERCTL}
if ! command -v promtool >/dev/null; then
    echo "SKIP: promtool not installed (Debian package prometheus)"
    exit 77
fi
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtprom curl jq head

testlib_start_disk_daemon "$kvtierd" 1MiB

ctl() { "$kvtierctl" -e "$endpoint" -s "$sock" "$@"; }
head -c 65536 /dev/urandom >"$dir/chunk"
for i in $(seq 0 39); do
    h=$(printf '%032x' "$i")
    ctl --ns "model-$i" put "$h" "$dir/chunk" >/dev/null
done
# two chunks: the most bytes, so it is among the namespaces exported
ctl --ns 'odd "name"\with' put 000000000000000000000000000000aa "$dir/chunk" >/dev/null
ctl --ns 'odd "name"\with' put 000000000000000000000000000000ab "$dir/chunk" >/dev/null
ctl --ns model-1 get 00000000000000000000000000000001 "$dir/back" >/dev/null
ctl --ns model-1 lookup 00000000000000000000000000000001 >/dev/null
ctl --ns model-1 tally 1 4 --reason too_small=3 >/dev/null

curl -sf --unix-socket "$sock" http://x/metrics >"$dir/metrics.txt"
if ! promtool check metrics <"$dir/metrics.txt" >"$dir/promtool.out" 2>&1; then
    cat "$dir/promtool.out" >&2
    fail "promtool check metrics failed"
fi
[[ ! -s $dir/promtool.out ]] || { cat "$dir/promtool.out" >&2; fail "promtool printed warnings"; }

# one HELP and one TYPE per family, and a family's samples in one block
helps=$(grep -c '^# HELP ' "$dir/metrics.txt")
types=$(grep -c '^# TYPE ' "$dir/metrics.txt")
uniq_types=$(grep '^# TYPE ' "$dir/metrics.txt" | awk '{print $3}' | sort -u | wc -l)
expect_eq "HELP lines" "$helps" "$types"
expect_eq "distinct families" "$uniq_types" "$types"
awk '!/^#/ { n = $0; sub(/[{ ].*/, "", n); sub(/_(bucket|sum|count)$/, "", n);
             if (n != last && seen[n]++) { print "family split: " n; bad = 1 } last = n }
     END { exit bad }' "$dir/metrics.txt" || fail "a family's samples are not contiguous"

# every family named by the conventions (promtool lints units and _total; this is the rest)
grep -q '^kvtier_op_duration_seconds_bucket{op="lookup",le="+Inf"} ' "$dir/metrics.txt" ||
    fail "no op latency histogram"
grep -q '^kvtier_disk_recovery_duration_seconds ' "$dir/metrics.txt" || fail "no recovery family"
grep -q 'reason="too_small"' "$dir/metrics.txt" || fail "no reason label"
grep -qF 'ns="odd \"name\"\\with"' "$dir/metrics.txt" || fail "label value not escaped"

# namespaces capped at 32 (41 declared)
exported=$(grep -c '^kvtier_namespace_chunks{' "$dir/metrics.txt")
expect_eq "namespaces exported" "$exported" 32
status >"$dir/status.json"
expect_jq "namespace counts" '.server.namespaces_declared == 41 and .server.namespaces_exported == 32' \
    "$dir/status.json" '.server'
testlib_stop_daemon
echo "metrics ok: $types families, promtool clean"
