"""ctypes declarations of libkvtier 0.2 (client/kvtier.h) and the rule that finds the library.

Every struct and prototype here mirrors kvtier.h field by field; tests/python/test_abi.py pins
them to the header (sizes and offsets printed by a C program built against it, and the
prototypes parsed from its text), so a header change fails that test instead of corrupting
memory at run time.

Finding the library (the first that exists wins):
  1. the environment variable KVTIER_LIB: a path to libkvtier.so (any name);
  2. the install prefix: `cmake --install` writes kvtier/_install.py beside this file, naming
     <prefix>/<libdir>/libkvtier.so.0.2 as an absolute path;
  3. the build tree, when the package is imported from the source tree (client/python/kvtier):
     <source>/build/client/libkvtier.so.0.2, or $KVTIER_BUILD_DIR/client/libkvtier.so.0.2;
  4. the dynamic loader's search path by SONAME (libkvtier.so.0.2: ldconfig, LD_LIBRARY_PATH),
     which is what a `pip install`ed copy relies on after the C library was installed.

Threads: the declarations are immutable after import; ctypes releases the GIL around every call,
so a call that waits (a synchronous request, kvt_poll) never holds up other Python threads.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

SONAME = "libkvtier.so.0.2"
VERSION = (0, 2)


class KvtHash(Structure):
    _fields_ = [("b", c_uint8 * 16)]


class KvtNsDesc(Structure):
    _fields_ = [
        ("model", c_char_p),
        ("dtype", c_char_p),
        ("chunk_tokens", c_uint32),
        ("num_layers", c_uint32),
        ("num_kv_heads", c_uint32),
        ("head_dim", c_uint32),
        ("world_size", c_uint32),
        ("mla", c_int),
        ("hash_seed", c_uint64),
        ("tenant", c_char_p),
        ("revision", c_char_p),
    ]


class KvtConnectOpts(Structure):
    _fields_ = [
        ("timeout_ms", c_int),
        ("data_path", c_int),
        ("max_in_flight", c_uint32),
        ("verify", c_int),
    ]


class KvtServerInfo(Structure):
    _fields_ = [
        ("lease_ms", c_uint32),
        ("max_chunk_bytes", c_uint64),
        ("max_chunks", c_uint32),
        ("daemon_version", c_uint32),
        ("features", c_uint64),
        ("max_in_flight", c_uint32),
        ("arena_gen", c_uint32),
    ]


class KvtLookupOpts(Structure):
    _fields_ = [
        ("all_ranks", c_int),
        ("lease", c_int),
        ("has_prompt", c_int),
        ("prompt_tokens", c_uint64),
        ("hbm_tokens", c_uint64),
    ]


class KvtLookupResult(Structure):
    _fields_ = [
        ("hit", c_uint32),
        ("skipped", c_int),
        ("leased", c_int),
        ("lease_ms", c_uint32),
        ("nranks", c_uint32),
        ("rank_hits", POINTER(c_uint32)),
        ("rank_hits_cap", c_uint32),
        ("lease_capped", c_int),
    ]


class KvtSaveOpts(Structure):
    _fields_ = [
        ("parent", POINTER(KvtHash)),
        ("has_op_id", c_int),
        ("op_id", c_uint64),
    ]


class KvtGateState(Structure):
    _fields_ = [
        ("payoff", c_double),
        ("share", c_double),
        ("act_ema", c_double),
        ("probes", c_uint64),
        ("lookups", c_uint64),
        ("admission_enabled", c_int),
        ("skip_enabled", c_int),
        ("load_bearing", c_int),
        ("policy", c_int),
        ("density", c_double),
        ("served_tokens", c_uint64),
        ("regret_tokens", c_uint64),
        ("written_tokens", c_uint64),
        ("declined_tokens", c_uint64),
    ]


class KvtReason(Structure):
    _fields_ = [("name", c_char_p), ("count", c_uint64)]


class KvtTallyTokens(Structure):
    _fields_ = [("served_tokens_total", c_uint64), ("lookup_tokens_total", c_uint64)]


class KvtTallyReq(Structure):
    _fields_ = [
        ("engine_id", c_uint64),
        ("paid_total", c_uint64),
        ("probes_total", c_uint64),
        ("reasons", POINTER(KvtReason)),
        ("nreasons", c_size_t),
        ("has_tokens", c_int),
        ("served_tokens_total", c_uint64),
        ("lookup_tokens_total", c_uint64),
    ]


class KvtSubmitOpts(Structure):
    _fields_ = [("user", c_void_p), ("timeout_ms", c_int)]


class KvtCompletion(Structure):
    _fields_ = [
        ("handle", c_uint64),
        ("user", c_void_p),
        ("op", c_int),
        ("status", c_int),
        ("error", c_char_p),
        ("n", c_size_t),
        ("outcomes", POINTER(c_uint8)),
        ("lens", POINTER(c_size_t)),
        ("ptrs", POINTER(c_void_p)),
        ("checksums", POINTER(c_uint64)),
        ("nhit", c_size_t),
        ("hold_until_ms", c_int64),
        ("lookup", KvtLookupResult),
        ("gates", KvtGateState),
    ]


class KvtStats(Structure):
    _fields_ = [
        ("submitted", c_uint64),
        ("completed", c_uint64),
        ("failed", c_uint64),
        ("timeouts", c_uint64),
        ("recoveries", c_uint64),
        ("remaps", c_uint64),
        ("chunks_verified", c_uint64),
        ("checksum_mismatches", c_uint64),
        ("releases_sent", c_uint64),
        ("bytes_copied", c_uint64),
        ("inline_calls", c_uint64),
        ("in_flight", c_uint32),
        ("queued", c_uint32),
        ("max_in_flight", c_uint32),
    ]


class KvtLink(Structure):
    _fields_ = [
        ("down", c_uint32),
        ("down_wait_ms", c_int),
        ("down_for_ms", c_int64),
        ("disconnects", c_uint64),
        ("unavailable", c_uint64),
    ]


class KvtArena(Structure):
    _fields_ = [
        ("base", c_void_p),
        ("bytes", c_size_t),
        ("gen", c_uint32),
        ("maps", c_uint32),
    ]


# The public structs by their C names (the ABI test walks this table).
STRUCTS = {
    "kvt_hash_t": KvtHash,
    "kvt_ns_desc_t": KvtNsDesc,
    "kvt_connect_opts_t": KvtConnectOpts,
    "kvt_server_info_t": KvtServerInfo,
    "kvt_lookup_opts_t": KvtLookupOpts,
    "kvt_lookup_result_t": KvtLookupResult,
    "kvt_save_opts_t": KvtSaveOpts,
    "kvt_gate_state_t": KvtGateState,
    "kvt_reason_t": KvtReason,
    "kvt_tally_tokens_t": KvtTallyTokens,
    "kvt_tally_req_t": KvtTallyReq,
    "kvt_submit_opts_t": KvtSubmitOpts,
    "kvt_completion_t": KvtCompletion,
    "kvt_stats_t": KvtStats,
    "kvt_arena_t": KvtArena,
    "kvt_link_t": KvtLink,
}

_P = POINTER
_client = c_void_p  # kvt_client_t * (opaque)
_handle = _P(c_uint64)  # kvt_handle_t *

# name: (restype, [argtypes]) for every KVT_API function of kvtier.h.
PROTOTYPES = {
    "kvt_connect": (c_int, [c_char_p, _P(KvtNsDesc), c_uint32, _P(KvtConnectOpts), _P(c_void_p)]),
    "kvt_data_path": (c_int, [_client]),
    "kvt_shutdown": (None, [_client]),
    "kvt_close": (None, [_P(c_void_p)]),
    "kvt_ns_fingerprint": (c_uint64, [_P(KvtNsDesc)]),
    "kvt_server_info": (c_int, [_client, _P(KvtServerInfo)]),
    "kvt_lookup": (c_int, [_client, _P(KvtHash), c_size_t, _P(KvtLookupOpts), _P(KvtLookupResult)]),
    "kvt_save": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(c_void_p), _P(c_size_t), _P(KvtSaveOpts), _P(c_uint8)],
    ),
    "kvt_load": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(c_void_p), _P(c_size_t), _P(c_size_t), _P(c_size_t)],
    ),
    "kvt_tally": (
        c_int,
        [_client, c_uint64, c_uint64, c_uint64, _P(KvtReason), c_size_t, _P(KvtGateState)],
    ),
    "kvt_tally2": (
        c_int,
        [
            _client,
            c_uint64,
            c_uint64,
            c_uint64,
            _P(KvtTallyTokens),
            _P(KvtReason),
            c_size_t,
            _P(KvtGateState),
        ],
    ),
    "kvt_last_error": (c_char_p, [_client]),
    "kvt_strerror": (c_char_p, [c_int]),
    "kvt_submit_lookup": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(KvtLookupOpts), _P(KvtSubmitOpts), _handle],
    ),
    "kvt_submit_save": (
        c_int,
        [
            _client,
            _P(KvtHash),
            c_size_t,
            _P(c_void_p),
            _P(c_size_t),
            _P(KvtSaveOpts),
            _P(KvtSubmitOpts),
            _handle,
        ],
    ),
    "kvt_submit_load": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(c_void_p), _P(c_size_t), _P(KvtSubmitOpts), _handle],
    ),
    "kvt_submit_tally": (c_int, [_client, _P(KvtTallyReq), _P(KvtSubmitOpts), _handle]),
    "kvt_submit_reserve": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(c_size_t), _P(KvtSaveOpts), _P(KvtSubmitOpts), _handle],
    ),
    "kvt_submit_commit": (
        c_int,
        [_client, _P(KvtCompletion), c_size_t, _P(KvtSubmitOpts), _handle],
    ),
    "kvt_submit_pin": (c_int, [_client, _P(KvtHash), c_size_t, _P(KvtSubmitOpts), _handle]),
    "kvt_reserve": (
        c_int,
        [_client, _P(KvtHash), c_size_t, _P(c_size_t), _P(KvtSaveOpts), _P(_P(KvtCompletion))],
    ),
    "kvt_commit": (c_int, [_client, _P(KvtCompletion), c_size_t, _P(_P(KvtCompletion))]),
    "kvt_pin": (c_int, [_client, _P(KvtHash), c_size_t, _P(_P(KvtCompletion))]),
    "kvt_pin_verify": (c_int, [_client, _P(KvtCompletion)]),
    "kvt_fd": (c_int, [_client]),
    "kvt_poll": (c_int, [_client, c_int]),
    "kvt_next_completion": (c_int, [_client, _P(_P(KvtCompletion))]),
    "kvt_completion_free": (None, [_client, _P(KvtCompletion)]),
    "kvt_stats": (c_int, [_client, _P(KvtStats)]),
    "kvt_link": (c_int, [_client, _P(KvtLink)]),
    "kvt_set_down_wait": (c_int, [_client, c_int]),
    "kvt_arena": (c_int, [_client, _P(KvtArena)]),
    "kvt_checksum": (c_uint64, [c_void_p, c_size_t]),
    "kvt_copy_checksum": (c_uint64, [c_void_p, c_void_p, c_size_t]),
    "kvt_hash_chain": (
        c_size_t,
        [_P(c_uint32), c_size_t, c_uint32, _P(KvtHash), _P(KvtHash), c_size_t],
    ),
    "kvt_hash_key": (None, [c_void_p, c_size_t, c_void_p, c_size_t, _P(KvtHash)]),
    "kvt_hash_keys": (None, [c_void_p, c_size_t, c_size_t, c_void_p, c_size_t, _P(KvtHash)]),
    "kvt_hash_parse": (c_int, [c_char_p, _P(KvtHash)]),
    "kvt_hash_format": (None, [_P(KvtHash), c_char_p]),
}


def _source_build_candidates() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    build = os.environ.get("KVTIER_BUILD_DIR")
    if build:
        out.append(os.path.join(build, "client", SONAME))
    # <source>/client/python/kvtier -> <source>
    source = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(source, "client", "kvtier.h")):
        out.append(os.path.join(source, "build", "client", SONAME))
    return out


def find_library() -> str:
    """The path (or SONAME) libkvtier is loaded from, by the rule of this module's header."""
    env = os.environ.get("KVTIER_LIB")
    if env:
        return env
    try:
        from . import _install  # written by cmake --install

        if os.path.exists(_install.LIBRARY):
            return _install.LIBRARY
    except ImportError:
        pass
    for cand in _source_build_candidates():
        if os.path.exists(cand):
            return cand
    return SONAME


def load() -> ctypes.CDLL:
    path = find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"kvtier: cannot load libkvtier ({path}): {e}. Set KVTIER_LIB to the library's path, "
            "or install it (cmake --install) so that the loader finds " + SONAME
        ) from e
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = load()
LIBRARY_PATH = find_library()
