#!/usr/bin/env bash
# bench_disk_smoke.sh KVTIERD KVTIER_BENCH - a short run of `kvtier-bench --disk-dir` against a
# real kvtierd with a 32 MiB RAM tier in a /dev/shm arena and a disk tier in a temp dir: 64
# chunks of 1 MiB of bf16 data must demote; every figure of the report (raw baseline, kvtier
# disk write and read, compression, lookups idle and while writing) is present and > 0, the
# oldest chunks were loaded back from disk and verified byte-exact, the baseline file is gone,
# a daemon without a disk tier is refused (exit 2), a second run with --paced --zero-copy
# restores every chunk (the pinned quarter verified after), and kvtierd stops cleanly on SIGTERM
# (exit 0, no sanitizer report).
set -euo pipefail

kvtierd=${1:?usage: bench_disk_smoke.sh KVTIERD KVTIER_BENCH}
bench=${2:?usage: bench_disk_smoke.sh KVTIERD KVTIER_BENCH}
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtdisk jq curl
arena=/dev/shm/kvtier-disk-smoke.$$.$RANDOM.arena
testlib_files+=("$arena" "$arena.d")
testlib_logs+=(bench.err bench2.err)

server="\"server\": {\"endpoint\": \"ipc://$dir/kvt.zmq\", \"status_socket\": \"$dir/status.sock\"}"
ram="\"ram\": {\"capacity_bytes\": \"32MiB\", \"arena_path\": \"$arena\", \"max_chunk_bytes\": \"1MiB\"}"
cat >"$dir/disk.json" <<JSON
{$server, $ram,
 "disk": {"enabled": true, "dir": "$dir/disk", "capacity_bytes": "256MiB",
          "segment_bytes": "16MiB", "write_buffer_bytes": "16MiB"},
 "log": {"level": "info"}}
JSON
cat >"$dir/ram.json" <<JSON
{$server, $ram, "disk": {"dir": "$dir/disk"}, "log": {"level": "info"}}
JSON

# A daemon without a disk tier: disk mode refuses with a message (exit 2).
testlib_start_daemon "$kvtierd" "$dir/ram.json" "$dir/status.sock"
mkdir -p "$dir/disk"
set +e
"$bench" -c "$dir/ram.json" --disk-dir "$dir/disk" --chunk-bytes 1MiB --chunks 64 \
    >/dev/null 2>"$dir/bench.err"
rc=$?
set -e
((rc == 2)) || fail "disk mode against a daemon without a disk tier: exit $rc, want 2"
grep -q 'disk tier is off' "$dir/bench.err" || fail "no 'disk tier is off' message"
testlib_stop_daemon

testlib_start_daemon "$kvtierd" "$dir/disk.json" "$dir/status.sock"
"$bench" -c "$dir/disk.json" --disk-dir "$dir/disk" --data bf16 --chunk-bytes 1MiB --chunks 64 \
    --lookups 100 --prompt-chunks 32 --lookup-first --json >"$dir/bench.json" 2>"$dir/bench.err" ||
    fail "kvtier-bench --disk-dir exited $?"

out=$dir/bench.json
check() { expect_jq "$1" "$2" "$out" "$3"; } # description jq-filter jq-filter-to-show
pos() { # description path: a number > 0
    check "$1" "$2 | type == \"number\" and . > 0" "$2"
}
check "mode" '.mode == "disk" and .data == "bf16"' '{mode, data}'
check "filesystem named" '.disk.filesystem | type == "string" and . != "unknown"' '.disk'
check "same filesystem as disk.dir" '.disk.same_filesystem == true' '.disk'
for p in write write_no_sync read_cached read; do
    pos "raw $p GB/s" ".disk.raw.$p.gbps"
done
check "raw bytes" '.disk.raw.bytes == 67108864' '.disk.raw'
check "page cache flag" '.disk.raw.read.page_cache_may_have_served | type == "boolean"' \
    '.disk.raw.read'
for f in gbps_raw gbps_stored gbps_written raw_bytes stored_bytes demotions records_written \
    compression_ratio; do
    pos "write $f" ".disk.write.$f"
done
check "every save stored" '.disk.write.outcomes.stored == 64' '.disk.write.outcomes'
check "refusals counted" '.disk.write.demotions_refused | type == "number" and . >= 0' \
    '.disk.write'
pos "read GB/s" '.disk.read.gbps'
pos "read disk hits" '.disk.read.disk_hits'
pos "read verified" '.disk.read.verified'
check "every disk hit verified" '.disk.read.verified == .disk.read.disk_hits' '.disk.read'
check "loads add up" '.disk.read.verified + .disk.read.misses == .disk.read.chunks' '.disk.read'
# auto compression yields to throughput when the write buffer is behind (disk.flushes_raw), so
# under load only some batches are compressed: the first, small batch always is.
check "bf16 compresses in the daemon" '.disk.compression.daemon_ratio < 1.0' '.disk.compression'
for c in shuffle_lz4 lz4; do
    for f in ratio compress_mbps decompress_mbps; do
        pos "$c $f" ".disk.compression.$c.$f"
    done
done
check "shuffle helps bf16" \
    '.disk.compression.shuffle_lz4.ratio < .disk.compression.lz4.ratio' '.disk.compression'
for ph in idle writing; do
    pos "lookups $ph calls" ".disk.lookup.$ph.calls"
    pos "lookups $ph p50" ".disk.lookup.$ph.p50_us"
    pos "lookups $ph p99" ".disk.lookup.$ph.p99_us"
done
check "idle lookups" '.disk.lookup.idle.calls == 100' '.disk.lookup.idle'
for ph in idle writing; do
    pos "the daemon's own lookup p99 ($ph)" ".disk.lookup.$ph.daemon_p99_us"
    # the phase's own p99 (0.2.14): from the difference of ops.lookup.buckets_us
    pos "the daemon's lookup p99 in the phase alone ($ph)" ".disk.lookup.$ph.daemon_window_p99_us"
done
# the read phase is cold: the daemon's segments are dropped from the page cache first
pos "segments dropped before the reads" '.disk.read.segments_dropped.files'
check "O_DIRECT raw read, or why not" \
    '(.disk.raw.read_direct.gbps | type == "number") or (.disk.raw.read_direct.not_measured | type == "string")' \
    '.disk.raw'
check "O_DIRECT raw write (+ fdatasync), or why not, and the write ratio against it" \
    '((.disk.raw.write_direct.gbps | type == "number") and (.disk.write.ratio_vs_raw_direct | type == "number")) or (.disk.raw.write_direct.not_measured | type == "string")' \
    '.disk.raw'
check "the shared-memory half of the read phase" \
    '.disk.read_shm.chunks > 0 and .disk.read_shm.verified + .disk.read_shm.misses == .disk.read_shm.chunks' \
    '.disk.read_shm'
check "--lookup-first recorded" '.params.lookup_first == true' '.params'
check "loop turns by CPU time beside wall time" \
    '(.disk.write.loop_turns.cpu_over_2ms | type == "number") and .disk.write.loop_turns.cpu_over_2ms <= .disk.write.loop_turns.turns' \
    '.disk.write.loop_turns'
check "the segment files' O_DIRECT read, and the restore against it" \
    '((.disk.raw.read_direct_segments.gbps | type == "number") and (.disk.read.ratio_vs_segments_direct | type == "number")) or (.disk.raw.read_direct_segments.gbps == null)' \
    '.disk.raw'
check "the same into huge pages (0.2.4), and the restores against it" \
    '((.disk.raw.read_direct_segments_huge.gbps | type == "number") and (.disk.read.ratio_vs_segments_direct_huge | type == "number") and (.disk.read_shm.ratio_vs_segments_direct_huge | type == "number")) or (.disk.raw.read_direct_segments_huge.gbps == null)' \
    '.disk'
check "the O_DIRECT write from distinct buffers (0.2.5), and the write ratio against it" \
    '((.disk.raw.write_direct_distinct.gbps | type == "number") and (.disk.write.ratio_vs_raw_direct_distinct | type == "number")) or (.disk.raw.write_direct_distinct.gbps == null)' \
    '.disk.raw'
check "the flushes' write calls (0.2.5)" \
    '.disk.write.calls.gbps > 0 and .disk.write.calls.bytes == .disk.write.raw_bytes' \
    '.disk.write.calls'
# the window of refusals counts every refusal of the phase (the sampler starts before the first
# save and takes its last sample after the drain), and nothing more than the phase wrote (on
# this small tier the window can be one interval in which no write completed: 0 GB/s)
check "the writer while demotions were refused (0.2.5)" \
    '(.disk.write.while_refusing.refused == .disk.write.demotions_refused) and ((.disk.write.while_refusing.refused == 0 and .disk.write.while_refusing.gbps == null) or (.disk.write.while_refusing.gbps >= 0 and .disk.write.while_refusing.bytes <= .disk.write.raw_bytes and .disk.write.while_refusing.samples >= 2))' \
    '.disk.write'
# the loads followed lookups of their chains: the daemon read them ahead, and they were loaded
st=$(curl -sf --unix-socket "$dir/status.sock" http://localhost/status) || fail "no status"
pf=$(jq '.disk.prefetches' <<<"$st")
hits=$(jq '.disk.prefetch_hits' <<<"$st")
((pf > 0 && hits > 0 && hits <= pf)) || fail "read-ahead: prefetches $pf, prefetch_hits $hits"
leftover=$(find "$dir/disk" -name 'kvtier-bench-*' | wc -l)
((leftover == 0)) || fail "the raw baseline file was left in $dir/disk"

# --paced (0.2.9): the saves wait for the writer between chains, so nothing is refused and every
# chunk of the read phase is on disk; --zero-copy: a quarter of the restore is pins with no copy
# out, read from disk, then reloaded and verified byte-exact.
"$bench" -c "$dir/disk.json" --disk-dir "$dir/disk" --chunk-bytes 1MiB --chunks 64 \
    --lookups 20 --prompt-chunks 32 --paced --zero-copy --json >"$dir/bench2.json" \
    2>"$dir/bench2.err" || fail "kvtier-bench --disk-dir --paced --zero-copy exited $?"
out1=$out
out=$dir/bench2.json
check "--paced and --zero-copy recorded" '.params.paced == true and .params.zero_copy == true' \
    '.params'
check "paced: the writer kept up (nothing refused)" \
    '.disk.write.demotions_refused == 0 and (.disk.write.paced.pace_waits | type == "number")' \
    '.disk.write'
check "paced: every chunk of the frames half came back from disk" \
    '.disk.read.chunks > 0 and .disk.read.verified == .disk.read.chunks and .disk.read.disk_hits == .disk.read.chunks' \
    '.disk.read'
check "the pinned quarter: pinned from disk, reloaded and verified" \
    '.disk.read_zc.chunks > 0 and .disk.read_zc.pinned == .disk.read_zc.chunks and .disk.read_zc.disk_hits == .disk.read_zc.chunks and .disk.read_zc.verified == .disk.read_zc.chunks and .disk.read_zc.gbps > 0' \
    '.disk.read_zc'
check "the daemon's CPU seconds per GB of each phase (0.2.9)" \
    '.disk.write.daemon_cpu_s_per_gb > 0 and ([.disk.read, .disk.read_shm, .disk.read_zc] | all(.daemon_cpu_s_per_gb >= 0))' \
    '[.disk.write, .disk.read, .disk.read_shm, .disk.read_zc] | map(.daemon_cpu_s_per_gb)'
check "the copying shared-memory quarter beside it" \
    '.disk.read_shm.chunks > 0 and .disk.read_shm.verified == .disk.read_shm.chunks' '.disk.read_shm'

testlib_stop_daemon
testlib_no_sanitizer_report "$dir/bench.err" "$dir/bench2.err"
echo "bench_disk_smoke: ok ($(jq -c '{w: .disk.write.gbps_raw, r: .disk.read.gbps,
    refused: .disk.write.demotions_refused}' "$out1"))"
