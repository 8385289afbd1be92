"""httpx integration: one bulkhead per origin around any httpx transport.

Isolation for an existing client in one line::

    import httpx, hullguard
    from hullguard.httpx import BulkheadTransport, SyncBulkheadTransport

    client = httpx.AsyncClient(transport=BulkheadTransport(registry=hullguard.Registry(
        max_concurrent=6, max_queue=100, queue_timeout=1.0,
        overrides={"https://slow.example.com:443": {"max_concurrent": 2, "max_queue": 4}},
    )))
    sync_client = httpx.Client(transport=SyncBulkheadTransport())

Two classes, because httpx keeps its async and sync transports apart:

* :class:`BulkheadTransport` (``httpx.AsyncBaseTransport``) for ``httpx.AsyncClient``; wraps
  ``httpx.AsyncHTTPTransport()`` unless given another async transport;
* :class:`SyncBulkheadTransport` (``httpx.BaseTransport``) for ``httpx.Client``; wraps
  ``httpx.HTTPTransport()`` unless given another sync transport (blocks the calling thread
  while queued, with the GIL released).

Each request is admitted by the bulkhead of its canonical origin key,
``hullguard.origin_key(str(request.url))`` (``scheme://host:port``, the same key as every other
hullguard layer and as ``Registry(overrides=...)``). Per request:

1. the permit is acquired *before* the request reaches the inner transport, so a request the
   bulkhead rejects never takes a slot of the connection pool;
2. a rejection raises the hullguard exception unchanged (``BulkheadFullError``,
   ``BulkheadQueueTimeoutError``, ``BulkheadClosedError``, ``CircuitOpenError``; never an
   ``httpx`` error): it is local overload, not a network failure;
3. the permit is held until the response is closed: for a streamed response
   (``client.stream(...)``, ``send(..., stream=True)``) that is when its body is closed or fully
   consumed, not when the headers arrive. The inner response stream is closed first, so the
   connection is back in the pool before the permit is released. A response whose body the
   inner transport already holds in memory (``httpx.ByteStream``, e.g. from
   ``httpx.MockTransport``) releases the permit at once;
4. a transport error or a cancellation while sending releases the permit and propagates.

Outcomes (docs/design.md §6.2, for a registry built with ``resilience={...}``): each request is one
guarded call. A transport error (an exception from the inner transport, or while reading the
body) and an HTTP 5xx response are ``failure``; HTTP 429 is ``overload`` (a failure for the
adaptive limit, a success for the breaker); any other response is ``success``; a cancellation
is ``ignored``. The outcome is recorded when the permit is released, i.e. when the response
body is closed. An open breaker raises :class:`hullguard.CircuitOpenError` before the request
is sent.

Redirects are separate requests: each hop is admitted by the bulkhead of its own origin.

Deadlines (docs/design.md §5.9): a request sent inside ``hullguard.deadline(seconds)`` (or
``deadline_at``) is admitted by that deadline — one that has passed is refused
:class:`hullguard.BulkheadQueueTimeoutError` (reason ``timeout``) before anything is sent, and a
queued one waits at most until it. Once admitted, the time left becomes the request's timeout:
each of httpx's ``connect`` / ``read`` / ``write`` / ``pool`` timeouts (the ``"timeout"`` request
extension) is lowered to it, never raised. With ``deadline_header=`` (off by default) the time
left also goes downstream in that header in the ``grpc-timeout`` format (:func:`grpc_timeout`),
e.g. ``deadline_header="grpc-timeout"``; the header replaces one the request carries already.

    with hullguard.deadline(1.5):
        r = await client.get(url)   # BulkheadQueueTimeoutError or httpx.TimeoutException
                                    # once the 1.5 s are spent
"""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any, AsyncIterator, Iterator, Optional

import httpx

from . import _deadline, _native
from ._native import Permit, Registry, _check_timeout, origin_key, outcome_of_status

__all__ = [
    "BulkheadTransport",
    "SyncBulkheadTransport",
    "outcome_of_status",
    "outcome_of_error",
    "grpc_timeout",
]


def grpc_timeout(seconds: float) -> str:
    """``seconds`` (a time left, ``>= 0``) as a ``grpc-timeout`` header value: at most 8 digits
    and a unit (``H``, ``M``, ``S``, ``m``, ``u``, ``n``), by the core's one rule for every
    binding: the finest unit whose value fits in 8 digits, rounded down (a deadline is never
    extended), written in the coarsest unit that holds it exactly (1.5 s → ``"1500m"``, 2 s →
    ``"2S"``). 0 (or less) is ``"0n"``; more than 99 999 999 hours is capped there."""
    return _native._grpc_timeout(float(seconds))


_TIMEOUT_KEYS = ("connect", "read", "write", "pool")


# An HTTP field name (RFC 9110 §5.1: a token).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

# Less than this left once admitted: the request is not sent (httpx would read a timeout of 0
# as "do not block", and a downstream deadline of 0 is no deadline).
_MIN_LEFT = 0.001


def _bound_by_deadline(request: httpx.Request, header: Optional[str]) -> Optional[float]:
    """An admitted request inside a budget: its timeouts lowered to the time left, and the
    time left in ``header`` if one is configured; returns the time left (``None`` outside every
    budget: nothing changes). Raises ``httpx.PoolTimeout`` — nothing sent — when less than a
    millisecond is left (the deadline passed between the admission and the send)."""
    d = _deadline._DEADLINE.get()
    if d is None:
        return None
    left = max(0.0, d - _deadline._now())
    if left < _MIN_LEFT:
        raise httpx.PoolTimeout(
            "hullguard: the request's deadline passed before it was sent", request=request
        )
    given = request.extensions.get("timeout")
    timeout = dict(given) if isinstance(given, dict) else {}
    for k in _TIMEOUT_KEYS:
        v = timeout.get(k)
        timeout[k] = left if v is None else min(float(v), left)
    request.extensions["timeout"] = timeout
    if header is not None:
        request.headers[header] = grpc_timeout(left)
    return left


def _release(permit: Permit, outcome: str) -> None:
    """Releases ``permit`` silently if still held (a permit already returned is skipped and
    never counted as ``released_twice_total``), recording ``outcome``."""
    permit._finish(outcome)


def outcome_of_error(exc: BaseException) -> str:
    """The outcome of an exception while sending or reading: a cancellation is
    ``"ignored"``; anything else (transport errors) is ``"failure"``."""
    return "ignored" if isinstance(exc, asyncio.CancelledError) else "failure"


class _AsyncPermitStream(httpx.AsyncByteStream):
    """The response body of an admitted request: closes the inner stream, then releases."""

    def __init__(self, stream: httpx.AsyncByteStream, permit: Permit, outcome: str) -> None:
        self._stream = stream
        self._permit = permit
        self._outcome = outcome
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except BaseException as e:
            if not isinstance(e, GeneratorExit):  # the reader stopped early: not an error
                self._outcome = outcome_of_error(e)
            await self.aclose()
            raise
        # Fully consumed: the permit goes back even if the caller never closes the response.
        await self.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._stream.aclose()
        finally:
            _release(self._permit, self._outcome)


class _SyncPermitStream(httpx.SyncByteStream):
    """The sync twin of :class:`_AsyncPermitStream`."""

    def __init__(self, stream: httpx.SyncByteStream, permit: Permit, outcome: str) -> None:
        self._stream = stream
        self._permit = permit
        self._outcome = outcome
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                yield chunk
        except BaseException as e:
            if not isinstance(e, GeneratorExit):
                self._outcome = outcome_of_error(e)
            self.close()
            raise
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._stream.close()
        finally:
            _release(self._permit, self._outcome)


def _checked(value: Any, name: str, cls: type, what: str) -> None:
    if value is not None and not isinstance(value, cls):
        raise TypeError(f"{name} must be {what} or None, not {type(value).__name__}")


class _Base:
    """What both transports share: the registry, the queue timeout, the key of a request.

    Every argument is checked here, at construction (``TypeError`` / ``ValueError`` naming it),
    not at the first request: ``timeout`` by the rule of every acquire's ``timeout``.
    """

    def __init__(self, transport: Any, base: type, registry: Any, timeout: Any, deadline_header: Any) -> None:
        _checked(transport, "transport", base, f"an httpx.{base.__name__}")
        _checked(registry, "registry", Registry, "a hullguard.Registry")
        _checked(deadline_header, "deadline_header", str, "a header name (str)")
        if deadline_header is not None and not _TOKEN.fullmatch(deadline_header):
            raise ValueError(
                "deadline_header must be a header name (an RFC 9110 token: letters, digits and "
                f"!#$%&'*+-.^_`|~), got {deadline_header!r}"
            )
        self._deadline_header: Optional[str] = deadline_header
        self._timeout = _check_timeout(timeout)
        self._registry: Registry = registry if registry is not None else Registry()

    @property
    def registry(self) -> Registry:
        """The registry holding one bulkhead per origin key."""
        return self._registry

    @staticmethod
    def key_of(request: httpx.Request) -> str:
        """The registry key of ``request``: its canonical origin key."""
        return origin_key(str(request.url))


class BulkheadTransport(_Base, httpx.AsyncBaseTransport):
    """An async httpx transport that admits each request through its origin's bulkhead.

    Args:
        transport: the async transport that sends admitted requests (default
            ``httpx.AsyncHTTPTransport()``; pass your own to keep its ``limits``, ``retries``,
            ``http2`` ... settings). Closed when this transport is closed.
        registry: one bulkhead per origin key (default ``hullguard.Registry()``: 10 concurrent,
            100 queued, 30 s queue timeout per origin). Use ``overrides`` keyed by
            ``hullguard.origin_key(url)`` for per-origin settings.
        timeout: the queue timeout in seconds for every request (``None``: each bulkhead's own
            ``queue_timeout``; ``0``: never queue; ``math.inf``: no deadline).
        deadline_header: a header to carry the time left until the ambient deadline
            downstream, in the ``grpc-timeout`` format (e.g. ``"grpc-timeout"``); ``None`` (the
            default): none is sent. Either way the time left bounds the request's timeouts.

    Raises:
        TypeError: ``transport`` is not an ``httpx.AsyncBaseTransport``, ``registry`` not a
            ``hullguard.Registry``, ``timeout`` not a number, ``deadline_header`` not a str.
        ValueError: ``timeout`` is negative, NaN, or a positive value below 1 ns;
            ``deadline_header`` is empty or no header name.

    Thread-safe as the registry is; one transport may serve several clients and loops.
    """

    def __init__(
        self,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        *,
        registry: Optional[Registry] = None,
        timeout: Optional[float] = None,
        deadline_header: Optional[str] = None,
    ) -> None:
        super().__init__(transport, httpx.AsyncBaseTransport, registry, timeout, deadline_header)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The inner transport."""
        return self._transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = self.key_of(request)
        # The ambient deadline (hullguard.deadline) is the acquire's: a passed one is refused
        # `timeout` here, before anything is sent.
        permit: Permit = await self._registry.acquire(key, timeout=self._timeout)
        try:
            left = _bound_by_deadline(request, self._deadline_header)
        except httpx.PoolTimeout:
            _release(permit, "ignored")  # nothing was sent: no outcome to record
            raise
        try:
            if left is None:
                response = await self._transport.handle_async_request(request)
            else:
                # The whole exchange up to the response head within the time left (httpx's
                # timeouts bound each operation, not their sum).
                try:
                    response = await asyncio.wait_for(
                        self._transport.handle_async_request(request), left
                    )
                except asyncio.TimeoutError:
                    raise httpx.ReadTimeout(
                        "hullguard: the request's deadline passed before its response",
                        request=request,
                    ) from None
        except BaseException as e:
            _release(permit, outcome_of_error(e))
            raise
        outcome = outcome_of_status(response.status_code)
        stream = response.stream
        if isinstance(stream, httpx.ByteStream) or not isinstance(stream, httpx.AsyncByteStream):
            # The body is already in memory: nothing is held any more.
            _release(permit, outcome)
        else:
            response.stream = _AsyncPermitStream(stream, permit, outcome)
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> "BulkheadTransport":
        await self._transport.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._transport.__aexit__(*exc)


class SyncBulkheadTransport(_Base, httpx.BaseTransport):
    """A sync httpx transport that admits each request through its origin's bulkhead.

    The arguments (and their errors) are those of :class:`BulkheadTransport`, with a sync
    ``transport`` (default ``httpx.HTTPTransport()``, an ``httpx.BaseTransport``). A queued
    request blocks its thread (GIL released) in ``Registry.acquire_sync``; any number of threads
    may send through one transport.
    """

    def __init__(
        self,
        transport: Optional[httpx.BaseTransport] = None,
        *,
        registry: Optional[Registry] = None,
        timeout: Optional[float] = None,
        deadline_header: Optional[str] = None,
    ) -> None:
        super().__init__(transport, httpx.BaseTransport, registry, timeout, deadline_header)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    @property
    def transport(self) -> httpx.BaseTransport:
        """The inner transport."""
        return self._transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        key = self.key_of(request)
        permit = self._registry.acquire_sync(key, timeout=self._timeout)
        try:
            _bound_by_deadline(request, self._deadline_header)
        except httpx.PoolTimeout:
            _release(permit, "ignored")  # nothing was sent: no outcome to record
            raise
        try:
            response = self._transport.handle_request(request)
        except BaseException as e:
            _release(permit, outcome_of_error(e))
            raise
        outcome = outcome_of_status(response.status_code)
        stream = response.stream
        if isinstance(stream, httpx.ByteStream) or not isinstance(stream, httpx.SyncByteStream):
            _release(permit, outcome)
        else:
            response.stream = _SyncPermitStream(stream, permit, outcome)
        return response

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "SyncBulkheadTransport":
        self._transport.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._transport.__exit__(*exc)
