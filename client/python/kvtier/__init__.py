"""kvtier: the Python client of kvtierd, the slow KV-cache tier of LLM inference engines.

A thin binding of libkvtier (ctypes, no compiled extension) and two engine adapters:
kvtier.vllm (a secondary tier of vLLM's tiering offload) and kvtier.sglang (a HiCache storage
backend). See the README's "Python" and engine sections, and help(kvtier.Client).

    import kvtier
    ns = kvtier.Namespace(model="demo", chunk_tokens=256)
    with kvtier.Client("ipc://run/kvtierd.zmq", ns) as c:
        h = kvtier.hash_key(b"my-block")
        c.save([h], [b"x" * 4096])
        buf = bytearray(4096)
        assert c.load([h], [buf]).nhit == 1
"""

from ._lib import LIBRARY_PATH, SONAME
from .client import (
    EBUFSIZE,
    EBUSY,
    ECLOSED,
    ECONFLICT,
    ECONNECT,
    EINVAL,
    ENOMEM,
    ENONS,
    EPROTO,
    ESTALE,
    ESYS,
    ETIMEDOUT,
    ETOOBIG,
    EUNAVAIL,
    EUNSUPP,
    EVERSION,
    FEATURE_ARENA_GEN,
    FEATURE_CHECKSUMS,
    FEATURE_CLIENT_CSUMS,
    FEATURE_TOKENS,
    LOAD_BUFSIZE,
    LOAD_CORRUPT,
    LOAD_HIT,
    LOAD_MISS,
    SAVE_DECLINED,
    SAVE_EXISTS,
    SAVE_NOSPACE,
    SAVE_RESERVED,
    SAVE_STORED,
    Client,
    Future,
    GateState,
    KvtierError,
    KvtierTimeout,
    KvtierUnavailable,
    LoadResult,
    LookupResult,
    Namespace,
    Pin,
    Reservation,
    ServerInfo,
    checksum,
    hash_chain,
    hash_format,
    hash_key,
    hash_keys,
    hash_parse,
    strerror,
)
from .tally import Tallies, loadable_tokens, verdict

__version__ = "0.2.14"

__all__ = [name for name in dir() if not name.startswith("_")]
