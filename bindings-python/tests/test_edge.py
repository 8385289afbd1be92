"""Server-side admission (issue 18): ``hullguard.asgi.AdmissionMiddleware`` in front of real
Starlette and FastAPI apps served by a real uvicorn on 127.0.0.1 (a free port, a thread of its
own, started and stopped by each test), requests through httpx.

What is checked: classification (header, route prefix, callable, unknown → the default class);
under an injected overload signal the critical class passes and the others get 503 (reason
``shed``, bound ``overload``) and no ``Retry-After``; ``Retry-After`` only with a rate limit's
honest ``retry_after``; the ``grpc-timeout`` header becomes the request's budget (the app sees
it, a spent one is refused before the app, a queued request waits at most the budget); no
permit is ever stranded — a client that disconnects while queued or while its request runs, an
app that raises, a streamed response cut short, a burst of cancelled clients; lifespan and
websocket scopes pass through; the probes start on the lifespan (or the first request), report
into ``stats()["load"]`` and stop on shutdown. Overload signals are injected (scripted probes or
``bh.report_load``); the one real signal is the lag of a loop blocked for 200 ms. Every wait is
bounded (``_uvicorn.WAIT_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

import hullguard
from hullguard.asgi import (
    AdmissionMiddleware,
    EventLoopLagProbe,
    ProcessCpuProbe,
    parse_grpc_timeout,
)
from hullguard.httpx import grpc_timeout
from _support import assert_idle
from _uvicorn import WAIT_S, Gate, UvicornServer, await_until, wait_until

CLASSES = [{"name": "batch"}, {"name": "critical", "priority": 10}]


def classed(**options: Any) -> hullguard.Bulkhead:
    """A gateway bulkhead: ``batch`` (priority 0) and ``critical`` (priority 10, never shed)."""
    kw: Dict[str, Any] = dict(max_concurrent=8, max_queue=16, classes=CLASSES, critical_priority=10)
    kw.update(options)
    return hullguard.Bulkhead(**kw)


class App:
    """A Starlette app with the routes the tests need, and what it saw."""

    def __init__(self) -> None:
        self.gate = Gate()  # opened by the tests (and by serve() on the way out)
        self.seen: List[str] = []
        self.disconnects = 0
        self.starts = 0
        self.stops = 0

        async def hold(request: Request) -> Response:
            self.seen.append(request.url.path)
            await self.gate.wait()
            return PlainTextResponse("held")

        async def echo(request: Request) -> Response:
            self.seen.append(request.url.path)
            return JSONResponse({"remaining": hullguard.remaining()})

        async def boom(request: Request) -> Response:
            self.seen.append(request.url.path)
            raise RuntimeError("boom (expected by the test)")

        async def until_disconnect(request: Request) -> Response:
            self.seen.append(request.url.path)
            deadline = time.monotonic() + WAIT_S
            while not await request.is_disconnected():
                assert time.monotonic() < deadline, "the disconnect never arrived"
                await asyncio.sleep(0.005)
            self.disconnects += 1
            return PlainTextResponse("gone")

        async def stream(request: Request) -> Response:
            self.seen.append(request.url.path)

            async def body() -> Any:
                yield b"first\n"
                for _ in range(int(WAIT_S / 0.01)):  # bounded: ends by itself after WAIT_S
                    await asyncio.sleep(0.01)
                    yield b"more\n"

            return StreamingResponse(body())

        async def upload(request: Request) -> Response:
            self.seen.append(request.url.path)
            body = await request.body()
            return JSONResponse({"length": len(body), "sha256": hashlib.sha256(body).hexdigest()})

        async def block(request: Request) -> Response:
            time.sleep(0.2)  # blocks the serving loop: the lag probe must see it
            return PlainTextResponse("blocked")

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> Any:
            self.starts += 1
            yield
            self.stops += 1

        self.app = Starlette(
            routes=[
                Route("/hold", hold),
                Route("/echo", echo),
                Route("/critical/echo", echo),
                Route("/boom", boom),
                Route("/until_disconnect", until_disconnect),
                Route("/stream", stream),
                Route("/block", block),
                Route("/upload", upload, methods=["POST"]),
            ],
            lifespan=lifespan,
        )


class Scripted:
    """An injected probe: reports ``signal`` every 5 ms on the serving loop until cancelled."""

    def __init__(self, **signal: float) -> None:
        self.signal = signal
        self.reports = 0
        self.cancelled = False

    async def run(self, report: Any) -> None:
        try:
            while True:
                report(**self.signal)
                self.reports += 1
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def _load(bh: hullguard.Bulkhead) -> Dict[str, int]:
    load = bh.stats()["load"]
    assert load is not None
    return load  # type: ignore[no-any-return]


def _get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, timeout=WAIT_S, **kw)


def _admit_classes(bh: hullguard.Bulkhead) -> List[int]:
    seen: List[int] = []
    bh.on("admit", lambda e: seen.append(e["class"]))
    return seen


# ----- shedding under an injected overload signal ----------------------------------------------


def test_critical_passes_and_batch_gets_503_under_injected_cpu() -> None:
    """The issue's sentence: while the CPU signal is over the threshold, non-critical requests
    get 503 (no Retry-After: there is no honest estimate) and critical ones pass; below it
    both pass. The signal comes from a scripted CPU probe started by the lifespan."""
    bh = classed(shed_cpu_threshold=0.85)
    cpu = Scripted(cpu=0.95)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, classify="x-class", lag_probe=False, cpu_probe=cpu)
    with UvicornServer(mw) as s:
        wait_until(lambda: _load(bh)["cpu_permille"] == 950, "the scripted CPU report")
        assert _load(bh)["overloaded"] == 1
        r = _get(s.url + "/echo", headers={"x-class": "critical"})
        assert r.status_code == 200, r.text
        r = _get(s.url + "/echo", headers={"x-class": "batch"})
        assert r.status_code == 503
        assert r.headers["content-type"] == "application/json"
        assert "retry-after" not in r.headers
        assert r.json() == {"reason": "shed", "bound": "overload", "code": "BULKHEAD_SHED",
                            "class": "batch"}
        r = _get(s.url + "/echo")  # no header: the default class (0, batch) is shed too
        assert r.status_code == 503 and r.json()["class"] == "batch"
        assert app.seen == ["/echo"]  # a shed request never reaches the app

        cpu.signal = {"cpu": 0.10}
        wait_until(lambda: _load(bh)["cpu_permille"] == 100, "the calm CPU report")
        assert _load(bh)["overloaded"] == 0
        assert _get(s.url + "/echo", headers={"x-class": "batch"}).status_code == 200
        s_ = bh.stats()
        assert (s_["load"]["shed_total"], s_["rejected_by_reason"]["shed"]) == (2, 2)
    assert cpu.cancelled and app.starts == app.stops == 1
    assert _load(bh)["cpu_permille"] == 0  # the stopped probe left no stale overload
    assert_idle(bh)


def test_fastapi_route_classes_and_a_lag_signal() -> None:
    """FastAPI (``app.add_middleware``), classes by route prefix, the lag signal reported
    directly with ``bh.report_load``: ``/critical/...`` passes, the rest is shed."""
    bh = classed(shed_lag_threshold=0.05)
    api = FastAPI()

    @api.get("/critical/pay")
    async def pay() -> Dict[str, str]:
        return {"paid": "yes"}

    @api.get("/report")
    async def report() -> Dict[str, str]:
        return {"report": "yes"}

    api.add_middleware(AdmissionMiddleware, bulkhead=bh, classify={"/critical": "critical"},
                       lag_probe=False, cpu_probe=False)
    with UvicornServer(api) as s:
        bh.report_load(event_loop_lag=0.2)
        assert _load(bh)["event_loop_lag_ns"] == 200_000_000 and _load(bh)["overloaded"] == 1
        assert _get(s.url + "/critical/pay").json() == {"paid": "yes"}
        r = _get(s.url + "/report")
        assert (r.status_code, r.json()["reason"], r.json()["bound"]) == (503, "shed", "overload")
        assert "retry-after" not in r.headers
        bh.report_load(event_loop_lag=0.001)
        assert _get(s.url + "/report").json() == {"report": "yes"}
    assert_idle(bh)


def test_critical_passes_only_while_capacity_is_left() -> None:
    """Critical is never shed by the signal, but the limits still apply: with the one permit
    held, a critical request with ``queue_timeout=0`` is refused ``concurrency_limit`` (503,
    no Retry-After)."""
    bh = classed(max_concurrent=1, shed_cpu_threshold=0.5)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, classify="x-class", lag_probe=False,
                             cpu_probe=False, queue_timeout=0)

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c:
            held = asyncio.create_task(c.get(url + "/hold", headers={"x-class": "critical"}))
            await await_until(lambda: bh.stats()["active"] == 1, "the held request")
            bh.report_load(cpu=0.9)
            r = await c.get(url + "/echo", headers={"x-class": "critical"})
            assert (r.status_code, r.json()["reason"]) == (503, "concurrency_limit")
            assert "retry-after" not in r.headers
            r = await c.get(url + "/echo", headers={"x-class": "batch"})
            assert (r.status_code, r.json()["reason"]) == (503, "shed")
            app.gate.open()
            assert (await held).status_code == 200

    with UvicornServer(mw, before_stop=app.gate.open) as s:
        asyncio.run(main(s.url))
    assert_idle(bh)


# ----- Retry-After -------------------------------------------------------------------------------


def test_retry_after_only_with_an_honest_estimate() -> None:
    """A rate limit knows when the next request conforms: 429 with ``Retry-After`` rounded up
    to whole seconds (and ``retry_after`` in the body). A full bulkhead does not: 503 without
    the header."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=0, classes=[{"name": "api"}],
                            rates={"requests": {"amount": 1, "per": 10.0, "burst": 1}})
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False,
                             queue_timeout=0)
    with UvicornServer(mw) as s:
        assert _get(s.url + "/echo").status_code == 200
        r = _get(s.url + "/echo")
        assert r.status_code == 429, r.text
        body = r.json()
        assert body["reason"] == "rate_limit" and 0 < body["retry_after"] <= 10.0
        assert r.headers["retry-after"] == str(math.ceil(body["retry_after"]))
        assert int(r.headers["retry-after"]) in range(1, 11)

    bh2 = hullguard.Bulkhead(max_concurrent=1, max_queue=0)
    app2 = App()
    mw2 = AdmissionMiddleware(app2.app, bulkhead=bh2, lag_probe=False, cpu_probe=False)

    async def full(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c:
            held = asyncio.create_task(c.get(url + "/hold"))
            await await_until(lambda: bh2.stats()["active"] == 1, "the held request")
            r = await c.get(url + "/echo")
            assert r.status_code == 503 and "retry-after" not in r.headers
            assert r.json() == {"reason": "concurrency_limit", "bound": "limit",
                                "code": "BULKHEAD_FULL", "class": None}
            assert int(r.headers["content-length"]) == len(r.content)
            app2.gate.open()
            assert (await held).status_code == 200

    with UvicornServer(mw2, before_stop=app2.gate.open) as s:
        asyncio.run(full(s.url))
    assert_idle(bh2)


# ----- the deadline header ------------------------------------------------------------------------


def test_grpc_timeout_parse_and_round_trip() -> None:
    cases = {"2S": 2.0, "1500m": 1.5, "0n": 0.0, "3H": 10800.0, "1M": 60.0, "250u": 0.00025,
             "99999999H": 99999999 * 3600.0}
    for text, secs in cases.items():
        assert parse_grpc_timeout(text) == pytest.approx(secs), text
        assert parse_grpc_timeout(text.encode()) == pytest.approx(secs), text
    # The core's one parser: no whitespace either (the HTTP server strips a field's own OWS).
    for bad in ("", "S", "2", "2s", "1.5S", "-1S", "123456789S", "2 S", "2SS", " 7S ", "\xff",
                b"\xff1S"):
        assert parse_grpc_timeout(bad) is None, bad
    for secs in (0.0, 0.001, 1.5, 2.0, 61.0, 12345.678):
        back = parse_grpc_timeout(grpc_timeout(secs))
        assert back is not None and back <= secs and back == pytest.approx(secs, rel=1e-6, abs=1e-9)


def test_the_deadline_header_becomes_the_budget() -> None:
    """The app runs inside ``hullguard.deadline(<the header's time>)``: it reads the budget;
    a malformed header, no header, or ``deadline_header=None`` add none; a custom header name
    works; a spent budget (``0n``) is refused ``timeout`` (bound ``deadline``) before the app."""
    bh = classed()
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)
    off = AdmissionMiddleware(app.app, bulkhead=bh, deadline_header=None, lag_probe=False,
                              cpu_probe=False)
    custom = AdmissionMiddleware(app.app, bulkhead=bh, deadline_header="X-Deadline",
                                 lag_probe=False, cpu_probe=False)
    with UvicornServer(mw) as s, UvicornServer(off) as s_off, UvicornServer(custom) as s_custom:
        left = _get(s.url + "/echo", headers={"grpc-timeout": "2S"}).json()["remaining"]
        assert 0 < left <= 2.0
        left = _get(s.url + "/echo", headers={"grpc-timeout": "500m"}).json()["remaining"]
        assert 0 < left <= 0.5
        assert _get(s.url + "/echo").json()["remaining"] is None
        assert _get(s.url + "/echo", headers={"grpc-timeout": "2 seconds"}).json()["remaining"] is None
        assert _get(s_off.url + "/echo", headers={"grpc-timeout": "2S"}).json()["remaining"] is None
        left = _get(s_custom.url + "/echo", headers={"x-deadline": "3S"}).json()["remaining"]
        assert 0 < left <= 3.0
        n = len(app.seen)
        r = _get(s.url + "/echo", headers={"grpc-timeout": "0n"})
        assert r.status_code == 503 and "retry-after" not in r.headers
        assert (r.json()["reason"], r.json()["bound"]) == ("timeout", "deadline")
        assert len(app.seen) == n  # refused before the app
    assert_idle(bh)


def test_a_queued_request_waits_at_most_its_budget() -> None:
    """With the one permit held, a request carrying ``grpc-timeout: 200m`` queues and is
    refused ``timeout`` once its budget is spent — not after the 30 s queue timeout (a
    wall-clock bound of 10x the budget)."""
    bh = classed(max_concurrent=1, queue_timeout=30.0)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c:
            held = asyncio.create_task(c.get(url + "/hold"))
            await await_until(lambda: bh.stats()["active"] == 1, "the held request")
            t0 = time.monotonic()
            r = await c.get(url + "/echo", headers={"grpc-timeout": "200m"})
            took = time.monotonic() - t0
            assert (r.status_code, r.json()["reason"]) == (503, "timeout"), r.text
            # Ended by the budget (not before it: time only moves forward), not by the 30 s
            # queue timeout (no speed assumed beyond half of it).
            assert 0.15 <= took < 15.0, took
            app.gate.open()
            assert (await held).status_code == 200

    with UvicornServer(mw, before_stop=app.gate.open) as s:
        asyncio.run(main(s.url))
    assert app.seen == ["/hold"]
    assert_idle(bh)


# ----- no permit is ever stranded ----------------------------------------------------------------


def test_client_disconnect_while_queued_gives_the_place_up() -> None:
    """A client that goes away while its request is queued: the waiter leaves the queue at
    once (its place freed, nothing held) and the app never sees the request."""
    bh = classed(max_concurrent=1)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c, httpx.AsyncClient(timeout=WAIT_S) as c2:
            held = asyncio.create_task(c.get(url + "/hold"))
            await await_until(lambda: bh.stats()["active"] == 1, "the held request")
            queued = asyncio.create_task(c2.get(url + "/echo"))
            await await_until(lambda: bh.stats()["queued"] == 1, "the queued request")
            queued.cancel()  # httpx closes the connection: the server sees a disconnect
            with pytest.raises(asyncio.CancelledError):
                await queued
            await await_until(lambda: bh.stats()["queued"] == 0, "the queued request to leave")
            assert bh.stats()["active"] == 1
            app.gate.open()
            assert (await held).status_code == 200

    with UvicornServer(mw, before_stop=app.gate.open) as s:
        asyncio.run(main(s.url))
    assert app.seen == ["/hold"]
    s_ = assert_idle(bh)
    assert s_["admitted_total"] == 1


def test_a_queued_request_body_reaches_the_app_intact() -> None:
    """While queued, the request is read ahead (to see a disconnect): the body chunks read are
    handed to the app in order once admitted — a small body wholly, a large one (past the
    64 KiB read-ahead) partly — and the app reads exactly what was sent."""
    bh = classed(max_concurrent=1)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)
    bodies = [bytes(range(256)) * 40, bytes(range(251)) * 1200]  # 10 KiB and ~300 KiB

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c, httpx.AsyncClient(timeout=WAIT_S) as c2:
            held = asyncio.create_task(c.get(url + "/hold"))
            await await_until(lambda: bh.stats()["active"] == 1, "the held request")
            uploads = []
            for i, body in enumerate(bodies):
                uploads.append(asyncio.create_task(c2.post(url + "/upload", content=body)))
                await await_until(lambda: bh.stats()["queued"] == i + 1, "the queued upload")
            app.gate.open()
            assert (await held).status_code == 200
            for body, task in zip(bodies, uploads):
                r = await task
                assert r.json() == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    with UvicornServer(mw, before_stop=app.gate.open) as s:
        asyncio.run(main(s.url))
    assert_idle(bh)


def test_client_disconnect_while_running_releases_when_the_app_ends() -> None:
    """A client that goes away while the app runs: the app is told (``receive()`` gives
    ``http.disconnect``) and the permit goes back when it returns; a streamed response cut
    short by the client is cancelled by Starlette and releases too."""
    bh = classed(max_concurrent=2)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)

    async def main(url: str) -> None:
        async with httpx.AsyncClient(timeout=WAIT_S) as c:
            running = asyncio.create_task(c.get(url + "/until_disconnect"))
            await await_until(lambda: bh.stats()["active"] == 1, "the running request")
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            await await_until(lambda: app.disconnects == 1, "the app to see the disconnect")
            await await_until(lambda: bh.stats()["active"] == 0, "the permit back")

        async with httpx.AsyncClient(timeout=WAIT_S) as c:
            async with c.stream("GET", url + "/stream") as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    assert line == "first"
                    break  # leaving the block closes the connection mid-stream
            await await_until(lambda: bh.stats()["active"] == 0, "the streamed permit back")

    with UvicornServer(mw) as s:
        asyncio.run(main(s.url))
    s_ = assert_idle(bh)
    assert s_["admitted_total"] == 2


def test_an_app_exception_releases_the_permit() -> None:
    """The app raises: Starlette answers 500 and the permit goes back (outcome ``failure``:
    with a breaker, it counts)."""
    bh = hullguard.Bulkhead(max_concurrent=2, resilience={"breaker": {"failure_threshold": 2}})
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)
    with UvicornServer(mw) as s:
        assert _get(s.url + "/boom").status_code == 500
        # The permit goes back once the server has sent the last byte (the client may read
        # the response a moment before).
        wait_until(lambda: bh.stats()["active"] == 0, "the permit back")
        assert bh.stats()["circuit"]["consecutive_failures"] == 1
        assert _get(s.url + "/echo").status_code == 200
        wait_until(lambda: bh.stats()["active"] == 0, "the permit back")
        assert bh.stats()["circuit"]["consecutive_failures"] == 0
    assert_idle(bh)


def test_a_burst_of_cancelled_clients_strands_nothing() -> None:
    """30 requests at 4 permits (26 queued); every third client gives up — some while
    running, most while queued — then the rest are let through: nothing held, nothing queued,
    every request accounted for."""
    bh = classed(max_concurrent=4, max_queue=32)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=False)

    async def main(url: str) -> Tuple[int, int]:
        limits = httpx.Limits(max_connections=40)
        async with httpx.AsyncClient(timeout=WAIT_S, limits=limits) as c:
            tasks = [asyncio.create_task(c.get(url + "/hold")) for _ in range(30)]
            await await_until(lambda: bh.stats()["active"] == 4 and bh.stats()["queued"] == 26,
                              "4 running, 26 queued")
            for t in tasks[::3]:
                t.cancel()
            # The cancelled ones that were queued leave the queue; those running wait at the
            # gate (their app does not watch for the disconnect) and end when it opens.
            await asyncio.wait(tasks[::3])
            app.gate.open()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
        ok = sum(1 for r in results if isinstance(r, httpx.Response) and r.status_code == 200)
        return cancelled, ok

    with UvicornServer(mw, before_stop=app.gate.open) as s:
        cancelled, ok = asyncio.run(main(s.url))
        wait_until(lambda: bh.stats()["active"] == 0 and bh.stats()["queued"] == 0, "idle")
    assert cancelled == 10
    s_ = assert_idle(bh)
    # Every request that reached the app was admitted once; a cancelled one either left the
    # queue or — granted as its disconnect arrived — was admitted and given back unused.
    assert len(app.seen) <= s_["admitted_total"] <= len(app.seen) + cancelled
    assert ok == 20 and len(app.seen) >= 20


# ----- scopes that pass through, the lifespan and the probes -----------------------------------


@pytest.mark.asyncio
async def test_websocket_and_other_scopes_pass_through_untouched() -> None:
    bh = classed()
    got: List[Tuple[Any, Any, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        got.append((scope, receive, send))

    mw = AdmissionMiddleware(inner, bulkhead=bh, lag_probe=False, cpu_probe=False)

    async def receive() -> Dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        pass

    for kind in ("websocket", "something-else"):
        scope: Dict[str, Any] = {"type": kind, "path": "/ws", "headers": []}
        await mw(scope, receive, send)
        assert got[-1] == (scope, receive, send) and got[-1][1] is receive and got[-1][2] is send
    assert bh.stats()["admitted_total"] == 0 and not mw.probes_running


@pytest.mark.asyncio
async def test_lifespan_messages_pass_and_drive_the_probes() -> None:
    """The lifespan's messages reach the app unchanged; ``startup`` starts the probes,
    ``shutdown`` stops them (and reports 0 for their signals)."""
    bh = classed(shed_cpu_threshold=0.5, shed_lag_threshold=0.05)
    cpu, lag = Scripted(cpu=0.9), Scripted(event_loop_lag=0.1)
    seen: List[Dict[str, Any]] = []
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        while True:
            msg = await receive()
            seen.append(msg)
            if msg["type"] == "lifespan.startup":
                await await_until(lambda: cpu.reports > 0 and lag.reports > 0, "the probes")
                assert mw.probes_running and _load(bh)["overloaded"] == 1
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    mw = AdmissionMiddleware(inner, bulkhead=bh, lag_probe=lag, cpu_probe=cpu)
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return incoming.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    await mw({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert seen == [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not mw.probes_running and cpu.cancelled and lag.cancelled
    load = _load(bh)
    assert (load["cpu_permille"], load["event_loop_lag_ns"], load["overloaded"]) == (0, 0, 0)


def test_without_a_lifespan_the_first_request_starts_the_probes() -> None:
    bh = classed(shed_cpu_threshold=0.5)
    cpu = Scripted(cpu=0.2)
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=False, cpu_probe=cpu)
    with UvicornServer(mw, lifespan="off") as s:
        assert not mw.probes_running and cpu.reports == 0
        assert _get(s.url + "/echo").status_code == 200
        wait_until(lambda: cpu.reports > 0, "the lazily started probe")
        assert mw.probes_running and _load(bh)["cpu_permille"] == 200
    assert app.starts == 0


class _Recording:
    """Wraps a real probe and keeps every value it reports."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.values: List[Dict[str, float]] = []

    async def run(self, report: Any) -> None:
        def rec(**signal: float) -> None:
            self.values.append(signal)
            report(**signal)

        await self.probe.run(rec)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_real_probes_report_and_see_a_blocked_loop(loop: str) -> None:
    """The default probes on uvicorn's loop (asyncio and uvloop): both report into
    ``stats()["load"]``; a handler that blocks the loop for 200 ms shows up as a lag of at least
    150 ms (the probe's 20 ms sleep overshoots by the block)."""
    bh = classed(shed_lag_threshold=10.0, shed_cpu_threshold=64.0)  # on, never shedding here
    lag = _Recording(EventLoopLagProbe(0.02))
    cpu = _Recording(ProcessCpuProbe(0.05))
    app = App()
    mw = AdmissionMiddleware(app.app, bulkhead=bh, lag_probe=lag, cpu_probe=cpu)
    with UvicornServer(mw, loop=loop) as s:
        wait_until(lambda: len(lag.values) >= 2 and len(cpu.values) >= 2, "both probes")
        assert _get(s.url + "/block").status_code == 200
        wait_until(lambda: any(v["event_loop_lag"] >= 0.15 for v in lag.values),
                   "the blocked loop's lag")
        assert all(v["event_loop_lag"] >= 0 for v in lag.values)
        assert all(v["cpu"] >= 0 for v in cpu.values)
    load = _load(bh)
    assert (load["event_loop_lag_ns"], load["cpu_permille"]) == (0, 0)  # reported 0 at the stop


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_probe_arithmetic_on_injected_clocks() -> None:
    """The lag probe reports the overshoot of its sleep; the CPU probe CPU time over wall
    time — on injected clocks, exactly."""
    now = [100.0]
    extra = [0.0, 0.03, 0.5, 0.0]

    async def sleep(d: float) -> None:
        now[0] += d + (extra.pop(0) if extra else 0.0)
        await asyncio.sleep(0)

    got: List[Dict[str, float]] = []
    probe = EventLoopLagProbe(0.1, clock=lambda: now[0], sleep=sleep)
    task = asyncio.ensure_future(probe.run(lambda **s: got.append(s)))
    await await_until(lambda: len(got) >= 4, "four lag reports")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [round(g["event_loop_lag"], 9) for g in got[:4]] == [0.0, 0.03, 0.5, 0.0]
    assert probe.last is not None

    wall = [0.0]
    cpu_s = [0.0]
    burn = [0.25, 1.0, 0.0, 3.0]  # CPU seconds used in each 1 s interval (3 threads busy)

    async def tick(d: float) -> None:
        wall[0] += d
        cpu_s[0] += burn.pop(0) if burn else 0.0
        await asyncio.sleep(0)

    got = []
    cpu = ProcessCpuProbe(1.0, process_time=lambda: cpu_s[0], clock=lambda: wall[0], sleep=tick)
    task = asyncio.ensure_future(cpu.run(lambda **s: got.append(s)))
    await await_until(lambda: len(got) >= 4, "four CPU reports")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [g["cpu"] for g in got[:4]] == [0.25, 1.0, 0.0, 3.0]


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_the_permit_goes_back_at_the_end_of_the_response() -> None:
    """The end of a response is its last body chunk — or, when ``http.response.start``
    announced trailers, its last trailers; or a ``pathsend``. The permit is held until that
    message has been sent, and released exactly once."""
    bh = hullguard.Bulkhead(max_concurrent=1)
    mw = AdmissionMiddleware(None, bulkhead=bh, lag_probe=False, cpu_probe=False)  # type: ignore[arg-type]
    held_during: List[Tuple[str, int]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        held_during.append((message["type"], bh.stats()["active"]))

    async def run(messages: List[Dict[str, Any]]) -> List[Tuple[str, int]]:
        async def app(scope: Any, receive_: Any, send_: Any) -> None:
            for m in messages:
                await send_(m)
                held_during.append(("after " + m["type"], bh.stats()["active"]))

        mw.app = app
        held_during.clear()
        await mw({"type": "http", "path": "/", "headers": []}, receive, send)
        return list(held_during)

    start = {"type": "http.response.start", "status": 200, "headers": []}
    got = await run([start, {"type": "http.response.body", "body": b"a", "more_body": True},
                     {"type": "http.response.body", "body": b"b"}])
    assert got == [("http.response.start", 1), ("after http.response.start", 1),
                   ("http.response.body", 1), ("after http.response.body", 1),
                   ("http.response.body", 1), ("after http.response.body", 0)]
    got = await run([dict(start, trailers=True), {"type": "http.response.body", "body": b"a"},
                     {"type": "http.response.trailers", "headers": [], "more_trailers": False}])
    assert [a for _, a in got] == [1, 1, 1, 1, 1, 0]
    got = await run([start, {"type": "http.response.pathsend", "path": "/dev/null"}])
    assert [a for _, a in got] == [1, 1, 1, 0]
    got = await run([start])  # the app returned without finishing: released on the way out
    assert [a for _, a in got] == [1, 1] and bh.stats()["active"] == 0
    assert_idle(bh)


# ----- classification and arguments --------------------------------------------------------------


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_classification_header_route_callable_and_default() -> None:
    """Header values, route prefixes (longest first, at ``/`` boundaries) and a callable's
    answers (name, index, ``None``, unknown) pick the admission class; anything unknown is the
    default class (class 0, or ``default_class``)."""
    three: List[Mapping[str, Any]] = [{"name": "batch"}, {"name": "critical", "priority": 10}, {"name": "interactive", "priority": 5}]

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(mw: AdmissionMiddleware, path: str = "/", headers: Optional[Dict[str, str]] = None) -> int:
        sent: List[Dict[str, Any]] = []

        async def receive() -> Dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path,
                 "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]}
        await mw(scope, receive, send)
        return int(sent[0]["status"])

    def make(classify: Any, default: Any = None) -> Tuple[AdmissionMiddleware, List[int], hullguard.Bulkhead]:
        bh = hullguard.Bulkhead(max_concurrent=4, classes=three, events=True)
        mw = AdmissionMiddleware(inner, bulkhead=bh, classify=classify, default_class=default,
                                 lag_probe=False, cpu_probe=False)
        return mw, _admit_classes(bh), bh

    mw, seen, bh = make("X-Class")
    for h in ({"x-class": "critical"}, {"x-class": " interactive "}, {"x-class": "nope"}, {}, {"x-class": "1"}):
        assert await call(mw, headers=h) == 204
    assert seen == [1, 2, 0, 0, 0]  # names only in a header: "1" is not a class name

    mw, seen, _ = make({"/api": "interactive", "/api/pay": "critical", "/admin/": 1}, default="interactive")
    for p in ("/api", "/api/x", "/apix", "/api/pay/now", "/api/payment", "/admin/x", "/admin", "/"):
        await call(mw, path=p)
    assert seen == [2, 2, 2, 1, 2, 1, 2, 2]

    answers: List[Any] = ["critical", 2, None, "nope", 7, True]
    mw, seen, _ = make(lambda scope: answers.pop(0))
    for _ in range(6):
        await call(mw)
    assert seen == [1, 2, 0, 0, 0, 0]


def test_argument_errors_name_the_argument() -> None:
    bh = classed()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    def mw(**kw: Any) -> AdmissionMiddleware:
        kw.setdefault("bulkhead", bh)
        return AdmissionMiddleware(app, **kw)

    with pytest.raises(TypeError, match="bulkhead"):
        mw(bulkhead=object())
    with pytest.raises(ValueError, match="classify"):
        mw(classify={"/x": "nope"})
    with pytest.raises(ValueError, match="classify"):
        mw(classify={"x": "batch"})
    with pytest.raises(ValueError, match="classify"):
        mw(classify="not a header")
    with pytest.raises(TypeError, match="classify"):
        mw(classify=42)
    with pytest.raises(ValueError, match="default_class"):
        mw(default_class="nope")
    with pytest.raises(ValueError, match="deadline_header"):
        mw(deadline_header="a b")
    with pytest.raises(TypeError, match="deadline_header"):
        mw(deadline_header=1)
    with pytest.raises(TypeError, match="lag_probe"):
        mw(lag_probe="fast")
    with pytest.raises(ValueError, match="interval"):
        mw(cpu_probe=0)
    with pytest.raises(ValueError, match="timeout"):
        mw(queue_timeout=-1)
    m = mw(lag_probe=0.2, cpu_probe=2)
    assert isinstance(m.lag_probe, EventLoopLagProbe) and m.lag_probe.interval == 0.2
    assert isinstance(m.cpu_probe, ProcessCpuProbe) and m.cpu_probe.interval == 2.0
    m = mw()
    assert isinstance(m.lag_probe, EventLoopLagProbe) and isinstance(m.cpu_probe, ProcessCpuProbe)
    assert mw(lag_probe=None, cpu_probe=False).lag_probe is None


def test_report_load_arguments_and_the_http_status_of_a_refusal() -> None:
    """``bh.report_load`` takes keywords in seconds / cores, checks both before reporting
    either; a refusal's detail carries the core's ``http_status``. A bulkhead without classes
    is one non-critical class: an overload sheds everything."""
    bh = hullguard.Bulkhead(max_concurrent=2, shed_cpu_threshold=0.5, shed_lag_threshold=0.1)
    with pytest.raises(TypeError, match="event_loop_lag= .* cpu="):
        bh.report_load()
    with pytest.raises(TypeError, match="cpu"):
        bh.report_load(cpu="0.9")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cpu"):
        bh.report_load(cpu=True)
    with pytest.raises(ValueError, match="event_loop_lag"):
        bh.report_load(event_loop_lag=float("nan"))
    with pytest.raises(ValueError, match="cpu"):
        bh.report_load(event_loop_lag=0.5, cpu=-1)  # nothing reported: the lag neither
    assert _load(bh) == {"event_loop_lag_ns": 0, "cpu_permille": 0, "overloaded": 0, "shed_total": 0}
    bh.report_load(event_loop_lag=math.inf)
    assert _load(bh)["overloaded"] == 1
    a = bh.try_admit()
    assert a.reason == "shed" and a.detail is not None
    assert (a.detail["bound"], a.detail["http_status"], a.detail["retry_after"]) == ("overload", 503, None)
    with pytest.raises(hullguard.BulkheadShedError) as e:
        bh.try_acquire()
    assert e.value.detail["http_status"] == 503
    bh.report_load(event_loop_lag=0, cpu=0.2)
    assert _load(bh)["overloaded"] == 0
    p = bh.try_acquire()
    assert p is not None
    p.release()
    plain = hullguard.Bulkhead(max_concurrent=1)
    plain.report_load(cpu=5.0)  # no threshold: recorded nowhere visible, changes nothing
    ok = plain.try_admit()
    assert plain.stats()["load"] is None and ok.ok and ok.permit is not None
    ok.permit.release()
    assert_idle(bh) and assert_idle(plain)


# ----- the probes' lifecycle (review findings) ------------------------------------------------


def _plain_app() -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _one_request(mw: Any) -> int:
    sent: List[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(m: Any) -> None:
        sent.append(m)

    await mw({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send)
    return int(sent[0]["status"])


def test_probes_follow_the_loop_and_never_leave_a_stale_overload() -> None:
    """A middleware that outlives its loop (no lifespan; a server restarted in-process): the
    old loop's shutdown ends the probe, which reports 0; the next loop's first request starts
    the probes on it; aclose() on yet another loop succeeds and reports 0; after aclose()
    requests do not restart them (review: a stale overload shed forever, aclose() raised
    'Event loop is closed', and a request after aclose() restarted the probes)."""
    bh = hullguard.Bulkhead(max_concurrent=4, shed_cpu_threshold=0.5)

    class Cpu:
        value = 0.9
        runs = 0

        async def run(self, report: Any) -> None:
            Cpu.runs += 1
            while True:
                report(cpu=self.value)
                await asyncio.sleep(0.005)

    cpu = Cpu()
    mw = AdmissionMiddleware(_plain_app(), bulkhead=bh, lag_probe=False, cpu_probe=cpu)

    async def loop1() -> None:
        assert await _one_request(mw) == 200  # starts the probe; its first reading follows
        await _until(lambda: bh.stats()["load"]["overloaded"] == 1)
        assert await _one_request(mw) == 503

    asyncio.run(loop1())  # ends without a lifespan shutdown: the probe task is cancelled
    assert bh.stats()["load"]["overloaded"] == 0, "the ended probe reported 0"
    cpu.value = 0.1

    async def loop2() -> None:
        assert await _one_request(mw) == 200
        await asyncio.sleep(0)  # the new task's first step
        assert mw.probes_running and Cpu.runs == 2, "started again on the new loop"
        await mw.aclose()
        assert not mw.probes_running
        assert await _one_request(mw) == 200
        assert not mw.probes_running, "a request after aclose() does not restart them"

    asyncio.run(loop2())

    async def loop3() -> None:
        await mw.aclose()  # idempotent, also on another loop
        mw.start_probes()  # an explicit start (the lifespan's) undoes aclose()
        assert mw.probes_running
        await mw.aclose()

    asyncio.run(loop3())
    assert bh.stats()["load"]["cpu_permille"] == 0


def test_a_probe_that_fails_reads_zero_and_is_reported() -> None:
    """A probe whose run() raises: its signal reads 0 (no stale overload) and the exception
    goes to the loop's exception handler (review: its last reading stood and nothing said so)."""
    bh = hullguard.Bulkhead(max_concurrent=4, shed_cpu_threshold=0.5)

    class Broken:
        async def run(self, report: Any) -> None:
            report(cpu=0.9)
            raise RuntimeError("probe bug")

    mw = AdmissionMiddleware(_plain_app(), bulkhead=bh, lag_probe=False, cpu_probe=Broken())
    handled: List[Any] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: handled.append(ctx))
        await _one_request(mw)
        await _until(lambda: bool(handled))
        assert bh.stats()["load"]["cpu_permille"] == 0
        assert await _one_request(mw) == 200
        await mw.aclose()

    asyncio.run(main())
    assert isinstance(handled[0]["exception"], RuntimeError)


async def _until(cond: Any, limit: float = 10.0) -> None:
    """Waits (bounded) until ``cond()`` holds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.001)


@pytest.mark.parametrize(
    "trigger, conflict, words",
    [
        ({"shed_cpu_threshold": 0.5}, {"enabled": False}, ["shed_cpu_threshold", "enabled set to false"]),
        ({"shed_lag_threshold": 0.1}, {"observe": "concurrency"}, ["shed_lag_threshold", "observe"]),
        ({"queue_delay_target": 0.05}, {"resilience": {"adaptive": {}}},
         ["queue_delay_target", "resilience.adaptive"]),
        ({"shed_cpu_threshold": 0.5}, {"max_reservations": 4}, ["shed_cpu_threshold", "max_reservations"]),
    ],
)
def test_what_the_implied_one_class_table_refuses_is_refused_by_name(
    trigger: Dict[str, Any], conflict: Dict[str, Any], words: List[str]
) -> None:
    """Found by the C ABI fuzz target (issue 21): a threshold or a queue-delay target gives a
    bulkhead without classes a one-class table, which takes no ``enabled=False``, observe mode,
    adaptive limit or reservations yet. The refusal names both options (it used to be about
    classes the caller never gave); each alone is a valid bulkhead."""
    with pytest.raises(ValueError) as e:
        hullguard.Bulkhead(max_concurrent=8, **trigger, **conflict)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert "classes" not in str(e.value).split(":")[0]
    hullguard.Bulkhead(max_concurrent=8, **trigger)
    hullguard.Bulkhead(max_concurrent=8, **conflict)
