#!/usr/bin/env bash
# replay_smoke.sh KVTIERD KVTIER_REPLAY TRACE - kvtier-replay on the first 200 requests of the
# Mooncake synthetic trace against a real kvtierd (memfd arena large enough that nothing is
# evicted, 4 KiB per block), twice on one daemon: namespace `replay-off` (gates off) and
# `replay-on` (admission and lookup skip enabled by a per-namespace override). Checked with jq:
#   - every request is accounted for: answered + skipped lookups + requests without a whole
#     block = 200, and the daemon's lookup_skip.lookups = the answered lookups;
#   - verdicts = answered lookups with hit > 0 = probes_total; paid = aligned_large_hit;
#   - the daemon folded every tally: admission.probes = probes_total + skipped lookups (the
#     daemon records a skipped lookup as a verdict itself);
#   - loads: every block loaded was verified byte-exact, none missing, tokens = blocks x 512,
#     and some were loaded (the small HBM makes the tier pay);
#   - gates off: every distinct whole block of the 200 requests (counted here with jq from the
#     trace) is saved exactly once, nothing declined, and the daemon received exactly that many
#     blocks x 4096 bytes;
#   - gates on: stored + declined + exists = the blocks offered, bytes = stored x 4096.
# kvtierd stops cleanly (exit 0, no sanitizer report). Exits 77 (skipped) when TRACE is absent.
set -euo pipefail

kvtierd=${1:?usage: replay_smoke.sh KVTIERD KVTIER_REPLAY TRACE}
replay=${2:?usage: replay_smoke.sh KVTIERD KVTIER_REPLAY TRACE}
trace=${3:?usage: replay_smoke.sh KVTIERD KVTIER_REPLAY TRACE}
if [[ ! -r $trace ]]; then
    echo "SKIP: no trace at $trace"
    exit 77
fi
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtreplay jq

requests=200
chunk=4096
endpoint="ipc://$dir/kvt.zmq"
sock="$dir/status.sock"
cat >"$dir/kvtierd.json" <<JSON
{
  "server": {"endpoint": "$endpoint", "status_socket": "$sock"},
  "ram": {"capacity_bytes": "128MiB", "arena_path": "", "prefault": false},
  "log": {"level": "warn"},
  "namespaces": {
    "replay-on": {"gates": {"admission": {"enabled": true}, "lookup_skip": {"enabled": true}}}
  }
}
JSON
"$kvtierd" -c "$dir/kvtierd.json" 2>"$dir/kvtierd.log" >&2 &
pid=$!
deadline=$((SECONDS + 10))
until [[ -S $sock ]]; do
    kill -0 "$pid" 2>/dev/null || fail "kvtierd exited before it was ready"
    ((SECONDS < deadline)) || fail "kvtierd not ready after 10 s"
    sleep 0.05
done

distinct=$(head -n "$requests" "$trace" |
    jq -s '[.[] | .hash_ids[0:(.input_length / 512 | floor)][]] | unique | length')
no_block=$(head -n "$requests" "$trace" | jq -s '[.[] | select(.input_length < 512)] | length')
((distinct > 1000)) || fail "trace: only $distinct distinct whole blocks in $requests requests"

replay_run() { # NS: the --json report on stdout
    "$replay" -c "$dir/kvtierd.json" --trace "$trace" --requests "$requests" --hbm-blocks 100 \
        --chunk-bytes "$chunk" --ns "$1" --json >"$dir/$1.json" 2>"$dir/$1.err" ||
        { cat "$dir/$1.err" >&2; fail "kvtier-replay --ns $1: exit $?"; }
}

# check NAME JQ_EXPR: the expression must be true of the report
check() {
    jq -e "$2" "$dir/$3.json" >/dev/null ||
        { jq . "$dir/$3.json" >&2; fail "$3: $1 ($2)"; }
}

for ns in replay-off replay-on; do
    replay_run "$ns"
    check "requests" ".requests == $requests" "$ns"
    check "requests without a whole block" ".requests_without_whole_block == $no_block" "$ns"
    check "every request accounted for" \
        ".lookups_answered + .lookups_skipped + .requests_without_whole_block == $requests" "$ns"
    check "daemon lookups = answered" ".lookup_skip.lookups == .lookups_answered" "$ns"
    check "verdicts = answered lookups with a hit" \
        "([.verdicts[]] | add) == .lookups_hit and .probes_total == .lookups_hit" "$ns"
    check "paid = aligned_large_hit" ".paid_total == .verdicts.aligned_large_hit" "$ns"
    check "no unaligned verdicts (hbm is whole blocks)" ".verdicts.unaligned_hbm_prefill == 0" "$ns"
    check "daemon folded every tally" ".admission.probes == .probes_total + .lookups_skipped" "$ns"
    check "loads happened" ".paid_total > 0 and .blocks_loaded > 0" "$ns"
    check "loads verified" \
        ".loads_verified == .blocks_loaded and .load_mismatch == 0 and .load_short == 0" "$ns"
    check "tokens loaded" ".tokens_loaded == .blocks_loaded * 512" "$ns"
    check "nothing refused for space" ".blocks_nospace == 0" "$ns"
    check "bytes = stored blocks" \
        ".bytes_received + .bytes_committed == .blocks_saved * $chunk" "$ns"
done
check "gates off: every distinct block saved once" \
    ".blocks_saved == $distinct and .blocks_exists == 0 and .blocks_declined == 0" replay-off
check "gates off: disabled, nothing skipped" \
    ".admission.enabled == false and .lookup_skip.enabled == false and .lookups_skipped == 0 and
     .admission.skipped == 0" replay-off
check "gates on: enabled" ".admission.enabled == true and .lookup_skip.enabled == true" replay-on
check "gates on: declines counted by the daemon" \
    "(.save_ops_declined > 0) == (.admission.skipped > 0)" replay-on

kill -TERM "$pid"
wait "$pid" || fail "kvtierd exit status $?"
pid=
! grep -q "runtime error\|AddressSanitizer\|LeakSanitizer" "$dir/kvtierd.log" ||
    fail "sanitizer report in kvtierd.log"
for ns in replay-off replay-on; do jq -c "{ns: \"$ns\", lookups_skipped, paid_total, probes_total, blocks_saved, blocks_declined, save_ops_declined, adm: .admission}" "$dir/$ns.json"; done
echo "PASS: replay_smoke ($requests requests, $distinct distinct blocks)"
