#!/usr/bin/env bash
# bench_disk_smoke.sh KVTIERD KVTIER_BENCH - a short run of `kvtier-bench --disk-dir` against a
# real kvtierd with a 32 MiB RAM tier in a /dev/shm arena and a disk tier in a temp dir: 64
# chunks of 1 MiB of bf16 data must demote; every figure of the report (raw baseline, kvtier
# disk write and read, compression, lookups idle and while writing) is present and > 0, the
# oldest chunks were loaded back from disk and verified byte-exact, the baseline file is gone,
# a daemon without a disk tier is refused (exit 2), and kvtierd stops cleanly on SIGTERM (exit
# 0, no sanitizer report).
set -euo pipefail

kvtierd=${1:?usage: bench_disk_smoke.sh KVTIERD KVTIER_BENCH}
bench=${2:?usage: bench_disk_smoke.sh KVTIERD KVTIER_BENCH}
for tool in jq curl; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is required" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/kvtdisk-XXXXXX)
arena=/dev/shm/kvtier-disk-smoke.$$.$RANDOM.arena
kpid=
cleanup() {
    if [[ -n $kpid ]] && kill -0 "$kpid" 2>/dev/null; then
        kill -KILL "$kpid" 2>/dev/null || true
        wait "$kpid" 2>/dev/null || true
    fi
    rm -rf "$dir"
    rm -f "$arena"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for log in kvtierd.log bench.err; do
        if [[ -s $dir/$log ]]; then
            echo "--- $log (tail)" >&2
            tail -n 30 "$dir/$log" >&2
        fi
    done
    exit 1
}

# start_daemon CONFIG: starts kvtierd and waits until its status socket answers.
start_daemon() {
    "$kvtierd" -c "$1" 2>>"$dir/kvtierd.log" >&2 &
    kpid=$!
    local deadline=$((SECONDS + 10))
    until curl -sf --max-time 5 --unix-socket "$dir/status.sock" http://x/status >/dev/null 2>&1; do
        kill -0 "$kpid" 2>/dev/null || fail "kvtierd exited before it was ready"
        ((SECONDS < deadline)) || fail "kvtierd not ready after 10 s"
        sleep 0.05
    done
}

stop_daemon() {
    kill -TERM "$kpid"
    set +e
    wait "$kpid"
    local rc=$?
    set -e
    kpid=
    ((rc == 0)) || fail "kvtierd exit status after SIGTERM: $rc"
}

server="\"server\": {\"endpoint\": \"ipc://$dir/kvt.zmq\", \"status_socket\": \"$dir/status.sock\"}"
ram="\"ram\": {\"capacity_bytes\": \"32MiB\", \"arena_path\": \"$arena\", \"max_chunk_bytes\": \"1MiB\"}"
cat >"$dir/disk.json" <<JSON
{$server, $ram,
 "disk": {"enabled": true, "dir": "$dir/disk", "capacity_bytes": "256MiB",
          "segment_bytes": "16MiB", "write_buffer_bytes": "16MiB"},
 "log": {"level": "info"}}
JSON
cat >"$dir/ram.json" <<JSON
{$server, $ram, "log": {"level": "info"}}
JSON

# A daemon without a disk tier: disk mode refuses with a message (exit 2).
start_daemon "$dir/ram.json"
mkdir -p "$dir/disk"
set +e
"$bench" -c "$dir/ram.json" --disk-dir "$dir/disk" --chunk-bytes 1MiB --chunks 64 \
    >/dev/null 2>"$dir/bench.err"
rc=$?
set -e
((rc == 2)) || fail "disk mode against a daemon without a disk tier: exit $rc, want 2"
grep -q 'disk tier is off' "$dir/bench.err" || fail "no 'disk tier is off' message"
stop_daemon

start_daemon "$dir/disk.json"
set +e
"$bench" -c "$dir/disk.json" --disk-dir "$dir/disk" --data bf16 --chunk-bytes 1MiB --chunks 64 \
    --lookups 100 --prompt-chunks 32 --json >"$dir/bench.json" 2>"$dir/bench.err"
rc=$?
set -e
((rc == 0)) || fail "kvtier-bench --disk-dir exited $rc"

out=$dir/bench.json
check() { # description jq-filter (must print true) jq-filter-to-show
    [[ $(jq -e "$2" "$out" 2>/dev/null) == true ]] || fail "$1 ($2): $(jq -c "$3" "$out")"
}
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
leftover=$(find "$dir/disk" -name 'kvtier-bench-*' | wc -l)
((leftover == 0)) || fail "the raw baseline file was left in $dir/disk"

stop_daemon
if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$dir/kvtierd.log" "$dir/bench.err"; then
    fail "sanitizer report in the kvtierd or kvtier-bench output"
fi
echo "bench_disk_smoke: ok ($(jq -c '{w: .disk.write.gbps_raw, r: .disk.read.gbps,
    refused: .disk.write.demotions_refused}' "$out"))"
