#!/bin/sh
# bootstrap.sh - installs what kvtier needs on Debian 12 (run as root) and builds it into ./build.
#
# Extra CMake arguments may be passed in KVT_CMAKE_ARGS (CI passes -DKVT_WERROR=ON). The build
# directory can be changed with KVT_BUILD_DIR. Re-running is cheap: apt-get skips installed
# packages and CMake rebuilds only what changed.
set -eu
cd "$(dirname "$0")/.."

# libhiredis-dev: kvtier-bench --vs-redis; redis-server (with redis-cli): its ctest smoke test;
# python3: tools/kvtier-tracegen (the replay smoke test generates its trace with it);
# libsystemd-dev: sd_notify (Type=notify, watchdog, reload); prometheus: promtool, which the
# metrics_promtool test runs on a live daemon's /metrics; python3-pytest, -numpy, -torch (CPU,
# 1.13): the Python package's tests (tests/python, run with /usr/bin/python3); python3-venv and
# python3-setuptools: the README's `pip install --no-build-isolation` into a venv.
packages="build-essential cmake pkg-config git curl libuv1-dev libzmq3-dev liblz4-dev
libjansson-dev libxxhash-dev check libsubunit-dev jq libhiredis-dev redis-server python3
libsystemd-dev prometheus python3-pytest python3-numpy python3-torch python3-venv python3-setuptools"

missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing packages:$missing (run as root to install them)" >&2
        exit 1
    fi
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

build="${KVT_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${KVT_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"

# The Python package, importable at once: as root, this checkout's client/python is registered
# with Debian's /usr/bin/python3 (a kvtier-dev.pth file in its site-packages, as an editable
# install would do), and the package loads build/client/libkvtier.so.0.2 from this tree. A copy
# installed by `cmake --install build` comes first on sys.path and takes precedence; removing
# the .pth file (or KVT_NO_PTH=1 here) undoes it.
if [ "$(id -u)" -eq 0 ] && [ -z "${KVT_NO_PTH:-}" ]; then
    site=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    mkdir -p "$site"
    printf '%s\n' "$(pwd)/client/python" > "$site/kvtier-dev.pth"
fi
