# testlib.sh - what the shell tests (tests/shell/) and the experiment scripts (tools/*.sh) share:
# a scratch directory, a daemon started and stopped the same way everywhere, failure messages
# with the logs' tails, assertions. Sourced, not run; bash only.
#
# testlib_init PREFIX TOOL...   checks that each TOOL is on PATH (or, given with a /, is an
#                               executable file there), makes a fresh directory $dir
#                               under /tmp and arms the exit trap: $pid and every process in
#                               testlib_pids still running is SIGKILLed, $dir and every path in
#                               testlib_files are removed.
# testlib_start_daemon KVTIERD CONFIG SOCK
#                               starts KVTIERD -c CONFIG in the background (stdout and stderr
#                               appended to $dir/kvtierd.log), its pid in $pid, and waits (10 s at
#                               most) until GET /status answers on SOCK.
# testlib_start_disk_daemon KVTIERD RAM
#                               writes $dir/kvtierd.json (endpoint ipc://$dir/kvt.zmq in $endpoint,
#                               status socket $dir/status.sock in $sock, a memfd arena of RAM,
#                               64 KiB chunks, an 8 MiB disk tier in $dir/disk) and starts KVTIERD
#                               on it (testlib_start_daemon).
# testlib_stop_daemon           SIGTERM to $pid; fails unless the daemon exits 0 with a log free of
#                               sanitizer reports.
# testlib_no_sanitizer_report FILE...
#                               fails when a FILE holds an ASan/LSan/UBSan report.
# status                        GET /status on the socket $sock (curl), the JSON on stdout.
# fail MESSAGE                  prints FAIL: MESSAGE and the tail of every file of testlib_logs
#                               (names in $dir, default kvtierd.log) that is not empty; exits 1.
# expect_eq WHAT GOT WANT       fails unless GOT is WANT.
# expect_jq WHAT FILTER FILE [SHOW]
#                               fails unless the jq FILTER prints true for FILE; the message shows
#                               the jq SHOW of FILE (default: all of it).
#
# Waits poll with a deadline; nothing sleeps for a fixed time to let something happen.

testlib_init() {
    local prefix=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "FAIL: $tool is required" >&2; exit 1; }
    done
    dir=$(mktemp -d "/tmp/$prefix-XXXXXX")
    pid=
    testlib_pids=()
    testlib_files=()
    testlib_logs=(kvtierd.log)
    trap testlib_cleanup EXIT
}

testlib_cleanup() {
    local p
    for p in $pid "${testlib_pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kill -KILL "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
    rm -rf "$dir" "${testlib_files[@]}"
}

fail() {
    local log
    echo "FAIL: $*" >&2
    for log in "${testlib_logs[@]}"; do
        if [[ -s $dir/$log ]]; then
            echo "--- $log (tail)" >&2
            tail -n 40 "$dir/$log" >&2
        fi
    done
    exit 1
}

expect_eq() { # what got want
    [[ "$2" == "$3" ]] || fail "$1: got '$2', want '$3'"
}

expect_jq() { # what filter file [show]
    [[ $(jq -e "$2" "$3" 2>/dev/null) == true ]] || fail "$1 ($2): $(jq -c "${4:-.}" "$3")"
}

status() {
    curl -sf --max-time 5 --unix-socket "$sock" http://x/status
}

testlib_start_daemon() { # kvtierd config sock
    local deadline=$((SECONDS + 10))
    "$1" -c "$2" >>"$dir/kvtierd.log" 2>&1 &
    pid=$!
    until curl -sf --max-time 5 --unix-socket "$3" http://x/status >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || fail "kvtierd exited before it was ready"
        ((SECONDS < deadline)) || fail "kvtierd not ready after 10 s"
        sleep 0.05
    done
}

testlib_start_disk_daemon() { # kvtierd ram
    endpoint="ipc://$dir/kvt.zmq"
    sock="$dir/status.sock"
    cat >"$dir/kvtierd.json" <<EOF
{
  "server": {"endpoint": "$endpoint", "status_socket": "$sock"},
  "ram": {"capacity_bytes": "$2", "arena_path": "", "max_chunk_bytes": "64KiB"},
  "disk": {"enabled": true, "dir": "$dir/disk", "capacity_bytes": "8MiB",
           "segment_bytes": "2MiB", "write_buffer_bytes": "1MiB"},
  "log": {"level": "info"}
}
EOF
    testlib_start_daemon "$1" "$dir/kvtierd.json" "$sock"
}

testlib_no_sanitizer_report() { # file...
    if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$@"; then
        fail "sanitizer report in $*"
    fi
}

testlib_stop_daemon() {
    local rc
    kill -TERM "$pid"
    set +e
    wait "$pid"
    rc=$?
    set -e
    pid=
    expect_eq "kvtierd exit status after SIGTERM" "$rc" 0
    testlib_no_sanitizer_report "$dir/kvtierd.log"
}
