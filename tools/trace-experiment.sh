#!/usr/bin/env bash
# trace-experiment.sh [KVTIERD [KVTIER_REPLAY]] - the Mooncake synthetic trace replayed by
# kvtier-replay against fresh daemons: gates off / on x an HBM prefix cache large enough that
# the tier is useless / small enough that it is useful (GATES.md). Not a test.
#
# Each run starts a fresh kvtierd (memfd arena, no disk tier, gates.admission.enabled and
# gates.lookup_skip.enabled both false or both true, default gate settings) and replays the
# first REQUESTS requests of TRACE with --hbm-blocks HBM_LARGE or HBM_SMALL and --chunk-bytes
# CHUNK. The RAM capacity holds every whole block of the replayed requests (distinct blocks x
# (CHUNK + 4 KiB) + 64 MiB), so nothing is evicted and the tier's content is all that was saved.
# The table shows the bytes moved into the tier (server.bytes_received + bytes_committed), the
# tokens loaded, the paid verdicts and the namespace's admission payoff at the end.
#
# Environment: TRACE (../shared/traces/synthetic_trace.jsonl beside the repository),
# REQUESTS (all 3993), CHUNK (65536), HBM_LARGE (50000), HBM_SMALL (500). Needs jq. Run from
# the top of a build tree: `tools/trace-experiment.sh build/daemon/kvtierd build/tools/kvtier-replay`.
set -euo pipefail

kvtierd=${1:-build/daemon/kvtierd}
replay=${2:-build/tools/kvtier-replay}
trace=${TRACE:-$(dirname "$0")/../../shared/traces/synthetic_trace.jsonl}
requests=${REQUESTS:-3993}
chunk=${CHUNK:-65536}
hbm_large=${HBM_LARGE:-50000}
hbm_small=${HBM_SMALL:-500}
command -v jq >/dev/null || { echo "trace-experiment: jq is required" >&2; exit 1; }
[[ -x $kvtierd && -x $replay ]] || { echo "trace-experiment: no $kvtierd or $replay" >&2; exit 1; }
[[ -r $trace ]] || { echo "trace-experiment: no trace at $trace (set TRACE)" >&2; exit 1; }

dir=$(mktemp -d /tmp/kvttx-XXXXXX)
pid=
cleanup() {
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
die() { echo "trace-experiment: $*" >&2; [[ -f $dir/kvtierd.log ]] && tail -n 20 "$dir/kvtierd.log" >&2; exit 1; }

# Distinct whole blocks of the replayed requests: what the tier holds if every save is admitted.
blocks=$(head -n "$requests" "$trace" |
    jq -s '[.[] | .hash_ids[0:(.input_length / 512 | floor)][]] | unique | length')
capacity=$((blocks * (chunk + 4096) + (64 << 20)))
sock="$dir/status.sock"
endpoint="ipc://$dir/kvt.zmq"

# run HBM_BLOCKS GATES(true|false): prints one table row
run() {
    local hbm=$1 enabled=$2 rep deadline
    cat >"$dir/kvtierd.json" <<JSON
{"server": {"endpoint": "$endpoint", "status_socket": "$sock"},
 "ram": {"capacity_bytes": $capacity, "arena_path": "", "prefault": false},
 "log": {"level": "warn"},
 "gates": {"admission": {"enabled": $enabled}, "lookup_skip": {"enabled": $enabled}}}
JSON
    "$kvtierd" -c "$dir/kvtierd.json" 2>"$dir/kvtierd.log" >&2 &
    pid=$!
    deadline=$((SECONDS + 10))
    until [[ -S $sock ]]; do
        kill -0 "$pid" 2>/dev/null || die "kvtierd exited before it was ready"
        ((SECONDS < deadline)) || die "kvtierd not ready after 10 s"
        sleep 0.05
    done
    rep=$("$replay" -c "$dir/kvtierd.json" --trace "$trace" --requests "$requests" \
        --hbm-blocks "$hbm" --chunk-bytes "$chunk" --json) || die "kvtier-replay failed"
    kill -TERM "$pid"
    wait "$pid" || die "kvtierd exit status $?"
    pid=
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
