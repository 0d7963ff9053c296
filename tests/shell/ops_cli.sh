#!/usr/bin/env bash
# ops_cli.sh KVTIERD KVTIERCTL - the operator verbs of kvtierctl against a real kvtierd with a
# disk tier: `status --watch` (plain frames when stdout is not a terminal: each opened by a
# "--- kvtierd" line, rates after the first frame) and `drop` (the count it prints, a get of a
# dropped chunk misses while another namespace keeps its chunk, exit 1 for a name that matches
# nothing, exit 2 without --ns, --json prints the daemon's answer), then a clean stop.
set -euo pipefail

kvtierd=${1:?usage: ops_cli.sh KVTIERD KVTIERCTL}
kvtierctl=${2:?usage: ops_cli.sh KVTIERD KVTIERCTL}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtops curl jq head grep

testlib_start_disk_daemon "$kvtierd" 4MiB

ctl() { "$kvtierctl" -e "$endpoint" -s "$sock" "$@"; }
head -c 4096 /dev/urandom >"$dir/chunk"
for h in 000000000000000000000000000000a1 000000000000000000000000000000a2; do
    expect_eq "put $h" "$(ctl --ns ops-a put "$h" "$dir/chunk")" stored
done
expect_eq "put b" "$(ctl --ns 'ops b' put 000000000000000000000000000000b1 "$dir/chunk")" stored

# the live view, as plain text
ctl status --watch 0.2 --count 3 >"$dir/watch.txt"
expect_eq "frames" "$(grep -c '^--- kvtierd ' "$dir/watch.txt")" 3
for word in '^ram ' '^disk   ok' '^hits ' '^ops/s ' '^namespaces 2' '^  ops-a ' '^sessions '; do
    grep -q "$word" "$dir/watch.txt" || fail "watch output lacks $word: $(cat "$dir/watch.txt")"
done
grep -q '^ops/s  -:' "$dir/watch.txt" || fail "the first frame should show no rate"
grep -q '^ops/s  [0-9.]*:' "$dir/watch.txt" || fail "later frames should show rates"
set +e
ctl status --count 2 >/dev/null 2>&1
expect_eq "--count without --watch" "$?" 2
set -e

# drop
expect_eq "drop ops-a" "$(ctl drop --ns ops-a)" 2
set +e
ctl --ns ops-a get 000000000000000000000000000000a1 "$dir/back" >/dev/null
expect_eq "get of a dropped chunk" "$?" 1
ctl drop --ns no-such-model >/dev/null
expect_eq "drop of an unknown namespace" "$?" 1
ctl drop >/dev/null 2>&1
expect_eq "drop without --ns" "$?" 2
set -e
ctl --ns 'ops b' get 000000000000000000000000000000b1 "$dir/back" >/dev/null
cmp -s "$dir/chunk" "$dir/back" || fail "the other namespace's chunk changed"
ctl drop --ns 'ops b' --revision '' --json >"$dir/drop.json"
expect_jq "drop --json" '.chunks == 1 and .revision == "" and (.namespaces | length) == 1' \
    "$dir/drop.json"
status >"$dir/status.json"
expect_jq "status after the drops" \
    '[.namespaces[] | {m: .model, c: .chunks, d: .dropped_chunks}] ==
     [{m: "ops-a", c: 0, d: 2}, {m: "ops b", c: 0, d: 1}]' "$dir/status.json" '.namespaces'
grep -q 'event=drop ns="ops-a" revision="" id=1 chunks=2' "$dir/kvtierd.log" ||
    fail "no drop log line"
testlib_stop_daemon
echo "ops cli ok"
