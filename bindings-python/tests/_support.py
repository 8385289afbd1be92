"""Test helpers shared by the suite (imported as ``_support``; fixtures are in conftest.py).

* the stats schema (docs/design.md §8.1) and invariant checks (I2 conservation, I5 quiescence);
* :class:`VirtualClockLoop`: an asyncio loop on a virtual clock whose timers fire only when the
  test advances the clock, in deadline order, with the core's clock (the binding's ``_clock``
  hook) following along;
* :class:`Ticker`: counts event-loop iterations on any loop (asyncio or uvloop);
* :class:`CountingAwaitable` / :class:`CountingContext`: count how often an awaitable is
  resumed (``send``/``throw``) and in which loop iteration.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

import hullguard
from hullguard import _native

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in requirements-dev.txt
    uvloop = None

# The event loops every async test runs on (conftest.py hands them to pytest-asyncio).
LOOP_FACTORIES: Dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
if uvloop is not None:
    LOOP_FACTORIES["uvloop"] = uvloop.new_event_loop

# The reason names, from the core's reason table.
REASONS = tuple(r["name"] for r in _native.REASONS)

# docs/design.md §8.1, in order.
STATS_KEYS = (
    "active",
    "queued",
    "granted_unclaimed",
    "limit",
    "max_concurrent",
    "available",
    "admitted_total",
    "rejected_by_reason",
    "released_twice_total",
    "leaked_total",
    "orphaned_in_flight",
    "orphaned_total",
    "ring_free",
    "queue_wait_count",
    "queue_wait_sum_ns",
    "queue_wait_max_ns",
    "queue_wait_histogram",
    "revision",
    "observe",
    "observed_by_reason",
    "observer_panics",
    "reservations_held",
    "reservations_expired_total",
    "adaptive",
    "circuit",
    "budget",
    "load",
)


def conserved(s: Dict[str, Any]) -> bool:
    """I2: ``available + active + granted_unclaimed == limit``."""
    return s["available"] + s["active"] + s["granted_unclaimed"] == s["limit"]


def assert_conserved(bh: Any, where: str = "") -> Dict[str, Any]:
    s = bh.stats()
    assert conserved(s), f"I2 broken {where}: {s}"
    assert s["available"] <= s["limit"], f"available above limit {where}: {s}"
    return s


def assert_idle(bh: Any, where: str = "") -> Dict[str, Any]:
    """I5: nothing held, nothing queued, nothing granted and unclaimed."""
    s = assert_conserved(bh, where)
    assert (s["active"], s["queued"], s["granted_unclaimed"]) == (0, 0, 0), f"{where}: {s}"
    assert s["available"] == s["limit"], f"{where}: {s}"
    return s


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose ``time()`` is virtual.

    Timers (``call_at`` / ``call_later``, hence the binding's queue timers, ``asyncio.sleep``,
    ``asyncio.timeout``) are not handed to asyncio's scheduler: the loop keeps them and fires
    them only in :meth:`advance`, one at a time in deadline order (ties in arming order), with
    the virtual clock set to each deadline first and the loop run to quiescence after each.
    ``clock`` is the matching ``_clock`` hook (integer ns) for ``Bulkhead`` / ``Registry``.

    The loop is driven from synchronous code only (never inside another running loop):
    :meth:`run_until_quiet` runs iterations until no callback is ready; it never blocks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now_ns = 0
        self.iterations = 0
        self.timers_armed = 0
        self._vtimers: List[Tuple[int, int, asyncio.TimerHandle, Callable[..., Any], Tuple[Any, ...], Any]] = []
        self._seq = 0

    # -- the clock -----------------------------------------------------------------------
    def time(self) -> float:
        return self.now_ns / 1e9

    def clock(self) -> int:
        return self.now_ns

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any, context: Any = None) -> asyncio.TimerHandle:  # type: ignore[override]
        handle = asyncio.TimerHandle(when, callback, args, self, context)
        self._seq += 1
        self.timers_armed += 1
        heapq.heappush(self._vtimers, (round(when * 1e9), self._seq, handle, callback, args, context))
        return handle

    def pending_timers(self) -> List[int]:
        """Deadlines (ns) of the armed, not cancelled, not yet fired timers."""
        return sorted(t[0] for t in self._vtimers if not t[2].cancelled())

    def take_timer(self) -> Callable[[], None]:
        """Removes the earliest live timer and returns a function that runs its callback now
        (to make a timer fire inside a chosen loop iteration, next to other events)."""
        while self._vtimers:
            _, _, handle, callback, args, context = heapq.heappop(self._vtimers)
            if not handle.cancelled():
                return lambda: context.run(callback, *args) if context is not None else callback(*args)
        raise AssertionError("no timer armed")

    # -- running -------------------------------------------------------------------------
    def run_once(self) -> None:
        """Exactly one loop iteration (the callbacks ready now; never blocks)."""
        self.call_soon(self.stop)
        self.run_forever()
        self.iterations += 1

    def run_until_quiet(self, max_iterations: int = 10_000) -> None:
        for _ in range(max_iterations):
            if not self._ready:  # type: ignore[attr-defined]
                return
            self.run_once()
        raise AssertionError(f"loop still busy after {max_iterations} iterations")

    def advance(self, ms: int) -> None:
        """Moves the virtual clock by ``ms``, firing every due timer in deadline order."""
        target = self.now_ns + ms * 1_000_000
        self.run_until_quiet()
        while self._vtimers:
            when_ns, _, handle, callback, args, context = self._vtimers[0]
            if handle.cancelled():
                heapq.heappop(self._vtimers)
                continue
            if when_ns > target:
                break
            heapq.heappop(self._vtimers)
            self.now_ns = max(self.now_ns, when_ns)
            self.call_soon(callback, *args, context=context)
            self.run_until_quiet()
        self.now_ns = target
        self.run_until_quiet()

    def shutdown(self) -> None:
        """Cancels what is left, lets it unwind, closes the loop."""
        for task in asyncio.all_tasks(self):
            task.cancel()
        self.run_until_quiet()
        self._vtimers.clear()
        self.close()


class Ticker:
    """Counts iterations of a running loop: a callback that reschedules itself with
    ``call_soon`` runs exactly once per iteration (asyncio and uvloop alike)."""

    def __init__(self, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.loop = loop or asyncio.get_running_loop()
        self.n = 0
        self._stopped = False
        self._handle = self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.n += 1
        if not self._stopped:
            self._handle = self.loop.call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True
        self._handle.cancel()


class CountingAwaitable:
    """Wraps an awaitable and counts every resumption of it (``send``/``throw``), recording
    the :class:`Ticker` value at each. ``sends[0]`` is the first step; a waiter that parks
    properly has exactly one more entry, when it is woken."""

    def __init__(self, inner: Any, ticker: Optional[Ticker] = None) -> None:
        self.inner = inner
        self.ticker = ticker
        self.sends: List[int] = []
        self.result: Any = None

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self.inner.__await__()
        value: Any = None
        exc: Optional[BaseException] = None
        while True:
            self.sends.append(self.ticker.n if self.ticker else 0)
            try:
                yielded = it.throw(exc) if exc is not None else it.send(value)
            except StopIteration as stop:
                self.result = stop.value
                return stop.value
            try:
                value, exc = (yield yielded), None
            except BaseException as e:  # noqa: BLE001 - forwarded unchanged
                value, exc = None, e


class CountingContext:
    """``async with CountingContext(bh.acquire())`` / ``CountingContext(bh)``: counts the
    resumptions of the ``__aenter__`` awaitable."""

    def __init__(self, inner: Any, ticker: Optional[Ticker] = None) -> None:
        self.inner = inner
        self.enter = CountingAwaitable(None, ticker)

    async def __aenter__(self) -> Any:
        self.enter.inner = self.inner.__aenter__()
        return await self.enter

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


async def settle(iterations: int = 4) -> None:
    """Lets the running loop run a few iterations (wake-ups resolve within one)."""
    for _ in range(iterations):
        await asyncio.sleep(0)


def outcome_of(task: "asyncio.Task[Any]") -> str:
    """``granted`` / the rejection reason / ``aborted`` (cancelled) for a finished task."""
    assert task.done()
    if task.cancelled():
        return "aborted"
    exc = task.exception()
    if exc is None:
        assert isinstance(task.result(), hullguard.Permit), task.result()
        return "granted"
    if isinstance(exc, hullguard.BulkheadError):
        return exc.reason
    raise AssertionError(f"unexpected exception {exc!r}")


class FixedClock:
    """A clock that moves only when told (integer ns), for the sync deadline tests (the
    ``fixed`` fixture of conftest.py also makes it the budgets' clock)."""

    def __init__(self, ns: int = 0) -> None:
        self.ns = ns

    def __call__(self) -> int:
        return self.ns
