#!/usr/bin/env bash
# trace-experiment.sh [KVTIERD [KVTIER_REPLAY]] - a trace replayed by kvtier-replay against fresh
# daemons: gates off / on x an HBM prefix cache large enough that the tier is useless / small
# enough that it is useful (docs/GATES.md). Not a test.
#
# Each run starts a fresh kvtierd (memfd arena, no disk tier, gates.admission.enabled and
# gates.lookup_skip.enabled both false or both true, default gate settings) and replays the
# first REQUESTS requests of TRACE with --hbm-blocks HBM_LARGE or HBM_SMALL and --chunk-bytes
# CHUNK. The RAM capacity holds every whole block of the replayed requests (distinct blocks x
# (CHUNK + 4 KiB) + 64 MiB), so nothing is evicted and the tier's content is all that was saved.
# The table shows the bytes moved into the tier (server.bytes_received + bytes_committed), the
# tokens loaded, the paid verdicts and the namespace's admission payoff at the end.
#
# Environment: TRACE, a Mooncake-format trace file (the Mooncake synthetic trace, for the
# README's figures); without it the script replays what `tools/kvtier-tracegen --seed SEED
# --requests REQUESTS` writes (SEED 1). REQUESTS (all of TRACE, else 3993), CHUNK (65536),
# HBM_LARGE (50000), HBM_SMALL (500). Needs curl and jq (and /usr/bin/python3 without TRACE).
# Run from the top of a build tree:
# `tools/trace-experiment.sh build/daemon/kvtierd build/tools/kvtier-replay`. The daemon is
# started and stopped as the shell tests do it (tests/lib/testlib.sh).
set -euo pipefail

kvtierd=${1:-build/daemon/kvtierd}
replay=${2:-build/tools/kvtier-replay}
chunk=${CHUNK:-65536}
hbm_large=${HBM_LARGE:-50000}
hbm_small=${HBM_SMALL:-500}
# shellcheck source=../tests/lib/testlib.sh
source "$(dirname "$0")/../tests/lib/testlib.sh"
testlib_init kvttx curl jq "$kvtierd" "$replay"
if [[ -n ${TRACE:-} ]]; then
    trace=$TRACE
    [[ -r $trace ]] || fail "no trace at $trace"
    requests=${REQUESTS:-$(wc -l <"$trace")}
else
    trace=$dir/trace.jsonl
    requests=${REQUESTS:-3993}
    /usr/bin/python3 "$(dirname "$0")/kvtier-tracegen" --seed "${SEED:-1}" --requests "$requests" \
        --output "$trace" || fail "kvtier-tracegen failed"
fi

# Distinct whole blocks of the replayed requests: what the tier holds if every save is admitted.
blocks=$(head -n "$requests" "$trace" |
    jq -s '[.[] | .hash_ids[0:(.input_length / 512 | floor)][]] | unique | length')
capacity=$((blocks * (chunk + 4096) + (64 << 20)))
sock="$dir/status.sock"
endpoint="ipc://$dir/kvt.zmq"

# run HBM_BLOCKS GATES(true|false): prints one table row
run() {
    local hbm=$1 enabled=$2 rep
    cat >"$dir/kvtierd.json" <<JSON
{"server": {"endpoint": "$endpoint", "status_socket": "$sock"},
 "ram": {"capacity_bytes": $capacity, "arena_path": "", "prefault": false},
 "log": {"level": "warn"},
 "gates": {"admission": {"enabled": $enabled}, "lookup_skip": {"enabled": $enabled}}}
JSON
    : >"$dir/kvtierd.log"
    testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"
    rep=$("$replay" -c "$dir/kvtierd.json" --trace "$trace" --requests "$requests" \
        --hbm-blocks "$hbm" --chunk-bytes "$chunk" --json) || fail "kvtier-replay failed"
    testlib_stop_daemon
    jq -r --arg g "$([[ $enabled == true ]] && echo on || echo off)" '
        [.hbm_blocks, $g, .bytes_received + .bytes_committed, .blocks_saved, .blocks_declined,
         .tokens_loaded, .verdicts.aligned_large_hit, .probes_total, .lookups_skipped,
         (.admission.payoff * 1e4 | round / 1e4), .admission.would_decline,
         .lookup_skip.would_skip, (.lookup_skip.act_ema * 1e4 | round / 1e4),
         (.load_hit_rate * 1e4 | round / 1e4), (.seconds * 10 | round / 10)] | @tsv' <<<"$rep"
}

start=$SECONDS
{
    printf 'hbm\tgates\tbytes_saved\tblocks_saved\tblocks_declined\ttokens_loaded\tpaid\tverdicts'
    printf '\tlookups_skipped\tpayoff\twould_decline\twould_skip\tact_ema\tload_hit_rate\treplay_s\n'
    for hbm in "$hbm_large" "$hbm_small"; do
        run "$hbm" false
        run "$hbm" true
    done
} >"$dir/table"
column -t -s $'\t' "$dir/table" 2>/dev/null || cat "$dir/table"
echo "requests=$requests chunk=$chunk distinct_blocks=$blocks capacity=$capacity, $((SECONDS - start)) s"
