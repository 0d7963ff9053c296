#!/usr/bin/env bash
# replay_smoke.sh KVTIERD KVTIER_REPLAY KVTIER_TRACEGEN - kvtier-replay on a 200-request trace that
# kvtier-tracegen writes at test time (shape conversations, seed 1), against a real kvtierd
# (memfd arena large enough that nothing is evicted, 4 KiB per block), four times on one daemon
# (namespaces never meet): `replay-off` (gates off) and `replay-on` (admission and lookup skip
# enabled by a per-namespace override) with a 100-block HBM cache, then `value-useless` and
# `value-useful`, both gates enabled with policy value and learn_tokens = window_tokens = 131072
# (the defaults scaled down 32 times: the trace offers 1M tokens), with an HBM cache holding
# every distinct block (the tier is useless) and with 100 blocks (it serves most prompts). The trace itself is checked first: the same seed writes the same
# bytes and another seed other bytes; every record has the four fields, ceil(input_length / 512)
# hash_ids, ids numbered in the order of their first appearance, and each id always behind the
# same id (prefix-chained). Then the replay, checked with jq:
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
#   - gates on: stored + declined + exists = the blocks offered, bytes = stored x 4096;
#   - the token totals reached the daemon: its served and written tokens are the replay's;
#   - the direction of the value policy (docs/GATES.md 7): useless, at most a quarter of the
#     bytes of gates off (every distinct block); useful, at least 98% of the tokens gates off
#     served at the same HBM size.
# kvtierd stops cleanly (exit 0, no sanitizer report).
set -euo pipefail

usage="usage: replay_smoke.sh KVTIERD KVTIER_REPLAY KVTIER_TRACEGEN"
kvtierd=${1:?$usage}
replay=${2:?$usage}
tracegen=${3:?$usage}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtreplay jq curl cmp /usr/bin/python3

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
    "replay-on": {"gates": {"admission": {"enabled": true}, "lookup_skip": {"enabled": true}}},
    "value-useless": {"gates": {"admission": {"enabled": true, "policy": "value",
        "learn_tokens": 131072, "window_tokens": 131072}, "lookup_skip": {"enabled": true}}},
    "value-useful": {"gates": {"admission": {"enabled": true, "policy": "value",
        "learn_tokens": 131072, "window_tokens": 131072}, "lookup_skip": {"enabled": true}}}
  }
}
JSON
testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"

trace=$dir/trace.jsonl
/usr/bin/python3 "$tracegen" --requests "$requests" --seed 1 --output "$trace" ||
    fail "kvtier-tracegen: exit $?"
/usr/bin/python3 "$tracegen" --requests "$requests" --seed 1 >"$dir/again.jsonl"
/usr/bin/python3 "$tracegen" --requests "$requests" --seed 2 >"$dir/other.jsonl"
cmp -s "$dir/again.jsonl" "$trace" || fail "kvtier-tracegen --seed 1 wrote two different traces"
! cmp -s "$dir/other.jsonl" "$trace" || fail "kvtier-tracegen --seed 2 wrote the trace of --seed 1"
jq -s . "$trace" >"$dir/trace.json"
expect_jq "trace: $requests records" "length == $requests" "$dir/trace.json" length
expect_jq "trace: every record is timestamp, input_length, output_length, hash_ids" \
    'all(.[]; keys_unsorted == ["timestamp", "input_length", "output_length", "hash_ids"])' \
    "$dir/trace.json" '.[0]'
expect_jq "trace: ceil(input_length / 512) hash_ids" \
    'all(.[]; (.hash_ids | length) == ((.input_length + 511) / 512 | floor))' "$dir/trace.json" \
    '[.[] | select((.hash_ids | length) != ((.input_length + 511) / 512 | floor))] | first'
expect_jq "trace: ids numbered in the order of their first appearance" \
    'reduce (.[] | .hash_ids[]) as $h ({next: 0, ok: true};
        if $h < .next then . elif $h == .next then .next += 1 else .ok = false end) | .ok' \
    "$dir/trace.json" 'map(.hash_ids) | first'
expect_jq "trace: each id always behind the same id (prefix-chained)" \
    '[.[] | .hash_ids | [-1] + . | [range(1; length) as $i | {id: .[$i], prev: .[$i - 1]}][]] |
     group_by(.id) | all(map(.prev) | unique | length == 1)' "$dir/trace.json" length
expect_jq "trace: some prefixes are shared" \
    '[.[] | .hash_ids[0]] | (unique | length) < length' "$dir/trace.json" length

distinct=$(head -n "$requests" "$trace" |
    jq -s '[.[] | .hash_ids[0:(.input_length / 512 | floor)][]] | unique | length')
no_block=$(head -n "$requests" "$trace" | jq -s '[.[] | select(.input_length < 512)] | length')
((distinct > 1000)) || fail "trace: only $distinct distinct whole blocks in $requests requests"

replay_run() { # NS [HBM_BLOCKS [POLICY]]: the --json report in $dir/NS.json
    "$replay" -c "$dir/kvtierd.json" --trace "$trace" --requests "$requests" \
        --hbm-blocks "${2:-100}" --chunk-bytes "$chunk" --ns "$1" ${3:+--policy "$3"} --json \
        >"$dir/$1.json" 2>"$dir/$1.err" ||
        { cat "$dir/$1.err" >&2; fail "kvtier-replay --ns $1: exit $?"; }
}

# check NAME JQ_EXPR NS: the expression must be true of the report of NS
check() {
    expect_jq "$3: $1" "$2" "$dir/$3.json"
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
for ns in replay-off replay-on; do
    check "token totals folded" \
        ".admission.served_tokens == .served_tokens and .admission.written_tokens == .written_tokens
         and .served_tokens == .tokens_loaded and .written_tokens == .blocks_saved * 512" "$ns"
done
check "gates off: policy off" '.policy == "off"' replay-off

replay_run value-useless "$distinct" value
replay_run value-useful 100 value
for ns in value-useless value-useful; do
    check "token totals folded" \
        ".admission.served_tokens == .served_tokens and .admission.written_tokens == .written_tokens" \
        "$ns"
    check "no load went wrong" ".load_mismatch == 0 and .load_short == 0" "$ns"
done
check "useless: nothing served" ".served_tokens == 0" value-useless
check "useless: at most a quarter of the bytes of gates off" \
    ".bytes_received + .bytes_committed <= $distinct * $chunk / 4" value-useless
off_served=$(jq -e .served_tokens "$dir/replay-off.json")
check "useful: at least 98% of the tokens gates off served ($off_served)" \
    ".served_tokens * 100 >= $off_served * 98" value-useful

# A request longer than the daemon takes in one call (server.max_chunks_per_request, 4096 by
# default) is replayed as its first 4096 blocks (0.2.10), counted, and said once on stderr: two
# requests of the same 5000 blocks; the second finds its 100 first blocks in HBM and loads the
# rest of the 4096 but the last (the engine recomputes a prompt's last token).
long=$dir/long.jsonl
/usr/bin/python3 -c '
import json
for t in (0, 1):
    print(json.dumps({"timestamp": t, "input_length": 5000 * 512, "output_length": 1,
                      "hash_ids": list(range(5000))}))' >"$long"
"$replay" -c "$dir/kvtierd.json" --trace "$long" --hbm-blocks 100 --chunk-bytes "$chunk" \
    --ns long --json >"$dir/long.json" 2>"$dir/long.err" ||
    { cat "$dir/long.err" >&2; fail "kvtier-replay of requests over 4096 blocks: exit $?"; }
grep -q "replayed as their first 4096" "$dir/long.err" ||
    fail "kvtier-replay did not say that it cut requests: $(cat "$dir/long.err")"
check "long requests cut to 4096 blocks" \
    ".requests == 2 and .requests_truncated == 2 and .blocks_truncated == 2 * 904" long
check "long requests: the first saved, the second loaded" \
    ".blocks_saved == 4096 and .blocks_loaded == 4096 - 1 - 100 and .loads_verified == .blocks_loaded
     and .prompt_tokens == 2 * 4096 * 512" long

testlib_stop_daemon
for ns in replay-off replay-on value-useless value-useful; do
    jq -c "{ns: \"$ns\", policy, hbm_blocks, lookups_skipped, paid_total, blocks_saved,
        blocks_declined, served_tokens, written_tokens, net}" "$dir/$ns.json"
done
echo "PASS: replay_smoke ($requests requests, $distinct distinct blocks)"
