"""kvtier.sglang against the real daemon: batch_set_v1 -> batch_exists -> batch_get_v1 through a
host pool's pages (a real torch CPU tensor; the test supplies only the attributes the backend
reads: page_size, layout, dtype, get_page_buffer_meta, get_dummy_flat_data_page), byte-exact;
an MLA model writes one copy; TP ranks see the same prefix count; rank 0's verdicts reach the
daemon's gates."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Optional

import torch

from conftest import jpath
from kvtier.sglang import KvtierHiCacheStorage

PAGE = 4  # tokens per page
LAYERS, HEADS, DIM = 2, 2, 64


@dataclass
class StorageConfig:  # SGLang's HiCacheStorageConfig fields the backend reads
    tp_rank: int
    tp_size: int
    is_mla_model: bool
    model_name: Optional[str]
    pp_rank: int = 0
    pp_size: int = 1
    is_page_first_layout: bool = True
    extra_config: Optional[dict] = None


@dataclass
class ExtraInfo:
    prefix_keys: Optional[list] = None


class MHAPagePool:
    """page_first MHA host pool: kv_buffer (2, tokens, layers, heads, dim); a page is its K and
    V pieces (two pointers per page), as SGLang's get_page_buffer_meta gives them."""

    layout = "page_first"

    def __init__(self, tokens=64, dtype=torch.bfloat16):
        self.page_size = PAGE
        self.dtype = dtype
        self.size = tokens
        self.kv_buffer = torch.zeros((2, tokens, LAYERS, HEADS, DIM), dtype=dtype)
        self.per_token = LAYERS * HEADS * DIM * self.kv_buffer.element_size()

    def get_page_buffer_meta(self, indices):
        base = self.kv_buffer.data_ptr()
        v_off = self.size * self.per_token
        ptrs = []
        for first in indices.tolist()[:: self.page_size]:
            k = base + first * self.per_token
            ptrs += [k, k + v_off]
        return ptrs, [self.page_size * self.per_token] * len(ptrs)

    def get_dummy_flat_data_page(self):
        return torch.zeros(2 * self.page_size * self.per_token, dtype=torch.uint8)

    def page(self, first):
        return (self.kv_buffer[:, first : first + self.page_size].contiguous().view(torch.uint8)).clone()


class MLAPool:
    """MLA host pool: kv_buffer (tokens, layers, 1, dim); one piece per page."""

    layout = "page_first"

    def __init__(self, tokens=64, dtype=torch.bfloat16):
        self.page_size = PAGE
        self.dtype = dtype
        self.kv_buffer = torch.zeros((tokens, LAYERS, 1, DIM), dtype=dtype)
        self.per_token = LAYERS * DIM * self.kv_buffer.element_size()

    def get_page_buffer_meta(self, indices):
        base = self.kv_buffer.data_ptr()
        ptrs = [base + f * self.per_token for f in indices.tolist()[:: self.page_size]]
        return ptrs, self.page_size * self.per_token

    def get_dummy_flat_data_page(self):
        return torch.zeros(self.page_size * self.per_token, dtype=torch.uint8)

    def page(self, first):
        return self.kv_buffer[first : first + self.page_size].contiguous().view(torch.uint8).clone()


def page_keys(prompt, n):
    out, prev = [], ""
    for i in range(n):
        prev = hashlib.sha256(f"{prev}{prompt}{i}".encode()).hexdigest()
        out.append(prev)
    return out


def indices(pages):
    return torch.tensor([p * PAGE + t for p in pages for t in range(PAGE)], dtype=torch.int64)


def backend(daemon, pool, rank, tp, mla, **extra):
    cfg = StorageConfig(rank, tp, mla, "sglang-test-model", extra_config={"endpoint": daemon.endpoint, **extra})
    b = KvtierHiCacheStorage(cfg, {})
    b.register_mem_pool_host(pool)
    return b


def fill(pool, seed):
    g = torch.Generator().manual_seed(seed)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape, generator=g).to(pool.kv_buffer.dtype))


def test_set_exists_get_byte_exact_and_tp_prefix(daemon):
    pools = [MHAPagePool(), MHAPagePool()]
    for r, p in enumerate(pools):
        fill(p, 10 + r)
    ranks = [backend(daemon, pools[r], r, 2, False) for r in range(2)]
    keys = page_keys("mha", 4)
    # Rank 0 backs up four pages, rank 1 only the first two.
    assert ranks[0].batch_set_v1(keys, indices([0, 1, 2, 3])) == [True] * 4
    assert ranks[1].batch_set_v1(keys[:2], indices([0, 1])) == [True] * 2
    # Both ranks see the same prefix count (the minimum over ranks).
    assert ranks[0].batch_exists(keys) == 2
    assert ranks[1].batch_exists(keys) == 2
    assert ranks[1].batch_set_v1(keys[2:], indices([2, 3]), ExtraInfo(prefix_keys=keys[:2])) == [True] * 2
    assert [r.batch_exists(keys) for r in ranks] == [4, 4]
    assert ranks[0].exists(keys[0]) and not ranks[0].exists(page_keys("absent", 1)[0])
    # Prefetch into other pages of each rank's pool: byte-exact, K and V.
    for r, pool in enumerate(pools):
        want = [pool.page(p * PAGE) for p in range(4)]
        assert ranks[r].batch_get_v1(keys, indices([8, 9, 10, 11])) == [True] * 4
        for i, p in enumerate([8, 9, 10, 11]):
            assert torch.equal(pool.page(p * PAGE), want[i]), f"rank {r} page {i}"
    # A missing page ends the prefix.
    mixed = keys[:2] + page_keys("absent", 1) + keys[3:]
    assert ranks[0].batch_get_v1(mixed, indices([12, 13, 14, 15])) == [True, True, False, False]
    st = daemon.status()
    assert jpath(st, "ram.chunks") == 8  # 4 pages x 2 ranks
    for b in ranks:
        b.close()


def test_mla_writes_one_copy_every_rank_reads_it(daemon):
    pools = [MLAPool(), MLAPool()]
    fill(pools[0], 3)
    ranks = [backend(daemon, pools[r], r, 2, True) for r in range(2)]
    keys = page_keys("mla", 3)
    for b in ranks:
        assert b.batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    st = daemon.wait_status(lambda st: jpath(st, "ram.chunks", 0) >= 3, "the pages")
    assert jpath(st, "ram.chunks") == 3
    ns = [n for n in st["namespaces"] if n["model"] == "sglang-test-model"]
    assert len(ns) == 1 and ns[0]["replicated"] in (True, 1) and ns[0]["chunks"] == 3
    assert [b.batch_exists(keys) for b in ranks] == [3, 3]
    # Rank 1 never wrote: it reads rank 0's copy into its own pool.
    assert ranks[1].batch_get_v1(keys, indices([5, 6, 7])) == [True] * 3
    for i, p in enumerate([5, 6, 7]):
        assert torch.equal(pools[1].page(p * PAGE), pools[0].page(i * PAGE))
    # The legacy tensor calls: get into a flat page, set from one.
    flat = ranks[1].get(keys[1])
    assert torch.equal(flat, pools[0].page(PAGE).flatten())
    for b in ranks:
        b.close()


def test_verdicts_reach_the_gates(daemon):
    pool = MLAPool()
    fill(pool, 5)
    b = backend(daemon, pool, 0, 1, False, min_load_tokens=2 * PAGE)
    keys = page_keys("tally", 4)
    assert b.batch_set_v1(keys, indices([0, 1, 2, 3])) == [True] * 4
    assert b.batch_exists(page_keys("none", 2)) == 0  # a miss: no verdict
    # One page hit of a two-page query: 4 tokens loadable < 8: too_small. (A hit covering the
    # whole query loses its last token and would round down to nothing: hbm_satisfies.)
    assert b.batch_exists(keys[:1] + page_keys("none", 1)) == 1
    assert b.batch_exists(keys) == 4  # aligned_large_hit
    assert b.batch_get_v1(keys, indices([4, 5, 6, 7])) == [True] * 4
    assert b.tallies.probes_total == 2 and b.tallies.paid_total == 1
    assert b.tallies.reasons == {"too_small": 1, "aligned_large_hit": 1}
    assert b.tallies.served_tokens_total == 4 * PAGE

    def tallied(st):
        n = [n for n in st["namespaces"] if n["model"] == "sglang-test-model"]
        return n and jpath(n[0], "gates.admission.reasons.aligned_large_hit", 0) == 1 and jpath(
            n[0], "gates.admission.reasons.too_small", 0
        ) == 1

    b.batch_exists(keys[:0])  # a call after the last push takes its completion
    daemon.wait_status(tallied, "the tallies")
    b.close()


def test_exists_reads_ahead_what_get_then_loads(make_daemon):
    """SGLang's order with the disk tier on: batch_exists (the lookup) finds pages that only the
    disk holds, the daemon reads them into RAM from then on, and batch_get_v1 finds them there:
    every page it loads is a read-ahead hit, byte-exact. 1 MiB of RAM, 4 KiB pages: 64 prompts of
    16 pages push the first prompts out of RAM (paced, so no demotion is refused)."""
    d = make_daemon(
        extra={
            "ram": {"capacity_bytes": "1MiB"},
            "disk": {
                "enabled": True,
                "capacity_bytes": "16MiB",
                "segment_bytes": "1MiB",
                "write_buffer_bytes": "1MiB",
            },
        },
        capacity=1 << 20,
        max_chunk=64 << 10,
    )
    pool = MHAPagePool(tokens=16 * PAGE * 2)
    b = backend(d, pool, 0, 1, False)
    prompts = [page_keys(f"disk-{p}", 16) for p in range(64)]
    first = None
    for p, keys in enumerate(prompts):
        fill(pool, 100 + p)
        if p == 0:
            first = [pool.page(i * PAGE) for i in range(16)]
        assert b.batch_set_v1(keys, indices(range(16))) == [True] * 16
        d.wait_status(lambda st: jpath(st, "disk.write_buffer_chunks") == 0, "the write buffer")
    st = d.status()
    assert jpath(st, "disk.demotions_refused") == 0
    assert jpath(st, "disk.prefetches") == 0
    ram_before = jpath(st, "disk.promotions")
    assert b.batch_exists(prompts[0]) == 16

    def read_ahead(st):
        return (
            jpath(st, "disk.prefetches", 0) > 0
            and jpath(st, "disk.reads_in_flight") == 0
            and jpath(st, "disk.reads_queued") == 0
        )

    st = d.wait_status(read_ahead, "the read-aheads")
    pf = jpath(st, "disk.prefetches")
    assert pf == 16 and jpath(st, "disk.promotions") - ram_before == 16
    assert b.batch_get_v1(prompts[0], indices(range(16, 32))) == [True] * 16
    for i in range(16):
        assert torch.equal(pool.page((16 + i) * PAGE), first[i]), f"page {i}"
    st = d.status()
    assert jpath(st, "disk.prefetch_hits") == 16
    assert jpath(st, "disk.promotions") - ram_before == 16  # nothing read twice
    b.close()


def test_exists_answers_a_miss_when_the_daemon_does_not_answer(daemon):
    """HiCache calls batch_exists from its prefetch thread, which catches no exception (an
    exception ends the thread for the life of the process): a daemon that does not answer is a
    miss, as batch_get_v1 / batch_set_v1 answer it, never an exception."""
    import os
    import signal

    pool = MHAPagePool()
    b = backend(daemon, pool, 0, 1, False, timeout_ms=300)
    keys = page_keys("stopped", 2)
    assert b.batch_set_v1(keys, indices([0, 1])) == [True, True]
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        assert b.batch_exists(keys) == 0
        assert b.exists(keys[0]) is False
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    assert b.batch_exists(keys) == 2
    b.close()


def hit_query(b, keys, prefix_keys, batch):
    """HiCache's _storage_hit_query of the versions that split a request (cache_controller.py
    @ 001067ff): one batch_exists per `batch` pages, the next batch asked only after a whole one
    hit, prefix_keys (a copy) extended by each batch when it was not empty."""
    prefix = list(prefix_keys) if prefix_keys else None
    hit = 0
    for lo in range(0, len(keys), batch):
        part = keys[lo : lo + batch]
        n = b.batch_exists(part, ExtraInfo(prefix_keys=prefix))
        hit += n
        if n < len(part):
            break
        if prefix:
            prefix += part
    return hit


def test_one_verdict_per_request_across_hicache_batches(daemon):
    """A request HiCache asks in several batch_exists calls is one verdict, with the HBM prefix
    counted once: per call, a 10-page request asked in batches of 4 was three verdicts, the last
    too_small, and its HBM prefix grew with every batch."""
    pool = MLAPool()
    fill(pool, 7)
    b = backend(daemon, pool, 0, 1, False, min_load_tokens=3 * PAGE, storage_batch_size=4)
    keys = page_keys("split", 10)
    for lo in range(0, 10, 5):
        assert b.batch_set_v1(keys[lo : lo + 5], indices(range(lo, lo + 5))) == [True] * 5
    # No HBM prefix: batches of 4, 4, 2, every page hit: one paid verdict over 10 pages.
    assert hit_query(b, keys, None, 4) == 10
    assert (b.tallies.probes_total, b.tallies.paid_total) == (1, 1)
    assert b.tallies.lookup_tokens_total == 10 * PAGE
    # Two HBM pages, then pages 2..9 asked in batches of 4 (4, 4: both whole): the request stays
    # open until the next call, which does not continue it (another request's prefix).
    assert hit_query(b, keys[2:], keys[:2], 4) == 8
    assert b.tallies.probes_total == 1
    other = page_keys("other", 3)
    assert hit_query(b, other, None, 4) == 0  # a miss: no verdict of its own
    assert (b.tallies.probes_total, b.tallies.paid_total) == (2, 2)
    assert b.tallies.lookup_tokens_total == 10 * PAGE + 10 * PAGE  # 2 HBM pages + 8 asked
    # A request whose first batch hit only in part: too small (2 pages < 3), decided at once.
    assert hit_query(b, keys[:2] + page_keys("gap", 6), None, 4) == 2
    assert b.tallies.reasons == {"aligned_large_hit": 2, "too_small": 1}
    # exists() is not a request: no verdict.
    assert b.exists(keys[0])
    assert b.tallies.probes_total == 3
    # An open request is decided at close.
    assert hit_query(b, keys[:4], None, 4) == 4
    assert b.tallies.probes_total == 3
    b.close()
    assert b.tallies.probes_total == 4


class LayerFirstPool:
    """layer_first MHA host pool as SGLang lays it out: kv_buffer (2, layers, tokens, heads,
    dim); get_page_buffer_meta gives K and V per layer (2 x layers pieces), get_data_page(flat)
    all K layers then all V layers: the two paths' orders differ."""

    layout = "layer_first"

    def __init__(self, tokens=64, dtype=torch.bfloat16):
        self.page_size = PAGE
        self.dtype = dtype
        self.size = tokens
        self.layer_num = LAYERS
        self.kv_buffer = torch.zeros((2, LAYERS, tokens, HEADS, DIM), dtype=dtype)
        self.tok = HEADS * DIM * self.kv_buffer.element_size()

    def get_page_buffer_meta(self, indices):
        base = self.kv_buffer.data_ptr()
        layer = self.size * self.tok
        v_off = LAYERS * layer
        ptrs = []
        for first in indices.tolist()[:: self.page_size]:
            for l in range(LAYERS):
                k = base + l * layer + first * self.tok
                ptrs += [k, k + v_off]
        return ptrs, [self.page_size * self.tok] * len(ptrs)

    def get_data_page(self, index, flat=True):
        p = self.kv_buffer[:, :, index : index + self.page_size]
        return p.flatten() if flat else p

    def get_dummy_flat_data_page(self):
        return torch.zeros(2 * LAYERS * self.page_size * HEADS * DIM, dtype=self.dtype)

    def set_from_flat_data_page(self, index, page):
        self.kv_buffer[:, :, index : index + self.page_size] = page.reshape(2, LAYERS, self.page_size, HEADS, DIM)

    def page(self, first):
        return self.kv_buffer[:, :, first : first + self.page_size].contiguous().view(torch.uint8).clone()


def test_layer_first_paths_never_mix_byte_orders(daemon):
    """On a layer_first pool the zero-copy pages (K, V per layer) and the flat data pages (all K,
    then all V) are different bytes: a page saved by one path and loaded by the other came back
    'found' with its layers shuffled. Each path now has its namespace (interface_v1 decides),
    and a call of the other path answers a miss."""
    src, dst = LayerFirstPool(), LayerFirstPool()
    fill(src, 21)
    zc = backend(daemon, src, 0, 1, False, interface_v1=True)
    flat = backend(daemon, dst, 0, 1, False)
    keys = page_keys("layer-first", 3)
    assert zc.batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    assert zc.batch_get_v1(keys, indices([8, 9, 10])) == [True] * 3
    for i in range(3):
        assert torch.equal(src.page((8 + i) * PAGE), src.page(i * PAGE))
    # The flat path does not see the zero-copy pages (other namespace) ...
    assert flat.batch_exists(keys) == 0
    assert flat.batch_get(keys) == [None] * 3
    # ... and keeps its own order, byte-exact, as HiCache's generic page get/set moves it.
    assert flat.batch_set(keys, [src.get_data_page(i * PAGE) for i in range(3)])
    got = flat.batch_get(keys, [dst.get_dummy_flat_data_page() for _ in keys])
    for i, page in enumerate(got):
        assert page is not None
        dst.set_from_flat_data_page((4 + i) * PAGE, page)
        assert torch.equal(dst.page((4 + i) * PAGE), src.page(i * PAGE))
    # A call of the path a backend was not configured for is a miss, never the other order.
    assert flat.batch_get_v1(keys, indices([12, 13, 14])) == [False] * 3
    assert flat.batch_set_v1(keys, indices([12, 13, 14])) == [False] * 3
    assert zc.batch_get(keys) == [None] * 3
    assert zc.batch_set(keys, [src.get_data_page(0)] * 3) is False
    zc.close()
    flat.close()


def test_batch_get_into_a_strided_target(daemon):
    """A target page that is a strided view is loaded through a contiguous copy: byte-exact,
    where the library's buffer check raised ValueError out of batch_get."""
    pool = MLAPool()
    fill(pool, 9)
    b = backend(daemon, pool, 0, 1, False)
    keys = page_keys("strided", 1)
    want = pool.page(0).flatten()
    assert b.batch_set(keys, [want])
    backing = torch.zeros(2 * want.numel(), dtype=torch.uint8)
    target = backing[::2]
    assert not target.is_contiguous()
    out = b.batch_get(keys, [target])
    assert out[0] is target and torch.equal(target, want)
    b.close()


def test_serves_again_after_a_restart_with_fewer_chunks_per_request(daemon):
    """The daemon restarted on a smaller server.max_chunks_per_request while the backend lives:
    calls of more pages than the new limit are split by it and serve again, byte-exact (the
    backend split by the limit of its connect, and the daemon refuses an oversized request
    before it looks at the session, so the library never said HELLO again to learn the new
    limit either: every such call was a miss or False for good)."""
    pool = MHAPagePool()
    fill(pool, 41)
    b = backend(daemon, pool, 0, 1, False, timeout_ms=2000)
    daemon.restart({"server": {"max_chunks_per_request": 2}})
    keys = page_keys("limit", 4)
    want = [pool.page(p * PAGE) for p in range(4)]
    for _ in range(2):  # the first call may meet the old limit once
        ok = b.batch_set_v1(keys, indices([0, 1, 2, 3]))
        if ok == [True] * 4:
            break
    assert ok == [True] * 4
    assert b.batch_exists(keys) == 4
    assert b.batch_get_v1(keys, indices([8, 9, 10, 11])) == [True] * 4
    for i, p in enumerate([8, 9, 10, 11]):
        assert torch.equal(pool.page(p * PAGE), want[i]), f"page {i}"
    flat = [want[i].reshape(-1).contiguous() for i in range(3)]
    assert b.batch_set(page_keys("limit-flat", 3), flat) is True
    got = b.batch_get(page_keys("limit-flat", 3), [torch.zeros_like(f) for f in flat])
    assert all(g is not None and torch.equal(g, f) for g, f in zip(got, flat))
    b.close()


def test_a_scribbled_page_is_a_miss_on_the_gather_path(daemon):
    """A page of several pieces is scattered from a pin on the shared-memory path; pins are not
    verified by default (a DMA reads them itself), but here the backend copies on the CPU: a
    chunk whose bytes changed in the shared arena after its commit (a writer of the arena's
    group, a reservation kept past its hold) must be a miss, as a copying load makes it, not a
    hit with wrong bytes in the host pool."""
    import ctypes

    import kvtier

    pool = MHAPagePool()
    fill(pool, 43)
    b = backend(daemon, pool, 0, 1, False)
    if b.client.data_path != "shm" or not b.client.server_info().features & kvtier.FEATURE_CHECKSUMS:
        b.close()
        return
    keys = page_keys("scribbled", 2)
    assert b.batch_set_v1(keys, indices([0, 1])) == [True, True]
    want = [pool.page(p * PAGE) for p in range(2)]
    with b.client.pin(b._hashes(keys[1:])) as pin:  # the second page's bytes, in the arena
        ctypes.memset(kvtier.client._BufRef(pin.views[0], writable=True).addr, 0x5A, 64)
    assert b.batch_get_v1(keys, indices([8, 9])) == [True, False]
    assert torch.equal(pool.page(8 * PAGE), want[0])
    assert b.client.stats()["checksum_mismatches"] == 1
    b.close()


def test_a_daemon_outage_is_misses_not_stalls(daemon, caplog):
    """The daemon is killed under a backend whose timeout (20 s) is far longer than the down
    wait: every call answers a miss or False KvtierUnavailable, not ETIMEDOUT (before 0.2.12
    each waited its whole timeout, holding HiCache's prefetch and backup threads; that
    failure takes a minute here), nothing raises, and once the daemon
    is back the pages stored before the kill are served again (the arena re-attached)."""
    pool = MHAPagePool()
    fill(pool, 31)
    b = backend(daemon, pool, 0, 1, False, timeout_ms=20000, interface_v1=True)
    keys = page_keys("outage", 3)
    assert b.batch_set_v1(keys, indices([0, 1, 2])) == [True] * 3
    want = [pool.page(p * PAGE).clone() for p in range(3)]

    daemon.kill()
    with caplog.at_level("WARNING", logger="kvtier.sglang"):
        for _ in range(20):  # a prefetch per request: one warning, not one per call
            assert b.batch_exists(keys) == 0
    assert len([r for r in caplog.records if "batch_exists" in r.getMessage()]) <= 1
    assert b.batch_set_v1(page_keys("outage-2", 2), indices([5, 6])) == [False, False]
    assert b.batch_get_v1(keys, indices([8, 9, 10])) == [False] * 3
    link = b.client.link()
    assert link["down"] == 1 and link["unavailable"] >= 3, link
    assert b.client.stats()["timeouts"] == 0

    daemon.start()
    for _ in range(200):  # a call made before the client reconnected is a miss
        if b.batch_exists(keys) == 3:
            break
        time.sleep(0.05)
    assert b.batch_exists(keys) == 3
    assert b.batch_get_v1(keys, indices([8, 9, 10])) == [True] * 3
    for i, p in enumerate([8, 9, 10]):
        assert torch.equal(pool.page(p * PAGE), want[i])
    b.close()


def test_starts_before_the_daemon_and_serves_once_it_is_there(daemon):
    """A backend registered while kvtierd is not there answers misses and False (before 0.2.12
    register_mem_pool_host raised, and SGLang's start with it), then serves once the background
    connect reaches the daemon. require_daemon keeps the old failure."""
    import pytest

    import kvtier

    daemon.kill()
    pool = MHAPagePool()
    fill(pool, 41)
    with pytest.raises(kvtier.KvtierTimeout):
        backend(daemon, pool, 0, 1, False, timeout_ms=300, require_daemon=True)
    b = backend(daemon, pool, 0, 1, False, timeout_ms=300, interface_v1=True)
    assert b.client is None
    keys = page_keys("early", 2)
    assert b.batch_exists(keys) == 0
    assert b.batch_set_v1(keys, indices([0, 1])) == [False, False]
    assert b.batch_get_v1(keys, indices([4, 5])) == [False, False]

    daemon.start()
    for _ in range(400):  # the background connect retries every second
        if b.client is not None:
            break
        time.sleep(0.05)
    assert b.client is not None
    assert b.batch_set_v1(keys, indices([0, 1])) == [True, True]
    assert b.batch_exists(keys) == 2
    assert b.batch_get_v1(keys, indices([4, 5])) == [True, True]
    for src, dst in ((0, 4), (1, 5)):
        assert torch.equal(pool.page(dst * PAGE), pool.page(src * PAGE))
    b.close()
