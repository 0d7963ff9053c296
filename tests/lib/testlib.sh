# testlib.sh - the common prologue of the shell tests (sourced, not run).
#
# testlib_init PREFIX TOOL...: checks the tools, makes a fresh directory $dir under /tmp that is
# removed on exit, and on exit SIGKILLs $pid if the test left a daemon running there. Provides
# fail MESSAGE (prints the daemon log's tail when $dir/kvtierd.log exists, exits 1) and
# expect_eq WHAT GOT WANT.

testlib_init() {
    local prefix=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "FAIL: $tool is required" >&2; exit 1; }
    done
    dir=$(mktemp -d "/tmp/$prefix-XXXXXX")
    pid=
    trap testlib_cleanup EXIT
}

testlib_cleanup() {
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

fail() {
    echo "FAIL: $*" >&2
    if [[ -f $dir/kvtierd.log ]]; then
        echo "--- kvtierd.log (tail)" >&2
        tail -n 40 "$dir/kvtierd.log" >&2
    fi
    exit 1
}

expect_eq() { # what got want
    [[ "$2" == "$3" ]] || fail "$1: got '$2', want '$3'"
}
