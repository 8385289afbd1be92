"""Server-side admission: a pure ASGI middleware that admits each incoming HTTP request through a
bulkhead (docs/design.md §10.1, issue 18). Works under any ASGI server and framework — uvicorn,
Starlette, FastAPI, a plain ASGI callable::

    import hullguard
    from hullguard.asgi import AdmissionMiddleware

    bh = hullguard.Bulkhead(
        max_concurrent=64, max_queue=256, queue_timeout=0.5,
        classes=[{"name": "batch"}, {"name": "critical", "priority": 10}],
        critical_priority=10,            # classes of priority >= 10 are never shed
        shed_cpu_threshold=0.85,         # shed non-critical work above 85 % of one core
        shed_lag_threshold=0.05,         # ... or above 50 ms of event-loop lag
    )
    app = AdmissionMiddleware(app, bulkhead=bh, classify={"/checkout": "critical"})
    # Starlette / FastAPI: app.add_middleware(AdmissionMiddleware, bulkhead=bh, classify=...)

Per HTTP request (``scope["type"] == "http"``):

1. **Class.** ``classify`` names the request's admission class:

   * a ``str``: a header name; the header's value is the class name (``classify="x-priority"``);
   * a mapping of route prefix → class name or index (``{"/api/checkout": "critical"}``): the
     longest prefix that matches the path at a ``/`` boundary wins (``"/api"`` matches
     ``/api`` and ``/api/x``, not ``/apix``);
   * a callable ``classify(scope) -> class name | class index | None``;
   * ``None`` (default): every request is the default class.

   A class the bulkhead does not have (an unknown header value, ``None``, a callable's unknown
   answer) is ``default_class`` (default: class 0, the bulkhead's own default).
2. **Deadline.** With ``deadline_header`` (default ``"grpc-timeout"``; ``None`` turns it off) a
   request carrying that header in the ``grpc-timeout`` format (1 to 8 digits and a unit ``H``,
   ``M``, ``S``, ``m``, ``u``, ``n``: ``"1500m"`` is 1.5 s) gets that budget: the admission and
   the whole app run inside ``hullguard.deadline(seconds)``, so a queued request waits at most
   the budget, a budget already spent (``"0n"``) is refused ``timeout`` at once, and everything
   the app calls through hullguard (``hullguard.httpx`` included, which sends the time left on)
   sees the time left. A malformed value is ignored (no budget), as gRPC ignores it.
3. **Admission.** ``bulkhead.admit(timeout=queue_timeout, admission_class=...)``: the decision
   — admit, queue, refuse, shed under overload — is the core's; the middleware only marshals.
   A client that disconnects while its request is queued gives its queue place up at once (the
   request never reaches the app): while queued, the middleware reads the request ahead to see
   the disconnect, keeping up to 64 KiB of body for the app (a larger body stops the watch; that
   request keeps its place until admitted or refused).
4. **Refusal.** The response is ``detail["http_status"]`` (the core's one table for every edge
   adapter: 429 for a rate limit, 503 for everything else — a full bulkhead, an overload, a
   queue timeout or a spent deadline, a closed bulkhead) with a JSON body
   ``{"reason", "bound", "code", "class", "retry_after"?}`` and ``Retry-After`` (whole seconds,
   rounded up) **only** when the refusal carries ``retry_after`` — the one honest estimate (a
   rate limit's time to conform); an overload or a full queue says nothing it cannot know.
5. **Release.** The permit is released exactly once: when the last body chunk of the response
   is sent, or when the app returns, raises or is cancelled without finishing one — so a client
   that disconnects never strands a permit (the app is told through ``receive()`` as usual;
   Starlette cancels a streaming response then). Work the app does after the response is
   complete (Starlette background tasks) is not counted. For a bulkhead with ``resilience``
   the outcome is ``outcome_of_status(status)`` (5xx ``failure``, 429 ``overload``), an
   exception ``failure``, a cancellation ``ignored``.

Lifespan and websocket scopes pass through untouched (the lifespan messages are only watched).

**Overload probes.** Two probes feed the bulkhead's overload signals with
``bulkhead.report_load(...)``; whether a signal sheds is the core's decision
(``shed_lag_threshold`` / ``shed_cpu_threshold`` of the bulkhead; without a threshold a
report is stored and changes nothing):

* :class:`EventLoopLagProbe` — sleeps ``interval`` on the serving loop and reports the overshoot
  as ``event_loop_lag`` (seconds);
* :class:`ProcessCpuProbe` — ``time.process_time()`` over wall time every ``interval``, reported
  as ``cpu`` (a fraction of one core: 1.0 is one core busy; above 1 with several threads).

They start on the lifespan's ``startup`` (or on the first request when the server sends no
lifespan) and stop on its ``shutdown`` (or :meth:`AdmissionMiddleware.aclose`), reporting 0 as
they stop so a stopped probe leaves no stale overload behind. ``lag_probe`` / ``cpu_probe``:
``True`` (default: the probe with its default interval), a number (the interval in seconds),
``False`` / ``None`` (off) or any object with ``async def run(self, report)`` that calls
``report(event_loop_lag=...)`` / ``report(cpu=...)`` until cancelled (tests pass scripted
probes, or call ``bulkhead.report_load`` themselves).

Thread-safety: one middleware serves one event loop (its probes run there); the bulkhead itself
may be shared by any number of loops and threads.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import deque
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Tuple,
    Union,
)

from . import _deadline
from ._native import Bulkhead, _check_timeout, _parse_grpc_timeout, outcome_of_status

__all__ = [
    "AdmissionMiddleware",
    "EventLoopLagProbe",
    "ProcessCpuProbe",
    "parse_grpc_timeout",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A class as the bulkhead takes it: a name, or an index into its table.
ClassRef = Union[str, int]
Classifier = Union[str, Mapping[str, ClassRef], Callable[[Scope], Optional[ClassRef]], None]
# report(event_loop_lag=seconds) / report(cpu=fraction): the bulkhead's report_load.
Report = Callable[..., Any]

# While a request is queued the middleware reads its body ahead (to see a disconnect) up to
# this many bytes, kept for the app; past it, it stops watching (the body stays unread).
_READ_AHEAD_LIMIT = 64 * 1024

# An HTTP field name (RFC 9110 §5.1: a token).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def parse_grpc_timeout(value: Union[str, bytes]) -> Optional[float]:
    """A ``grpc-timeout`` header value as seconds (``"1500m"`` → 1.5, ``"2S"`` → 2.0, ``"0n"``
    → 0.0), or ``None`` for a malformed value (not 1–8 ASCII digits followed by one of ``H M S
    m u n``): no budget, as gRPC servers treat it. The core's one parser
    (``hullguard_core::deadline::parse_grpc_timeout``, also Node's and the tower layer's), the
    inverse of :func:`hullguard.httpx.grpc_timeout` (which rounds down, so a round trip never
    extends a deadline)."""
    if isinstance(value, str):
        try:
            value = value.encode("ascii")
        except UnicodeEncodeError:
            return None
    return _parse_grpc_timeout(value)


# ---------------------------------------------------------------------------------------------
# Overload probes.


class EventLoopLagProbe:
    """Reports the serving event loop's lag: every ``interval`` seconds it sleeps ``interval``
    and reports how much later than asked it woke up, ``report(event_loop_lag=seconds)`` (``>=
    0``). A loop blocked by CPU-bound work or a long synchronous call wakes late: the lag is
    the delay every other request on the loop suffers too.

    ``clock`` (seconds, monotonic; default ``time.monotonic``, the loop's own scale) and
    ``sleep`` (default ``asyncio.sleep``) are injectable for tests. Runs until cancelled.
    """

    def __init__(
        self,
        interval: float = 0.05,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.interval = _check_interval(interval)
        self._clock = clock
        self._sleep = sleep
        self.last: Optional[float] = None
        """The last lag reported (seconds), ``None`` before the first."""

    async def run(self, report: Report) -> None:
        while True:
            start = self._clock()
            await self._sleep(self.interval)
            lag = max(0.0, self._clock() - start - self.interval)
            self.last = lag
            report(event_loop_lag=lag)

    def __repr__(self) -> str:
        return f"EventLoopLagProbe(interval={self.interval!r})"


class ProcessCpuProbe:
    """Reports the process's CPU use: every ``interval`` seconds, the CPU time the process
    used (``time.process_time()``: user + system, every thread) over the wall time that passed,
    ``report(cpu=fraction)`` — 1.0 is one core fully busy (above 1.0 with several busy threads).

    ``process_time`` and ``clock`` (seconds) and ``sleep`` are injectable for tests. Runs until
    cancelled.
    """

    def __init__(
        self,
        interval: float = 0.5,
        *,
        process_time: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.interval = _check_interval(interval)
        self._process_time = process_time
        self._clock = clock
        self._sleep = sleep
        self.last: Optional[float] = None
        """The last CPU fraction reported, ``None`` before the first."""

    async def run(self, report: Report) -> None:
        cpu0, wall0 = self._process_time(), self._clock()
        while True:
            await self._sleep(self.interval)
            cpu1, wall1 = self._process_time(), self._clock()
            wall = wall1 - wall0
            if wall > 0:
                self.last = max(0.0, cpu1 - cpu0) / wall
                report(cpu=self.last)
            cpu0, wall0 = cpu1, wall1

    def __repr__(self) -> str:
        return f"ProcessCpuProbe(interval={self.interval!r})"


def _check_interval(interval: Any) -> float:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise TypeError(f"interval must be a number of seconds, not {type(interval).__name__}")
    if not (0 < interval < math.inf):
        raise ValueError(f"interval must be a finite number of seconds > 0, got {interval!r}")
    return float(interval)


def _probe(value: Any, name: str, default: Callable[[float], Any], interval: float) -> Any:
    """``lag_probe=`` / ``cpu_probe=`` as a probe object or ``None``."""
    if value is None or value is False:
        return None
    if value is True:
        return default(interval)
    if isinstance(value, (int, float)):
        return default(value)
    if not callable(getattr(value, "run", None)):
        raise TypeError(
            f"{name} must be True, False, None, an interval in seconds or an object with "
            f"`async def run(self, report)`, not {type(value).__name__}"
        )
    return value


# ---------------------------------------------------------------------------------------------
# Classification.


def _prefix_matches(path: str, prefix: str) -> bool:
    if not path.startswith(prefix):
        return False
    return len(path) == len(prefix) or prefix.endswith("/") or path[len(prefix)] == "/"


class _Classes:
    """The bulkhead's class table seen from the middleware: name/index → the index to pass."""

    def __init__(self, bulkhead: Bulkhead, default: Optional[ClassRef]) -> None:
        self.names: List[Optional[str]] = list(bulkhead.classes)
        self.by_name: Dict[str, int] = {n: i for i, n in enumerate(self.names) if n is not None}
        self.default: Optional[int] = None
        if default is not None:
            d = self.resolve(default)
            if d is None:
                raise ValueError(f"default_class {default!r} is not a class of the bulkhead "
                                 f"(its classes: {self.names})")
            self.default = d

    def resolve(self, ref: Any) -> Optional[int]:
        """The index of ``ref`` (a name or an index of the table), ``None`` if it is none."""
        if isinstance(ref, bool):
            return None
        if isinstance(ref, int):
            return ref if 0 <= ref < len(self.names) else None
        if isinstance(ref, str):
            return self.by_name.get(ref)
        return None

    def name(self, index: Optional[int]) -> Optional[str]:
        i = 0 if index is None else index
        return self.names[i] if i < len(self.names) else None


def _classifier(
    classify: Classifier, classes: _Classes
) -> Callable[[Scope], Optional[int]]:
    """``classify=`` as a function scope → class index (``None``: the default)."""
    default = classes.default
    if classify is None:
        return lambda scope: default
    if isinstance(classify, str):
        if not _TOKEN.fullmatch(classify):
            raise ValueError(f"classify: {classify!r} is not a header name")
        header = classify.lower().encode("latin-1")

        def by_header(scope: Scope) -> Optional[int]:
            for k, v in scope.get("headers") or ():
                if k == header:
                    i = classes.resolve(v.decode("latin-1").strip())
                    return default if i is None else i
            return default

        return by_header
    if isinstance(classify, Mapping):
        routes: List[Tuple[str, int]] = []
        for prefix, ref in classify.items():
            if not isinstance(prefix, str) or not prefix.startswith("/"):
                raise ValueError(f"classify: a route prefix must be a str starting with '/', "
                                 f"got {prefix!r}")
            i = classes.resolve(ref)
            if i is None:
                raise ValueError(f"classify: {ref!r} (for {prefix!r}) is not a class of the "
                                 f"bulkhead (its classes: {classes.names})")
            routes.append((prefix, i))
        routes.sort(key=lambda r: -len(r[0]))  # the longest prefix first

        def by_route(scope: Scope) -> Optional[int]:
            path = scope.get("path") or "/"
            for prefix, i in routes:
                if _prefix_matches(path, prefix):
                    return i
            return default

        return by_route
    if callable(classify):
        fn = classify

        def by_callable(scope: Scope) -> Optional[int]:
            i = classes.resolve(fn(scope))
            return default if i is None else i

        return by_callable
    raise TypeError(
        "classify must be a header name (str), a mapping of route prefix -> class, a callable "
        f"(scope) -> class or None, not {type(classify).__name__}"
    )


# ---------------------------------------------------------------------------------------------
# The middleware.


class _ReadAhead:
    """The request's ``receive`` with the messages read while the request was queued (to see a
    disconnect) handed to the app first, in order. A read still in flight when the request is
    admitted is handed over too, never cancelled (an ASGI ``receive`` need not be cancel-safe).
    """

    __slots__ = ("_receive", "_buffer", "_pending", "buffered")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._buffer: Deque[Message] = deque()
        self._pending: Optional["asyncio.Future[Message]"] = None
        self.buffered = 0
        """Body bytes read ahead and not yet handed to the app."""

    def start(self) -> "asyncio.Future[Message]":
        self._pending = asyncio.ensure_future(self._receive())
        return self._pending

    def take(self) -> Message:
        """The finished read (buffered for the app)."""
        assert self._pending is not None
        msg = self._pending.result()
        self._pending = None
        self._buffer.append(msg)
        self.buffered += len(msg.get("body", b""))
        return msg

    async def __call__(self) -> Message:
        if self._buffer:
            msg = self._buffer.popleft()
            self.buffered -= len(msg.get("body", b""))
            return msg
        pending = self._pending
        if pending is not None:
            # A cancelled caller leaves the read for its next call.
            msg = await asyncio.shield(pending)
            self._pending = None
            return msg
        return await self._receive()

    def close(self) -> None:
        """At the end of the request: a read still in flight is cancelled (nobody will read
        it; the request is over)."""
        p = self._pending
        self._pending = None
        if p is not None:
            if p.done():
                if not p.cancelled():
                    p.exception()  # retrieved: never "exception was never retrieved"
            else:
                p.cancel()


class _Response:
    """The app's ``send`` wrapped: sees the status and the end of the response — the last body
    chunk, or the last trailers of a response that announced trailers, or a ``pathsend`` — and
    releases the permit once that message has been sent."""

    __slots__ = ("_send", "_permit", "status", "trailers", "done")

    def __init__(self, send: Send, permit: Any) -> None:
        self._send = send
        self._permit = permit
        self.status: Optional[int] = None
        self.trailers = False
        self.done = False

    async def __call__(self, message: Message) -> None:
        t = message.get("type")
        if t == "http.response.start":
            self.status = int(message.get("status", 200))
            self.trailers = bool(message.get("trailers", False))
        await self._send(message)
        if t == "http.response.body":
            last = not message.get("more_body", False) and not self.trailers
        elif t == "http.response.trailers":
            last = not message.get("more_trailers", False)
        else:
            last = t == "http.response.pathsend"
        if last and not self.done:
            self.done = True
            self._permit._finish(outcome_of_status(self.status or 200))


async def _give_up(admit: "asyncio.Future[Any]") -> None:
    """Cancels a queued admission; one granted meanwhile is released unused (``ignored``)."""
    if not admit.done():
        admit.cancel()
        await asyncio.gather(admit, return_exceptions=True)
    if admit.cancelled() or admit.exception() is not None:
        return
    a = admit.result()
    if a.ok:
        a.permit._finish("ignored")


class AdmissionMiddleware:
    """An ASGI middleware admitting each HTTP request through ``bulkhead`` (see the module docs).

    Args:
        app: the ASGI app behind it.
        bulkhead: the :class:`hullguard.Bulkhead` that admits (its ``classes``, priorities,
            ``critical_priority`` and ``shed_*_threshold`` options decide the shedding).
        classify: a header name, a mapping of route prefix → class, a callable ``(scope) ->
            class name | index | None``, or ``None`` (every request the default class).
        default_class: the class of a request ``classify`` does not place (a name or an index;
            default: class 0).
        deadline_header: the header whose ``grpc-timeout``-format value becomes the request's
            budget (default ``"grpc-timeout"``; ``None``: off).
        lag_probe, cpu_probe: ``True`` (the default probe), an interval in seconds, ``False`` /
            ``None`` (off), or a probe object (``async def run(self, report)``). Default: both
            on, the lag probe every 50 ms and the CPU probe every 0.5 s.
        queue_timeout: seconds a request may wait in the bulkhead's queue (``None``: the
            bulkhead's ``queue_timeout``; ``0``: never queue).

    Raises ``TypeError`` / ``ValueError`` naming the argument at construction (an unknown class
    in a route mapping, a bad header name, a bad timeout).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        bulkhead: Bulkhead,
        classify: Classifier = None,
        default_class: Optional[ClassRef] = None,
        deadline_header: Optional[str] = "grpc-timeout",
        lag_probe: Any = True,
        cpu_probe: Any = True,
        queue_timeout: Optional[float] = None,
    ) -> None:
        if not isinstance(bulkhead, Bulkhead):
            raise TypeError(f"bulkhead must be a hullguard.Bulkhead, not {type(bulkhead).__name__}")
        if deadline_header is not None:
            if not isinstance(deadline_header, str):
                raise TypeError("deadline_header must be a header name (str) or None, not "
                                f"{type(deadline_header).__name__}")
            if not _TOKEN.fullmatch(deadline_header):
                raise ValueError(f"deadline_header {deadline_header!r} is not a header name")
        self.app = app
        self.bulkhead = bulkhead
        self._classes = _Classes(bulkhead, default_class)
        self._classify = _classifier(classify, self._classes)
        self._deadline_header = (
            deadline_header.lower().encode("latin-1") if deadline_header is not None else None
        )
        self._timeout = _check_timeout(queue_timeout)
        self.lag_probe = _probe(lag_probe, "lag_probe", EventLoopLagProbe, 0.05)
        self.cpu_probe = _probe(cpu_probe, "cpu_probe", ProcessCpuProbe, 0.5)
        self._tasks: List["asyncio.Task[None]"] = []
        self._probe_loop: Optional[asyncio.AbstractEventLoop] = None
        # Set by aclose(): requests do not start the probes again.
        self._closed = False

    # -- probes --------------------------------------------------------------------------
    @property
    def probes_running(self) -> bool:
        """Whether the probes run (started by the lifespan or the first request)."""
        return any(not t.done() for t in self._tasks)

    def _report(self, **signal: float) -> None:
        self.bulkhead.report_load(**signal)

    def start_probes(self) -> None:
        """Starts the probes on the running loop (what the lifespan's startup calls, and the
        first request on a loop when the server sends no lifespan). Idempotent on one loop;
        on another loop (a server restarted in-process) the probes move to it. Undoes
        :meth:`aclose`."""
        self._closed = False
        self._start_on(asyncio.get_running_loop())

    def _start_on(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._probe_loop is loop:
            return
        self._cancel_tasks(loop)
        self._probe_loop = loop
        self._tasks = []
        for p, signal in ((self.lag_probe, "event_loop_lag"), (self.cpu_probe, "cpu")):
            if p is None:
                continue
            t = loop.create_task(p.run(self._report), name=f"hullguard.asgi {p!r}")
            t.add_done_callback(self._ended(signal))
            self._tasks.append(t)

    def _ended(self, signal: str) -> Callable[["asyncio.Task[None]"], None]:
        """A probe task's done callback: its signal reads 0 (no stale overload outlives the
        probe, however it ended), and a probe that raised is reported to the loop's exception
        handler (it is not restarted on this loop)."""

        def done(t: "asyncio.Task[None]") -> None:
            try:
                self._report(**{signal: 0.0})
            finally:
                if not t.cancelled() and t.exception() is not None:
                    t.get_loop().call_exception_handler({
                        "message": f"hullguard.asgi: the {signal} probe failed; its signal "
                                   "reads 0 until the probes start again",
                        "exception": t.exception(),
                        "task": t,
                    })

        return done

    def _cancel_tasks(self, loop: Optional[asyncio.AbstractEventLoop]) -> List["asyncio.Task[None]"]:
        """Cancels the probe tasks (those of `loop` directly; another live loop's through it; a
        closed loop's are gone already). Returns the ones of `loop` to await."""
        tasks, self._tasks = self._tasks, []
        mine = []
        for t in tasks:
            if t.done():
                continue
            other = t.get_loop()
            if other is loop:
                t.cancel()
                mine.append(t)
            elif not other.is_closed():
                try:
                    other.call_soon_threadsafe(t.cancel)
                except RuntimeError:  # closed meanwhile
                    pass
        return mine

    async def aclose(self) -> None:
        """Stops the probes (what the lifespan's shutdown calls) and reports 0 for their
        signals, so no stale overload outlives them; requests no longer start them (until
        :meth:`start_probes`, or the next lifespan startup). Idempotent."""
        self._closed = True
        self._probe_loop = None
        try:
            mine = self._cancel_tasks(asyncio.get_running_loop())
            await asyncio.gather(*mine, return_exceptions=True)
        finally:
            if self.lag_probe is not None:
                self._report(event_loop_lag=0.0)
            if self.cpu_probe is not None:
                self._report(cpu=0.0)

    # -- ASGI ----------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched() -> Message:
            msg = await receive()
            t = msg.get("type")
            if t == "lifespan.startup":
                self.start_probes()
            elif t == "lifespan.shutdown":
                await self.aclose()
            return msg

        await self.app(scope, watched, send)

    def _budget(self, scope: Scope) -> Optional[float]:
        h = self._deadline_header
        if h is None:
            return None
        for k, v in scope.get("headers") or ():
            if k == h:
                return parse_grpc_timeout(v)
        return None

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._closed and self._probe_loop is not asyncio.get_running_loop():
            # No lifespan: the first request on a loop starts them (or moves them to it).
            self._start_on(asyncio.get_running_loop())
        klass = self._classify(scope)
        budget = self._budget(scope)
        if budget is None:
            await self._admit_and_run(scope, receive, send, klass)
            return
        with _deadline.deadline(budget):
            await self._admit_and_run(scope, receive, send, klass)

    async def _admit_and_run(
        self, scope: Scope, receive: Receive, send: Send, klass: Optional[int]
    ) -> None:
        bh = self.bulkhead
        reader = _ReadAhead(receive)
        try:
            if bh.would_admit(timeout=self._timeout, admission_class=klass).decision == "would_queue":
                admission = await self._queue(reader, klass)
                if admission is None:
                    return  # the client left while queued: its place is given up
            else:
                admission = await bh.admit(timeout=self._timeout, admission_class=klass)
            if not admission.ok:
                await self._refuse(send, admission.detail or {}, admission.error, klass)
                return
            await self._run(scope, reader, send, admission.permit)
        finally:
            reader.close()

    async def _queue(self, reader: _ReadAhead, klass: Optional[int]) -> Any:
        """Waits for the admission while watching ``receive`` for a disconnect; ``None`` if the
        client left first (the queued admission is cancelled: its place freed, nothing held).
        The request's body chunks read meanwhile are kept for the app; once the body is read,
        ``receive()`` blocks until the client disconnects (ASGI), which is what is watched."""
        admit: "asyncio.Future[Any]" = asyncio.ensure_future(
            self.bulkhead.admit(timeout=self._timeout, admission_class=klass)
        )
        try:
            while reader.buffered < _READ_AHEAD_LIMIT:
                read = reader.start()
                await asyncio.wait((admit, read), return_when=asyncio.FIRST_COMPLETED)
                if admit.done():
                    return admit.result()  # a read in flight is handed to the app
                if reader.take().get("type") == "http.disconnect":
                    await _give_up(admit)
                    return None
            # A large body: stop reading ahead (it would all wait in memory); this request
            # keeps its place until it is admitted or refused.
            return await admit
        except BaseException:
            await _give_up(admit)
            raise

    async def _run(self, scope: Scope, receive: Receive, send: Send, permit: Any) -> None:
        response = _Response(send, permit)
        outcome: Optional[str] = None
        try:
            await self.app(scope, receive, response)
        except asyncio.CancelledError:
            outcome = "ignored"
            raise
        except BaseException:
            outcome = "failure"
            raise
        finally:
            if not response.done:
                response.done = True
                if outcome is None:
                    # Returned without finishing a response: the server answers 500 (or the
                    # client went away mid-stream).
                    outcome = outcome_of_status(response.status) if response.status else "failure"
                permit._finish(outcome)

    async def _refuse(
        self, send: Send, detail: Dict[str, Any], error: Any, klass: Optional[int]
    ) -> None:
        status = int(detail.get("http_status") or 503)
        body: Dict[str, Any] = {
            "reason": detail.get("reason", getattr(error, "reason", None)),
            "bound": detail.get("bound"),
            "code": getattr(error, "code", None),
            "class": self._classes.name(klass),
        }
        headers = [(b"content-type", b"application/json")]
        retry_after = detail.get("retry_after")
        if retry_after is not None:
            body["retry_after"] = retry_after
            headers.append((b"retry-after", str(max(0, math.ceil(retry_after))).encode()))
        payload = json.dumps(body).encode()
        headers.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

