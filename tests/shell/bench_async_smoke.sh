#!/usr/bin/env bash
# bench_async_smoke.sh KVTIERD KVTIER_BENCH - a short run of `kvtier-bench --depth 8 --zero-copy
# --all-ranks` against a real kvtierd with a /dev/shm arena, in the steady state (the default):
# the tier is filled to capacity first, every kvtier backend (shm, frames, zero-copy) stores and
# loads back every chunk byte-exact with 8 requests in flight, submit latencies, zero-copy round
# trips beside raw ZeroMQ ones, the copy+checksum baseline, the daemon's CPU per GB and loop
# figures (status loop.*) and the single-rank lookups beside all-ranks ones are reported, with
# no warning; --cold skips the fill; --zero-copy with --data-path frames is a usage error (exit 2).
set -euo pipefail

kvtierd=${1:?usage: bench_async_smoke.sh KVTIERD KVTIER_BENCH}
bench=${2:?usage: bench_async_smoke.sh KVTIERD KVTIER_BENCH}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtasync jq curl
arena=/dev/shm/kvtier-bench-async.$$.$RANDOM.arena
testlib_files+=("$arena" "$arena.d")
testlib_logs+=(bench.err)

sock="$dir/status.sock"
cat >"$dir/kvtierd.json" <<JSON
{
  "server": {"endpoint": "ipc://$dir/kvt.zmq", "status_socket": "$sock"},
  "ram": {"capacity_bytes": "48MiB", "arena_path": "$arena", "max_chunk_bytes": "1MiB"},
  "disk": {"dir": "$dir/disk"},
  "log": {"level": "info"}
}
JSON
testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"

chunks=16
rounds=2
"$bench" -c "$dir/kvtierd.json" --depth 8 --zero-copy --all-ranks --world 2 --chunks $chunks \
    --rounds $rounds --chunk-bytes 256KiB --lookups 40 --prompt-chunks 16 --json \
    >"$dir/bench.json" 2>"$dir/bench.err" || fail "kvtier-bench --depth 8 --zero-copy exited $?"

out=$dir/bench.json
check() { expect_jq "$1" "$2" "$out" "$3"; } # description jq-filter jq-filter-to-show
pos() { check "$1" "$2 | type == \"number\" and . > 0" "$2"; }
check "parameters" '.params.depth == 8 and .params.zero_copy == true and .params.cold == false' \
    '.params'
check "the tier was filled to capacity first" '.steady.filled == true and .steady.reached == true' \
    '.steady'
pos "fill bytes" '.steady.bytes'
want=$((chunks * rounds))
for bk in kvtier_shm kvtier_frames kvtier_zc; do
    check "$bk measured" ".backends.$bk.state == \"measured\"" ".backends.$bk"
    check "$bk stored every chunk" ".backends.$bk.save.outcomes.stored == $want" ".backends.$bk.save"
    check "$bk loaded every chunk back byte-exact" \
        ".backends.$bk.load.chunks == {\"hits\": $want, \"misses\": 0, \"evicted\": 0}" \
        ".backends.$bk.load.chunks"
    for op in save load; do
        check "$bk $op submit latencies" ".backends.$bk.$op.submit_latency.calls == $want" \
            ".backends.$bk.$op"
        check "$bk $op daemon CPU per GB" \
            ".backends.$bk.$op.daemon_cpu_s_per_gb | type == \"number\" and . >= 0" \
            ".backends.$bk.$op"
    done
done
for rt in reserve commit pin zmq; do
    check "zero-copy $rt round trips" ".backends.kvtier_zc.round_trips.$rt.calls == $want" \
        ".backends.kvtier_zc.round_trips"
done
for rt in reserve commit pin; do
    pos "zero-copy $rt vs zmq" ".backends.kvtier_zc.round_trips.ratio_p50.$rt"
done
for op in save load; do
    for col in kvtier_shm kvtier_frames kvtier_zc zmq memcpy copy_csum; do
        pos "$op GB/s of $col" ".compare.$op.$col"
    done
    for ratio in shm_memcpy frames_zmq shm_copy_csum zc_memcpy; do
        pos "$op ratio $ratio" ".compare.ratios.$op.$ratio"
    done
done
pos "copy+checksum baseline" '.copy_checksum.gbps'
pos "daemon pid" '.daemon.pid'
check "the daemon's loop busy share" '.daemon.loop_busy_share | type == "number" and . >= 0' \
    '.daemon'
pos "the daemon's loop turn p99" '.daemon.loop_turn_p99_us'
pos "single-rank lookups beside all-ranks ones" '.lookup_single.latency.calls'
pos "all-ranks / single-rank p50" '.lookup_single.ratio_all_p50'
check "lookups hit every chunk of every rank" '.lookup.short_hits == 0' '.lookup'
check "no warnings" '.warnings == []' '.warnings'

"$bench" -c "$dir/kvtierd.json" --depth 2 --cold --chunks 4 --rounds 1 --chunk-bytes 64KiB \
    --lookups 8 --prompt-chunks 4 --json >"$dir/cold.json" 2>"$dir/bench.err" ||
    fail "kvtier-bench --cold exited $?"
expect_jq "--cold: no fill" '.steady.filled == false and .params.cold == true' "$dir/cold.json" \
    '.steady'

set +e
"$bench" -c "$dir/kvtierd.json" --zero-copy --data-path frames --chunks 1 >/dev/null 2>&1
rc=$?
set -e
((rc == 2)) || fail "--zero-copy --data-path frames: exit $rc, want 2"

testlib_stop_daemon
testlib_no_sanitizer_report "$dir/bench.err"
echo "bench_async_smoke: ok ($(jq -c '{shm: .compare.ratios.save.shm_memcpy,
    frames: .compare.ratios.save.frames_zmq}' "$out"))"
