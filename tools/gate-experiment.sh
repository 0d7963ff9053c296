#!/usr/bin/env bash
# gate-experiment.sh [KVTIERD [KVTIERCTL]] - bytes the daemon receives with the save-admission
# gate off and on, for a useless tier and a useful one (docs/GATES.md section 2). Not a test.
#
# For each workload and each gate setting, a fresh kvtierd (memfd arena, policy atom, its default
# settings: target 0.10, floor 0.25, alpha 1/16, warmup 64; `gates.admission.enabled` false or
# true; the value policy needs token evidence, which this script does not give) gets
# OPS save operations of one CHUNK-byte chunk each (`kvtierctl put --op K`, distinct chunks:
# nothing is ever saved twice). One engine reports one verdict per operation as cumulative
# totals (`kvtierctl tally PAID PROBES`) every STEP operations:
#   useless: paid 0 - the HBM cache answers everything, the tier is written and never read;
#   useful:  paid 1 in 2 - half the requests load a hit from the tier (payoff 0.5 >> target).
# The table shows server.bytes_received (payload that crossed the socket) from GET /status.
#
# Environment: OPS (400), CHUNK (65536), STEP (8). Needs curl and jq. Run from the top of a
# build tree: `tools/gate-experiment.sh build/daemon/kvtierd build/tools/kvtierctl`. The daemon
# is started and stopped as the shell tests do it (tests/lib/testlib.sh).
set -euo pipefail

kvtierd=${1:-build/daemon/kvtierd}
kvtierctl=${2:-build/tools/kvtierctl}
ops=${OPS:-400}
chunk=${CHUNK:-65536}
step=${STEP:-8}
# shellcheck source=../tests/lib/testlib.sh
source "$(dirname "$0")/../tests/lib/testlib.sh"
testlib_init kvtgx curl jq "$kvtierd" "$kvtierctl"

head -c "$chunk" /dev/urandom >"$dir/chunk"
capacity=$(((ops * (chunk + 4096) / 1048576 + 16) * 1048576))
sock="$dir/status.sock"
endpoint="ipc://$dir/kvt.zmq"
ctl() { "$kvtierctl" -e "$endpoint" -s "$sock" --ns experiment "$@"; }

# run WORKLOAD GATES(true|false): prints one table row
run() {
    local workload=$1 enabled=$2 paid=0 stored=0 declined=0 out st
    cat >"$dir/kvtierd.json" <<EOF
{"server": {"endpoint": "$endpoint", "status_socket": "$sock"},
 "ram": {"capacity_bytes": $capacity, "arena_path": "", "max_chunk_bytes": $chunk},
 "log": {"level": "warn"},
 "gates": {"admission": {"enabled": $enabled, "policy": "atom"}}}
EOF
    : >"$dir/kvtierd.log"
    testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"
    for ((k = 0; k < ops; k++)); do
        if ((k > 0 && k % step == 0)); then
            [[ $workload == useful ]] && paid=$((k / 2))
            ctl tally "$paid" "$k" >/dev/null || fail "tally $paid $k"
        fi
        out=$(ctl put --op "$((k + 1))" "$(printf '%032x' $((k + 1)))" "$dir/chunk") ||
            fail "put $k"
        case $out in
        stored) stored=$((stored + 1)) ;;
        declined) declined=$((declined + 1)) ;;
        *) fail "put $k: $out" ;;
        esac
    done
    st=$(status)
    testlib_stop_daemon
    jq -r --arg w "$workload" --arg g "$([[ $enabled == true ]] && echo on || echo off)" \
        --argjson s "$stored" --argjson d "$declined" --argjson n "$ops" '
        (.namespaces[0].gates.admission) as $a |
        [$w, $g, $n, $s, $d, .server.bytes_received, ($a.payoff * 1e4 | round / 1e4),
         $a.would_decline] | @tsv' <<<"$st"
}

start=$SECONDS
{
    printf 'workload\tgates\tops\tstored\tdeclined\tbytes_received\tpayoff\twould_decline\n'
    for workload in useless useful; do
        run "$workload" false
        run "$workload" true
    done
} >"$dir/table"
column -t -s $'\t' "$dir/table" 2>/dev/null || cat "$dir/table"
awk -F'\t' 'NR > 1 { b[$1 "/" $2] = $6 }
    END { for (w in b) if (w ~ /on$/) { base = w; sub(/on$/, "off", base);
          printf "%s: gates on receive %.1f%% of the bytes received with gates off\n",
          substr(w, 1, index(w, "/") - 1), 100 * b[w] / b[base] } }' "$dir/table" | sort
echo "ops=$ops chunk=$chunk step=$step, $((SECONDS - start)) s"
