"""What the Python tests share: the real kvtierd, started the way tests/lib/harness.c starts it.

Each `daemon` fixture gets a fresh directory under /tmp (short: Unix socket paths stay below
108 bytes) with a JSON config (ipc://<dir>/kvt.zmq, status socket <dir>/status.sock, a memfd
arena, the test's extra keys deep-merged over it), runs the kvtierd named by $KVTIERD (ctest
sets it; else build/daemon/kvtierd of the source tree) with its log in <dir>/kvtierd.log, and
waits, polling GET /status with a deadline, until it answers. At the end it sends SIGTERM and
asserts exit status 0. State is awaited by polling status, never by fixed sleeps.

The library under test is $KVTIER_LIB (ctest: the plain build's libkvtier.so; an ASan library
cannot be loaded into an interpreter that was not started with the ASan runtime).
"""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "client", "python"))

DEADLINE_S = 10.0


def _merge(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies (PR_SET_PDEATHSIG), so a
    test that crashes never leaves its daemon behind (as harness.c does)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 3.0):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Daemon:
    """A running kvtierd of one test."""

    _count = 0

    def __init__(self, extra: dict | None = None, capacity: int = 64 << 20, max_chunk: int = 4 << 20):
        self.dir = tempfile.mkdtemp(prefix="kvtpy.", dir="/tmp")
        Daemon._count += 1
        # A named arena in /dev/shm, so that same-host clients take the shared-memory path.
        self.arena_path = f"/dev/shm/kvtpy-{os.getpid()}-{Daemon._count}.arena"
        self.endpoint = f"ipc://{self.dir}/kvt.zmq"
        self.status_path = f"{self.dir}/status.sock"
        self.log_path = f"{self.dir}/kvtierd.log"
        cfg = {
            "server": {"endpoint": self.endpoint, "status_socket": self.status_path},
            "ram": {
                "capacity_bytes": capacity,
                "arena_path": self.arena_path,
                "max_chunk_bytes": max_chunk,
                "lease_ms": 30000,
            },
            # what the daemon keeps for a restart (the RAM journal) stays in the test's directory
            "disk": {"dir": f"{self.dir}/disk"},
            "log": {"level": "info"},
        }
        _merge(cfg, extra or {})
        self.config_path = f"{self.dir}/kvtierd.json"
        self.cfg = cfg
        with open(self.config_path, "w") as f:
            json.dump(cfg, f, indent=2)
        self._log = open(self.log_path, "wb")
        self._start()

    def _start(self) -> None:
        binary = os.environ.get("KVTIERD") or os.path.join(SOURCE, "build", "daemon", "kvtierd")
        self.proc = subprocess.Popen(
            [binary, "-c", self.config_path],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        self.wait_status(lambda st: True, what="the daemon to answer GET /status")

    def restart(self, extra: dict | None = None, sig: int = signal.SIGTERM) -> None:
        """Stops the daemon with sig and starts it again on its config (same endpoint, status
        socket and arena path) with extra deep-merged over it; its files are kept."""
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(sig)
        try:
            self.proc.wait(30.0)  # a clean stop may take the daemon's persist bound (20 s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"kvtierd did not stop on {sig}:\n{self.log()}")
        _merge(self.cfg, extra or {})
        with open(self.config_path, "w") as f:
            json.dump(self.cfg, f, indent=2)
        self._start()

    def kill(self) -> None:
        """SIGKILL, and waits: the daemon is gone until start()."""
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()

    def start(self) -> None:
        """Starts the daemon again on its config (after kill())."""
        assert self.proc.poll() is not None, "the daemon is running"
        self._start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str) -> str | None:
        try:
            conn = _UnixHTTP(self.status_path)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read().decode()
            conn.close()
            return body if resp.status == 200 else None
        except OSError:
            return None

    def status(self) -> dict | None:
        body = self.get("/status")
        return json.loads(body) if body else None

    def wait_status(self, pred, what: str = "status", timeout: float = DEADLINE_S) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"kvtierd exited ({self.proc.returncode}):\n{self.log()}")
            st = self.status()
            if st is not None and pred(st):
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; last status: {st}\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-1500:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"kvtierd did not stop on SIGTERM:\n{self.log()}")
            assert rc == 0, f"kvtierd exited with {rc}:\n{self.log()}"
        self._log.close()
        if os.path.exists(self.arena_path):
            os.unlink(self.arena_path)
        # the journal's directory beside the arena (kvtierd 0.2.6: <arena>.d)
        shutil.rmtree(self.arena_path + ".d", ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def jpath(st: dict, dotted: str, default=None):
    cur = st
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def make_daemon():
    made = []

    def make(**kw) -> Daemon:
        d = Daemon(**kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()
