#!/usr/bin/env bash
# trace-experiment.sh [KVTIERD [KVTIER_REPLAY]] - a trace replayed by kvtier-replay against fresh
# daemons: a matrix of HBM prefix-cache sizes x admission policies {off, atom, value}, printed as
# one table (docs/GATES.md section 7). Not a test.
#
# Each run starts a fresh kvtierd (memfd arena, no disk tier) and replays the first REQUESTS
# requests of TRACE with --hbm-blocks HBM and --chunk-bytes CHUNK. Policy `off` runs both gates
# disabled; `atom` and `value` run admission enabled with that policy (gates.admission.policy)
# and, with SKIP=1, the lookup-skip gate enabled too; every other gate setting is the default,
# but gates.admission.cost_ratio is COST. kvtier-replay is told the policy (--policy) and
# refuses a daemon that runs another one. The RAM capacity holds every whole block of the
# replayed requests (distinct blocks x (CHUNK + 4 KiB) + 64 MiB), so nothing is evicted and the
# tier's content is all that was saved. The HBM sizes are FRACTIONS of the distinct whole
# blocks (1 = holds every distinct block: the tier is useless), or the block counts in HBM.
#
# The table, one row per run: bytes moved into the tier (server.bytes_received +
# bytes_committed) and its ratio to `off` at the same HBM size; tokens served from the tier
# (tokens loaded on paid verdicts) and its ratio to `off`; net = served - COST x written tokens,
# and its difference to `off`; share = save operations admitted / decided by the daemon's gate
# (1 when nothing was decided); the namespace's density (the value policy's estimate, also
# computed while another policy decides); regret tokens; the replay's seconds.
#
# Environment: TRACE, a Mooncake-format trace file; without it the script replays what
# `tools/kvtier-tracegen --shape SHAPE --seed SEED --requests REQUESTS` writes (SHAPE
# conversations, SEED 1, REQUESTS 3993). REQUESTS (all of TRACE), CHUNK (16384: the bytes scale
# with it, the tokens do not), FRACTIONS ("1 0.5 0.2 0.1 0.05 0.01"), HBM (a list of block
# counts instead), POLICIES ("off atom value"), COST (0.05), SKIP (1). Needs curl and jq (and
# /usr/bin/python3 without TRACE). Run from the top of a build tree:
# `tools/trace-experiment.sh build/daemon/kvtierd build/tools/kvtier-replay`. The daemon is
# started and stopped as the shell tests do it (tests/lib/testlib.sh).
set -euo pipefail

kvtierd=${1:-build/daemon/kvtierd}
replay=${2:-build/tools/kvtier-replay}
chunk=${CHUNK:-16384}
cost=${COST:-0.05}
skip=${SKIP:-1}
policies=${POLICIES:-off atom value}
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
    /usr/bin/python3 "$(dirname "$0")/kvtier-tracegen" --shape "${SHAPE:-conversations}" \
        --seed "${SEED:-1}" --requests "$requests" --output "$trace" || fail "kvtier-tracegen failed"
fi

# Distinct whole blocks of the replayed requests: what the tier holds if every save is admitted.
blocks=$(head -n "$requests" "$trace" |
    jq -s '[.[] | .hash_ids[0:(.input_length / 512 | floor)][]] | unique | length')
capacity=$((blocks * (chunk + 4096) + (64 << 20)))
if [[ -n ${HBM:-} ]]; then
    sizes=$HBM
else
    sizes=$(for f in ${FRACTIONS:-1 0.5 0.2 0.1 0.05 0.01}; do
        jq -n --argjson b "$blocks" --argjson f "$f" '[($b * $f | floor), 1] | max'
    done)
fi
sock="$dir/status.sock"
endpoint="ipc://$dir/kvt.zmq"

# run HBM_BLOCKS POLICY: the replay's --json report on stdout
run() {
    local hbm=$1 policy=$2 adm=false lskip=false
    if [[ $policy != off ]]; then
        adm=true
        [[ $skip == 1 ]] && lskip=true
    fi
    cat >"$dir/kvtierd.json" <<JSON
{"server": {"endpoint": "$endpoint", "status_socket": "$sock"},
 "ram": {"capacity_bytes": $capacity, "arena_path": "", "prefault": false},
 "log": {"level": "warn"},
 "gates": {"admission": {"enabled": $adm, "policy": "${policy/off/value}", "cost_ratio": $cost},
           "lookup_skip": {"enabled": $lskip}}}
JSON
    : >"$dir/kvtierd.log"
    testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"
    "$replay" -c "$dir/kvtierd.json" --trace "$trace" --requests "$requests" --hbm-blocks "$hbm" \
        --chunk-bytes "$chunk" --policy "$policy" --json || fail "kvtier-replay failed"
    testlib_stop_daemon
}

start=$SECONDS
{
    printf 'hbm\tpolicy\tbytes\tbytes/off\tserved\tserved/off\tnet\tnet-off\tshare\tdensity'
    printf '\tregret\treplay_s\n'
    for hbm in $sizes; do
        off=
        for policy in $policies; do
            rep=$(run "$hbm" "$policy")
            [[ $policy == off ]] && off=$rep
            jq -r --argjson c "$cost" --argjson off "${off:-null}" '
                def net: .served_tokens - $c * .written_tokens;
                def bytes: .bytes_received + .bytes_committed;
                def ratio(a; b): if b == 0 then (if a == 0 then 1 else "inf" end)
                                 else (a / b * 1000 | round / 1000) end;
                [.hbm_blocks, .policy, bytes,
                 (if $off then ratio(bytes; $off | bytes) else "-" end),
                 .served_tokens,
                 (if $off then ratio(.served_tokens; $off.served_tokens) else "-" end),
                 (net | round), (if $off then (net - ($off | net) | round) else "-" end),
                 ((.admission.saved // 0) as $s | (.admission.skipped // 0) as $k |
                  if $s + $k == 0 then 1 else ($s / ($s + $k) * 1000 | round / 1000) end),
                 ((.admission.density // 0) * 1e4 | round / 1e4),
                 (.admission.regret_tokens // 0), (.seconds * 10 | round / 10)] | @tsv' <<<"$rep"
        done
    done
} >"$dir/table"
column -t -s $'\t' "$dir/table" 2>/dev/null || cat "$dir/table"
echo "requests=$requests chunk=$chunk distinct_blocks=$blocks capacity=$capacity cost=$cost" \
    "skip=$skip, $((SECONDS - start)) s"
