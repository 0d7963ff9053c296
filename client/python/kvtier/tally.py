"""Verdicts and tallies of docs/GATES.md section 1, kept by an engine adapter.

A verdict is the engine's judgement, once a request was allocated, of whether the tier's lookup
answer was worth a load. With hbm the leading prompt tokens the engine already holds and lmc the
loadable hit (the tier's prefix hit in tokens, less one token when it covers the whole prompt,
rounded down to whole chunks), the first matching row decides:

    lmc <= hbm                   -> hbm_satisfies_after_alloc   (not paid)
    hbm % chunk_tokens != 0      -> unaligned_hbm_prefill       (not paid)
    lmc - hbm < min_load_tokens  -> too_small                   (not paid)
    otherwise                    -> aligned_large_hit           (paid; loads [hbm, lmc))

A lookup that found nothing (hit 0) is no verdict at all. Tallies are cumulative totals
(paid_total, probes_total, a count per verdict name, served tokens, lookup tokens), so a lost or
repeated push changes nothing; Tallies.push() sends them asynchronously when they changed since
the last push, which an adapter does at most once per engine step.

Threads: a Tallies is used by one thread at a time (the adapter's scheduler thread).
"""

from __future__ import annotations

import os
from typing import Optional

HBM_SATISFIES = "hbm_satisfies_after_alloc"
UNALIGNED = "unaligned_hbm_prefill"
TOO_SMALL = "too_small"
PAID = "aligned_large_hit"


def loadable_tokens(hit_tokens: int, prompt_tokens: int, chunk_tokens: int) -> int:
    """GATES.md's loadable hit: less the last token when the hit covers the whole prompt,
    rounded down to a multiple of chunk_tokens (a hit of 0 stays 0)."""
    if hit_tokens <= 0:
        return 0
    if prompt_tokens and hit_tokens >= prompt_tokens:
        hit_tokens = prompt_tokens - 1
    return (hit_tokens // chunk_tokens) * chunk_tokens


def verdict(
    hbm_tokens: int, hit_tokens: int, prompt_tokens: int, chunk_tokens: int, min_load_tokens: int
) -> Optional[str]:
    """The verdict of GATES.md section 1, or None when the lookup found nothing."""
    if hit_tokens <= 0:
        return None
    lmc = loadable_tokens(hit_tokens, prompt_tokens, chunk_tokens)
    if lmc <= hbm_tokens:
        return HBM_SATISFIES
    if hbm_tokens % chunk_tokens != 0:
        return UNALIGNED
    if lmc - hbm_tokens < min_load_tokens:
        return TOO_SMALL
    return PAID


class Tallies:
    """The cumulative totals of one engine instance (engine_id: random unless given)."""

    def __init__(self, engine_id: Optional[int] = None):
        self.engine_id = engine_id if engine_id is not None else int.from_bytes(os.urandom(8), "little")
        self.paid_total = 0
        self.probes_total = 0
        self.reasons: dict[str, int] = {}
        self.served_tokens_total = 0
        self.lookup_tokens_total = 0
        self._pushed: Optional[tuple] = None

    def record(self, name: Optional[str], lookup_tokens: int, served_tokens: int = 0) -> None:
        """Counts one verdict (None: no verdict, nothing counted)."""
        if name is None:
            return
        self.probes_total += 1
        if name == PAID:
            self.paid_total += 1
        self.reasons[name] = self.reasons.get(name, 0) + 1
        self.lookup_tokens_total += lookup_tokens
        self.served_tokens_total += served_tokens

    def add_served(self, tokens: int) -> None:
        """Tokens loaded from the tier and used, counted when the load completes."""
        self.served_tokens_total += tokens

    def _key(self) -> tuple:
        return (
            self.paid_total,
            self.probes_total,
            self.served_tokens_total,
            self.lookup_tokens_total,
            tuple(sorted(self.reasons.items())),
        )

    def push(self, client) -> bool:
        """Submits the totals (kvt_submit_tally, never waits) if they changed since the last
        push; returns whether it did. The completion is taken by the client's next drain."""
        key = self._key()
        if key == self._pushed or self.probes_total == 0:
            return False
        client.submit_tally(
            self.engine_id,
            self.paid_total,
            self.probes_total,
            dict(self.reasons),
            served_tokens_total=self.served_tokens_total,
            lookup_tokens_total=self.lookup_tokens_total,
        )
        self._pushed = key
        return True
