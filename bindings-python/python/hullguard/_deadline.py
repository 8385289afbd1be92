"""Ambient deadlines (docs/design.md §5.9, issue 17): a request's whole time budget, set once
and honoured by every acquire made inside it.

::

    with hullguard.deadline(1.5):            # this request gets 1.5 s in all
        async with bh.acquire():             # queues at most what is left
            ...
        await client.get(url)                # hullguard.httpx: the rest, as httpx's timeout

A budget is an **absolute** deadline in seconds on the ``time.monotonic()`` scale, kept in a
:class:`contextvars.ContextVar`: it follows the code that runs in the context — the tasks it
creates (asyncio copies the context), threads started with ``contextvars.copy_context().run`` —
and nothing else. Budgets nest and only ever narrow: entering one takes the minimum of it and
the one in force, so a callee can never extend its caller's budget. Every acquire without
``deadline=`` takes the ambient deadline; an explicit ``deadline=`` is min'd with it.

What the deadline does is the core's (one rule in every layer): a deadline that has passed is
refused ``timeout`` at once (:class:`hullguard.BulkheadQueueTimeoutError`, never a
``ValueError``), a queued request waits at most until the deadline (less the bulkhead's
``min_service_time``), and a guarded call's ``call_timeout`` is capped by the time left.

Thread-safe: the budget of each context is its own; the functions here only read and set the
context variable of the calling context.
"""

from __future__ import annotations

import contextvars
import math
import time
from types import TracebackType
from typing import Any, Callable, Optional, Tuple, Type

from . import _native

__all__ = ["deadline", "deadline_at", "current_deadline", "remaining", "DeadlineScope"]

# The ambient absolute deadline (seconds on the time.monotonic() scale), None for none. Read by
# the native module at every acquire once the first budget is entered.
_DEADLINE: "contextvars.ContextVar[Optional[float]]" = contextvars.ContextVar(
    "hullguard.deadline", default=None
)

_enabled = False


def _monotonic() -> float:
    return time.monotonic()


_now: Callable[[], float] = _monotonic


def _set_clock(clock: Optional[Callable[[], int]]) -> None:
    """Test hook: "now" for :func:`deadline` and :func:`remaining` (and ``hullguard.httpx``)
    from ``clock()`` in integer ns — the ``_clock`` given to a test's ``Bulkhead`` /
    ``Registry``, so that budgets and the core share one virtual time. ``None`` restores
    ``time.monotonic()``. Not thread-safe; not for production code."""
    global _now
    if clock is None:
        _now = _monotonic
    else:
        _now = lambda: clock() / 1e9  # noqa: E731


def _check_seconds(seconds: Any) -> float:
    """``seconds`` of :func:`deadline`: an int or float, not NaN or ``-math.inf`` (``TypeError``
    / ``ValueError`` naming ``seconds``); ``math.inf`` is no budget."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(
            "seconds must be a number of seconds (an int or a float; math.inf for no budget), "
            f"not {type(seconds).__name__}"
        )
    try:
        s = float(seconds)
    except OverflowError:  # an int beyond a float
        s = math.inf if seconds > 0 else -math.inf
    if math.isnan(s) or s == -math.inf:
        raise ValueError(
            "seconds must be a number of seconds (finite, or math.inf for no budget); "
            f"got {seconds!r}"
        )
    return s


# The scopes entered in this context and their tokens, innermost last: each context (task,
# thread) has its own, so one scope object may be entered by many tasks at once.
_SCOPES: "contextvars.ContextVar[Tuple[Tuple[DeadlineScope, contextvars.Token[Optional[float]]], ...]]" = (
    contextvars.ContextVar("hullguard.deadline_scopes", default=())
)


class DeadlineScope:
    """A time budget: ``with`` / ``async with`` sets the ambient deadline of the calling
    context for the block — the minimum of this scope's and the one already in force — and
    restores the previous one at the exit. Entering returns the deadline in force inside
    (absolute seconds on the ``time.monotonic()`` scale, or ``None``). Made by
    :func:`deadline` (relative: counted from the entry) and :func:`deadline_at` (absolute).

    One scope object may be entered by several tasks or threads at once, again once left, or
    nested in itself: each entry is kept in the entering context. It must be left in the
    context that entered it (as every ``ContextVar`` token): leaving it elsewhere raises
    ``RuntimeError`` and changes nothing.
    """

    __slots__ = ("_seconds", "_at")

    def __init__(self, seconds: Optional[float], at: Optional[float]) -> None:
        self._seconds = seconds
        self._at = at

    def _enter(self) -> Optional[float]:
        global _enabled
        if not _enabled:
            _native._enable_ambient_deadline(_DEADLINE)
            _enabled = True
        if self._seconds is not None:
            # From 2**63 ns on (math.inf too) it is no deadline, as for deadline=.
            mine = _native._check_deadline(_now() + self._seconds, "seconds")
        else:
            mine = self._at
        outer = _DEADLINE.get()
        inside = outer if mine is None else mine if outer is None else min(outer, mine)
        token = _DEADLINE.set(inside)
        _SCOPES.set(_SCOPES.get() + ((self, token),))
        return inside

    def _exit(self) -> None:
        stack = _SCOPES.get()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] is self:
                try:
                    # Reset first: a token of another context raises, and nothing is popped.
                    _DEADLINE.reset(stack[i][1])
                except ValueError:
                    break
                _SCOPES.set(stack[:i] + stack[i + 1:])
                return
        raise RuntimeError(f"{self!r} left in a context that did not enter it")

    def __enter__(self) -> Optional[float]:
        return self._enter()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._exit()

    async def __aenter__(self) -> Optional[float]:
        return self._enter()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._exit()

    def __repr__(self) -> str:
        if self._seconds is not None:
            return f"hullguard.deadline({self._seconds!r})"
        return f"hullguard.deadline_at({self._at!r})"


def deadline(seconds: float) -> DeadlineScope:
    """A budget of ``seconds`` from the moment the block is entered::

        with hullguard.deadline(1.5):
            ...
        async with hullguard.deadline(1.5):
            ...

    Inside the block every acquire is bounded by the deadline (see the module docs); budgets
    nest and the innermost deadline in force is the earliest. ``seconds``: an int or float;
    ``math.inf`` adds no budget (an outer one stays); 0 or less is a budget already spent (an
    acquire inside is refused ``timeout``, not a ``ValueError``). Raises ``TypeError`` for a
    non-number, ``ValueError`` for NaN or ``-math.inf``.
    """
    return DeadlineScope(_check_seconds(seconds), None)


def deadline_at(when: Optional[float]) -> DeadlineScope:
    """A budget that ends at ``when``: absolute seconds on the ``time.monotonic()`` scale (the
    form a deadline takes as it flows from call to call — e.g. the ``current_deadline()`` of
    the caller). ``None``, ``math.inf`` and anything from ``2**63`` ns on add no budget; a
    deadline in the past is a budget already spent. Raises ``TypeError`` for a non-number,
    ``ValueError`` for NaN or ``-math.inf`` (the rule of every acquire's ``deadline=``)."""
    return DeadlineScope(None, _native._check_deadline(when, "when"))


def current_deadline() -> Optional[float]:
    """The deadline in force in the calling context: absolute seconds on the
    ``time.monotonic()`` scale, or ``None`` outside every budget."""
    return _DEADLINE.get()


def remaining() -> Optional[float]:
    """Seconds left until the deadline in force (never negative: 0 once it has passed), or
    ``None`` outside every budget."""
    d = _DEADLINE.get()
    if d is None:
        return None
    return max(0.0, d - _now())
