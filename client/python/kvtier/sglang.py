"""kvtier as a HiCache storage backend of SGLang (--hicache-storage-backend dynamic).

Upstream interface read (sgl-project/sglang, files at this commit):
  - python/sglang/srt/mem_cache/hicache_storage.py @ 001067fffe33427bee0ed2f007fb7551a1d76b44:
    HiCacheStorage with register_mem_pool_host(mem_pool_host), get(key, target_location,
    target_sizes), batch_get(keys, target_locations, target_sizes), set(key, value,
    target_location, target_sizes), batch_set(keys, values, target_locations, target_sizes),
    exists(key), batch_exists(keys, extra_info) -> prefix count, batch_get_v1(keys,
    host_indices, extra_info) -> List[bool], batch_set_v1(keys, host_indices, extra_info) ->
    List[bool], clear(), get_stats(); HiCacheStorageConfig (tp_rank, tp_size, pp_rank, pp_size,
    is_mla_model, is_page_first_layout, model_name, extra_config, ...); HiCacheStorageExtraInfo
    (prefix_keys, extra_info).
  - python/sglang/srt/mem_cache/storage/backend_factory.py @ the same commit: backend "dynamic"
    reads extra_config {"backend_name", "module_path", "class_name", ...} and calls
    class(storage_config, kwargs); register_mem_pool_host(host pool) follows.
  - host pools hand pages over as in the mooncake/nixl backends: mem_pool_host.page_size,
    .layout, .dtype, and get_page_buffer_meta(host_indices) -> (ptrs, sizes): per page its
    buffer pieces (MLA one, MHA page-first K and V, layer-first two per layer), sizes an int
    or a list.

Implemented (the pinned list, tests/python/upstream_signatures.json): __init__,
register_mem_pool_host, get, batch_get, set, batch_set, exists, batch_exists, batch_get_v1,
batch_set_v1, clear, get_stats. SGLang's HiCacheStorage is subclassed when SGLang is
importable; here it is not, so the class defines the same methods.

Design. Each TP rank is one kvtier client of rank tp_rank in a namespace of world size tp_size
(MLA models: a replicated namespace, and only rank 0 writes: one copy serves every rank). A
chunk is one SGLang page: the concatenation of the page's buffer pieces in the order
get_page_buffer_meta gives them; the namespace's dtype string carries the pool's layout,
dtype, pipeline stage and page bytes ("<dtype>/sglang-<layout>/pp<r>of<n>/<bytes>B"), so pools
laid out differently never share chunks. Keys: SGLang's page hash string (ASCII) through
kvt_hash_keys; extra_info.prefix_keys' last key is the chain parent of a save.
batch_exists asks for every rank at once (all_ranks: the minimum over ranks), so all TP ranks
see the same prefix count. Zero-copy pages: a page of one piece goes straight to the library as
a pointer (the I/O thread copies between the pool and the arena or the frames); a page of
several pieces is gathered into a reservation in the arena (reserve, one memmove per piece,
commit) and scattered from a pin (verified, then one memmove per piece, release) on the
shared-memory path, or through a staging buffer on the frames path.

Verdicts (docs/GATES.md section 1) come from batch_exists on rank 0 (one engine instance per
namespace, not one per rank), one per request: hbm = the tokens of extra_info.prefix_keys (pages
SGLang already holds), the hit = hbm + hit pages, the prompt = hbm + every page asked; a hit too
small to be worth prefetching (below min_load_tokens, default one page: SGLang's own prefetch
threshold should be given as min_load_tokens) is too_small, a larger one aligned_large_hit, whose
served tokens are counted when batch_get_v1 (or batch_get) loads them. Totals are pushed
(kvt_submit_tally, not waited for) after each call that changed them.

One request, one verdict. HiCache versions that split a request's hit query into batches of
STORAGE_BATCH_SIZE pages (128; extra key storage_batch_size) call batch_exists once per batch,
and ask the next batch only when the whole batch hit; they extend prefix_keys by each batch when
it was not empty. So a call whose every page hit and which asked exactly storage_batch_size pages
leaves its request open: the next call continues it when its prefix_keys are the open request's
prefix plus its pages (or, for a request that began with no prefix_keys, when it has none either),
and the verdict is decided once a call does not continue it, or ends it (a miss, a short batch),
or at close(). Decision: the one case this cannot tell apart is a request of exactly
storage_batch_size x k pages, all hit, with no HBM prefix, followed by another request with no HBM
prefix: the two count as one verdict (HiCache versions that ask all pages in one call have the
same case only for a request of exactly storage_batch_size pages). exists() records no verdict.

Paths and layouts. SGLang moves pages through batch_get_v1 / batch_set_v1 (zero copy, the pieces
of get_page_buffer_meta) only with extra_config "interface_v1" set (the README's config sets
it); without it, through batch_get / batch_set of flat data pages (get_data_page(flat=True)).
For the page_first layout both hold the same bytes in the same order (K then V of the page); for
any other layout they need not (layer_first: the pieces are K and V per layer, the flat page all
K layers then all V layers), and one page stored by one path and loaded by the other would be
wrong bytes. Decision: the namespace is the path's: for layouts other than page_first the
dtype string names the flat path ("sglang-<layout>-flat") unless interface_v1 is set, and a call
of the other path answers misses (and False for saves) with one warning, instead of mixing
orders.
Daemon absent or gone (0.2.12): a backend registered while kvtierd does not answer starts
without it and connects in the background (kvtier.connect); until then, and during an outage
(the library's down wait, kvtier.Client), every call answers a miss or False.
Threads: SGLang calls a backend from its prefetch and backup threads; the library client is
thread-safe and the tallies are kept under a lock.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, List, Optional

from . import client as _c
from .client import Client, KvtierError, Namespace
from .connect import Connection, Warnings
from .tally import Tallies, verdict

logger = logging.getLogger(__name__)
_warn = Warnings(logger)

UPSTREAM = {
    "repo": "sgl-project/sglang",
    "hicache_storage.py": "001067fffe33427bee0ed2f007fb7551a1d76b44",
    "backend_factory.py": "001067fffe33427bee0ed2f007fb7551a1d76b44",
}
IMPLEMENTS = (
    "__init__",
    "register_mem_pool_host",
    "get",
    "batch_get",
    "set",
    "batch_set",
    "exists",
    "batch_exists",
    "batch_get_v1",
    "batch_set_v1",
    "clear",
    "get_stats",
)

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base  # type: ignore

    HAVE_SGLANG = True
except Exception:
    HAVE_SGLANG = False
    _Base = object


class KvtierHiCacheStorage(_Base):  # type: ignore[misc, valid-type]
    """A HiCache storage backend backed by kvtierd. extra_config keys: endpoint, model (default
    the config's model_name), revision, tenant, timeout_ms, down_wait_ms (how long a call waits
    for a lost daemon to come back before it is a miss: kvtier.Client), require_daemon (raise
    when the daemon does not answer the connect instead of starting without the tier:
    kvtier.connect), min_load_tokens, engine_id, interface_v1 (SGLang's own: the zero-copy calls), storage_batch_size (default
    128)."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self.config = storage_config
        self.endpoint = extra.get("endpoint", "ipc:///run/kvtier/kvtierd.zmq")
        self.model = extra.get("model") or getattr(storage_config, "model_name", None)
        if not self.model:
            raise ValueError("kvtier: no model name (storage_config.model_name or extra 'model')")
        self.revision = extra.get("revision")
        self.tenant = extra.get("tenant")
        self.timeout_ms = int(extra.get("timeout_ms", 0))
        dw = extra.get("down_wait_ms")
        self.down_wait_ms = None if dw is None else int(dw)
        self.require_daemon = bool(extra.get("require_daemon", False))
        self.min_load_tokens = extra.get("min_load_tokens")
        self.tp_rank = int(getattr(storage_config, "tp_rank", 0))
        self.tp_size = int(getattr(storage_config, "tp_size", 1))
        self.pp_rank = int(getattr(storage_config, "pp_rank", 0))
        self.pp_size = int(getattr(storage_config, "pp_size", 1))
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        self._salt = (self.tenant or "").encode()
        self.interface_v1 = bool(extra.get("interface_v1", False))
        self.storage_batch_size = int(extra.get("storage_batch_size", 128))
        self.tallies = Tallies(extra.get("engine_id"))
        self._tally_lock = threading.Lock()
        self._query: Optional[_Query] = None  # rank 0's request still open (batch_exists)
        self._split = False  # the two paths store different orders (layout not page_first)
        self._warned: set = set()
        self._conn: Optional[Connection] = None
        self.mem_pool_host = None

    # -- HiCacheStorage

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Connects once the host pool (page size, layout, dtype) is known."""
        self.mem_pool_host = mem_pool_host
        self.page_size = int(mem_pool_host.page_size)
        layout = getattr(mem_pool_host, "layout", "page_first")
        dtype = str(getattr(mem_pool_host, "dtype", "")).replace("torch.", "")
        self.page_bytes = self._page_bytes()
        self._split = layout != "page_first"
        if self._split and not self.interface_v1:
            layout = f"{layout}-flat"
        if self.min_load_tokens is None:
            self.min_load_tokens = self.page_size
        self.min_load_tokens = int(self.min_load_tokens)
        ns = Namespace(
            model=str(self.model),
            chunk_tokens=self.page_size,
            world_size=self.tp_size,
            dtype=f"{dtype}/sglang-{layout}/pp{self.pp_rank}of{self.pp_size}/{self.page_bytes}B",
            mla=self.is_mla,
            tenant=self.tenant,
            revision=self.revision,
        )
        if self._conn is not None:
            self._conn.close()
        self._conn = Connection(
            lambda: Client(
                self.endpoint, ns, self.tp_rank, timeout_ms=self.timeout_ms, down_wait_ms=self.down_wait_ms
            ),
            require_daemon=self.require_daemon,
            what="kvtier sglang",
        )

    @property
    def client(self) -> Optional[Client]:
        """The library client, None before register_mem_pool_host and while the daemon has not
        answered yet (kvtier.connect)."""
        return self._conn.client if self._conn is not None else None

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        if not keys:
            return 0
        hit, answered = self._count(keys)
        if not answered or self.tp_rank != 0:
            return hit
        prefix = list(getattr(extra_info, "prefix_keys", None) or [])
        with self._tally_lock:
            q = self._query
            if q is not None and not q.continued_by(prefix):
                self._decide(q)
                q = None
            if q is None:
                q = _Query(len(prefix))
            q.add(prefix, keys, hit)
            if hit == len(keys) and len(keys) == self.storage_batch_size:
                self._query = q  # HiCache may ask this request's next batch
            else:
                self._query = None
                self._decide(q)
            self._push()
        return hit

    def exists(self, key: str) -> bool:
        return self._count([key])[0] == 1

    def _count(self, keys: List[str]) -> tuple:
        """The prefix count of keys over every rank, and whether the daemon answered it all."""
        if self._connecting():
            return 0, False
        cl = self._client()
        hit = 0
        try:
            for part in self._parts(keys):
                r = cl.lookup(self._hashes(part), all_ranks=self.tp_size > 1)
                hit += r.hit
                if r.hit < len(part):
                    break
        except KvtierError as e:
            # HiCache calls this from its prefetch thread, which catches nothing: an exception
            # would end the thread (L3 off for the life of the process). What was not answered
            # is a miss, as the other methods answer.
            _warn("batch_exists", e, "kvtier: batch_exists: %s", e)
            return hit, False
        return hit, True

    def _decide(self, q: "_Query") -> None:
        """Records the verdict of request q (the tally lock held)."""
        hbm = q.hbm_pages * self.page_size
        name = verdict(
            hbm,
            hbm + q.hit * self.page_size,
            hbm + q.asked * self.page_size,
            self.page_size,
            self.min_load_tokens,
        )
        self.tallies.record(name, lookup_tokens=hbm + q.asked * self.page_size)

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        if n == 0:
            return []
        if self._off_path("batch_set_v1", v1=True) or self._connecting():
            return [False] * n
        if self.is_mla and self.tp_rank != 0:
            return [True] * n  # one copy, written by rank 0
        pages = self._pages(host_indices, n)
        parent = self._parent(extra_info)
        ok: List[bool] = []
        step = self._max_chunks
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            ok += self._save(keys[lo:hi], pages[lo:hi], parent)
            parent = self._hashes([keys[hi - 1]])[0]
        return ok

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        if n == 0:
            return []
        if self._off_path("batch_get_v1", v1=True) or self._connecting():
            return [False] * n
        pages = self._pages(host_indices, n)
        ok: List[bool] = []
        step = self._max_chunks
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            got = self._load(keys[lo:hi], pages[lo:hi])
            ok += got
            if not all(got):
                ok += [False] * (n - hi)
                break
        self._served(ok)
        return ok

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        out = self.batch_get([key], [target_location] if target_location is not None else None)
        return out[0]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        """Loads pages into the given tensors (or new flat pages of the host pool's dummy
        page); None for a miss. A target that is not contiguous is loaded through a contiguous
        copy."""
        out: List[Any] = [None] * len(keys)
        if self._off_path("batch_get", v1=False) or self._connecting():
            return out
        cl = self._client()
        targets = list(target_locations) if target_locations is not None else [
            self.mem_pool_host.get_dummy_flat_data_page() for _ in keys
        ]
        bufs = [t.contiguous() if hasattr(t, "is_contiguous") and not t.is_contiguous() else t for t in targets]
        step = self._max_chunks
        for lo in range(0, len(keys), step):
            hi = min(len(keys), lo + step)
            try:
                res = cl.load(self._hashes(keys[lo:hi]), bufs[lo:hi])
            except (KvtierError, ValueError, TypeError) as e:
                _warn("batch_get", e, "kvtier: batch_get: %s", e)
                break
            for i in range(hi - lo):
                if res.lens[i]:
                    if bufs[lo + i] is not targets[lo + i]:
                        targets[lo + i].copy_(bufs[lo + i])
                    out[lo + i] = targets[lo + i]
            if res.nhit < hi - lo:
                break
        self._served([o is not None for o in out])
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        """Saves flat page tensors (contiguous CPU tensors or buffers)."""
        if self._off_path("batch_set", v1=False) or self._connecting():
            return False
        if self.is_mla and self.tp_rank != 0:
            return True
        cl = self._client()
        vals = [v.contiguous() if hasattr(v, "contiguous") else v for v in values]
        try:
            outcomes = []
            step = self._max_chunks
            for lo in range(0, len(keys), step):
                hi = min(len(keys), lo + step)
                outcomes += cl.save(self._hashes(keys[lo:hi]), vals[lo:hi])
        except KvtierError as e:
            _warn("batch_set", e, "kvtier: batch_set: %s", e)
            return False
        return all(o in (_c.SAVE_STORED, _c.SAVE_EXISTS) for o in outcomes)

    def clear(self) -> None:
        """Nothing: the daemon owns eviction; `kvtierctl drop --ns MODEL` invalidates a model."""
        return None

    def get_stats(self) -> Any:
        return None

    def close(self) -> None:
        with self._tally_lock:
            if self._query is not None and self.client is not None:
                self._decide(self._query)
                self._push()
            self._query = None
        if self._conn is not None:
            self._conn.close()

    # -- internals

    @property
    def _max_chunks(self) -> int:
        """The daemon's per-request limit as the library knows it now (a daemon restarted on
        another server.max_chunks_per_request announces its own in the recovery's HELLO; a
        value kept from the connect made every larger call fail for good)."""
        return max(1, self._connection().get().server_info().max_chunks)

    def _connection(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("kvtier: register_mem_pool_host() was not called")
        return self._conn

    def _client(self) -> Client:
        """The client; KvtierUnavailable while not yet connected (callers answer a miss)."""
        c = self._connection().get()
        c.poll_completions()  # take finished tallies
        return c

    def _connecting(self) -> bool:
        """Whether the daemon has not answered yet: every call is a miss (kvtier.connect)."""
        return self._connection().client is None

    def _served(self, ok: List[bool]) -> None:
        """Counts the leading run of loaded pages as served tokens (rank 0)."""
        if self.tp_rank != 0:
            return
        loaded = 0
        for v in ok:
            if not v:
                break
            loaded += 1
        with self._tally_lock:
            self.tallies.add_served(loaded * self.page_size)
            self._push()

    def _off_path(self, method: str, v1: bool) -> bool:
        """Whether a call of this path must not touch the namespace: the layout's two paths store
        different byte orders and the namespace is the other path's (see the module header)."""
        if not self._split or v1 == self.interface_v1:
            return False
        if method not in self._warned:
            self._warned.add(method)
            logger.warning(
                "kvtier: %s on a %s pool with interface_v1 %s: this namespace holds the other "
                "path's byte order; answering misses (set interface_v1 to match SGLang's)",
                method,
                getattr(self.mem_pool_host, "layout", "?"),
                "set" if self.interface_v1 else "unset",
            )
        return True

    def _push(self) -> None:
        if self.client is None:  # not yet connected: the totals are cumulative, sent later
            return
        try:
            self.tallies.push(self.client)
        except KvtierError as e:
            _warn("tally", e, "kvtier: tally not sent: %s", e)

    def _hashes(self, keys: List[str]) -> List[bytes]:
        return _c.hash_keys([k.encode() for k in keys], self._salt)

    def _parts(self, keys: List[str]):
        step = self._max_chunks
        for lo in range(0, len(keys), step):
            yield keys[lo : lo + step]

    def _parent(self, extra_info: Any) -> Optional[bytes]:
        prefix = getattr(extra_info, "prefix_keys", None)
        return self._hashes([prefix[-1]])[0] if prefix else None

    def _page_bytes(self) -> int:
        import torch

        idx = torch.arange(self.page_size, dtype=torch.int64)
        return sum(size for _p, size in self._pieces(idx, 1)[0])

    def _pieces(self, host_indices: Any, n: int) -> List[List[tuple]]:
        """Per page, its (address, size) pieces from the host pool."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if isinstance(sizes, int):
            sizes = [sizes] * len(ptrs)
        if len(ptrs) % n != 0 or len(sizes) != len(ptrs):
            raise ValueError("kvtier: the host pool's buffer metadata does not split into pages")
        per = len(ptrs) // n
        return [[(int(ptrs[i * per + j]), int(sizes[i * per + j])) for j in range(per)] for i in range(n)]

    def _pages(self, host_indices: Any, n: int) -> List[List[tuple]]:
        if len(host_indices) != n * self.page_size:
            raise ValueError("kvtier: host_indices must hold page_size indices per key")
        return self._pieces(host_indices, n)

    def _save(self, keys: List[str], pages: List[List[tuple]], parent: Optional[bytes]) -> List[bool]:
        cl = self._client()
        hashes = self._hashes(keys)
        try:
            if all(len(p) == 1 for p in pages):
                outcomes = cl.save(hashes, [p[0] for p in pages], parent=parent)
            elif cl.data_path == "shm":
                outcomes = self._save_gather(cl, hashes, pages, parent)
            else:
                staged = [bytearray(b"".join(ctypes.string_at(a, s) for a, s in p)) for p in pages]
                outcomes = cl.save(hashes, staged, parent=parent)
        except KvtierError as e:
            _warn("batch_set_v1", e, "kvtier: batch_set_v1: %s", e)
            return [False] * len(keys)
        return [o in (_c.SAVE_STORED, _c.SAVE_EXISTS) for o in outcomes]

    def _save_gather(self, cl: Client, hashes, pages, parent) -> List[int]:
        lens = [sum(s for _a, s in p) for p in pages]
        res = cl.reserve(hashes, lens, parent=parent)
        for i, view in enumerate(res.views):
            if view is None:
                continue
            dst = _c._BufRef(view, writable=True).addr
            for addr, size in pages[i]:
                ctypes.memmove(dst, addr, size)
                dst += size
        final = res.commit().result()
        return [o if res.outcomes[i] == _c.SAVE_RESERVED else res.outcomes[i] for i, o in enumerate(final)]

    def _load(self, keys: List[str], pages: List[List[tuple]]) -> List[bool]:
        cl = self._client()
        hashes = self._hashes(keys)
        n = len(keys)
        try:
            if all(len(p) == 1 for p in pages):
                res = cl.load(hashes, [p[0] for p in pages])
                return [i < res.nhit for i in range(n)]
            if cl.data_path == "shm":
                with cl.pin(hashes) as pin:
                    # the pieces are copied on this thread, so verify as a copying load does
                    # (pins are not verified by default, for a DMA that reads them itself): a
                    # chunk scribbled in the shared arena is a miss, not wrong bytes in the pool
                    if cl.server_info().features & _c.FEATURE_CHECKSUMS:
                        pin.verify()
                    nhit = pin.nhit
                    for i in range(pin.nhit):
                        if pin.lens[i] != sum(s for _a, s in pages[i]):
                            nhit = i  # another layout's bytes: a miss from here on
                            break
                        src = _c._BufRef(pin.views[i], writable=True).addr
                        for addr, size in pages[i]:
                            ctypes.memmove(addr, src, size)
                            src += size
                    return [i < nhit for i in range(n)]
            staged = [bytearray(sum(s for _a, s in p)) for p in pages]
            res = cl.load(hashes, staged)
            for i in range(res.nhit):
                mv = memoryview(staged[i])
                off = 0
                for addr, size in pages[i]:
                    ctypes.memmove(addr, _c._BufRef(mv[off : off + size], writable=True).addr, size)
                    off += size
            return [i < res.nhit for i in range(n)]
        except KvtierError as e:
            _warn("batch_get_v1", e, "kvtier: batch_get_v1: %s", e)
            return [False] * n


class _Query:
    """Rank 0's open request of batch_exists calls: its HBM pages, pages asked and hit."""

    __slots__ = ("hbm_pages", "asked", "hit", "next_prefix", "last_key")

    def __init__(self, hbm_pages: int) -> None:
        self.hbm_pages = hbm_pages
        self.asked = 0
        self.hit = 0
        self.next_prefix = 0  # the prefix_keys length a continuing call has (0: none)
        self.last_key = None

    def add(self, prefix: list, keys: List[str], hit: int) -> None:
        self.asked += len(keys)
        self.hit += hit
        self.next_prefix = len(prefix) + len(keys) if prefix else 0
        self.last_key = keys[-1]

    def continued_by(self, prefix: list) -> bool:
        if not prefix:
            return self.next_prefix == 0
        return len(prefix) == self.next_prefix and prefix[-1] == self.last_key


__all__ = ["KvtierHiCacheStorage", "UPSTREAM", "IMPLEMENTS", "HAVE_SGLANG"]
