"""The Python client of kvtierd: a thin, Pythonic layer over libkvtier (kvtier.h) through ctypes.

Design: one Client wraps one kvt_client_t (one (endpoint, namespace, rank)). The synchronous
calls (lookup, save, load, tally) are the library's synchronous calls; the asynchronous ones
(submit_*) return a Future at once. Completions are taken from the library's queue by whichever
thread asks: Future.result() drives the queue itself, Client.poll_completions() takes what is
there without waiting (for an engine's own loop), and Client.fileno() is the library's
level-triggered descriptor for selectors/asyncio. A completion is turned into Python values the
moment it is taken and freed, except a reservation or a pin, which a Reservation or a Pin owns
until it is committed, released or garbage-collected.

Buffers: anything exporting a C-contiguous buffer (bytes for saves; bytearray, memoryview, mmap,
numpy arrays, torch CPU tensors for both), or an (address, length) tuple for memory the caller
manages (a host pool's pages). A submitted request keeps its buffers referenced until its
completion is taken, as the library borrows them until then.

Zero-copy: Reservation.views / Pin.views are memoryviews over the daemon's shared arena (the
shared-memory data path only); Pin.numpy()/Pin.torch() and Reservation.numpy()/torch() wrap the
same bytes without a copy. They are valid until the pin is released / the reservation committed
or abandoned (or hold_until_ms passes): Python cannot revoke a memoryview, so touching one after
that reads or writes arena space the daemon may have given to another chunk.

Threads: every method may be called from any thread, concurrently (the library's rule), except
close(), which must be the last call. Completion dispatch is serialized by one lock; a thread
waiting in Future.result() either polls the library (one at a time) or waits on a condition.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from ctypes import byref, c_size_t, c_uint8, c_uint64, c_void_p, POINTER
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from . import _lib
from ._lib import lib

# Error codes (kvtier.h).
OK = 0
EPROTO, EVERSION, ENONS, ETOOBIG, EINVAL, ECONFLICT, EBUSY, EUNSUPP, ESTALE = range(-1, -10, -1)
ETIMEDOUT, ENOMEM, ECONNECT, EBUFSIZE, ESYS, ECLOSED = -100, -101, -102, -103, -104, -105
EUNAVAIL = -106  # 0.2.12: the connection to the daemon is down (kvtier.h "The link")

# Per-chunk save / reserve outcomes.
SAVE_STORED, SAVE_EXISTS, SAVE_NOSPACE, SAVE_DECLINED, SAVE_RESERVED = 1, 2, 3, 4, 5
# Per-chunk load / pin outcomes.
LOAD_HIT, LOAD_MISS, LOAD_CORRUPT, LOAD_BUFSIZE = 1, 2, 3, 4

OP_LOOKUP, OP_SAVE, OP_LOAD, OP_TALLY, OP_RESERVE, OP_COMMIT, OP_PIN = range(1, 8)

FEATURE_CHECKSUMS, FEATURE_TOKENS, FEATURE_ARENA_GEN = 0x1, 0x2, 0x4
FEATURE_CLIENT_CSUMS = 0x8  # 0.2.1: copying shared-memory saves send their checksums

_DATA_PATHS = {"auto": 0, "frames": 1, "shm": 2}
_VERIFY = {"default": 0, "all": 1, "none": 2}

Buffer = Union[bytes, bytearray, memoryview, "tuple[int, int]", Any]


class KvtierError(Exception):
    """A libkvtier call failed. code is the negative KVT_E* code, name its kvt_strerror() text,
    message the daemon's own message when it sent one ("" otherwise)."""

    def __init__(self, code: int, message: str = "", call: str = ""):
        self.code = code
        self.name = strerror(code)
        self.message = message
        self.call = call
        text = f"{call}: " if call else ""
        text += self.name
        if message:
            text += f": {message}"
        super().__init__(text)


class KvtierTimeout(KvtierError, TimeoutError):
    """KVT_ETIMEDOUT: no reply within the request's timeout."""


class KvtierUnavailable(KvtierError, ConnectionError):
    """KVT_EUNAVAIL: the connection to the daemon is down (it died, was killed, is restarting);
    the request failed within the client's down wait instead of its whole timeout."""


def strerror(code: int) -> str:
    return lib.kvt_strerror(code).decode()


def _error(code: int, message: str = "", call: str = "") -> KvtierError:
    cls = {ETIMEDOUT: KvtierTimeout, EUNAVAIL: KvtierUnavailable}.get(code, KvtierError)
    return cls(code, message, call)


# ------------------------------------------------------------------------------------------------
# Hashes

Hash = bytes  # 16 bytes


def hash_key(key: bytes, salt: bytes = b"") -> Hash:
    """kvt_hash_key: the chunk hash of an engine-native key (vLLM OffloadKey bytes, SGLang's page
    hash string as ASCII)."""
    out = _lib.KvtHash()
    salt = bytes(salt)
    lib.kvt_hash_key(key, len(key), salt or None, len(salt), byref(out))
    return bytes(out.b)


def hash_keys(keys: Sequence[bytes], salt: bytes = b"") -> list[Hash]:
    """kvt_hash_key of each key (one library call when all keys have the same length)."""
    n = len(keys)
    if n == 0:
        return []
    klen = len(keys[0])
    salt = bytes(salt)
    if klen > 0 and all(len(k) == klen for k in keys):
        out = (_lib.KvtHash * n)()
        lib.kvt_hash_keys(b"".join(keys), klen, n, salt or None, len(salt), out)
        raw = bytes(memoryview(out).cast("B"))
        return [raw[i * 16 : (i + 1) * 16] for i in range(n)]
    return [hash_key(k, salt) for k in keys]


def hash_chain(tokens: Sequence[int], chunk_tokens: int, parent: Optional[Hash] = None) -> list[Hash]:
    """kvt_hash_chain: chained hashes of the whole chunks of a token sequence."""
    ntok = len(tokens)
    cap = ntok // chunk_tokens if chunk_tokens else 0
    if cap == 0:
        return []
    toks = (ctypes.c_uint32 * ntok)(*tokens)
    out = (_lib.KvtHash * cap)()
    par = _hash_struct(parent) if parent is not None else None
    n = lib.kvt_hash_chain(toks, ntok, chunk_tokens, byref(par) if par else None, out, cap)
    raw = bytes(memoryview(out).cast("B"))
    return [raw[i * 16 : (i + 1) * 16] for i in range(n)]


def hash_parse(text: str) -> Hash:
    h = _lib.KvtHash()
    rc = lib.kvt_hash_parse(text.encode(), byref(h))
    if rc != 0:
        raise _error(rc, call="kvt_hash_parse")
    return bytes(h.b)


def hash_format(h: Hash) -> str:
    buf = ctypes.create_string_buffer(33)
    lib.kvt_hash_format(byref(_hash_struct(h)), buf)
    return buf.value.decode()


def checksum(buf: Buffer) -> int:
    """kvt_checksum: XXH3-64 (seed 0) of the bytes, the daemon's chunk checksum."""
    ref = _BufRef(buf, writable=False)
    return lib.kvt_checksum(ref.addr, ref.nbytes)


def _hash_struct(h: bytes) -> _lib.KvtHash:
    if len(h) != 16:
        raise ValueError("a chunk hash is 16 bytes")
    out = _lib.KvtHash()
    ctypes.memmove(out.b, h, 16)
    return out


def _hash_array(hashes: Sequence[bytes]) -> "ctypes.Array[_lib.KvtHash]":
    n = len(hashes)
    if n == 0:
        raise ValueError("at least one hash is needed")
    joined = b"".join(hashes)
    if len(joined) != 16 * n:
        raise ValueError("a chunk hash is 16 bytes")
    arr = (_lib.KvtHash * n)()
    ctypes.memmove(arr, joined, len(joined))
    return arr


# ------------------------------------------------------------------------------------------------
# Buffers


class _BufRef:
    """The address and size of a caller buffer, and the references that keep it alive."""

    __slots__ = ("addr", "nbytes", "keep")

    def __init__(self, obj: Buffer, writable: bool):
        if isinstance(obj, tuple):
            self.addr, self.nbytes = int(obj[0]), int(obj[1])
            self.keep = None
            return
        if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch.Tensor
            if obj.device.type != "cpu" or not obj.is_contiguous():
                raise ValueError("a torch tensor buffer must be a contiguous CPU tensor")
            self.addr = obj.data_ptr()
            self.nbytes = obj.numel() * obj.element_size()
            self.keep = obj
            return
        if isinstance(obj, bytes):
            if writable:
                raise TypeError("bytes is read-only: loads need a writable buffer")
            self.keep = obj
            self.addr = ctypes.cast(ctypes.c_char_p(obj), c_void_p).value or 0
            self.nbytes = len(obj)
            return
        mv = memoryview(obj)
        if not mv.c_contiguous:
            raise ValueError("buffers must be C-contiguous")
        nbytes = mv.nbytes
        if mv.readonly:
            if writable:
                raise TypeError("a read-only buffer cannot receive a load")
            # A read-only export (e.g. memoryview(bytes)): take its address through a view that
            # shares the memory (no copy).
            import numpy  # noqa: F401  (numpy is a declared dependency of the read-only case)

            arr = numpy.frombuffer(mv, dtype=numpy.uint8)
            self.addr = arr.ctypes.data if nbytes else 0
            self.keep = (obj, arr)
        else:
            carr = (ctypes.c_char * nbytes).from_buffer(mv) if nbytes else None
            self.addr = ctypes.addressof(carr) if carr is not None else 0
            self.keep = (obj, mv, carr)
        self.nbytes = nbytes


def _view(addr: int, nbytes: int) -> memoryview:
    """A writable memoryview of nbytes at addr (no copy)."""
    return memoryview((ctypes.c_char * nbytes).from_address(addr)).cast("B")


# ------------------------------------------------------------------------------------------------
# Results


@dataclass
class Namespace:
    """kvt_ns_desc_t: one KV layout of one model at one revision (see kvtier.h)."""

    model: str
    chunk_tokens: int
    world_size: int = 1
    dtype: Optional[str] = None
    num_layers: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    mla: bool = False
    hash_seed: int = 0
    tenant: Optional[str] = None
    revision: Optional[str] = None

    def _struct(self) -> tuple[_lib.KvtNsDesc, list]:
        keep = [
            s.encode() if s is not None else None
            for s in (self.model, self.dtype, self.tenant, self.revision)
        ]
        d = _lib.KvtNsDesc(
            model=keep[0],
            dtype=keep[1],
            chunk_tokens=self.chunk_tokens,
            num_layers=self.num_layers,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            world_size=self.world_size,
            mla=1 if self.mla else 0,
            hash_seed=self.hash_seed,
            tenant=keep[2],
            revision=keep[3],
        )
        return d, keep

    def fingerprint(self) -> int:
        d, _keep = self._struct()
        return lib.kvt_ns_fingerprint(byref(d))


@dataclass
class LookupResult:
    hit: int  # contiguous prefix hit in chunks (min over ranks with all_ranks)
    skipped: bool = False  # the lookup-skip gate answered without looking
    leased: bool = False
    lease_ms: int = 0
    lease_capped: bool = False
    rank_hits: list[int] = field(default_factory=list)  # all_ranks only


@dataclass
class LoadResult:
    nhit: int  # contiguous prefix of chunks loaded
    lens: list[int]  # stored size per chunk (0 on a miss)
    outcomes: list[int] = field(default_factory=list)  # LOAD_* (asynchronous loads)


@dataclass
class GateState:
    payoff: float
    share: float
    act_ema: float
    probes: int
    lookups: int
    admission_enabled: bool
    skip_enabled: bool
    load_bearing: bool
    policy: int
    density: float
    served_tokens: int
    regret_tokens: int
    written_tokens: int
    declined_tokens: int


@dataclass
class ServerInfo:
    lease_ms: int
    max_chunk_bytes: int
    max_chunks: int
    daemon_version: int
    features: int
    max_in_flight: int
    arena_gen: int


def _struct_dict(s: ctypes.Structure) -> dict:
    return {name: getattr(s, name) for name, _t in s._fields_}


def _gate_state(g: _lib.KvtGateState) -> GateState:
    d = _struct_dict(g)
    for k in ("admission_enabled", "skip_enabled", "load_bearing"):
        d[k] = bool(d[k])
    return GateState(**d)


def _lookup_result(r: _lib.KvtLookupResult) -> LookupResult:
    ranks = [r.rank_hits[i] for i in range(r.nranks)] if r.rank_hits and r.nranks else []
    return LookupResult(
        hit=r.hit,
        skipped=bool(r.skipped),
        leased=bool(r.leased),
        lease_ms=r.lease_ms,
        lease_capped=bool(r.lease_capped),
        rank_hits=ranks,
    )


# ------------------------------------------------------------------------------------------------
# Futures, reservations, pins


class Future:
    """One submitted request. result(timeout) waits for it (driving the client's completion
    queue) and returns its value or raises KvtierError; done() never waits."""

    def __init__(self, client: "Client", op: int, keep: Any, user: Any):
        self._client = client
        self.op = op
        self.handle = 0
        self.user = user
        self._keep = keep  # the borrowed buffers, until the completion is taken
        self._done = False
        self._value: Any = None
        self._exc: Optional[BaseException] = None
        self._callbacks: list = []

    def done(self) -> bool:
        return self._done

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._done:
            self._client._wait_for(self, timeout)
        if self._exc is not None:
            raise self._exc
        return self._value

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if not self._done:
            self._client._wait_for(self, timeout)
        return self._exc

    def add_done_callback(self, fn) -> None:
        """fn(future) runs on the thread that takes the completion (at once if done), outside
        the client's lock: it may submit, wait for other futures or take completions. An
        exception it raises is logged and does not reach the thread taking completions."""
        with self._client._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        _run_callback(fn, self)

    def _finish(self, value: Any, exc: Optional[BaseException]) -> None:
        """Resolves the future (with the client's lock held); its callbacks are run by
        _run_callbacks once the lock is released."""
        self._value, self._exc, self._done = value, exc, True
        self._keep = None

    def _run_callbacks(self) -> None:
        with self._client._lock:
            fns, self._callbacks = self._callbacks, []
        _each(fns, lambda fn: _run_callback(fn, self))


def _each(items, call) -> None:
    """call(x) for every x, even when one raises what is not an Exception (KeyboardInterrupt:
    the first one is re-raised once all ran)."""
    first: Optional[BaseException] = None
    for x in items:
        try:
            call(x)
        except BaseException as e:
            if first is None:
                first = e
    if first is not None:
        raise first


def _run_callback(fn, fut: "Future") -> None:
    try:
        fn(fut)
    except Exception:  # as concurrent.futures does: a callback's error is the callback's
        import logging

        logging.getLogger("kvtier").exception("exception in a Future callback")


class _Held:
    """A completion the library lent us (reservation or pin), freed exactly once. A subclass
    whose __init__ fails gives it up (_disown): the drain that made it frees it then."""

    _comp = None

    def _disown(self) -> None:
        self._comp = None

    def __init__(self, client: "Client", comp: "POINTER[_lib.KvtCompletion]"):
        self._client = client
        self._comp = comp

    def _free(self) -> None:
        comp, self._comp = self._comp, None
        if comp is not None and self._client._c is not None:
            lib.kvt_completion_free(self._client._c, comp)

    def __del__(self):
        try:
            self._free()
        except Exception:
            pass


class Reservation(_Held):
    """A zero-copy save, step 1: per chunk an outcome (SAVE_RESERVED: write views[i], then
    commit) and the arena space to fill before hold_until_ms."""

    def __init__(self, client: "Client", comp, lens: Sequence[int]):
        super().__init__(client, comp)
        try:
            self._init_views(comp, lens)
        except BaseException:
            self._disown()
            raise

    def _init_views(self, comp, lens: Sequence[int]) -> None:
        c = comp.contents
        self.n = c.n
        self.outcomes = [c.outcomes[i] for i in range(c.n)]
        self.lens = list(lens)  # the sizes asked for (a reserve completion carries no lens)
        self.hold_until_ms = c.hold_until_ms
        self.views: list[Optional[memoryview]] = []
        for i in range(c.n):
            p = c.ptrs[i] if c.ptrs else None
            ok = self.outcomes[i] == SAVE_RESERVED and p
            self.views.append(_view(p, self.lens[i]) if ok else None)

    def numpy(self, i: int):
        import numpy

        return numpy.frombuffer(self.views[i], dtype=numpy.uint8)

    def torch(self, i: int):
        import torch

        return torch.frombuffer(self.views[i], dtype=torch.uint8)

    def commit(self, nwritten: Optional[int] = None, timeout_ms: int = 0) -> Future:
        """Publishes the reserved chunks among the first nwritten (all by default); the
        future's result is the final per-chunk outcomes."""
        if self._comp is None:
            raise KvtierError(EINVAL, "reservation already committed or abandoned", "commit")
        nw = self.n if nwritten is None else nwritten
        fut = self._client._submit(
            OP_COMMIT,
            lambda so, h: lib.kvt_submit_commit(self._client._c, self._comp, nw, so, h),
            keep=None,
            user=None,
            timeout_ms=timeout_ms,
            call="kvt_submit_commit",
        )
        self._comp = None  # the library owns it now
        self.views = []
        return fut

    def abandon(self) -> None:
        """Gives the space back without committing (the daemon reclaims it at its deadline)."""
        self.views = []
        self._free()


class Pin(_Held):
    """A zero-copy load: views[i] are the HIT chunks' bytes in the arena, pinned until
    release() (or hold_until_ms). Also a context manager that releases on exit."""

    def __init__(self, client: "Client", comp):
        super().__init__(client, comp)
        try:
            self._fill()
        except BaseException:
            self._disown()
            raise

    def _fill(self) -> None:
        c = self._comp.contents
        self.n = c.n
        self.nhit = c.nhit
        self.outcomes = [c.outcomes[i] for i in range(c.n)]
        self.lens = [c.lens[i] for i in range(c.n)]
        self.checksums = [c.checksums[i] for i in range(c.n)] if c.checksums else None
        self.hold_until_ms = c.hold_until_ms
        self.views = []
        for i in range(c.n):
            p = c.ptrs[i] if c.ptrs else None
            ok = self.outcomes[i] == LOAD_HIT and p
            self.views.append(_view(p, self.lens[i]) if ok else None)

    def numpy(self, i: int):
        import numpy

        return numpy.frombuffer(self.views[i], dtype=numpy.uint8)

    def torch(self, i: int):
        import torch

        return torch.frombuffer(self.views[i], dtype=torch.uint8)

    def verify(self) -> int:
        """kvt_pin_verify: checks the HIT chunks against the daemon's checksums on this thread;
        returns the number of mismatches (each becomes LOAD_CORRUPT, a miss)."""
        if self._comp is None:
            raise KvtierError(EINVAL, "pin already released", "verify")
        rc = lib.kvt_pin_verify(self._client._c, self._comp)
        if rc < 0:
            raise _error(rc, call="kvt_pin_verify")
        self._fill()
        return rc

    def release(self) -> None:
        """Releases the pins (batched by the library, no round trip)."""
        self.views = []
        self._free()

    def __enter__(self) -> "Pin":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class Completion:
    """What Client.poll_completions() yields: the future it completed."""

    future: Future


# ------------------------------------------------------------------------------------------------
# The client


class Client:
    """A connection of one rank to kvtierd for one namespace (kvt_connect).

    endpoint: "ipc:///path" (same host: the shared-memory path when the arena can be mapped) or
    "tcp://127.0.0.1:port". namespace: a Namespace. data_path: "auto", "frames" or "shm".
    verify: "default" (copying loads verified), "all" (pins too) or "none". down_wait_ms: how
    long a request waits for a lost connection to the daemon to come back before it fails
    KvtierUnavailable (kvt_set_down_wait; None: the library's default, 100 or
    KVTIER_DOWN_WAIT_MS; -1: no fast failure)."""

    def __init__(
        self,
        endpoint: str,
        namespace: Namespace,
        rank: int = 0,
        *,
        timeout_ms: int = 0,
        data_path: str = "auto",
        max_in_flight: int = 0,
        verify: str = "default",
        down_wait_ms: Optional[int] = None,
    ):
        self._c: Optional[int] = None
        self.endpoint = endpoint
        self.namespace = namespace
        self.rank = rank
        desc, keep = namespace._struct()
        opts = _lib.KvtConnectOpts(
            timeout_ms=timeout_ms,
            data_path=_DATA_PATHS[data_path],
            max_in_flight=max_in_flight,
            verify=_VERIFY[verify],
        )
        out = c_void_p()
        rc = lib.kvt_connect(endpoint.encode(), byref(desc), rank, byref(opts), byref(out))
        del keep
        if rc != 0:
            msg = lib.kvt_last_error(None)
            raise _error(rc, msg.decode(errors="replace") if msg else "", "kvt_connect")
        self._c = out.value
        self._pid = os.getpid()  # a forked child must not use this client (_check)
        if down_wait_ms is not None:
            rc = lib.kvt_set_down_wait(self._c, int(down_wait_ms))
            if rc != 0:
                lib.kvt_close(byref(out))
                self._c = None
                raise _error(rc, f"down_wait_ms {down_wait_ms}: -1 or more", "kvt_set_down_wait")
        self._lock = threading.Lock()  # the pending table and completion taking
        self._cond = threading.Condition(self._lock)
        self._polling = False
        self._dispatching: dict[int, int] = {}  # threads running callbacks -> depth (close waits)
        self._closing = False
        self._pending: dict[int, Future] = {}
        self._early: dict[int, Any] = {}  # completions taken before their submit returned

    # -- lifetime

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def shutdown(self) -> None:
        """kvt_shutdown: every request not completed completes with ECLOSED; pending futures
        are resolved by the next completion drain (close() does it)."""
        if self._c is not None:
            lib.kvt_shutdown(self._c)

    def close(self) -> None:
        """Shuts down, resolves every pending future (ECLOSED), and frees the client. Pins and
        reservations still held become invalid. In a forked child it only forgets the parent's
        client (its threads and its lock are the parent's; the library frees nothing there)."""
        if self._c is not None and self._forked():
            c = c_void_p(self._c)
            self._c = None
            lib.kvt_close(byref(c))  # frees nothing in a child: returns at once
            return
        with self._lock:
            if self._c is None or self._closing:
                return  # closed, or another thread (maybe a callback) is closing it
            self._closing = True
        lib.kvt_shutdown(self._c)
        self.poll_completions()
        with self._lock:
            left = list(self._pending.values())
            for fut in left:
                fut._finish(None, _error(ECLOSED, call="close"))
            self._pending.clear()
            self._enter_dispatch(left)
        self._dispatch(left)
        with self._lock:
            # callbacks other threads are running may still use what the client lent them
            # (a Pin's bytes): the client is freed once they returned, or after 5 s (a callback
            # that never returns must not hold close() for ever)
            me = threading.get_ident()
            deadline = time.monotonic() + 5.0
            while any(n for t, n in self._dispatching.items() if t != me):
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    break
                self._cond.wait(min(1.0, left_s))
        c = c_void_p(self._c)
        self._c = None
        lib.kvt_close(byref(c))

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _forked(self) -> bool:
        return getattr(self, "_pid", None) not in (None, os.getpid())

    def _fork_error(self) -> KvtierError:
        return KvtierError(
            ECLOSED,
            f"this client was connected by process {self._pid} before a fork(); a forked child "
            "must create its own Client",
        )

    def _check(self) -> int:
        if self._c is None:
            raise KvtierError(ECLOSED, "client closed")
        if self._forked():
            raise self._fork_error()
        return self._c

    def _fail(self, rc: int, call: str) -> KvtierError:
        msg = lib.kvt_last_error(self._c) if self._c is not None else None
        return _error(rc, msg.decode(errors="replace") if msg else "", call)

    # -- facts

    def fileno(self) -> int:
        """kvt_fd: readable while a completion waits (level-triggered); do not read or close."""
        return lib.kvt_fd(self._check())

    @property
    def data_path(self) -> str:
        return {1: "frames", 2: "shm"}.get(lib.kvt_data_path(self._check()), "?")

    def server_info(self) -> ServerInfo:
        info = _lib.KvtServerInfo()
        rc = lib.kvt_server_info(self._check(), byref(info))
        if rc != 0:
            raise self._fail(rc, "kvt_server_info")
        return ServerInfo(**_struct_dict(info))

    def stats(self) -> dict:
        st = _lib.KvtStats()
        rc = lib.kvt_stats(self._check(), byref(st))
        if rc != 0:
            raise self._fail(rc, "kvt_stats")
        return _struct_dict(st)

    def link(self) -> dict:
        """kvt_link: down (1 while the connection to the daemon is down), down_wait_ms,
        down_for_ms, disconnects, unavailable (requests failed KvtierUnavailable)."""
        st = _lib.KvtLink()
        rc = lib.kvt_link(self._check(), byref(st))
        if rc != 0:
            raise self._fail(rc, "kvt_link")
        return _struct_dict(st)

    def set_down_wait(self, ms: int) -> None:
        """kvt_set_down_wait: ms >= 0, or -1 for no fast failure."""
        rc = lib.kvt_set_down_wait(self._check(), int(ms))
        if rc != 0:
            raise self._fail(rc, "kvt_set_down_wait")

    def arena(self) -> dict:
        """kvt_arena: base address, bytes, generation and map count (shared-memory path)."""
        a = _lib.KvtArena()
        rc = lib.kvt_arena(self._check(), byref(a))
        if rc != 0:
            raise self._fail(rc, "kvt_arena")
        return _struct_dict(a)

    # -- synchronous calls

    def lookup(
        self,
        hashes: Sequence[Hash],
        *,
        all_ranks: bool = False,
        lease: bool = False,
        prompt_tokens: Optional[int] = None,
        hbm_tokens: int = 0,
    ) -> LookupResult:
        c = self._check()
        arr = _hash_array(hashes)
        opts = _lookup_opts(all_ranks, lease, prompt_tokens, hbm_tokens)
        res = _lib.KvtLookupResult()
        ranks = None
        if all_ranks:
            cap = max(1, self.namespace.world_size)
            ranks = (ctypes.c_uint32 * cap)()
            res.rank_hits = ranks
            res.rank_hits_cap = cap
        rc = lib.kvt_lookup(c, arr, len(hashes), byref(opts), byref(res))
        if rc != 0:
            raise self._fail(rc, "kvt_lookup")
        return _lookup_result(res)

    def save(
        self,
        hashes: Sequence[Hash],
        bufs: Sequence[Buffer],
        *,
        parent: Optional[Hash] = None,
        op_id: Optional[int] = None,
    ) -> list[int]:
        """Saves a chain of chunks; returns the SAVE_* outcome per chunk."""
        c = self._check()
        arr, ptrs, lens, refs = _save_args(hashes, bufs)
        opts, pkeep = _save_opts(parent, op_id)
        outcomes = (c_uint8 * len(hashes))()
        rc = lib.kvt_save(c, arr, len(hashes), ptrs, lens, byref(opts), outcomes)
        del refs, pkeep
        if rc != 0:
            raise self._fail(rc, "kvt_save")
        return list(outcomes)

    def load(self, hashes: Sequence[Hash], bufs: Sequence[Buffer]) -> LoadResult:
        """Loads chunks into writable buffers; returns the hit prefix and stored sizes. A chunk
        too large for its buffer raises KvtierError(EBUFSIZE)."""
        c = self._check()
        arr, ptrs, caps, refs = _load_args(hashes, bufs)
        n = len(hashes)
        lens = (c_size_t * n)()
        nhit = c_size_t()
        rc = lib.kvt_load(c, arr, n, ptrs, caps, lens, byref(nhit))
        del refs
        if rc != 0:
            raise self._fail(rc, "kvt_load")
        return LoadResult(nhit=nhit.value, lens=list(lens))

    def tally(
        self,
        engine_id: int,
        paid_total: int,
        probes_total: int,
        reasons: Optional[dict[str, int]] = None,
        *,
        served_tokens_total: Optional[int] = None,
        lookup_tokens_total: Optional[int] = None,
    ) -> GateState:
        """Pushes an engine's cumulative verdict totals (docs/GATES.md section 1), with the token
        totals when given; returns the namespace's gate state after the fold."""
        c = self._check()
        req, keep = _tally_req(
            engine_id, paid_total, probes_total, reasons, served_tokens_total, lookup_tokens_total
        )
        tokens = _lib.KvtTallyTokens(req.served_tokens_total, req.lookup_tokens_total)
        st = _lib.KvtGateState()
        rc = lib.kvt_tally2(
            c,
            engine_id,
            paid_total,
            probes_total,
            byref(tokens) if req.has_tokens else None,
            req.reasons,
            req.nreasons,
            byref(st),
        )
        del keep
        if rc != 0:
            raise self._fail(rc, "kvt_tally2")
        return _gate_state(st)

    # -- asynchronous calls

    def submit_lookup(
        self,
        hashes: Sequence[Hash],
        *,
        all_ranks: bool = False,
        lease: bool = False,
        prompt_tokens: Optional[int] = None,
        hbm_tokens: int = 0,
        user: Any = None,
        timeout_ms: int = 0,
    ) -> Future:
        arr = _hash_array(hashes)
        opts = _lookup_opts(all_ranks, lease, prompt_tokens, hbm_tokens)
        n = len(hashes)
        return self._submit(
            OP_LOOKUP,
            lambda so, h: lib.kvt_submit_lookup(self._check(), arr, n, byref(opts), so, h),
            keep=None,
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_lookup",
        )

    def submit_save(
        self,
        hashes: Sequence[Hash],
        bufs: Sequence[Buffer],
        *,
        parent: Optional[Hash] = None,
        op_id: Optional[int] = None,
        user: Any = None,
        timeout_ms: int = 0,
    ) -> Future:
        """As save(); the future's result is the SAVE_* outcome per chunk. The buffers must not
        be written until the future is done."""
        arr, ptrs, lens, refs = _save_args(hashes, bufs)
        opts, pkeep = _save_opts(parent, op_id)
        n = len(hashes)
        return self._submit(
            OP_SAVE,
            lambda so, h: lib.kvt_submit_save(self._check(), arr, n, ptrs, lens, byref(opts), so, h),
            keep=refs,
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_save",
        )

    def submit_load(
        self, hashes: Sequence[Hash], bufs: Sequence[Buffer], *, user: Any = None, timeout_ms: int = 0
    ) -> Future:
        """As load(); the future's result is a LoadResult (with per-chunk outcomes). The buffers
        must not be read until the future is done."""
        arr, ptrs, caps, refs = _load_args(hashes, bufs)
        n = len(hashes)
        return self._submit(
            OP_LOAD,
            lambda so, h: lib.kvt_submit_load(self._check(), arr, n, ptrs, caps, so, h),
            keep=refs,
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_load",
        )

    def submit_tally(
        self,
        engine_id: int,
        paid_total: int,
        probes_total: int,
        reasons: Optional[dict[str, int]] = None,
        *,
        served_tokens_total: Optional[int] = None,
        lookup_tokens_total: Optional[int] = None,
        user: Any = None,
        timeout_ms: int = 0,
    ) -> Future:
        req, keep = _tally_req(
            engine_id, paid_total, probes_total, reasons, served_tokens_total, lookup_tokens_total
        )
        return self._submit(
            OP_TALLY,
            lambda so, h: lib.kvt_submit_tally(self._check(), byref(req), so, h),
            keep=keep,
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_tally",
        )

    def submit_reserve(
        self,
        hashes: Sequence[Hash],
        lens: Sequence[int],
        *,
        parent: Optional[Hash] = None,
        op_id: Optional[int] = None,
        user: Any = None,
        timeout_ms: int = 0,
    ) -> Future:
        """Zero-copy save, step 1; the future's result is a Reservation."""
        arr = _hash_array(hashes)
        n = len(hashes)
        clens = (c_size_t * n)(*lens)
        opts, pkeep = _save_opts(parent, op_id)
        return self._submit(
            OP_RESERVE,
            lambda so, h: lib.kvt_submit_reserve(self._check(), arr, n, clens, byref(opts), so, h),
            keep={"lens": list(lens), "parent": pkeep},
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_reserve",
        )

    def submit_pin(self, hashes: Sequence[Hash], *, user: Any = None, timeout_ms: int = 0) -> Future:
        """Zero-copy load; the future's result is a Pin."""
        arr = _hash_array(hashes)
        n = len(hashes)
        return self._submit(
            OP_PIN,
            lambda so, h: lib.kvt_submit_pin(self._check(), arr, n, so, h),
            keep=None,
            user=user,
            timeout_ms=timeout_ms,
            call="kvt_submit_pin",
        )

    def pin(self, hashes: Sequence[Hash], timeout: Optional[float] = None) -> Pin:
        return self.submit_pin(hashes).result(timeout)

    def reserve(self, hashes: Sequence[Hash], lens: Sequence[int], **kw) -> Reservation:
        return self.submit_reserve(hashes, lens, **kw).result()

    # -- completions

    def poll_completions(self, timeout: float = 0.0) -> list[Future]:
        """Takes every completion waiting (waiting up to timeout seconds for the first one) and
        resolves its future; returns the futures completed, oldest first."""
        c = self._check()
        if timeout > 0:
            rc = lib.kvt_poll(c, int(timeout * 1000))
            if rc < 0:
                raise self._fail(rc, "kvt_poll")
        with self._lock:
            done = self._drain_locked()
            self._enter_dispatch(done)
        self._dispatch(done)
        return done

    def completions(self, timeout: Optional[float] = None) -> Iterator[Future]:
        """Yields futures as they complete until none is pending (or timeout seconds pass
        without a completion)."""
        while True:
            with self._lock:
                if not self._pending:
                    return
            done = self.poll_completions(timeout=timeout if timeout is not None else 3600.0)
            if not done and timeout is not None:
                return
            yield from done

    def _submit(self, op: int, fn, keep: Any, user: Any, timeout_ms: int, call: str) -> Future:
        fut = Future(self, op, keep, user)
        so = _lib.KvtSubmitOpts(user=None, timeout_ms=timeout_ms)
        h = c_uint64()
        with self._lock:
            rc = fn(byref(so), byref(h))
            if rc != 0:
                raise self._fail(rc, call)
            fut.handle = h.value
            self._pending[h.value] = fut
        return fut

    def _drain_locked(self) -> list[Future]:
        done = []
        comp = POINTER(_lib.KvtCompletion)()
        while self._c is not None and lib.kvt_next_completion(self._c, byref(comp)) == 1:
            fut = self._pending.pop(comp.contents.handle, None)
            try:
                value, exc, keep_comp = self._convert(fut, comp)
            except Exception as e:  # the future gets it, the others of this drain still finish
                value, exc, keep_comp = None, e, False
            if not keep_comp:
                lib.kvt_completion_free(self._c, comp)
            comp = POINTER(_lib.KvtCompletion)()
            if fut is not None:
                fut._finish(value, exc)
                done.append(fut)
        if done:
            self._cond.notify_all()
        return done

    def _convert(self, fut: Optional[Future], comp) -> tuple[Any, Optional[BaseException], bool]:
        c = comp.contents
        if c.status != 0 and not (c.op == OP_LOAD and c.status == EBUFSIZE):
            err = c.error.decode(errors="replace") if c.error else ""
            return None, _error(c.status, err, _OP_CALLS.get(c.op, "")), False
        if c.op == OP_LOOKUP:
            return _lookup_result(c.lookup), None, False
        if c.op in (OP_SAVE, OP_COMMIT):
            return [c.outcomes[i] for i in range(c.n)], None, False
        if c.op == OP_LOAD:
            res = LoadResult(
                nhit=c.nhit,
                lens=[c.lens[i] for i in range(c.n)],
                outcomes=[c.outcomes[i] for i in range(c.n)],
            )
            if c.status == EBUFSIZE:
                return None, _error(EBUFSIZE, "a stored chunk is larger than its buffer", "load"), False
            return res, None, False
        if c.op == OP_TALLY:
            return _gate_state(c.gates), None, False
        if c.op == OP_RESERVE:
            lens = fut._keep["lens"] if fut is not None else [0] * c.n
            return Reservation(self, comp, lens), None, True
        if c.op == OP_PIN:
            return Pin(self, comp), None, True
        return None, None, False

    def _wait_for(self, fut: Future, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._forked() and not fut._done:  # before the lock: a parent's thread may hold it
            raise self._fork_error()
        while True:
            done: list[Future] = []
            with self._lock:
                if fut._done:
                    return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("the request has not completed yet")
                if self._c is None:
                    raise KvtierError(ECLOSED, "client closed")
                if self._polling:
                    self._cond.wait(remaining)
                    continue
                self._polling = True
                self._lock.release()
                try:
                    ms = 100 if remaining is None else max(0, min(100, int(remaining * 1000)))
                    lib.kvt_poll(self._c, ms)
                finally:
                    self._lock.acquire()
                    self._polling = False
                try:
                    done = self._drain_locked()
                    self._enter_dispatch(done)
                finally:
                    self._cond.notify_all()
            # callbacks outside the lock: one that submits or waits must not deadlock
            self._dispatch(done)

    def _enter_dispatch(self, futs: list) -> None:
        """With the lock held, in the region that took futs: this thread dispatches from now
        on (close() waits for it), so no close() can slip in before the callbacks run."""
        if futs:
            me = threading.get_ident()
            self._dispatching[me] = self._dispatching.get(me, 0) + 1

    def _dispatch(self, futs: list) -> None:
        """Runs the callbacks of futs (outside the lock; _enter_dispatch was called for them),
        every one of them even when one raises what is not an Exception (KeyboardInterrupt:
        re-raised after the others ran), then leaves the dispatch."""
        if not futs:
            return
        me = threading.get_ident()
        late: Optional[BaseException] = None
        try:
            _each(futs, Future._run_callbacks)
        finally:
            while True:  # the leave must happen: an interrupt in the acquire tries again
                try:
                    with self._lock:
                        n = self._dispatching.get(me, 1) - 1
                        if n > 0:
                            self._dispatching[me] = n
                        else:
                            self._dispatching.pop(me, None)
                        self._cond.notify_all()
                    break
                except BaseException as e:
                    late = late or e
        if late is not None:
            raise late


_OP_CALLS = {
    OP_LOOKUP: "lookup",
    OP_SAVE: "save",
    OP_LOAD: "load",
    OP_TALLY: "tally",
    OP_RESERVE: "reserve",
    OP_COMMIT: "commit",
    OP_PIN: "pin",
}


def _lookup_opts(all_ranks, lease, prompt_tokens, hbm_tokens) -> _lib.KvtLookupOpts:
    return _lib.KvtLookupOpts(
        all_ranks=1 if all_ranks else 0,
        lease=1 if lease else 0,
        has_prompt=0 if prompt_tokens is None else 1,
        prompt_tokens=prompt_tokens or 0,
        hbm_tokens=hbm_tokens or 0,
    )


def _save_opts(parent, op_id):
    p = _hash_struct(parent) if parent is not None else None
    opts = _lib.KvtSaveOpts(
        parent=ctypes.pointer(p) if p is not None else None,
        has_op_id=0 if op_id is None else 1,
        op_id=op_id or 0,
    )
    return opts, p


def _save_args(hashes, bufs):
    if len(bufs) != len(hashes):
        raise ValueError("one buffer per hash")
    arr = _hash_array(hashes)
    refs = [_BufRef(b, writable=False) for b in bufs]
    n = len(refs)
    ptrs = (c_void_p * n)(*[r.addr for r in refs])
    lens = (c_size_t * n)(*[r.nbytes for r in refs])
    return arr, ptrs, lens, refs


def _load_args(hashes, bufs):
    if len(bufs) != len(hashes):
        raise ValueError("one buffer per hash")
    arr = _hash_array(hashes)
    refs = [_BufRef(b, writable=True) for b in bufs]
    n = len(refs)
    ptrs = (c_void_p * n)(*[r.addr for r in refs])
    caps = (c_size_t * n)(*[r.nbytes for r in refs])
    return arr, ptrs, caps, refs


def _tally_req(engine_id, paid, probes, reasons, served, lookup_tokens):
    items = list((reasons or {}).items())
    names = [k.encode() for k, _ in items]
    rarr = (_lib.KvtReason * max(1, len(items)))()
    for i, (k, v) in enumerate(items):
        rarr[i].name = names[i]
        rarr[i].count = v
    has_tokens = served is not None or lookup_tokens is not None
    req = _lib.KvtTallyReq(
        engine_id=engine_id,
        paid_total=paid,
        probes_total=probes,
        reasons=rarr if items else None,
        nreasons=len(items),
        has_tokens=1 if has_tokens else 0,
        served_tokens_total=served or 0,
        lookup_tokens_total=lookup_tokens or 0,
    )
    return req, (names, rarr)
