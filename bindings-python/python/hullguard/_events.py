"""``bh.events()``: a bulkhead's events as an async iterator (docs/design.md §8.2).

The stream is one more listener (``bh.on``) per kind, feeding a bounded buffer: an event
arriving while the buffer holds ``maxsize`` events is dropped and counted in ``dropped`` —
admission never blocks and never waits for a reader. Events may come from any thread; the
reader is woken on its own loop. ``aclose()`` (or leaving ``async with``) unregisters it; a
stream left open keeps its bulkhead alive.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any, Deque, Dict, Optional, Tuple

from . import _native

__all__ = ["EventStream"]


class EventStream:
    """``async for event in bh.events("admit", "reject", maxsize=256): ...``.

    ``kinds``: the event names to receive (default: every kind; the admission kinds need
    ``Bulkhead(events=True)``, else ``ValueError``). ``maxsize``: the buffer (an ``int`` ≥ 1,
    default 1024); ``dropped``: events dropped because it was full. Each event is the dict a
    ``bh.on`` callback receives.
    """

    def __init__(self, bh: Any, kinds: Tuple[str, ...] = (), maxsize: int = 1024) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"maxsize must be an int >= 1, not {type(maxsize).__name__}")
        if maxsize < 1:
            raise ValueError(f"maxsize must be an int >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self.dropped = 0
        self._buf: Deque[Dict[str, Any]] = deque()
        # Reentrant: a listener may run on this thread while it holds the lock (a garbage
        # collection at an allocation finalizes an unreleased permit, whose release event
        # comes here).
        self._lock = threading.RLock()
        self._waiter: Optional[asyncio.Future[None]] = None
        self._closed = False
        self._bh = bh
        self._kinds: Tuple[str, ...] = tuple(kinds) or tuple(_native.EVENT_KINDS)
        done = []
        try:
            for k in self._kinds:
                bh.on(k, self._push)
                done.append(k)
        except BaseException:
            for k in done:
                bh.off(k, self._push)
            raise

    def _push(self, event: Dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                return
            if len(self._buf) >= self.maxsize:
                self.dropped += 1
                return
            self._buf.append(event)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            _wake(waiter)

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        while True:
            # Allocated before the lock: an event pushed meanwhile (this thread included) is
            # found in the buffer below.
            waiter = loop.create_future()
            with self._lock:
                if self._buf:
                    return self._buf.popleft()
                if self._closed:
                    raise StopAsyncIteration
                self._waiter = waiter
            await waiter

    def pending(self) -> int:
        """Events buffered now."""
        with self._lock:
            return len(self._buf)

    async def aclose(self) -> None:
        """Unregisters the stream; buffered events are still delivered, then iteration ends."""
        self.close()

    def close(self) -> None:
        """``aclose`` from synchronous code."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiter, self._waiter = self._waiter, None
        for k in self._kinds:
            self._bh.off(k, self._push)
        if waiter is not None:
            _wake(waiter)

    async def __aenter__(self) -> "EventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


def _wake(fut: "asyncio.Future[None]") -> None:
    loop = fut.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        if not fut.done():
            fut.set_result(None)
    else:
        try:
            loop.call_soon_threadsafe(_set, fut)
        except RuntimeError:  # its loop is closed: nobody is waiting any more
            pass


def _set(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)
