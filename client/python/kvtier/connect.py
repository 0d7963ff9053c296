"""Connecting an engine adapter to a daemon that may not be there yet (0.2.12).

An engine starts its KV tier once, at its own start. Before 0.2.12 an adapter connected there
and then, so an engine started before kvtierd (a boot order, a daemon being upgraded, a crash
loop) failed to start at all: kvt_connect waits timeout_ms for the HELLO and raises. The tier is
an optimisation, so the adapters now start without it instead: the first connect is still made
in the constructor (the usual case is unchanged, and a wrong configuration, which the daemon
answers at once, still raises there), but a connect that nobody answered (KvtierTimeout) or that
found no socket (ECONNECT) is retried on a background thread until the daemon answers, and until
then every adapter call is a miss, a failed save or a failed job (KvtierUnavailable raised by
Connection.get, which the adapters already treat as any client error).

Decisions:
  - one retry per retry_s (1 s) after a failed attempt; each attempt waits the connect's timeout;
  - an error other than "nobody answered" (EVERSION, ECONFLICT, EINVAL...) is logged and retried
    every 10 s: the daemon may be upgraded or reconfigured under a running engine;
  - require_daemon=True (the adapters' key of that name) keeps the old behaviour: the
    constructor raises when the first connect fails;
  - the thread is a daemon thread and holds nothing but the factory; close() stops it, and a
    client it connects after close() is closed at once;
  - the adapters' warnings about failed calls go through Warnings: at most one per call site and
    error code per 10 s, with the count of those not logged.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from .client import ECONNECT, EUNAVAIL, Client, KvtierError, KvtierTimeout, _error

logger = logging.getLogger(__name__)

RETRY_S = 1.0
RETRY_OTHER_S = 10.0


class Connection:
    """A Client made by factory(), now or, when the daemon does not answer, by a background
    thread that retries. get() returns it or raises KvtierUnavailable."""

    def __init__(self, factory: Callable[[], Client], *, require_daemon: bool = False, what: str = "kvtier"):
        self._factory = factory
        self._what = what
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.client: Optional[Client] = None
        self.attempts = 1
        try:
            self.client = factory()
        except KvtierError as e:
            if require_daemon or not _retryable(e):
                raise
            logger.warning(
                "%s: the daemon did not answer the connect (%s); starting without the tier, "
                "connecting in the background (require_daemon to fail instead)",
                what,
                e,
            )
            self._thread = threading.Thread(target=self._run, name=f"{what}-connect", daemon=True)
            self._thread.start()

    def get(self) -> Client:
        c = self.client
        if c is None:
            raise _error(EUNAVAIL, "not connected to the daemon yet (connecting in the background)", self._what)
        return c

    @property
    def connected(self) -> bool:
        return self.client is not None

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            c, self.client = self.client, None
        if c is not None:
            c.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=0.1)  # it may be inside a connect: it closes what it makes

    def _run(self) -> None:
        wait = RETRY_S
        while not self._stop.wait(wait):
            self.attempts += 1
            try:
                c = self._factory()
            except KvtierError as e:
                wait = RETRY_S if _retryable(e) else RETRY_OTHER_S
                if not _retryable(e):
                    logger.error("%s: connect failed: %s (retrying every %.0f s)", self._what, e, wait)
                continue
            with self._lock:
                if not self._stop.is_set():
                    self.client = c
                    logger.warning("%s: connected to the daemon after %d attempts", self._what, self.attempts)
                    return
            c.close()
            return


class Warnings:
    """The adapters' warnings about failed calls, at most one per (site, error code) per
    interval_s: during an outage every call fails, and a warning per call would flood the
    engine's log. The next one logged after the interval says how many were not."""

    def __init__(self, log: logging.Logger, interval_s: float = 10.0) -> None:
        self._log = log
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last: dict = {}  # (site, code) -> (monotonic time logged, calls not logged since)

    def __call__(self, site: str, err: Any, fmt: str, *args: Any) -> None:
        key = (site, getattr(err, "code", None))
        now = time.monotonic()
        with self._lock:
            last, quiet = self._last.get(key, (None, 0))
            if last is not None and now - last < self._interval:
                self._last[key] = (last, quiet + 1)
                return
            self._last[key] = (now, 0)
        if quiet:
            fmt += " (and %d more like it in the last %.0f s, not logged)"
            args = args + (quiet, now - last)
        self._log.warning(fmt, *args)


def _retryable(e: KvtierError) -> bool:
    """Whether a failed connect is "nobody answered": the daemon is not there (yet)."""
    return isinstance(e, KvtierTimeout) or e.code in (ECONNECT, EUNAVAIL)


__all__ = ["Connection", "Warnings"]
