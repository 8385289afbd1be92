"""In-flight deduplication (single-flight) over a bulkhead: :class:`SingleFlight`.

Concurrent calls that name the same work (a **caller-supplied key**: hullguard never hashes a
prompt) run it once, under one admission, and share its result::

    sf = hullguard.SingleFlight(bh)
    answer = await sf.run(f"summary:{doc_id}", lambda: summarise(doc_id), cost=1500)

The rules (issue 16, item 3; each one a failure single-flight libraries and async-bulkhead-llm
have shipped):

* **Partitioned by everything that changes the admission.** Calls join the same flight only
  when their *partition* is equal: the caller's key, ``weight``, ``admission_class``, the
  per-call ``observe`` mode (``None`` and ``"off"`` are the same: the per-call mode is OR-ed into
  the bulkhead's) and the **cost bucket**. The bucket rule: costs ``0``, ``1``, ``2–3``, ``4–7``,
  ``8–15``, … (``cost.bit_length()``: powers of two), so two estimates of the same request that
  differ by less than a factor of two share, and a call reserving far more never rides on a
  cheaper admission. ``SingleFlight(bh, cost_bucket=fn)`` replaces the rule (``fn(cost)`` → any
  hashable; ``cost_bucket=lambda c: c`` shares exact costs only). An enforce-mode call never joins
  an observed (shadow) one; when the bulkhead exposes its own mode (``bh.observe``), that mode is
  part of the partition too, so a ``set_observe`` switch starts new flights.
* **One admission, made by the shared work.** The first caller of a partition (the leader)
  starts the shared work in its own task: ``bulkhead.acquire(weight, cost=…, admission_class=…,
  observe=…)``, then ``fn()`` while the permit is held; the permit is released with the outcome of
  ``fn`` (returned → ``"success"``, raised → ``"failure"``, cancelled → ``"ignored"``). Followers
  wait for it; the flight leaves the table as soon as its result is known (nothing is cached).
* **A refusal is not shared.** When the admission is refused (any :class:`BulkheadError` raised by
  the acquire), the leader gets that error and every follower tries admission itself: one of
  them becomes the new leader of a new flight (at most one round per waiter: bounded).
* **Each waiter awaits the work shielded.** A waiter that is cancelled leaves alone (its own
  ``CancelledError``); the others are untouched. The shared task is cancelled only when its
  **last** waiter leaves; its permit is then released once it has unwound.
* **Errors of ``fn`` are shared**: every waiter of the flight gets the same exception object.
* **Usage**: ``get_usage=`` maps the shared result to the budget units it used (e.g.
  ``lambda r: llm.usage_of(r).total``); the permit is released with that usage, the rest of the
  reservation refunded (as Node's ``run(fn, {getUsage})``).
* **Streaming results.** A result that is an async iterator (``__anext__``) has one consumer.
  The permit then stays held until the stream ends (exhausted → ``"success"``, raised →
  ``"failure"``, closed early by every consumer → ``"ignored"``). The first waiter to take it
  (the leader, or if it left the earliest waiter still there) gets it; every other waiter gets
  :class:`UnshareableResultError` unless it passed ``tee=True``: then it gets its own async
  iterator over the same items (each item is kept until the slowest consumer has read
  it: memory grows with the stream when one consumer lags). Other results (including sync
  iterators and objects holding streams) are shared by reference.

Not thread-safe: a ``SingleFlight`` belongs to one event loop (the bulkhead may be shared by
several). ``len(sf)`` is the number of flights in the table.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    Hashable,
    List,
    Optional,
    Set,
    Tuple,
    Union,
)

from . import _deadline
from ._errors import BulkheadError, CallTimeoutError

__all__ = ["SingleFlight", "UnshareableResultError", "cost_bucket"]

Key = Union[str, bytes, int]


class UnshareableResultError(TypeError):
    """A follower's shared result is a single-consumer stream (an async iterator) and the flight
    was not run with ``tee=True``. Not a :class:`BulkheadError`: the call was admitted and ran;
    only its result could not be shared. ``.key`` is the caller's key."""

    def __init__(self, key: Any) -> None:
        super().__init__(
            f"the result of flight {key!r} is a single-consumer stream; "
            "pass tee=True to give every waiter its own copy"
        )
        self.key = key


def cost_bucket(cost: int) -> int:
    """The default cost bucket: ``cost.bit_length()`` (0 | 1 | 2–3 | 4–7 | 8–15 | …)."""
    return cost.bit_length()


class _Refused:
    """The shared work's admission was refused: the leader raises ``error``, followers retry."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Flight:
    __slots__ = ("task", "waiters", "partition", "leader")

    def __init__(self, partition: Tuple[Any, ...], leader: object) -> None:
        self.partition = partition
        self.leader = leader  # the caller that started the flight
        self.task: "asyncio.Future[Any]"
        # The waiters still awaiting the result, in arrival order (a token per waiter).
        self.waiters: List[object] = []


class SingleFlight:
    """Runs concurrent calls of the same (caller-supplied) key once, under one admission of
    ``bulkhead``; see the module documentation for the rules.

    Args:
        bulkhead: a :class:`hullguard.Bulkhead` (or anything with its ``acquire``).
        cost_bucket: ``fn(cost) -> hashable``, the cost part of the partition (default:
            :func:`cost_bucket`, powers of two).
    """

    def __init__(
        self,
        bulkhead: Any,
        *,
        cost_bucket: Optional[Callable[[int], Hashable]] = None,
    ) -> None:
        if not callable(getattr(bulkhead, "acquire", None)):
            raise TypeError(
                f"bulkhead must be a hullguard.Bulkhead (with acquire()), not {type(bulkhead).__name__}"
            )
        if cost_bucket is not None and not callable(cost_bucket):
            raise TypeError(f"cost_bucket must be callable, not {type(cost_bucket).__name__}")
        self._bh = bulkhead
        self._bucket: Callable[[int], Hashable] = cost_bucket or globals()["cost_bucket"]
        self._flights: Dict[Tuple[Any, ...], _Flight] = {}
        self._hits = 0

    def __len__(self) -> int:
        return len(self._flights)

    @property
    def hits(self) -> int:
        """How many calls joined a flight another call had started (followers)."""
        return self._hits

    async def run(
        self,
        key: Key,
        fn: Callable[[], Awaitable[Any]],
        *,
        weight: int = 1,
        cost: int = 0,
        admission_class: Union[str, int, None] = None,
        observe: Optional[str] = None,
        tee: bool = False,
        get_usage: Optional[Callable[[Any], Optional[int]]] = None,
    ) -> Any:
        """Runs ``fn()`` (a no-argument async callable) once per partition in flight and returns
        its result (or raises its exception) to every waiter.

        Args:
            key: the caller's key (``str``, ``bytes`` or ``int``) naming the work.
            fn: the work: ``await fn()`` runs while the shared permit is held.
            weight, cost, admission_class, observe: the admission of the shared work (as
                ``bulkhead.acquire``; validated there); all part of the partition (cost by bucket).
            tee: give every waiter its own copy of a streaming (async-iterator) result.
            get_usage: ``get_usage(result)`` → the budget units the work used (or ``None``:
                unknown), e.g. ``lambda r: llm.usage_of(r).total``: the permit is released with
                that usage, the rest of ``cost`` refunded (the flight's starter's ``get_usage``
                is used; not called for a streaming result). One that raises still releases
                (the whole cost charged) and every waiter gets its error.

        Raises:
            BulkheadError: this call's own admission was refused (a follower whose leader was
                refused retries first).
            UnshareableResultError: the result is a stream, ``tee`` is false and another waiter
                got it.
            TypeError / ValueError: a bad argument (named).
            asyncio.CancelledError: this caller was cancelled (the shared work goes on while any
                other waiter remains).
        """
        if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
            raise TypeError(f"key must be a str, bytes or int, not {type(key).__name__}")
        if not callable(fn):
            raise TypeError(f"fn must be a no-argument async callable, not {type(fn).__name__}")
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise TypeError(f"weight must be an int, not {type(weight).__name__}")
        if admission_class is not None and (
            isinstance(admission_class, bool) or not isinstance(admission_class, (str, int))
        ):
            raise TypeError(
                f"admission_class must be a class name (str) or index (int), not {type(admission_class).__name__}"
            )
        if observe is not None and not isinstance(observe, str):
            raise TypeError(f"observe must be a str or None, not {type(observe).__name__}")
        if isinstance(cost, bool) or not isinstance(cost, int):
            raise TypeError(f"cost must be an int, not {type(cost).__name__}")
        if cost < 0:
            raise ValueError(f"cost must be >= 0, got {cost}")
        if not isinstance(tee, bool):
            raise TypeError(f"tee must be a bool, not {type(tee).__name__}")
        if get_usage is not None and not callable(get_usage):
            raise TypeError(f"get_usage must be callable, not {type(get_usage).__name__}")
        partition = (
            key,
            weight,
            admission_class,
            "off" if observe is None else observe,
            self._bucket(cost),
            # The bulkhead's own observe mode when the binding exposes it (a switch between a
            # leader's admission and a follower's arrival then starts a new flight).
            getattr(self._bh, "observe", None),
        )
        me = object()
        # Each round, the flight's leader leaves (refused) or every waiter gets the result: a
        # waiter takes part in at most one round per waiter that was ahead of it.
        while True:
            flight = self._flights.get(partition)
            if flight is None:
                flight = _Flight(partition, me)
                # The shared work runs outside every budget (another caller's deadline must not
                # cut it short for the rest); each caller's own budget bounds its wait, below.
                ctx = contextvars.copy_context()
                ctx.run(_deadline._DEADLINE.set, None)
                flight.task = ctx.run(
                    asyncio.ensure_future,
                    self._work(flight, fn, weight, cost, admission_class, observe, get_usage),
                )
                flight.task.add_done_callback(_retrieve)
                self._flights[partition] = flight
            else:
                self._hits += 1
            flight.waiters.append(me)
            left = _deadline.remaining()
            try:
                if left is None:
                    result = await asyncio.shield(flight.task)
                else:
                    result = await asyncio.wait_for(asyncio.shield(flight.task), left)
            except BaseException as e:
                self._leave(flight, me)
                if flight.task.done() and not flight.task.cancelled():
                    r = flight.task.result() if flight.task.exception() is None else None
                    if isinstance(r, _Stream):
                        r.forfeit()  # cancelled after the stream arrived: not claimed
                if isinstance(e, asyncio.TimeoutError) and not flight.task.done():
                    # This caller's budget ran out while it waited (the work goes on for the
                    # others): the call timeout a guarded call gets at its deadline.
                    raise CallTimeoutError(
                        "the deadline passed while waiting for the shared work",
                        reason="call_timeout",
                    ) from None
                raise
            self._leave(flight, me)
            if isinstance(result, _Refused):
                if flight.leader is me:  # the caller that started it; the others retry
                    raise result.error
                continue
            if isinstance(result, _Stream):
                return result.claim(key, tee)
            return result

    def _leave(self, flight: _Flight, me: object) -> None:
        try:
            flight.waiters.remove(me)
        except ValueError:  # pragma: no cover - each waiter leaves once
            return
        if flight.waiters or flight.task.done():
            return
        # The last waiter left before the result: the work is cancelled (its permit released
        # once it has unwound) and the partition is free for a new flight.
        if self._flights.get(flight.partition) is flight:
            del self._flights[flight.partition]
        # Kept alive until it has unwound (asyncio keeps only weak references to tasks).
        _unwinding.add(flight.task)
        flight.task.add_done_callback(_unwinding.discard)
        flight.task.cancel()

    async def _work(
        self,
        flight: _Flight,
        fn: Callable[[], Awaitable[Any]],
        weight: int,
        cost: int,
        admission_class: Union[str, int, None],
        observe: Optional[str],
        get_usage: Optional[Callable[[Any], Optional[int]]],
    ) -> Any:
        try:
            try:
                permit = await self._bh.acquire(weight, **_admission(cost, admission_class, observe))
            except BulkheadError as e:
                return _Refused(e)
            try:
                result = await fn()
            except BaseException:
                # Classified by the permit: CancelledError → "ignored", else "failure".
                with permit:
                    raise
            if _is_stream(result):
                stream = _Stream(result, permit, len(flight.waiters))
                stream._abandon_if_unused()  # every waiter left already: close and release
                return stream
            _settle(permit, result, get_usage)
            return result
        finally:
            if self._flights.get(flight.partition) is flight:
                del self._flights[flight.partition]


# Shared work whose last waiter left, still unwinding.
_unwinding: Set["asyncio.Future[Any]"] = set()


def _retrieve(task: "asyncio.Future[Any]") -> None:
    """Marks the shared work's exception retrieved: when every waiter has left, nobody else
    reads it, and asyncio must not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _settle(permit: Any, result: Any, get_usage: Optional[Callable[[Any], Optional[int]]]) -> None:
    """Releases ``permit`` ("success") with ``get_usage(result)`` units when known. Released
    whatever happens: a ``get_usage`` that raises, or a usage the binding refuses, still
    releases (the whole cost charged), then raises."""
    try:
        used = get_usage(result) if get_usage is not None else None
        if used is None:
            permit.release("success")
        else:
            permit.release("success", usage=used)
    except BaseException:
        if not permit.released:
            permit.release("success")
        raise


def _admission(cost: int, admission_class: Any, observe: Any) -> Dict[str, Any]:
    """The per-call admission keywords of ``acquire``, only those that differ from the default
    (so a bulkhead without them is called as before)."""
    kw: Dict[str, Any] = {}
    if cost:
        kw["cost"] = cost
    if admission_class is not None:
        kw["admission_class"] = admission_class
    if observe is not None:
        kw["observe"] = observe
    return kw


async def _aclose(*streams: Any) -> None:
    """Closes each stream once: ``aclose()`` (async generators), else ``close()`` (the OpenAI
    and Anthropic SDK streams), awaited when it returns an awaitable. A close that raises is
    ignored: the stream is being abandoned, and the caller's own outcome matters more."""
    seen: List[int] = []
    for s in streams:
        if id(s) in seen:
            continue
        seen.append(id(s))
        close = getattr(s, "aclose", None) or getattr(s, "close", None)
        if close is None:
            continue
        try:
            r = close()
            if inspect.isawaitable(r):
                await r
        except Exception:
            pass


def _is_stream(value: Any) -> bool:
    """A single-consumer async stream: has ``__anext__`` (async generators, async iterators)."""
    return callable(getattr(type(value), "__anext__", None))


class _Stream:
    """A streaming result held under its permit until the stream ends, handed out as branches.

    The source is read by one shared task per item (``pending``), which every reading branch
    awaits shielded: a consumer cancelled mid-read never breaks the stream for the others.
    Each item stays in ``buf`` until every open branch has read it and every waiter of the
    flight has claimed its branch or left (``expected``). The permit is released once: the
    source ended (``"success"``), raised (``"failure"``), or every consumer left before the end
    (``"ignored"``; the source is closed).
    """

    def __init__(self, source: Any, permit: Any, expected: int) -> None:
        self.source = source
        self.permit = permit
        self.expected = expected  # waiters of the flight that have not claimed or left yet
        self.buf: Deque[Any] = collections.deque()
        self.base = 0  # the index of buf[0]
        # Each open branch's read position, by the branch's token (not the branch itself: a
        # branch dropped unread must be garbage-collectable to let go of the stream).
        self.cursors: Dict[object, int] = {}
        self.handed = False
        self.pending: "Optional[asyncio.Future[None]]" = None
        self.end: Optional[BaseException] = None  # StopAsyncIteration or the source's error
        self.settled = False
        self.loop = asyncio.get_running_loop()

    def claim(self, key: Any, tee: bool) -> "_Branch":
        self.expected -= 1
        if self.handed and not tee:
            self._abandon_if_unused()
            raise UnshareableResultError(key)
        self.handed = True
        return _Branch(self)

    def forfeit(self) -> None:
        """A waiter of the flight left (cancelled) without claiming its branch."""
        self.expected -= 1
        self._abandon_if_unused()

    def _open(self) -> bool:
        return self.expected > 0 or bool(self.cursors)

    def _abandon_if_unused(self) -> None:
        if self.settled or self._open():
            return
        self.settle("ignored")
        if self.pending is not None:
            self.pending.cancel()
        # Closed on the stream's loop (this may run in a finalizer, outside any loop).
        loop, source = self.loop, self.source
        if not loop.is_closed():
            loop.call_soon_threadsafe(lambda: loop.create_task(_aclose(source)))

    def settle(self, outcome: str) -> None:
        if not self.settled:
            self.settled = True
            self.permit.release(outcome)

    async def _advance(self) -> None:
        try:
            item = await self.source.__anext__()
        except StopAsyncIteration as e:
            self.end = e
            self.settle("success")
        except asyncio.CancelledError:
            self.end = StopAsyncIteration()
            self.settle("ignored")
            raise
        except BaseException as e:
            self.end = e
            self.settle("failure")
        else:
            self.buf.append(item)
        finally:
            self.pending = None

    async def pull(self, index: int) -> Any:
        while True:
            if index < self.base + len(self.buf):
                return self.buf[index - self.base]
            if self.end is not None:
                raise self.end
            if self.pending is None:
                self.pending = asyncio.ensure_future(self._advance())
            await asyncio.shield(self.pending)

    def trim(self) -> None:
        """Drops the items every open branch has read (none while a waiter may still claim)."""
        if self.expected > 0:
            return
        low = min(self.cursors.values()) if self.cursors else self.base + len(self.buf)
        while self.buf and self.base < low:
            self.buf.popleft()
            self.base += 1

    async def closed(self) -> None:
        self.trim()
        if self.settled or self._open():
            return
        # Every consumer left before the end: close the source, then release ("ignored").
        self.settled = True
        try:
            if self.pending is not None:
                self.pending.cancel()
            await _aclose(self.source)
        finally:
            self.permit.release("ignored")


class _Branch:
    """One waiter's async iterator over a shared stream (``aclose()`` leaves it; so does being
    garbage-collected)."""

    def __init__(self, stream: _Stream) -> None:
        self._s = stream
        self._token = object()
        stream.cursors[self._token] = stream.base
        self.closed = False

    def __aiter__(self) -> "_Branch":
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise StopAsyncIteration
        try:
            item = await self._s.pull(self._s.cursors[self._token])
        except BaseException:
            if self._s.end is not None:
                await self.aclose()
            raise
        if not self.closed:
            self._s.cursors[self._token] += 1
            self._s.trim()
        return item

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._s.cursors.pop(self._token, None)
        await self._s.closed()

    def __del__(self) -> None:
        if not self.closed:
            self.closed = True
            self._s.cursors.pop(self._token, None)
            self._s.trim()
            self._s._abandon_if_unused()
