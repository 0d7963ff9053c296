#!/usr/bin/env bash
# cli_roundtrip.sh KVTIERD KVTIERCTL - a save/lookup/load round trip driven only by kvtierctl and
# curl against a real kvtierd: 3 ranks (world 3) put chunks of random bytes as chains, lookups
# per rank and for all ranks, byte-exact gets, a miss, status counters read with curl + jq, and
# a clean SIGTERM shutdown (exit 0, no sanitizer report in the log). Waits poll with a deadline.
set -euo pipefail

kvtierd=${1:?usage: cli_roundtrip.sh KVTIERD KVTIERCTL}
kvtierctl=${2:?usage: cli_roundtrip.sh KVTIERD KVTIERCTL}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtcli curl jq cmp od

endpoint="ipc://$dir/kvt.zmq"
sock="$dir/status.sock"
capacity=$((8 * 1024 * 1024))
cat >"$dir/kvtierd.json" <<EOF
{
  "server": {"endpoint": "$endpoint", "status_socket": "$sock"},
  "ram": {"capacity_bytes": $capacity, "arena_path": "", "max_chunk_bytes": "1MiB",
          "lease_ms": 30000},
  "log": {"level": "info"}
}
EOF
testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"

ctl() { # RANK ARGS...
    local rank=$1
    shift
    "$kvtierctl" -e "$endpoint" -s "$sock" --ns cli-model --world 3 --rank "$rank" "$@"
}
randhash() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

# A namespace name over 255 bytes is a usage error that says so (exit 2), not a failed connect.
set +e
long=$(printf 'n%.0s' {1..300})
"$kvtierctl" -e "$endpoint" -s "$sock" --ns "$long" lookup "$(randhash)" >/dev/null 2>"$dir/ns.err"
rc=$?
set -e
((rc == 2)) || fail "--ns of 300 bytes: exit $rc, want 2"
grep -q 'at most 255 bytes' "$dir/ns.err" || fail "--ns of 300 bytes: $(cat "$dir/ns.err")"

# Four chunks per chain; rank 2 stores only the first two.
sizes=(1 4096 70001 1048576)
stored=(4 4 2)
hashes=()
for i in 0 1 2 3; do hashes+=("$(randhash)"); done
absent=$(randhash)

for r in 0 1 2; do
    for ((i = 0; i < stored[r]; i++)); do
        f="$dir/r$r.c$i"
        head -c "${sizes[i]}" /dev/urandom >"$f"
        if ((i == 0)); then
            out=$(ctl "$r" put "${hashes[i]}" "$f") || fail "put rank $r chunk $i"
        else
            out=$(ctl "$r" put --parent "${hashes[i - 1]}" "${hashes[i]}" "$f") ||
                fail "put rank $r chunk $i"
        fi
        expect_eq "put rank $r chunk $i" "$out" stored
    done
done

# Saving again costs no transfer.
received=$(status | jq -e '.server.bytes_received')
expect_eq "bytes_received after the puts" "$received" $((2 * (1 + 4096 + 70001 + 1048576) + 1 + 4096))
out=$(ctl 0 put --json "${hashes[0]}" "$dir/r0.c0" | jq -r '.outcome')
expect_eq "second put" "$out" exists
expect_eq "bytes_received after a second put" "$(status | jq -e '.server.bytes_received')" "$received"

for r in 0 1 2; do
    out=$(ctl "$r" lookup "${hashes[@]}") || fail "lookup rank $r"
    expect_eq "lookup rank $r" "$out" "${stored[r]}"
done
out=$(ctl 1 lookup --all-ranks --json "${hashes[@]}") || fail "lookup --all-ranks"
expect_eq "all-ranks hit" "$(jq -c '.hit' <<<"$out")" 2
expect_eq "all-ranks rank_hits" "$(jq -c '.rank_hits' <<<"$out")" "[4,4,2]"
expect_eq "all-ranks chunks" "$(jq -c '.chunks' <<<"$out")" 4

st=$(status)
expect_eq "ram.capacity_bytes" "$(jq -e '.ram.capacity_bytes' <<<"$st")" "$capacity"
expect_eq "ram.chunks" "$(jq -e '.ram.chunks' <<<"$st")" 10
hits0=$(jq -e '.ram.hits' <<<"$st")
misses0=$(jq -e '.ram.misses' <<<"$st")

for r in 0 1 2; do
    for ((i = 0; i < stored[r]; i++)); do
        out=$(ctl "$r" get "${hashes[i]}" "$dir/back") || fail "get rank $r chunk $i"
        expect_eq "get rank $r chunk $i" "$out" "hit ${sizes[i]}"
        cmp -s "$dir/r$r.c$i" "$dir/back" || fail "get rank $r chunk $i: bytes differ"
    done
done

set +e
ctl 0 get "$absent" "$dir/none" >/dev/null
rc_absent=$?
ctl 2 get "${hashes[3]}" "$dir/none" >/dev/null
rc_rank=$?
set -e
expect_eq "get of an absent hash: exit" "$rc_absent" 1
expect_eq "get of a chunk rank 2 never stored: exit" "$rc_rank" 1
[[ ! -e $dir/none ]] || fail "a missed get wrote its output file"

st=$(status)
expect_eq "ram.hits after the gets" "$(jq -e '.ram.hits' <<<"$st")" $((hits0 + 10))
expect_eq "ram.misses after the gets" "$(jq -e '.ram.misses' <<<"$st")" $((misses0 + 2))
expect_eq "ram.used_bytes <= capacity" "$(jq -e ".ram.used_bytes <= $capacity" <<<"$st")" true

# A leased lookup makes its connection a consumer: the summary lists it under the top sessions
# (the summary's other lines unchanged), and the JSON has its held bytes.
ctl 0 lookup --lease "${hashes[@]}" >/dev/null || fail "leased lookup"
summary=$(ctl 0 status) || fail "status"
grep -q '^clients ' <<<"$summary" || fail "status summary: no clients line: $summary"
grep -q '^namespaces 1$' <<<"$summary" || fail "status summary: no namespaces line: $summary"
grep -q '^top sessions: held ' <<<"$summary" || fail "status summary: no top sessions: $summary"
grep -Eq '^  [0-9a-f]+: held [0-9.]+ [KM]iB \(leased ' <<<"$summary" ||
    fail "status summary: no consumer line: $summary"
expect_jq "the leaseholder's held bytes" \
    '.server.top_sessions[0].held_bytes == (1 + 4096 + 70001 + 1048576)' <(status) '.server'

testlib_stop_daemon
echo "cli_roundtrip: ok"
