"""kvtier.vllm against the real daemon, driven in vLLM's call order: lookup across steps until
answered -> submit_load -> get_finished; submit_store -> get_finished; touch; request_finished;
shutdown. The primary tier is a real buffer laid out as vLLM lays it out (one row of
page_size_bytes per block, a 2-D memoryview); reloads are compared byte for byte. With the
daemon SIGSTOPped, every method returns and the jobs complete only after SIGCONT (order, not
time)."""

from __future__ import annotations

import hashlib
import os
import select
import signal

import numpy as np
import pytest

import kvtier
from kvtier.vllm import KvtierSecondaryTier
from conftest import jpath
from vllm_fakes import JobMetadata, ReqContext, make_offload_key

BLOCK_TOKENS = 16
ROW = 64 << 10  # page_size_bytes of one block row (all workers, all layers)
NBLOCKS = 64


def primary():
    buf = bytearray(NBLOCKS * ROW)
    return buf, memoryview(buf).cast("B", (NBLOCKS, ROW))


def keys_of(prompt: str, n: int) -> list[bytes]:
    out, prev = [], b""
    for i in range(n):
        prev = hashlib.sha256(prev + f"{prompt}/{i}".encode()).digest()
        out.append(make_offload_key(prev, 0))
    return out


def req(req_id: str, keys: list[bytes]) -> ReqContext:
    ctx = ReqContext(req_id)
    for i, k in enumerate(keys):
        ctx.set_offload_key_position(k, (i + 1) * BLOCK_TOKENS)
    return ctx


def fds(tier):
    """The client's descriptor to wait on (none while the tier is not connected yet)."""
    return [tier.client.fileno()] if tier.client is not None else []


def wait_step(tier, steps, pred, limit=2000):
    """Runs scheduler steps (get_finished) until pred(finished so far) holds; between steps it
    waits on the client's descriptor (no fixed sleeps)."""
    for _ in range(limit):
        steps.extend(tier.get_finished())
        if pred(steps):
            return steps
        select.select(fds(tier), [], [], 0.05)
    raise AssertionError(f"the tier did not reach the state; finished: {steps}")


def lookup_all(tier, keys, ctx, limit=2000):
    """vLLM's lookup loop: each step asks keys in order until one is not a hit; returns the
    number of leading hits once every asked key is answered."""
    for _ in range(limit):
        hits = 0
        pending = False
        for k in keys:
            r = tier.lookup(k, ctx)
            if r is None:
                pending = True
                break
            if not r:
                break
            hits += 1
        if not pending:
            return hits
        tier.get_finished()
        select.select(fds(tier), [], [], 0.05)
    raise AssertionError("lookups never answered")


def load_byte_exact(tier, buf, job_id, keys, src, dst, ctx):
    """vLLM's load of keys into blocks dst: the job succeeds and each block holds the bytes of
    the block src it was stored from."""
    tier.submit_load(JobMetadata(job_id, keys, np.array(dst), True, ctx))
    steps = wait_step(tier, [], lambda s: any(r.job_id == job_id for r in s))
    assert [r.success for r in steps if r.job_id == job_id] == [True]
    for s_, d_ in zip(src, dst):
        assert buf[d_ * ROW : (d_ + 1) * ROW] == buf[s_ * ROW : (s_ + 1) * ROW]


def fill(buf, block_ids, seed):
    rng = np.random.default_rng(seed)
    for b in block_ids:
        buf[b * ROW : (b + 1) * ROW] = rng.integers(0, 256, ROW, dtype=np.uint8).tobytes()


def make_tier(daemon, view, **kw):
    return KvtierSecondaryTier(
        None,
        view,
        "KvtierSecondaryTier",
        endpoint=daemon.endpoint,
        model="vllm-test-model",
        revision="r1",
        dtype="bf16",
        block_tokens=BLOCK_TOKENS,
        num_layers=2,
        tp_size=2,
        **kw,
    )


def test_call_order_byte_exact_and_tallies(daemon):
    buf, view = primary()
    tier = make_tier(daemon, view)
    keys = keys_of("prompt-a", 4)

    # A new prompt: nothing stored yet; the answer comes at a later step.
    a = req("a", keys)
    assert tier.lookup(keys[0], a) is None
    assert lookup_all(tier, keys, a) == 0

    # The primary tier cascades the four blocks down.
    src = [3, 5, 7, 9]
    fill(buf, src, 1)
    tier.submit_store(JobMetadata(1, keys, np.array(src), False, a))
    steps = wait_step(tier, [], lambda s: any(r.job_id == 1 for r in s))
    assert [r.success for r in steps if r.job_id == 1] == [True]
    tier.request_finished(a)  # looked up, nothing hit: no verdict
    st = daemon.wait_status(lambda st: jpath(st, "ram.chunks", 0) == 4, "4 chunks")
    ns = [n for n in st["namespaces"] if n["model"] == "vllm-test-model"]
    assert len(ns) == 1 and ns[0]["chunks"] == 4 and ns[0]["revision"] == "r1"

    # A second request with the same prefix: looked up across steps until answered...
    b = req("b", keys)
    assert lookup_all(tier, keys, b) == 4
    # ...promoted into other primary slots, byte-exact.
    dst = [10, 11, 12, 13]
    load_byte_exact(tier, buf, 2, keys, src, dst, b)
    tier.touch(keys, b)
    tier.request_finished(b)  # loaded: aligned_large_hit, 4 blocks served
    assert tier.tallies.paid_total == 1 and tier.tallies.probes_total == 1
    assert tier.tallies.served_tokens_total == 4 * BLOCK_TOKENS
    tier.get_finished()  # the step pushes the tally
    st = daemon.wait_status(
        lambda st: any(
            jpath(n, "gates.admission.reasons.aligned_large_hit", 0) == 1 for n in st["namespaces"]
        ),
        "the tally",
    )
    if tier.client.server_info().features & kvtier.FEATURE_TOKENS:
        n = [n for n in st["namespaces"] if n["model"] == "vllm-test-model"][0]
        assert jpath(n, "gates.admission.served_tokens") == 4 * BLOCK_TOKENS

    # A load of blocks never stored fails, and their lookups turn False (no livelock).
    other = keys_of("prompt-b", 2)
    c = req("c", other)
    tier.submit_load(JobMetadata(3, other, np.array([20, 21]), True, c))
    steps = wait_step(tier, [], lambda s: any(r.job_id == 3 for r in s))
    assert [r.success for r in steps if r.job_id == 3] == [False]
    tier.shutdown()


def test_no_method_blocks_on_a_stopped_daemon(daemon):
    buf, view = primary()
    tier = make_tier(daemon, view)
    keys = keys_of("prompt-stop", 3)
    ctx = req("s", keys)
    fill(buf, [0, 1, 2], 7)
    tier.submit_store(JobMetadata(1, keys, np.array([0, 1, 2]), False, ctx))
    wait_step(tier, [], lambda s: any(r.job_id == 1 and r.success for r in s))

    events = []
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        more = keys_of("prompt-stop-2", 2)
        fill(buf, [30, 31], 8)
        tier.submit_store(JobMetadata(2, more, np.array([30, 31]), False, ctx))
        events.append("store submitted")
        tier.submit_load(JobMetadata(3, keys, np.array([40, 41, 42]), True, ctx))
        events.append("load submitted")
        assert tier.lookup(keys_of("prompt-stop-3", 1)[0], ctx) is None
        events.append("lookup returned")
        assert list(tier.get_finished()) == []
        events.append("get_finished returned")
        tier.touch(keys, ctx)
        events.append("touch returned")
        # Nothing can have completed: the daemon is stopped.
        assert tier.jobs_in_flight == 2
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    steps = wait_step(tier, [], lambda s: {r.job_id for r in s} >= {2, 3})
    events.append("jobs finished")
    assert events == [
        "store submitted",
        "load submitted",
        "lookup returned",
        "get_finished returned",
        "touch returned",
        "jobs finished",
    ]
    assert all(r.success for r in steps if r.job_id in (2, 3))
    for s_, d_ in zip([0, 1, 2], [40, 41, 42]):
        assert buf[d_ * ROW : (d_ + 1) * ROW] == buf[s_ * ROW : (s_ + 1) * ROW]
    tier.request_finished(ctx)
    tier.shutdown()


def test_requires_a_block_row_view(daemon):
    with pytest.raises(ValueError):
        make_tier(daemon, memoryview(bytearray(ROW)))


def test_a_miss_told_one_request_is_asked_again_for_another(daemon):
    """A request that asked blocks before they were stored was told False; while it still runs,
    another request asking the same blocks (the primary tier evicted them meanwhile) must get
    the tier's present answer, not the first request's stale miss."""
    buf, view = primary()
    tier = make_tier(daemon, view)
    keys = keys_of("prompt-stale", 3)
    a = req("stale-a", keys)
    assert lookup_all(tier, keys, a) == 0
    fill(buf, [0, 1, 2], 5)
    tier.submit_store(JobMetadata(1, keys, np.array([0, 1, 2]), False, a))
    wait_step(tier, [], lambda s: any(r.job_id == 1 and r.success for r in s))
    b = req("stale-b", keys)  # a has not finished
    assert lookup_all(tier, keys, b) == 3
    tier.request_finished(a)
    tier.request_finished(b)
    tier.shutdown()


def test_serves_again_after_a_restart_with_fewer_chunks_per_request(daemon):
    """The daemon restarted on a smaller server.max_chunks_per_request while the tier lives: no
    step raises (the tier split its lookups by the limit of the connect: ETOOBIG at submit
    escaped get_finished), and a store of more blocks than the new limit is split by it and
    succeeds (the limit kept from the connect failed every such job for good; and the daemon
    refuses an oversized request before it looks at the session, so without a new HELLO the
    library never learned the new limit)."""
    buf, view = primary()
    tier = make_tier(daemon, view, timeout_ms=2000)
    daemon.restart({"server": {"max_chunks_per_request": 2}})
    keys = keys_of("prompt-limit", 6)
    ctx = req("limit", keys)
    for k in keys:  # one step asks every key of the prompt
        assert tier.lookup(k, ctx) is None
    assert lookup_all(tier, keys, ctx) == 0  # answered once the library met the new daemon
    other = keys_of("prompt-limit-other", 6)
    o = req("limit-other", other)
    for k in other:  # and again, now that the library knows the new limit
        assert tier.lookup(k, o) is None
    tier.touch(keys, ctx)
    tier.get_finished()
    assert lookup_all(tier, other, o) == 0
    src = [1, 2, 3, 4, 5, 6]
    fill(buf, src, 9)
    results = []
    for job in range(1, 4):  # the first job may meet the old limit once
        tier.submit_store(JobMetadata(job, keys, np.array(src), False, ctx))
        results += wait_step(tier, [], lambda s: any(r.job_id == job for r in s))
        if results[-1].success:
            break
    assert results[-1].success, results
    assert tier.client.server_info().max_chunks == 2
    b = req("limit-b", keys)
    assert lookup_all(tier, keys, b) == 6
    dst = [20, 21, 22, 23, 24, 25]
    load_byte_exact(tier, buf, 9, keys, src, dst, b)
    tier.request_finished(ctx)
    tier.request_finished(o)
    tier.request_finished(b)
    tier.shutdown()


def test_a_daemon_outage_is_misses_and_failed_jobs_not_stalls(daemon):
    """The daemon is killed under a live tier whose timeout is longer than this test: lookups
    are answered False and jobs finish unsuccessful within the client's down wait (before
    0.2.12 each waited its whole timeout: vLLM's scheduler held those requests, unscheduled, that
    long), nothing raises, and once the daemon is back the tier serves again (the shared arena
    re-attached: the blocks stored before the kill are hits)."""
    buf, view = primary()
    tier = make_tier(daemon, view, timeout_ms=600000)
    keys = keys_of("prompt-outage", 3)
    ctx = req("outage", keys)
    fill(buf, [0, 1, 2], 21)
    tier.submit_store(JobMetadata(1, keys, np.array([0, 1, 2]), False, ctx))
    wait_step(tier, [], lambda s: any(r.job_id == 1 and r.success for r in s))

    daemon.kill()
    gone = req("outage-gone", keys)
    assert lookup_all(tier, keys, gone, limit=200) == 0  # answered, not held: at most 10 s
    more = keys_of("prompt-outage-2", 2)
    fill(buf, [10, 11], 22)
    tier.submit_store(JobMetadata(2, more, np.array([10, 11]), False, gone))
    tier.submit_load(JobMetadata(3, keys, np.array([40, 41, 42]), True, gone))
    steps = wait_step(tier, [], lambda s: {r.job_id for r in s} >= {2, 3}, limit=200)
    assert [r.success for r in steps if r.job_id in (2, 3)] == [False, False]
    link = tier.client.link()
    assert link["down"] == 1 and link["disconnects"] == 1 and link["unavailable"] >= 3, link
    assert tier.client.stats()["timeouts"] == 0
    tier.request_finished(gone)

    daemon.start()
    hits = 0
    for i in range(200):  # a request asked while the client had not yet reconnected is a miss
        back = req(f"outage-back-{i}", keys)
        hits = lookup_all(tier, keys, back)
        tier.request_finished(back)
        if hits == 3:
            break
        select.select(fds(tier), [], [], 0.05)
    assert hits == 3
    assert tier.client.link()["down"] == 0
    again = req("outage-again", keys)
    assert lookup_all(tier, keys, again) == 3
    load_byte_exact(tier, buf, 4, keys, [0, 1, 2], [50, 51, 52], again)
    tier.request_finished(ctx)
    tier.request_finished(again)
    tier.shutdown()


def test_starts_before_the_daemon_and_serves_once_it_is_there(daemon):
    """An engine started while kvtierd is not there (a boot order, an upgrade) starts, with every
    lookup a miss and every job failed, instead of failing its start (before 0.2.12 the
    constructor raised KvtierTimeout); once the daemon answers, the background connect takes
    over and the tier serves. require_daemon keeps the old failure."""
    daemon.kill()
    buf, view = primary()
    with pytest.raises(kvtier.KvtierTimeout):
        make_tier(daemon, view, timeout_ms=300, require_daemon=True)
    tier = make_tier(daemon, view, timeout_ms=300)
    assert tier.client is None
    keys = keys_of("prompt-early", 3)
    early = req("early", keys)
    assert lookup_all(tier, keys, early, limit=20) == 0
    fill(buf, [0, 1, 2], 23)
    tier.submit_store(JobMetadata(1, keys, np.array([0, 1, 2]), False, early))
    steps = wait_step(tier, [], lambda s: any(r.job_id == 1 for r in s), limit=20)
    assert [r.success for r in steps if r.job_id == 1] == [False]
    tier.request_finished(early)

    daemon.start()
    for _ in range(400):  # the background connect retries every second
        if tier.client is not None:
            break
        select.select([], [], [], 0.05)
    assert tier.client is not None
    tier.submit_store(JobMetadata(2, keys, np.array([0, 1, 2]), False, early))
    steps = wait_step(tier, [], lambda s: any(r.job_id == 2 for r in s))
    assert [r.success for r in steps if r.job_id == 2] == [True]
    later = req("later", keys)
    assert lookup_all(tier, keys, later) == 3
    load_byte_exact(tier, buf, 3, keys, [0, 1, 2], [40, 41, 42], later)
    tier.request_finished(later)
    tier.shutdown()
