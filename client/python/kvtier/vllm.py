"""kvtier as a secondary tier of vLLM's tiering offload (TieringOffloadingSpec).

Upstream interface read (vllm-project/vllm, files at these commits):
  - vllm/v1/kv_offload/tiering/base.py @ 041410b9b13a5e762e6bfce4a0ce39574def5919:
    SecondaryTierManager.__init__(offloading_spec, primary_kv_view, tier_type),
    lookup(key, req_context) -> bool | None, submit_store(job_metadata),
    submit_load(job_metadata), get_finished() -> Iterable[JobResult],
    touch(keys, req_context), get_request_offloading_context(req_context),
    request_finished(req_context), shutdown(); JobMetadata(job_id, keys, block_ids,
    is_promotion, req_context), JobResult(job_id, success).
  - vllm/v1/kv_offload/tiering/spec.py @ 0078e9d2b020be709d7d756877106fd1015ea4f4: a secondary
    tier config {"type": <class name>, "module_path": <module>, ...} is built by
    SecondaryTierFactory.create_secondary_tier(tier_config, primary_kv_view, spec), the other
    keys passed to the constructor as keywords.
  - vllm/v1/kv_offload/tiering/async_lookup.py @ 030ea52effcb05071543c8c42b8f0145e94cee43:
    lookups accumulate during a step and go out as one batch per request per step.
  - vllm/v1/kv_offload/tiering/fs/manager.py @ 0255eeaabf66661958ae72b1e85eebcdb39de2a5: the
    primary view is 2-D, one row per block; a block's bytes are
    view[block_id * strides[0] : +strides[0]].
  - vllm/v1/kv_offload/base.py @ 0105e232b7fa4e1b59ec87531f167c0443a5095d: OffloadKey = block
    hash + 4-byte big-endian group index; ReqContext.req_id, get_offload_key_position(key).

Implemented (the pinned list, tests/python/upstream_signatures.json): __init__, lookup,
submit_store, submit_load, get_finished, touch, get_request_offloading_context,
request_finished, shutdown. Also on_schedule_end(context) (the step hook of later upstream
versions; it flushes the step's lookups as get_finished does) and the later names
get_finished_jobs / on_request_finished as aliases. vLLM's base class is subclassed when it is
importable; here it is not (vLLM needs torch 2.x, Debian has 1.13), so the class defines the
same methods, and JobResult is vLLM's when importable, else a dataclass of the same fields.

Design. One tier manager serves a whole engine (it runs in the scheduler over the primary file
that all TP workers share), so one kvtier chunk is one vLLM block row as the primary tier lays
it out (all workers, all layers: strides[0] bytes), in a namespace of world size 1 whose
descriptor carries the model, revision, block size (chunk_tokens), layer layout, and, in its
dtype string, the row format: "<dtype>/vllm-row/tp<N>/<row bytes>B" (kvt_ns_desc_t has no
layout string, and the row's bytes depend on the TP size). Keys: the OffloadKey bytes through
kvt_hash_keys (engine-native keys, salt = the tenant or "").

Nothing here blocks the scheduler thread for a round trip or a copy: lookups are submitted
(kvt_submit_lookup) and answered None until their completion is taken at a later call; stores
and loads are kvt_submit_save / kvt_submit_load with pointers into the primary view, so
libkvtier's I/O thread does every copy; get_finished() only takes completions already there.
Lookups go out once per step (get_finished or on_schedule_end), one request per request that
asked, its new keys in prompt order: key i is present iff i < the contiguous hit (a key after
the first miss answers False, which is what a prefix cache needs). touch() rides along as a
lookup of its keys in the same flush (a lookup refreshes the daemon's recency).

Verdicts (docs/GATES.md section 1) are decided per request at request_finished(): hbm = the
start token of the first key this tier was asked (ReqContext.get_offload_key_position, the end
token of each key, minus one block), the hit = the end token of the last contiguous hit, the
prompt = the largest end token seen (the tier does not see the prompt length: this counts whole
blocks only). No hit: no verdict; a request this tier loaded for: aligned_large_hit, its served
tokens the blocks loaded; otherwise the first matching row of the table, and a large hit that
vLLM still did not load (the primary tier served it): hbm_satisfies_after_alloc. min_load_tokens
defaults to one block. Totals are pushed with kvt_submit_tally at most once per step (when they
changed), from get_finished().

Daemon absent or gone (0.2.12): a tier constructed while kvtierd does not answer starts without
it and connects in the background (kvtier.connect); until then, and during an outage (the
library's down wait, kvtier.Client), lookups are answered False and jobs finish unsuccessful.

Threads: every method runs on vLLM's scheduler thread (the library's I/O thread does the rest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Optional

from . import client as _c
from .client import Client, KvtierError, Namespace
from .connect import Connection, Warnings
from .tally import PAID, Tallies, verdict

logger = logging.getLogger(__name__)
_warn = Warnings(logger)

UPSTREAM = {
    "repo": "vllm-project/vllm",
    "base.py": "041410b9b13a5e762e6bfce4a0ce39574def5919",
    "spec.py": "0078e9d2b020be709d7d756877106fd1015ea4f4",
    "async_lookup.py": "030ea52effcb05071543c8c42b8f0145e94cee43",
}
IMPLEMENTS = (
    "__init__",
    "lookup",
    "submit_store",
    "submit_load",
    "get_finished",
    "touch",
    "get_request_offloading_context",
    "request_finished",
    "shutdown",
)

try:  # the real base class and result type, when vLLM is importable
    from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager as _Base  # type: ignore

    HAVE_VLLM = True
except Exception:  # vLLM absent (or unimportable: it needs torch 2.x)
    HAVE_VLLM = False
    _Base = object

    @dataclass
    class JobResult:  # type: ignore[no-redef]
        """vLLM's JobResult (tiering/base.py): the outcome of one store or load job."""

        job_id: int
        success: bool


@dataclass
class _Key:
    result: Optional[bool] = None  # None: pending or in flight
    in_flight: bool = False


@dataclass
class _Req:
    """What the tier knows of one request (for its verdict)."""

    first_start: Optional[int] = None  # start token of the first key asked
    hit_end: int = 0  # end token of the last contiguous hit
    max_end: int = 0
    any_hit: bool = False
    loaded_tokens: int = 0
    last_store_hash: Optional[bytes] = None


def _attr(obj: Any, *path: str) -> Any:
    for p in path:
        if obj is None:
            return None
        obj = getattr(obj, p, None)
    return obj


class KvtierSecondaryTier(_Base):  # type: ignore[misc, valid-type]
    """A vLLM secondary tier backed by kvtierd. Config keys (the tier config dict): endpoint,
    model, revision, dtype, block_tokens, num_layers, num_kv_heads, head_dim, tp_size, tenant,
    timeout_ms, down_wait_ms (how long a call waits for a lost daemon to come back before it is
    a miss or a failed job: kvtier.Client), require_daemon (raise at construction when the
    daemon does not answer, instead of starting without the tier: kvtier.connect),
    min_load_tokens, engine_id; anything vLLM's spec knows is taken from it."""

    def __init__(
        self,
        offloading_spec: Any = None,
        primary_kv_view: Optional[memoryview] = None,
        tier_type: str = "KvtierSecondaryTier",
        *,
        vllm_config: Any = None,
        endpoint: str = "ipc:///run/kvtier/kvtierd.zmq",
        model: Optional[str] = None,
        revision: Optional[str] = None,
        dtype: Optional[str] = None,
        block_tokens: Optional[int] = None,
        num_layers: int = 0,
        num_kv_heads: int = 0,
        head_dim: int = 0,
        tp_size: Optional[int] = None,
        tenant: Optional[str] = None,
        timeout_ms: int = 0,
        min_load_tokens: Optional[int] = None,
        engine_id: Optional[int] = None,
        down_wait_ms: Optional[int] = None,
        require_daemon: bool = False,
    ) -> None:
        if primary_kv_view is None:
            raise ValueError("kvtier: the primary tier's memoryview is required")
        if HAVE_VLLM:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        vcfg = vllm_config or _attr(offloading_spec, "vllm_config")
        model = model or _attr(vcfg, "model_config", "model")
        if not model:
            raise ValueError("kvtier: the tier config needs 'model' (or a vllm_config naming it)")
        revision = revision or _attr(vcfg, "model_config", "revision")
        dtype = dtype or str(_attr(vcfg, "model_config", "dtype") or "auto")
        tp_size = tp_size or _attr(vcfg, "parallel_config", "tensor_parallel_size") or 1
        block_tokens = block_tokens or _attr(offloading_spec, "offloaded_block_size") or _attr(
            offloading_spec, "block_size"
        )
        if not block_tokens:
            raise ValueError("kvtier: the tier config needs 'block_tokens' (tokens per block)")
        view = primary_kv_view
        self.row_bytes = int(view.strides[0]) if view.ndim >= 2 else int(view.nbytes)
        if view.ndim < 2:
            raise ValueError("kvtier: the primary view must be 2-D (one row per block)")
        self.num_blocks = int(view.shape[0])
        self._base_ref = _c._BufRef(view, writable=True)  # the rows' base address
        self.block_tokens = int(block_tokens)
        self.min_load_tokens = int(min_load_tokens or self.block_tokens)
        self._salt = (tenant or "").encode()
        ns = Namespace(
            model=str(model),
            chunk_tokens=self.block_tokens,
            world_size=1,
            dtype=f"{dtype}/vllm-row/tp{tp_size}/{self.row_bytes}B",
            num_layers=num_layers,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            tenant=tenant,
            revision=revision,
        )
        self._conn = Connection(
            lambda: Client(endpoint, ns, 0, timeout_ms=timeout_ms, down_wait_ms=down_wait_ms),
            require_daemon=require_daemon,
            what="kvtier vllm",
        )
        self.tallies = Tallies(engine_id)
        self._keys: dict[bytes, _Key] = {}
        self._batch: dict[str, list[tuple[bytes, Any]]] = {}  # req_id -> [(key, req_context)]
        self._touch: list[bytes] = []
        self._reqs: dict[str, _Req] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._finished: list[Any] = []
        self.jobs_in_flight = 0

    # -- SecondaryTierManager

    def lookup(self, key: bytes, req_context: Any) -> Optional[bool]:
        """True: stored, False: not stored, None: asked, answer at a later step."""
        self._drain()
        req_id = req_context.req_id
        st = self._keys.get(key)
        if st is None:
            st = self._keys[key] = _Key()
            self._batch.setdefault(req_id, []).append((key, req_context))
        elif st.result is False and key not in self._req_keys.get(req_id, ()):
            # A miss answered to another request may be stale (stored since): a request
            # asking for the first time is answered by a new lookup.
            st.result = None
            self._batch.setdefault(req_id, []).append((key, req_context))
        self._req_keys.setdefault(req_id, set()).add(key)
        req = self._reqs.setdefault(req_id, _Req())
        end = self._position(req_context, key)
        if end is None:  # no positions: count whole blocks in the order asked
            end = (len(self._req_keys[req_id])) * self.block_tokens
        if req.first_start is None:
            req.first_start = max(0, end - self.block_tokens)
        req.max_end = max(req.max_end, end)
        if st.result is True:
            req.any_hit = True
            req.hit_end = max(req.hit_end, end)
        return st.result

    def submit_store(self, job_metadata: Any) -> None:
        keys = list(job_metadata.keys)
        bufs = self._rows(job_metadata.block_ids)
        hashes = _c.hash_keys(keys, self._salt)
        req_id = _attr(job_metadata, "req_context", "req_id")
        req = self._reqs.setdefault(req_id, _Req()) if req_id is not None else None
        parent = req.last_store_hash if req is not None else None
        if req is not None and hashes:
            req.last_store_hash = hashes[-1]
        self._submit_chunks(job_metadata, "store", hashes, bufs, parent)

    def submit_load(self, job_metadata: Any) -> None:
        keys = list(job_metadata.keys)
        bufs = self._rows(job_metadata.block_ids)
        hashes = _c.hash_keys(keys, self._salt)
        self._submit_chunks(job_metadata, "load", hashes, bufs, None)

    def get_finished(self) -> Iterable[Any]:
        """The jobs finished since the last call; also flushes this step's lookups and pushes
        the tallies when they changed. Never waits."""
        self._drain()
        self._flush()
        if self.client is not None:  # not yet connected: the totals are cumulative, sent later
            try:
                self.tallies.push(self.client)
            except KvtierError as e:
                _warn("tally", e, "kvtier: tally not sent: %s", e)
        out, self._finished = self._finished, []
        return out

    def touch(self, keys: Collection[bytes], req_context: Any) -> None:
        self._touch.extend(keys)

    def get_request_offloading_context(self, req_context: Any) -> Any:
        if HAVE_VLLM:
            return super().get_request_offloading_context(req_context)
        return None

    def request_finished(self, req_context: Any) -> None:
        req_id = req_context.req_id
        req = self._reqs.pop(req_id, None)
        if req is not None and req.any_hit:
            hbm = req.first_start or 0
            if req.loaded_tokens > 0:
                name = PAID
            else:
                name = verdict(hbm, req.hit_end, req.max_end, self.block_tokens, self.min_load_tokens)
                if name == PAID:  # a large hit vLLM did not load: the primary tier served it
                    name = "hbm_satisfies_after_alloc"
            self.tallies.record(name, lookup_tokens=req.max_end, served_tokens=req.loaded_tokens)
        for key in self._req_keys.pop(req_id, ()):  # keep keys in flight for other requests
            st = self._keys.get(key)
            if st is not None and not st.in_flight and not self._asked_by_other(key, req_id):
                del self._keys[key]
        self._batch.pop(req_id, None)

    def shutdown(self) -> None:
        self._conn.close()

    @property
    def client(self) -> Optional[Client]:
        """The library client, None while the daemon has not answered yet (kvtier.connect)."""
        return self._conn.client

    # -- later upstream names and hooks

    def on_schedule_end(self, context: Any = None) -> None:
        self._drain()
        self._flush()

    get_finished_jobs = get_finished
    on_request_finished = request_finished

    # -- internals

    def _position(self, req_context: Any, key: bytes) -> Optional[int]:
        fn = getattr(req_context, "get_offload_key_position", None)
        return fn(key) if fn is not None else None

    def _asked_by_other(self, key: bytes, req_id: str) -> bool:
        return any(key in ks for r, ks in self._req_keys.items() if r != req_id)

    def _rows(self, block_ids: Iterable[int]) -> list[tuple[int, int]]:
        base, row = self._base_ref.addr, self.row_bytes
        out = []
        for b in block_ids:
            b = int(b)
            if not 0 <= b < self.num_blocks:
                raise ValueError(f"kvtier: block id {b} outside the primary tier")
            out.append((base + b * row, row))
        return out

    @property
    def _max_chunks(self) -> int:
        """The daemon's per-request limit as the library knows it now: a daemon restarted on
        another server.max_chunks_per_request announces its own in the recovery's HELLO (a
        value kept from the connect made every larger request fail with ETOOBIG for good)."""
        return max(1, self._conn.get().server_info().max_chunks)

    def _submit_chunks(self, job, kind: str, hashes, bufs, parent) -> None:
        job_id = job.job_id
        state = {"left": 0, "ok": True, "kind": kind, "job": job, "loaded": 0}
        try:
            step = self._max_chunks
            for i in range(0, len(hashes), step):
                h, b = hashes[i : i + step], bufs[i : i + step]
                if kind == "store":
                    fut = self._conn.get().submit_save(h, b, parent=parent, user=state)
                    parent = h[-1]
                else:
                    fut = self._conn.get().submit_load(h, b, user=state)
                state["left"] += 1
                fut.add_done_callback(self._job_part_done)
        except KvtierError as e:
            _warn(kind, e, "kvtier: %s job %s not submitted: %s", kind, job_id, e)
            state["ok"] = False
        if state["left"] == 0:
            self._job_done(state)
        else:
            self.jobs_in_flight += 1

    def _job_part_done(self, fut) -> None:
        state = fut.user
        exc = fut._exc
        if exc is not None:
            state["ok"] = False
        elif state["kind"] == "load":
            res = fut._value
            if res.nhit != len(res.lens):
                state["ok"] = False
            state["loaded"] += res.nhit
        state["left"] -= 1
        if state["left"] == 0:
            self.jobs_in_flight -= 1
            self._job_done(state)

    def _job_done(self, state) -> None:
        job = state["job"]
        ok = state["ok"]
        if state["kind"] == "load":
            req_id = _attr(job, "req_context", "req_id")
            if ok and req_id in self._reqs:
                self._reqs[req_id].loaded_tokens += state["loaded"] * self.block_tokens
            if not ok:  # upstream's mark_miss: stop offering what cannot be loaded
                for key in job.keys:
                    st = self._keys.get(key)
                    if st is not None:
                        st.result = False
        self._finished.append(JobResult(job_id=job.job_id, success=ok))

    def _flush(self) -> None:
        batch, self._batch = self._batch, {}
        if self.client is None:  # not yet connected: every key asked is a miss, touches go
            for entries in batch.values():
                for k, _ in entries:
                    st = self._keys.get(k)
                    if st is not None and st.result is None:
                        st.result = False
            self._touch = []
            return
        step = self._max_chunks
        for req_id, entries in batch.items():
            keys = [k for k, _ in entries if k in self._keys and self._keys[k].result is None]
            for i in range(0, len(keys), step):
                part = keys[i : i + step]
                for k in part:
                    self._keys[k].in_flight = True
                try:
                    fut = self._conn.get().submit_lookup(_c.hash_keys(part, self._salt), user=(req_id, part))
                except KvtierError as e:
                    # get_finished / on_schedule_end must not raise into the scheduler; the
                    # keys are answered as a failed lookup is (False), not left None for ever
                    _warn("lookup", e, "kvtier: lookup not submitted: %s", e)
                    for k in part:
                        self._keys[k].in_flight = False
                        self._keys[k].result = False
                    continue
                fut.add_done_callback(self._lookup_done)
        if self._touch:
            touch, self._touch = self._touch, []
            for i in range(0, len(touch), step):
                try:
                    self._conn.get().submit_lookup(_c.hash_keys(touch[i : i + step], self._salt))
                except KvtierError as e:
                    _warn("touch", e, "kvtier: touch not submitted: %s", e)

    def _lookup_done(self, fut) -> None:
        _req_id, keys = fut.user
        hit = 0 if fut._exc is not None else fut._value.hit
        for i, key in enumerate(keys):
            st = self._keys.get(key)
            if st is not None:
                st.in_flight = False
                st.result = i < hit

    def _drain(self) -> None:
        c = self.client
        if c is not None:
            c.poll_completions()


# The module_path/type pair of the README's --kv-transfer-config.
__all__ = ["KvtierSecondaryTier", "JobResult", "UPSTREAM", "IMPLEMENTS", "HAVE_VLLM"]
