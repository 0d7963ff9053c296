#!/usr/bin/env bash
# bench_redis_smoke.sh KVTIERD KVTIER_BENCH - a short run of `kvtier-bench --vs-redis` against a
# real redis-server and a real kvtierd with a /dev/shm arena: every column of the side-by-side
# table (kvtier-shm, kvtier-frames, redis, zmq, memcpy) and every ratio is present and > 0, every
# backend loaded back all its chunks byte-exact, the run left no key in Redis, a non-loopback
# Redis address is a usage error (exit 2), and kvtierd stops cleanly on SIGTERM (exit 0, no
# sanitizer report). Exits 77 (skipped) only when redis-server is not installed.
set -euo pipefail

kvtierd=${1:?usage: bench_redis_smoke.sh KVTIERD KVTIER_BENCH}
bench=${2:?usage: bench_redis_smoke.sh KVTIERD KVTIER_BENCH}
if ! command -v redis-server >/dev/null; then
    echo "SKIP: redis-server is not installed (Debian: apt-get install redis-server)"
    exit 77
fi
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtbench redis-cli jq curl
arena=/dev/shm/kvtier-bench-smoke.$$.$RANDOM.arena
testlib_files+=("$arena" "$arena.d")
testlib_logs+=(redis.log bench.err)

# redis-server on a random port; another port if that one is taken (redis-server then exits).
start_redis() {
    port=$((20000 + RANDOM % 40000))
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
        --dir "$dir" >"$dir/redis.log" 2>&1 &
    rpid=$!
    testlib_pids+=("$rpid")
}
start_redis
deadline=$((SECONDS + 10))
tries=1
until [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]]; do
    if ! kill -0 "$rpid" 2>/dev/null; then
        grep -q 'Address already in use' "$dir/redis.log" && ((tries++ < 5)) ||
            fail "redis-server exited before it answered (port $port)"
        start_redis
    fi
    ((SECONDS < deadline)) || fail "redis-server not answering after 10 s"
    sleep 0.05
done

endpoint="ipc://$dir/kvt.zmq"
sock="$dir/status.sock"
cat >"$dir/kvtierd.json" <<EOF
{
  "server": {"endpoint": "$endpoint", "status_socket": "$sock"},
  "ram": {"capacity_bytes": "64MiB", "arena_path": "$arena", "max_chunk_bytes": "1MiB"},
  "disk": {"dir": "$dir/disk"},
  "log": {"level": "info"}
}
EOF
testlib_start_daemon "$kvtierd" "$dir/kvtierd.json" "$sock"

chunks=8
rounds=1
"$bench" -c "$dir/kvtierd.json" --vs-redis "127.0.0.1:$port" --chunks $chunks --rounds $rounds \
    --chunk-bytes 256KiB --batch 4 --lookups 50 --prompt-chunks 32 --json \
    >"$dir/bench.json" 2>"$dir/bench.err" || fail "kvtier-bench --vs-redis exited $?"

out=$dir/bench.json
check() { expect_jq "$1" "$2" "$out" "$3"; } # description jq-filter jq-filter-to-show
for op in save load; do
    for col in kvtier_shm kvtier_frames redis zmq memcpy; do
        check "$op GB/s of $col" ".compare.$op.$col | type == \"number\" and . > 0" ".compare.$op"
    done
    for ratio in shm_memcpy shm_redis frames_zmq; do
        check "$op ratio $ratio" ".compare.ratios.$op.$ratio | type == \"number\" and . > 0" \
            ".compare.ratios.$op"
    done
done
want=$((chunks * rounds))
for bk in kvtier_shm kvtier_frames redis; do
    check "$bk measured" ".backends.$bk.state == \"measured\"" ".backends.$bk"
    check "$bk stored every chunk" ".backends.$bk.save.outcomes.stored == $want" ".backends.$bk.save"
    check "$bk loaded every chunk back byte-exact" \
        ".backends.$bk.load.chunks == {\"hits\": $want, \"misses\": 0, \"evicted\": 0}" \
        ".backends.$bk.load.chunks"
done
check "redis server" ".backends.redis.server == \"127.0.0.1:$port\"" ".backends.redis"
check "data path" '.data_path == "shm"' '.data_path'
check "no warnings" '.warnings == []' '.warnings'
keys=$(redis-cli -p "$port" dbsize)
[[ $keys == 0 ]] || fail "the run left $keys keys in Redis"

set +e
"$bench" -c "$dir/kvtierd.json" --vs-redis "192.0.2.1:$port" --chunks 1 >/dev/null 2>&1
rc=$?
set -e
((rc == 2)) || fail "a non-loopback --vs-redis address: exit $rc, want 2"

testlib_stop_daemon
testlib_no_sanitizer_report "$dir/bench.err"
echo "bench_redis_smoke: ok (redis port $port)"
