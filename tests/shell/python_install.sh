#!/bin/bash
# python_install.sh BUILD_DIR SOURCE_DIR - the Python package as a new user gets it:
#   1. `cmake --install` into a scratch prefix puts kvtier into the prefix's site-packages
#      (lib/python3.<minor>/dist-packages) with _install.py naming the installed library, and
#      /usr/bin/python3 imports it from there, outside the source tree and without KVTIER_LIB,
#      loading the prefix's libkvtier.so.0.2;
#   2. `pip install --no-build-isolation --no-index` of client/python into a
#      `/usr/bin/python3 -m venv --system-site-packages` venv works offline, and that copy
#      imports with KVTIER_LIB;
#   3. the README's Python example (the block between the "python-example" markers) runs as
#      written against the installed kvtierd, with only its endpoint pointed at this test's
#      daemon.
set -euo pipefail
build="$1"
source_dir="$2"
# shellcheck source=../lib/testlib.sh
source "$(dirname "$0")/../lib/testlib.sh"
testlib_init kvtpy /usr/bin/python3
prefix=$dir/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null

minor=$(/usr/bin/python3 -c 'import sys; print(sys.version_info.minor)')
site=$prefix/lib/python3.$minor/dist-packages
[ -f "$site/kvtier/__init__.py" ] && [ -f "$site/kvtier/_install.py" ] ||
    fail "kvtier not installed into $site"
lib=$(cd "$dir" && env -u KVTIER_LIB PYTHONPATH="$site" /usr/bin/python3 -c \
    'import kvtier, kvtier.vllm, kvtier.sglang; print(kvtier.LIBRARY_PATH)')
libdir=$(dirname "$(find "$prefix" -name 'libkvtier.so.0.2' | head -n1)")
expect_eq "library the installed package loads" "$lib" "$libdir/libkvtier.so.0.2"

# pip into a venv, offline, from a copy (an in-tree build would leave build/ in the source).
cp -r "$source_dir/client/python" "$dir/pkg"
rm -rf "$dir/pkg/build" "$dir/pkg"/*.egg-info
/usr/bin/python3 -m venv --system-site-packages "$dir/venv"
(cd "$dir" && "$dir/venv/bin/pip" install -q --no-build-isolation --no-index "$dir/pkg") ||
    fail "pip install into the venv"
where=$(cd "$dir" && KVTIER_LIB="$libdir/libkvtier.so.0.2" "$dir/venv/bin/python" -c \
    'import kvtier; print(kvtier.__file__)')
case "$where" in "$dir/venv/"*) ;; *) fail "the venv imported kvtier from $where" ;; esac

# The README example, against the installed daemon.
cat > "$dir/kvtierd.json" <<JSON
{"server": {"endpoint": "ipc://$dir/kvt.zmq", "status_socket": "$dir/status.sock"},
 "ram": {"capacity_bytes": "32MiB", "max_chunk_bytes": "4MiB", "arena_path": "/dev/shm/kvtpy-readme.$$.arena"},
 "disk": {"enabled": false, "dir": "$dir/disk"}}
JSON
testlib_files+=("/dev/shm/kvtpy-readme.$$.arena" "/dev/shm/kvtpy-readme.$$.arena.d")
sock=$dir/status.sock
testlib_start_daemon "$prefix/sbin/kvtierd" "$dir/kvtierd.json" "$sock"
sed -n '/<!-- python-example -->/,/<!-- \/python-example -->/p' "$source_dir/README.md" |
    sed '1,/^```python$/d; /^```$/,$d' > "$dir/example.py"
[ "$(wc -l < "$dir/example.py")" -le 10 ] || fail "the README example is longer than 10 lines"
grep -q 'ipc://run/kvtierd.zmq' "$dir/example.py" || fail "the README example names another endpoint"
sed -i "s|ipc://run/kvtierd.zmq|ipc://$dir/kvt.zmq|" "$dir/example.py"
out=$(cd "$dir" && PYTHONPATH="$site" /usr/bin/python3 example.py) || fail "the README example failed"
expect_eq "the README example's output" "$out" "True"
status > "$dir/status.json"
expect_jq "one chunk saved by the example" '.ram.chunks == 1' "$dir/status.json"
testlib_stop_daemon
echo "python_install: ok"
