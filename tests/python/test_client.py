"""The binding against the real daemon: every call round-trips, errors map to exceptions with
kvt_strerror's text, futures complete (also through fileno() and an event loop), and numpy /
torch views over the arena are the arena's memory (a write through a reservation view is what
a pin then reads, and a pin's tensor sees the bytes the daemon holds)."""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import time

import numpy as np
import pytest
import torch

import kvtier
from conftest import jpath

NS = kvtier.Namespace(model="py-binding", chunk_tokens=16, dtype="bf16", num_layers=2)


def chunk(i: int, n: int = 8192) -> bytes:
    return np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_sync_calls_round_trip(daemon):
    with kvtier.Client(daemon.endpoint, NS) as c:
        assert c.data_path == "shm"
        info = c.server_info()
        assert info.max_chunks > 0 and info.max_in_flight > 0
        hashes = kvtier.hash_chain(list(range(64)), 16)
        assert len(hashes) == 4
        data = [chunk(i) for i in range(4)]
        assert c.save(hashes, data) == [kvtier.SAVE_STORED] * 4
        assert c.save(hashes[:1], data[:1]) == [kvtier.SAVE_EXISTS]
        assert c.lookup(hashes).hit == 4
        assert c.lookup(hashes[:2] + [kvtier.hash_key(b"nope")] + hashes[3:]).hit == 2
        bufs = [bytearray(8192) for _ in range(4)]
        res = c.load(hashes, bufs)
        assert res.nhit == 4 and res.lens == [8192] * 4
        assert [bytes(b) for b in bufs] == data
        # numpy and torch buffers load in place.
        arr = np.zeros(8192, dtype=np.uint8)
        ten = torch.zeros(8192, dtype=torch.uint8)
        assert c.load(hashes[:2], [arr, ten]).nhit == 2
        assert arr.tobytes() == data[0] and bytes(ten.numpy()) == data[1]
        st = c.tally(7, 1, 3, {"too_small": 2}, served_tokens_total=16, lookup_tokens_total=96)
        assert st.probes == 3
        assert c.stats()["submitted"] == 7  # 2 saves, 2 lookups, 2 loads, 1 tally
        assert kvtier.hash_parse(kvtier.hash_format(hashes[0])) == hashes[0]
        assert kvtier.checksum(data[0]) == kvtier.checksum(bytearray(data[0]))
    st = daemon.status()
    n = [n for n in st["namespaces"] if n["model"] == "py-binding"][0]
    assert n["chunks"] == 4 and jpath(n, "gates.admission.reasons.too_small") == 2


def test_errors_are_exceptions(daemon):
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Client("ipc:///nonexistent-dir/x.zmq", kvtier.Namespace(model="", chunk_tokens=16))
    assert e.value.code == kvtier.EINVAL and e.value.name == kvtier.strerror(kvtier.EINVAL)
    assert kvtier.strerror(kvtier.EINVAL) in str(e.value)
    with kvtier.Client(daemon.endpoint, NS) as c:
        h = kvtier.hash_key(b"big")
        c.save([h], [chunk(1, 16384)])
        with pytest.raises(kvtier.KvtierError) as e:
            c.load([h], [bytearray(100)])
        assert e.value.code == kvtier.EBUFSIZE
        with pytest.raises(TypeError):
            c.load([h], [b"read-only bytes"])
        with pytest.raises(kvtier.KvtierError) as e:  # rank outside the world
            kvtier.Client(daemon.endpoint, NS, rank=5)
        assert e.value.code == kvtier.EINVAL
    with pytest.raises(kvtier.KvtierError):
        c.lookup([h])  # closed


def test_timeout_is_kvtier_timeout(daemon):
    with kvtier.Client(daemon.endpoint, NS, timeout_ms=300) as c:
        h = kvtier.hash_key(b"t")
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            fut = c.submit_lookup([h])
            with pytest.raises(kvtier.KvtierTimeout) as e:
                fut.result(10)
            assert e.value.code == kvtier.ETIMEDOUT and isinstance(e.value, TimeoutError)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
        assert c.lookup([h]).hit == 0


def test_futures_complete(daemon):
    with kvtier.Client(daemon.endpoint, NS) as c:
        hashes = [kvtier.hash_key(b"f%d" % i) for i in range(32)]
        data = [chunk(100 + i) for i in range(32)]
        saves = [c.submit_save([h], [d], user=i) for i, (h, d) in enumerate(zip(hashes, data))]
        assert [f.result(10) for f in saves] == [[kvtier.SAVE_STORED]] * 32
        assert [f.user for f in saves] == list(range(32))
        bufs = [bytearray(8192) for _ in range(32)]
        loads = [c.submit_load([h], [b]) for h, b in zip(hashes, bufs)]
        # Taken through the completion iterator rather than result().
        got = list(c.completions(timeout=10))
        assert set(id(f) for f in got) == set(id(f) for f in loads)
        assert all(f.result().nhit == 1 for f in loads)
        assert [bytes(b) for b in bufs] == data
        look = c.submit_lookup(hashes)
        tal = c.submit_tally(9, 0, 1, {"hbm_satisfies_after_alloc": 1})
        assert look.result(10).hit == 32 and tal.result(10).probes >= 1

        # fileno() drives an event loop.
        async def main():
            loop = asyncio.get_running_loop()
            fut = c.submit_lookup(hashes[:4])
            ready = asyncio.Event()
            loop.add_reader(c.fileno(), ready.set)
            try:
                while not fut.done():
                    await ready.wait()
                    ready.clear()
                    c.poll_completions()
            finally:
                loop.remove_reader(c.fileno())
            return fut.result()

        assert asyncio.run(main()).hit == 4
        sel = selectors.DefaultSelector()
        sel.register(c.fileno(), selectors.EVENT_READ)
        fut = c.submit_lookup(hashes[:1])
        assert sel.select(10)
        c.poll_completions()
        assert fut.done() and fut.result().hit == 1


def test_zero_copy_views_are_the_arena(daemon):
    with kvtier.Client(daemon.endpoint, NS) as c:
        hashes = [kvtier.hash_key(b"zc%d" % i) for i in range(3)]
        res = c.reserve(hashes, [4096] * 3)
        assert res.outcomes == [kvtier.SAVE_RESERVED] * 3
        arena = c.arena()
        # Written through numpy, torch and the memoryview: all three are arena memory.
        res.numpy(0)[:] = 1
        res.torch(1).fill_(2)
        res.views[2][:] = b"\x03" * 4096
        for v in res.views:
            addr = np.frombuffer(v, dtype=np.uint8).ctypes.data
            assert arena["base"] <= addr < arena["base"] + arena["bytes"]
        assert res.commit().result(10) == [kvtier.SAVE_STORED] * 3
        with c.pin(hashes) as pin:
            assert pin.nhit == 3
            t = pin.torch(1)
            assert bytes(pin.views[0]) == b"\x01" * 4096
            assert torch.all(t == 2) and pin.numpy(2).tobytes() == b"\x03" * 4096
            if c.server_info().features & kvtier.FEATURE_CHECKSUMS:
                assert pin.checksums == [kvtier.checksum(bytes([k + 1]) * 4096) for k in range(3)]
                assert pin.verify() == 0 and pin.nhit == 3
            # The same memory: what the pin shows is what a copying load then reads.
            addr = t.data_ptr()
            assert arena["base"] <= addr < arena["base"] + arena["bytes"]
        bufs = [bytearray(4096) for _ in range(3)]
        assert c.load(hashes, bufs).nhit == 3 and bufs[1] == b"\x02" * 4096
        # An abandoned reservation publishes nothing.
        h = kvtier.hash_key(b"abandoned")
        r = c.reserve([h], [4096])
        r.abandon()
        assert c.lookup([h]).hit == 0


def test_auto_client_goes_on_frames_when_a_restart_takes_the_arena_away(make_daemon):
    """A client connected under data_path "auto" on the shared-memory path, and its daemon
    restarted on a memfd arena (one no other process maps): the recovery finds no arena, and the
    client goes on over frames (saves and loads byte-exact) instead of failing every call for
    good; a client that asked for "shm" fails, as it asked."""
    d = make_daemon()
    auto = kvtier.Client(d.endpoint, NS, timeout_ms=3000)
    strict = kvtier.Client(d.endpoint, NS, data_path="shm", timeout_ms=3000)
    assert auto.data_path == "shm" and strict.data_path == "shm"
    d.restart({"ram": {"arena_path": ""}})
    h = [kvtier.hash_key(b"after-%d" % i) for i in range(3)]
    data = [chunk(100 + i) for i in range(3)]
    assert auto.save(h, data) == [kvtier.SAVE_STORED] * 3
    assert auto.data_path == "frames"
    out = [bytearray(len(b)) for b in data]
    assert auto.load(h, out).nhit == 3
    assert [bytes(o) for o in out] == data
    assert auto.stats()["recoveries"] >= 1
    with pytest.raises(kvtier.KvtierError):
        strict.save([kvtier.hash_key(b"strict")], [chunk(7)])
    assert strict.data_path == "shm"
    strict.close()
    auto.close()


def test_frames_path_and_all_ranks(daemon):
    ns = kvtier.Namespace(model="py-ranks", chunk_tokens=16, world_size=2)
    with kvtier.Client(daemon.endpoint, ns, 0, data_path="frames") as c0, kvtier.Client(
        daemon.endpoint, ns, 1
    ) as c1:
        assert c0.data_path == "frames"
        hashes = [kvtier.hash_key(b"r%d" % i) for i in range(3)]
        c0.save(hashes, [chunk(i, 1024) for i in range(3)])
        c1.save(hashes[:1], [chunk(9, 1024)])
        r = c0.lookup(hashes, all_ranks=True)
        assert r.hit == 1 and r.rank_hits == [3, 1]
        with pytest.raises(kvtier.KvtierError) as e:
            c0.pin(hashes)
        assert e.value.code == kvtier.EUNSUPP


def test_done_callbacks_run_outside_the_lock(daemon):
    """A done-callback may submit the next request and wait for it (a chained lookup, then a
    load), and one that raises neither hangs the other waiters nor reaches result(): callbacks
    used to run under the client's lock, so a submit from one deadlocked every thread."""
    import threading

    with kvtier.Client(daemon.endpoint, NS, timeout_ms=2000) as c:
        h = kvtier.hash_key(b"cb-chain")
        data = chunk(7)
        assert c.save([h], [data]) == [kvtier.SAVE_STORED]
        got = {}

        def chained(f):
            buf = bytearray(len(data))
            got["load"] = c.submit_load([h], [buf]).result(5)
            got["buf"] = bytes(buf)

        def raising(f):
            raise RuntimeError("a callback's own error")

        first = c.submit_lookup([h])
        first.add_done_callback(raising)
        first.add_done_callback(chained)
        other = c.submit_lookup([h])
        t = threading.Thread(target=other.result, args=(5,), daemon=True)
        t.start()
        assert first.result(5).hit == 1
        t.join(5)
        assert not t.is_alive(), "a waiter hung behind a callback"
        assert got["load"].nhit == 1 and got["buf"] == data
        late = []
        first.add_done_callback(late.append)  # already done: runs at once
        assert late == [first]


def test_callbacks_survive_an_interrupt_and_close_waits_for_them(daemon):
    """The review of 0.2.7: a KeyboardInterrupt raised by one callback lost the callbacks of the
    other futures of the same drain, and close() freed the client while another thread's
    callback still used what the client lent (it no longer waited for callbacks once they ran
    outside the lock). Now the others run and the interrupt is raised after them, and close()
    returns only once other threads' callbacks returned."""
    import threading
    import time

    c = kvtier.Client(daemon.endpoint, NS, timeout_ms=2000)
    h = kvtier.hash_key(b"cb-interrupt")
    assert c.save([h], [chunk(8)]) == [kvtier.SAVE_STORED]
    ran = []

    def interrupt(f):
        raise KeyboardInterrupt

    first, second = c.submit_lookup([h]), c.submit_lookup([h])
    first.add_done_callback(interrupt)
    second.add_done_callback(lambda f: ran.append("second"))
    time.sleep(0.3)  # both completions waiting: one drain takes them together
    deadline = time.monotonic() + 5
    while "second" not in ran and time.monotonic() < deadline:
        try:
            c.poll_completions(timeout=0.05)
        except KeyboardInterrupt:
            ran.append("interrupt")
    assert "second" in ran and "interrupt" in ran

    entered, leave, order = threading.Event(), threading.Event(), []

    def slow(f):
        entered.set()
        leave.wait(5)
        order.append("callback returned")

    third = c.submit_lookup([h])
    third.add_done_callback(slow)
    t = threading.Thread(target=third.result, args=(5,), daemon=True)
    t.start()
    assert entered.wait(5)
    threading.Timer(0.3, leave.set).start()
    c.close()
    order.append("closed")
    t.join(5)
    assert order == ["callback returned", "closed"]


def test_clients_under_daemon_restarts_lose_no_thread_and_load_no_wrong_byte(daemon):
    """Four clients (shm, frames, auto, auto) submit saves, lookups, loads and pins from their
    own threads while the daemon is killed or stopped and started again eight times: every
    future completes (ok, or KvtierUnavailable while the link is down; nothing waits for its
    20 s timeout), every thread ends, every chunk loaded is its key's bytes, and the clients
    serve again at the end."""
    import random
    import threading

    def data(key: bytes) -> bytes:
        return (key * (4096 // len(key) + 1))[:4096]

    stop = threading.Event()
    problems: list = []
    outcomes: dict = {}
    lock = threading.Lock()

    def count(k: str) -> None:
        with lock:
            outcomes[k] = outcomes.get(k, 0) + 1

    def worker(idx: int, path: str) -> None:
        try:
            run(idx, path)
        except BaseException as e:  # a thread's exception would not fail the test by itself
            problems.append(f"client {idx} ({path}): {e!r}")

    def run(idx: int, path: str) -> None:
        rng = random.Random(idx)
        with kvtier.Client(daemon.endpoint, NS, data_path=path, timeout_ms=20000) as c:
            while not stop.is_set():
                keys = [b"restart-%d-%d" % (idx, rng.randrange(32)) for _ in range(4)]
                hs = [kvtier.hash_key(k) for k in keys]
                outs = [bytearray(4096) for _ in keys]
                futs = []
                try:
                    futs.append(("save", c.submit_save(hs, [data(k) for k in keys])))
                    futs.append(("lookup", c.submit_lookup(hs)))
                    futs.append(("load", c.submit_load(hs, outs)))
                    if c.data_path == "shm" and rng.random() < 0.3:
                        with c.pin(hs[:2]) as pin:
                            for i in range(pin.nhit):
                                if bytes(pin.views[i]) != data(keys[i]):
                                    problems.append(f"pin {keys[i]!r}: wrong bytes")
                except kvtier.KvtierUnavailable:
                    count("unavailable")
                for what, fut in futs:
                    try:
                        res = fut.result(60)
                    except kvtier.KvtierUnavailable:
                        count("unavailable")
                        continue
                    except kvtier.KvtierError as e:
                        problems.append(f"{what}: {e}")
                        continue
                    count("ok")
                    if what == "load":
                        for i in range(res.nhit):
                            if bytes(outs[i]) != data(keys[i]):
                                problems.append(f"load {keys[i]!r}: wrong bytes")
            c.lookup([kvtier.hash_key(b"restart-end")])  # serves again

    threads = [threading.Thread(target=worker, args=(i, p)) for i, p in enumerate(["shm", "frames", "auto", "auto"])]
    for t in threads:
        t.start()
    rng = random.Random(7)
    try:
        for r in range(8):
            time.sleep(rng.uniform(0.2, 0.6))
            if r % 4 == 3:  # frozen past the heartbeat's timeout, then killed
                os.kill(daemon.pid, signal.SIGSTOP)
                time.sleep(4.5)
            daemon.kill()
            time.sleep(rng.uniform(0.0, 0.3))
            daemon.start()
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert problems == [], problems[:5]
    assert outcomes.get("ok", 0) > 0 and outcomes.get("unavailable", 0) > 0, outcomes


@pytest.mark.parametrize("path", ["shm", "frames"])
def test_a_forked_child_gets_a_clear_error_and_the_parent_goes_on(daemon, path):
    """vLLM and SGLang fork workers. A child that inherits a connected Client has none of its
    threads (the I/O thread, the copy helpers, ZeroMQ's) and shares its eventfds and socket with
    the parent: before 0.2.13 a call in the child spun for ever inside ZeroMQ (its timeout never
    fired) and close() (also the one at the child's exit) hung in pthread_cond_destroy. Now
    every call in the child raises KvtierError(ECLOSED) naming the fork, close() returns at once,
    and the parent's client keeps serving the same bytes."""
    with kvtier.Client(daemon.endpoint, NS, data_path=path, timeout_ms=2000) as c:
        hs = [kvtier.hash_key(b"fork-%s-%d" % (path.encode(), i)) for i in range(4)]
        data = [chunk(100 + i, 65536) for i in range(4)]
        c.save(hs, data)
        fut = c.submit_lookup(hs)  # pending at the fork: the child must not wait for it
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never raise out of here
            lines = []
            try:
                for name, call in [
                    ("lookup", lambda: c.lookup(hs)),
                    ("load", lambda: c.load(hs, [bytearray(65536) for _ in hs])),
                    ("submit_save", lambda: c.submit_save(hs[:1], data[:1])),
                    ("result", lambda: fut.result(1)),
                    ("poll", lambda: c.poll_completions(0.1)),
                    ("stats", lambda: c.stats()),
                ]:
                    try:
                        call()
                        lines.append(f"{name}: no error")
                    except kvtier.KvtierError as e:
                        ok = e.code == kvtier.ECLOSED and "fork" in str(e)
                        lines.append(f"{name}: {'ok' if ok else 'wrong error ' + repr(e)}")
                    except BaseException as e:
                        lines.append(f"{name}: wrong error {e!r}")
                c.close()
                lines.append("close: ok")
            finally:
                os.write(wfd, "\n".join(lines).encode())
                os._exit(0)
        os.close(wfd)
        # the parent meanwhile: its pending future and new calls are served
        assert fut.result(5).hit == 4
        for _ in range(10):
            bufs = [bytearray(65536) for _ in hs]
            assert c.load(hs, bufs).nhit == 4 and [bytes(b) for b in bufs] == data
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        report = os.read(rfd, 65536).decode().splitlines()
        os.close(rfd)
        assert status == 0, status
        assert report == [
            "lookup: ok",
            "load: ok",
            "submit_save: ok",
            "result: ok",
            "poll: ok",
            "stats: ok",
            "close: ok",
        ], report
        bufs = [bytearray(65536) for _ in hs]
        assert c.load(hs, bufs).nhit == 4 and [bytes(b) for b in bufs] == data
