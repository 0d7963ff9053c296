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
commit) and scattered from a pin (one memmove per piece, release) on the shared-memory path, or
through a staging buffer on the frames path.

Verdicts (docs/GATES.md section 1) come from batch_exists on rank 0 (one engine instance per
namespace, not one per rank): hbm = the tokens of extra_info.prefix_keys (pages SGLang already
holds), the hit = hbm + hit pages, the prompt = hbm + every page asked; a hit too small to be
worth prefetching (below min_load_tokens, default one page: SGLang's own prefetch threshold
should be given as min_load_tokens) is too_small, a larger one aligned_large_hit, whose served
tokens are counted when batch_get_v1 loads them. Totals are pushed (kvt_submit_tally, not
waited for) after each call that changed them.

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
from .tally import Tallies, verdict

logger = logging.getLogger(__name__)

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
    the config's model_name), revision, tenant, timeout_ms, min_load_tokens, engine_id."""

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
        self.min_load_tokens = extra.get("min_load_tokens")
        self.tp_rank = int(getattr(storage_config, "tp_rank", 0))
        self.tp_size = int(getattr(storage_config, "tp_size", 1))
        self.pp_rank = int(getattr(storage_config, "pp_rank", 0))
        self.pp_size = int(getattr(storage_config, "pp_size", 1))
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        self._salt = (self.tenant or "").encode()
        self.tallies = Tallies(extra.get("engine_id"))
        self._tally_lock = threading.Lock()
        self.client: Optional[Client] = None
        self.mem_pool_host = None

    # -- HiCacheStorage

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Connects once the host pool (page size, layout, dtype) is known."""
        self.mem_pool_host = mem_pool_host
        self.page_size = int(mem_pool_host.page_size)
        layout = getattr(mem_pool_host, "layout", "page_first")
        dtype = str(getattr(mem_pool_host, "dtype", "")).replace("torch.", "")
        self.page_bytes = self._page_bytes()
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
        if self.client is not None:
            self.client.close()
        self.client = Client(self.endpoint, ns, self.tp_rank, timeout_ms=self.timeout_ms)
        self._max_chunks = max(1, self.client.server_info().max_chunks)

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        if not keys:
            return 0
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
            logger.warning("kvtier: batch_exists: %s", e)
            return hit
        if self.tp_rank == 0:
            hbm = len(getattr(extra_info, "prefix_keys", None) or []) * self.page_size
            name = verdict(
                hbm,
                hbm + hit * self.page_size,
                hbm + len(keys) * self.page_size,
                self.page_size,
                self.min_load_tokens,
            )
            with self._tally_lock:
                self.tallies.record(name, lookup_tokens=hbm + len(keys) * self.page_size)
                self._push()
        return hit

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        if n == 0:
            return []
        if self.is_mla and self.tp_rank != 0:
            return [True] * n  # one copy, written by rank 0
        pages = self._pages(host_indices, n)
        parent = self._parent(extra_info)
        ok: List[bool] = []
        for lo in range(0, n, self._max_chunks):
            hi = min(n, lo + self._max_chunks)
            ok += self._save(keys[lo:hi], pages[lo:hi], parent)
            parent = self._hashes([keys[hi - 1]])[0]
        return ok

    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        if n == 0:
            return []
        pages = self._pages(host_indices, n)
        ok: List[bool] = []
        for lo in range(0, n, self._max_chunks):
            hi = min(n, lo + self._max_chunks)
            got = self._load(keys[lo:hi], pages[lo:hi])
            ok += got
            if not all(got):
                ok += [False] * (n - hi)
                break
        if self.tp_rank == 0:
            loaded = 0
            for v in ok:
                if not v:
                    break
                loaded += 1
            with self._tally_lock:
                self.tallies.add_served(loaded * self.page_size)
                self._push()
        return ok

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        out = self.batch_get([key], [target_location] if target_location is not None else None)
        return out[0]

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        """Loads pages into the given tensors (or new flat pages of the host pool's dummy
        page); None for a miss."""
        cl = self._client()
        targets = list(target_locations) if target_locations is not None else [
            self.mem_pool_host.get_dummy_flat_data_page() for _ in keys
        ]
        out: List[Any] = [None] * len(keys)
        for lo in range(0, len(keys), self._max_chunks):
            hi = min(len(keys), lo + self._max_chunks)
            try:
                res = cl.load(self._hashes(keys[lo:hi]), targets[lo:hi])
            except KvtierError as e:
                logger.warning("kvtier: batch_get: %s", e)
                return out
            for i in range(hi - lo):
                if res.lens[i]:
                    out[lo + i] = targets[lo + i]
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        """Saves flat page tensors (contiguous CPU tensors or buffers)."""
        if self.is_mla and self.tp_rank != 0:
            return True
        cl = self._client()
        vals = [v.contiguous() if hasattr(v, "contiguous") else v for v in values]
        try:
            outcomes = []
            for lo in range(0, len(keys), self._max_chunks):
                hi = min(len(keys), lo + self._max_chunks)
                outcomes += cl.save(self._hashes(keys[lo:hi]), vals[lo:hi])
        except KvtierError as e:
            logger.warning("kvtier: batch_set: %s", e)
            return False
        return all(o in (_c.SAVE_STORED, _c.SAVE_EXISTS) for o in outcomes)

    def clear(self) -> None:
        """Nothing: the daemon owns eviction; `kvtierctl drop --ns MODEL` invalidates a model."""
        return None

    def get_stats(self) -> Any:
        return None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- internals

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError("kvtier: register_mem_pool_host() was not called")
        self.client.poll_completions()  # take finished tallies
        return self.client

    def _push(self) -> None:
        try:
            self.tallies.push(self.client)
        except KvtierError as e:
            logger.warning("kvtier: tally not sent: %s", e)

    def _hashes(self, keys: List[str]) -> List[bytes]:
        return _c.hash_keys([k.encode() for k in keys], self._salt)

    def _parts(self, keys: List[str]):
        for lo in range(0, len(keys), self._max_chunks):
            yield keys[lo : lo + self._max_chunks]

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
            logger.warning("kvtier: batch_set_v1: %s", e)
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
            logger.warning("kvtier: batch_get_v1: %s", e)
            return [False] * n


__all__ = ["KvtierHiCacheStorage", "UPSTREAM", "IMPLEMENTS", "HAVE_SGLANG"]
