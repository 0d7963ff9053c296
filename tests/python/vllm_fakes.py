"""The few vLLM objects the vLLM adapter test hands to the tier, with upstream's fields
(vllm/v1/kv_offload/base.py ReqContext, tiering/base.py JobMetadata): vLLM itself is not
importable here. They carry data only; the tier, the daemon and the buffers are real."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Optional

import numpy as np


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[dict] = None
    _positions: dict = field(default_factory=dict)

    def set_offload_key_position(self, key: bytes, end_token: int) -> None:
        self._positions[key] = end_token

    def get_offload_key_position(self, key: bytes) -> Optional[int]:
        return self._positions.get(key)


@dataclass
class JobMetadata:
    job_id: int
    keys: Collection[bytes]
    block_ids: np.ndarray
    is_promotion: bool
    req_context: Any


def make_offload_key(block_hash: bytes, group_idx: int) -> bytes:
    """upstream make_offload_key: the block hash followed by the big-endian u32 group index."""
    return block_hash + group_idx.to_bytes(4, "big", signed=False)
