#!/usr/bin/env bash
# gates_cli.sh KVTIERD KVTIERCTL - docs/GATES.md admission scenario 3 and lookup-skip scenario 7
# reproduced through kvtierctl (tally, put --op, lookup --prompt-tokens/--hbm-tokens) against a
# real kvtierd, observed with curl + jq on GET /status and in the daemon's log.
#
# Admission 3 (warmup 10, floor 0.25, alpha 1): `tally 0 200` (one engine's cumulative totals:
# 200 verdicts, none paid; alpha 1 makes the batch land where 200 single folds do, payoff 0.0);
# then 400 save operations (`put --op K`) -> exactly every fourth one stored, 100 in all, and the
# daemon received the payload of those 100 only. Two ranks presenting one --op get one answer.
# Lookup skip 7 (chunk 8, min_load 8192): 32 lookups of a 20000-token prompt with 16000 tokens in
# HBM (19999 - 16000 < 8192: skippable): 31 answered `skipped` with hit 0 and no lease, the 32nd
# answered (a forced probe). The stored prefix is 4 chunks here, not 20000 tokens: the decision
# depends only on the token counts, and the forced probe is non-actionable either way.
# Token tallies (namespace clitok, policy value): `tally --served-tokens N --lookup-tokens N`
# folds the token totals (a repeat folds nothing, a decrease re-baselines) and prints them with
# the policy; one option without the other is a usage error.
set -euo pipefail

kvtierd=${1:?usage: gates_cli.sh KVTIERD KVTIERCTL}
kvtierctl=${2:?usage: gates_cli.sh KVTIERD KVTIERCTL}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtgates curl jq od

endpoint="ipc://$dir/kvt.zmq"
sock="$dir/status.sock"
cat >"$dir/kvtierd.json" <<EOF
{
  "server": {"endpoint": "$endpoint", "status_socket": "$sock"},
  "ram": {"capacity_bytes": "8MiB", "arena_path": "", "max_chunk_bytes": "64KiB"},
  "log": {"level": "info"},
  "gates": {"admission": {"policy": "atom"}},
  "namespaces": {
    "clitok": {"gates": {"admission": {"enabled": true, "policy": "value"}}},
    "cli3": {"gates": {"admission": {"enabled": true, "warmup": 10, "floor": 0.25, "alpha": 1,
                                     "report_every": 100}}},
    "cli7": {"gates": {"lookup_skip": {"enabled": true}}}
  }
}
EOF
testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"

gates() { # MODEL: the gates object of its first namespace
    status | jq -e --arg m "$1" 'first(.namespaces[] | select(.model == $m)) | .gates'
}

ctl() { # NS CHUNK_TOKENS WORLD RANK ARGS...
    local ns=$1 ct=$2 world=$3 rank=$4
    shift 4
    "$kvtierctl" -e "$endpoint" -s "$sock" --ns "$ns" --chunk-tokens "$ct" --world "$world" \
        --rank "$rank" "$@"
}
hexhash() { printf '%08x%08x%016x' "$1" "$2" "$3"; } # TAG OP I: a unique chunk hash

# --- admission scenario 3 ---
size=1000
head -c "$size" /dev/urandom >"$dir/chunk"
out=$(ctl cli3 16 1 0 tally 0 200 --json) || fail "tally 0 200"
expect_eq "tally: probes" "$(jq -c '.probes' <<<"$out")" 200
expect_eq "tally: payoff is 0" "$(jq -c '.payoff == 0' <<<"$out")" true
expect_eq "tally: share" "$(jq -c '.share' <<<"$out")" 0.25
expect_eq "tally: admission enabled" "$(jq -c '.admission_enabled' <<<"$out")" true
rx0=$(status | jq -e '.server.bytes_received')

for ((k = 0; k < 400; k++)); do
    want=declined
    ((k % 4 == 3)) && want=stored
    out=$(ctl cli3 16 1 0 put --op $((k + 1)) "$(hexhash 3 "$k" 0)" "$dir/chunk") ||
        fail "put --op $((k + 1))"
    expect_eq "save operation $k" "$out" "$want"
done

g=$(gates cli3)
expect_eq "cli3 probes" "$(jq -c '.admission.probes' <<<"$g")" 200
expect_eq "cli3 saved" "$(jq -c '.admission.saved' <<<"$g")" 100
expect_eq "cli3 skipped" "$(jq -c '.admission.skipped' <<<"$g")" 300
expect_eq "cli3 save_share" "$(jq -c '.admission.save_share' <<<"$g")" 0.25
expect_eq "cli3 share" "$(jq -c '.admission.share' <<<"$g")" 0.25
expect_eq "bytes received for 400 operations" \
    "$(($(status | jq -e '.server.bytes_received') - rx0))" $((100 * size))
grep -q 'event=admission ns=cli3 probes=200 payoff=0.000000 saved=0 skipped=0' \
    "$dir/kvtierd.log" || fail "no admission log line for cli3 at probes=200"

# Two ranks of one operation (--op 9001.., different chunks per rank): one decision, one answer.
# The world-2 layout is another namespace of model cli3: same settings, its own estimator, fed
# the same zero-payoff tally; at share 0.25 its first three operations are declined.
out=$(ctl cli3 16 2 0 tally 0 200 --json) || fail "tally world 2"
expect_eq "tally world 2: probes" "$(jq -c '.probes' <<<"$out")" 200
for ((k = 0; k < 4; k++)); do
    want=declined
    ((k == 3)) && want=stored
    a=$(ctl cli3 16 2 0 put --op $((9001 + k)) "$(hexhash 30 "$k" 0)" "$dir/chunk") ||
        fail "rank 0 put --op $((9001 + k))"
    b=$(ctl cli3 16 2 1 put --op $((9001 + k)) "$(hexhash 31 "$k" 0)" "$dir/chunk") ||
        fail "rank 1 put --op $((9001 + k))"
    expect_eq "rank 0, op $((9001 + k))" "$a" "$want"
    expect_eq "rank 1, op $((9001 + k))" "$b" "$want"
done
expect_eq "cli3 namespaces: [world, saved, skipped]" "$(status | jq -c '[.namespaces[] |
    select(.model == "cli3") | [.world, .gates.admission.saved, .gates.admission.skipped]]')" \
    "[[1,100,300],[2,1,3]]"

# --- lookup skip scenario 7 ---
h=()
for i in 0 1 2 3; do h+=("$(hexhash 7 0 "$i")"); done
out=$(ctl cli7 8 1 0 put "${h[0]}" "$dir/chunk") || fail "put cli7 chunk 0"
expect_eq "put cli7 chunk 0" "$out" stored
for i in 1 2 3; do
    out=$(ctl cli7 8 1 0 put --parent "${h[i - 1]}" "${h[i]}" "$dir/chunk") ||
        fail "put cli7 chunk $i"
    expect_eq "put cli7 chunk $i" "$out" stored
done

for ((k = 1; k <= 32; k++)); do
    out=$(ctl cli7 8 1 0 lookup --json --lease --prompt-tokens 20000 --hbm-tokens 16000 \
        "${h[@]}") || fail "lookup $k"
    if ((k < 32)); then
        expect_eq "lookup $k" "$(jq -c '[.skipped, .hit, .leased]' <<<"$out")" "[true,0,false]"
    else
        expect_eq "lookup $k (forced probe)" "$(jq -c '[.skipped, .hit, .leased]' <<<"$out")" \
            "[false,4,true]"
    fi
done

st=$(status)
g=$(jq -e '.namespaces[] | select(.model == "cli7") | .gates' <<<"$st")
expect_eq "cli7 skips" "$(jq -c '.lookup_skip.skips' <<<"$g")" 31
expect_eq "cli7 forced_probes" "$(jq -c '.lookup_skip.forced_probes' <<<"$g")" 1
expect_eq "cli7 lookups" "$(jq -c '.lookup_skip.lookups' <<<"$g")" 1
expect_eq "cli7 act_ema" "$(jq -c '.lookup_skip.act_ema == 0' <<<"$g")" true
expect_eq "cli7 load_bearing" "$(jq -c '.lookup_skip.load_bearing' <<<"$g")" false
expect_eq "cli7 probes (one non-paid verdict per skip)" "$(jq -c '.admission.probes' <<<"$g")" 31
expect_eq "cli7 payoff" "$(jq -c '.admission.payoff as $p |
    (reduce range(31) as $i (1.0; . + 0.0625 * (0 - .))) == $p' <<<"$g")" true
expect_eq "leased chunks (only the forced probe leased)" \
    "$(jq -c '.ram.leased_chunks' <<<"$st")" 4

# --- token tallies ---
tok() { ctl clitok 16 1 0 tally --engine 4 --json "$@"; }
out=$(tok 1 2 --served-tokens 8192 --lookup-tokens 20000) || fail "tally with tokens"
expect_eq "tokens: policy and served" "$(jq -c '[.policy, .served_tokens]' <<<"$out")" \
    '["value",8192]'
out=$(tok 1 2 --served-tokens 8192 --lookup-tokens 20000) || fail "tally repeated"
expect_eq "tokens: a repeat folds nothing" "$(jq -c '.served_tokens' <<<"$out")" 8192
out=$(tok 0 1 --served-tokens 100 --lookup-tokens 100) || fail "tally restarted"
out=$(tok 1 3 --served-tokens 612 --lookup-tokens 900) || fail "tally after the restart"
expect_eq "tokens: differences after a re-baseline" "$(jq -c '.served_tokens' <<<"$out")" 8704
rc=0
ctl clitok 16 1 0 tally 1 2 --served-tokens 5 >/dev/null 2>&1 || rc=$?
expect_eq "tokens: both options or none (exit 2)" "$rc" 2
st=$(status)
expect_eq "tokens: status" "$(jq -c '.namespaces[] | select(.model == "clitok") |
    .gates.admission | [.served_tokens, .lookup_tokens, .token_tallies]' <<<"$st")" \
    "[8704,20800,4]"

testlib_stop_daemon
echo "gates_cli: ok"
