"""hullguard.httpx: per-origin bulkheads around httpx transports, on real loopback servers.

Two tiny HTTP/1.1 servers (``http.server`` threads on 127.0.0.1, two ports = two origins) and
``httpx.MockTransport`` where a transport error or an in-memory body is wanted.
"""

from __future__ import annotations

import asyncio
import http.server
import math
import threading
import time
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

import hullguard
from hullguard.httpx import BulkheadTransport, SyncBulkheadTransport

# ---------------------------------------------------------------------------------------------
# The upstream: GET /ok, /slow?ms=N, /gate (answers once the test opens the gate), /stream
# (one chunk, then the rest once the gate opens), /drop (closes the connection, no response).


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server: _Server = self.server  # type: ignore[assignment]
        url = urlparse(self.path)
        server.hits += 1
        if url.path == "/ok":
            self._send(b"ok\n")
        elif url.path == "/slow":
            time.sleep(int(parse_qs(url.query).get("ms", ["100"])[0]) / 1000)
            self._send(b"slow\n")
        elif url.path == "/gate":
            server.gate.wait(10)
            self._send(b"gate\n")
        elif url.path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(b"first\n")
            server.gate.wait(10)
            self._chunk(b"second\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif url.path == "/drop":
            self.close_connection = True
            self.connection.shutdown(2)
        elif url.path == "/error":
            self._send(b"boom\n", status=503)
        else:
            self._send(b"not found\n", status=404)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.gate = threading.Event()
        self.hits = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _serve() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def upstream() -> Iterator[_Server]:
    yield from _serve()


@pytest.fixture
def other() -> Iterator[_Server]:
    yield from _serve()


def _stats(registry: hullguard.Registry, url: str) -> dict:
    return registry.stats()[hullguard.origin_key(url)]


def _live(registry: hullguard.Registry, url: str, field: str) -> int:
    """A stats field of ``url``'s bulkhead, 0 before its first request created it."""
    return registry.stats().get(hullguard.origin_key(url), {}).get(field, 0)


async def _until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


# ---------------------------------------------------------------------------------------------
# async


@pytest.mark.asyncio
async def test_one_bulkhead_per_origin_key(upstream: _Server, other: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        held = asyncio.create_task(client.get(upstream.url + "/gate"))
        await _until(lambda: _live(reg, upstream.url, "active") == 1)
        # The same origin is full ...
        with pytest.raises(hullguard.BulkheadFullError) as info:
            await client.get(upstream.url + "/ok")
        assert info.value.reason == "concurrency_limit"
        assert info.value.snapshot["key"] == hullguard.origin_key(upstream.url)
        assert not isinstance(info.value, httpx.HTTPError)
        # ... another origin is not.
        r = await client.get(other.url + "/ok")
        assert r.status_code == 200 and r.text == "ok\n"
        upstream.gate.set()
        assert (await held).status_code == 200
    assert reg.keys() == sorted(hullguard.origin_key(u) for u in (upstream.url, other.url))
    for u in (upstream.url, other.url):
        s = _stats(reg, u)
        assert s["active"] == 0 and s["leaked_total"] == 0 and s["released_twice_total"] == 0
    assert _stats(reg, upstream.url)["rejected_by_reason"]["concurrency_limit"] == 1


@pytest.mark.asyncio
async def test_key_is_the_canonical_origin_key_and_overrides_apply(upstream: _Server) -> None:
    port = upstream.server_address[1]
    key = f"http://localhost:{port}"
    assert hullguard.origin_key(f"HTTP://LocalHost:{port}/x?y=1") == key
    reg = hullguard.Registry(max_concurrent=5, overrides={key: {"max_concurrent": 2}})
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        r = await client.get(f"http://LOCALHOST:{port}/ok")
        assert r.status_code == 200
    assert reg.keys() == [key]
    assert reg.stats()[key]["max_concurrent"] == 2
    assert reg.stats()[key]["admitted_total"] == 1


@pytest.mark.asyncio
async def test_queued_request_is_admitted_when_the_first_closes(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=10, queue_timeout=5.0)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        first = asyncio.create_task(client.get(upstream.url + "/gate"))
        # Admitted and arrived (a busy machine may take a while between the two).
        await _until(lambda: _live(reg, upstream.url, "active") == 1 and upstream.hits == 1)
        second = asyncio.create_task(client.get(upstream.url + "/ok"))
        await _until(lambda: _live(reg, upstream.url, "queued") == 1)
        assert upstream.hits == 1  # the queued one has not reached the server
        upstream.gate.set()
        assert (await first).status_code == 200
        assert (await second).status_code == 200
    s = _stats(reg, upstream.url)
    assert (s["active"], s["queued"], s["admitted_total"], s["queue_wait_count"]) == (0, 0, 2, 1)


@pytest.mark.asyncio
async def test_streaming_holds_the_permit_until_the_body_is_closed(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        async with client.stream("GET", upstream.url + "/stream") as r:
            assert r.status_code == 200
            # Headers are here, the body is not: still held.
            assert _stats(reg, upstream.url)["active"] == 1
            chunks: Any = r.aiter_raw()
            assert await chunks.__anext__() == b"first\n"
            assert _stats(reg, upstream.url)["active"] == 1
            with pytest.raises(hullguard.BulkheadFullError):
                await client.get(upstream.url + "/ok")
            await chunks.aclose()  # stop reading early: closing the response releases
        assert _stats(reg, upstream.url)["active"] == 0
        # Consumed to the end: released without an explicit close.
        upstream.gate.set()
        r = await client.send(client.build_request("GET", upstream.url + "/stream"), stream=True)
        assert _stats(reg, upstream.url)["active"] == 1
        assert await r.aread() == b"first\nsecond\n"
        assert _stats(reg, upstream.url)["active"] == 0
        await r.aclose()  # a second close is a no-op
    s = _stats(reg, upstream.url)
    assert (s["active"], s["released_twice_total"], s["leaked_total"]) == (0, 0, 0)


@pytest.mark.asyncio
async def test_transport_errors_release(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    # A real one: the server drops the connection.
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(upstream.url + "/drop")
        assert _stats(reg, upstream.url)["active"] == 0
        # The permit came back: the next request is admitted (max_queue=0 would reject it).
        assert (await client.get(upstream.url + "/ok")).status_code == 200
        # HTTP errors are responses, not transport errors: released on close as usual.
        assert (await client.get(upstream.url + "/error")).status_code == 503
        # Refused connection: nothing listens there.
        dead = "http://127.0.0.1:9"
        with pytest.raises(httpx.ConnectError):
            await client.get(dead + "/")
        assert _stats(reg, dead)["active"] == 0

    # A mock one: the inner transport raises.
    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("mock", request=request)

    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    transport = BulkheadTransport(httpx.MockTransport(boom), registry=reg)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            with pytest.raises(httpx.ReadTimeout):
                await client.get("https://api.example.com/x")
    s = reg.stats()["https://api.example.com:443"]
    assert (s["active"], s["admitted_total"], s["leaked_total"]) == (0, 3, 0)


@pytest.mark.asyncio
async def test_cancelled_while_sending_releases(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        task = asyncio.create_task(client.get(upstream.url + "/gate"))
        await _until(lambda: upstream.hits == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _stats(reg, upstream.url)["active"] == 0
        upstream.gate.set()
        assert (await client.get(upstream.url + "/ok")).status_code == 200


@pytest.mark.asyncio
async def test_cancelled_while_queued_gives_up_the_place(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=10)
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client:
        held = asyncio.create_task(client.get(upstream.url + "/gate"))
        await _until(lambda: _live(reg, upstream.url, "active") == 1)
        queued = asyncio.create_task(client.get(upstream.url + "/ok"))
        await _until(lambda: _live(reg, upstream.url, "queued") == 1)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        upstream.gate.set()
        await held
    s = _stats(reg, upstream.url)
    assert (s["active"], s["queued"], s["rejected_by_reason"]["aborted"]) == (0, 0, 1)
    assert upstream.hits == 1


@pytest.mark.asyncio
async def test_rejection_types(upstream: _Server) -> None:
    key = hullguard.origin_key(upstream.url)
    reg = hullguard.Registry(max_concurrent=1, max_queue=1, queue_timeout=5.0, max_keys=1)
    impatient = httpx.AsyncClient(transport=BulkheadTransport(registry=reg, timeout=0.05))
    async with httpx.AsyncClient(transport=BulkheadTransport(registry=reg)) as client, impatient:
        held = asyncio.create_task(client.get(upstream.url + "/gate"))
        await _until(lambda: _live(reg, upstream.url, "active") == 1)
        # Queued, then timed out: not a TimeoutError, not an httpx error.
        with pytest.raises(hullguard.BulkheadQueueTimeoutError) as t:
            await impatient.get(upstream.url + "/ok")
        assert t.value.reason == "timeout" and t.value.code == "BULKHEAD_QUEUE_TIMEOUT"
        assert not isinstance(t.value, (TimeoutError, httpx.HTTPError))
        # Queue full.
        queued = asyncio.create_task(client.get(upstream.url + "/ok"))
        await _until(lambda: _live(reg, upstream.url, "queued") == 1)
        with pytest.raises(hullguard.BulkheadFullError) as q:
            await client.get(upstream.url + "/ok")
        assert q.value.reason == "queue_limit"
        # A second origin at max_keys=1 while the first is busy.
        with pytest.raises(hullguard.BulkheadFullError) as k:
            await client.get("http://127.0.0.2:1/")
        assert k.value.reason == "key_limit"
        upstream.gate.set()
        await held
        assert (await queued).status_code == 200
        # Closed.
        reg.close()
        with pytest.raises(hullguard.BulkheadClosedError) as c:
            await client.get(upstream.url + "/ok")
        assert c.value.reason == "shutdown" and not c.value.retryable
    rejected = reg.stats()[key]["rejected_by_reason"]
    assert (rejected["timeout"], rejected["queue_limit"], rejected["shutdown"]) == (1, 1, 1)
    assert reg.key_limit_rejections == 1


@pytest.mark.asyncio
async def test_per_transport_timeout_zero_never_queues(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=10, queue_timeout=30.0)
    transport = BulkheadTransport(registry=reg, timeout=0)
    async with httpx.AsyncClient(transport=transport) as client:
        held = asyncio.create_task(client.get(upstream.url + "/gate"))
        await _until(lambda: _live(reg, upstream.url, "active") == 1)
        with pytest.raises(hullguard.BulkheadFullError) as e:
            await client.get(upstream.url + "/ok")
        assert e.value.reason == "concurrency_limit"
        upstream.gate.set()
        await held


@pytest.mark.asyncio
async def test_in_memory_body_releases_at_once() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"origin": hullguard.origin_key(str(request.url))})

    transport = BulkheadTransport(httpx.MockTransport(handler), registry=reg)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(3):
            r = await client.get("https://Example.com/a")
            assert r.json() == {"origin": "https://example.com:443"}
    s = reg.stats()["https://example.com:443"]
    assert (s["active"], s["admitted_total"], s["leaked_total"]) == (0, 3, 0)


@pytest.mark.asyncio
async def test_defaults(upstream: _Server) -> None:
    transport = BulkheadTransport()
    assert isinstance(transport.registry, hullguard.Registry)
    assert isinstance(transport.transport, httpx.AsyncHTTPTransport)
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(upstream.url + "/ok")).status_code == 200
    s = _stats(transport.registry, upstream.url)
    assert (s["max_concurrent"], s["active"], s["admitted_total"]) == (10, 0, 1)
    with pytest.raises(TypeError):
        BulkheadTransport(registry=object())  # type: ignore[arg-type]


BAD_TRANSPORT_ARGS = [
    ({"timeout": -1}, ValueError, "timeout"),
    ({"timeout": math.nan}, ValueError, "timeout"),
    ({"timeout": 1e-12}, ValueError, "timeout must be 0 or at least 1e-9 seconds"),
    ({"timeout": "1"}, TypeError, "timeout must be .*, not str"),
    ({"timeout": True}, TypeError, "timeout"),
    ({"registry": {}}, TypeError, "registry must be a hullguard.Registry or None, not dict"),
    ({"transport": object()}, TypeError, "transport must be an httpx.*Transport or None, not object"),
]


@pytest.mark.parametrize("cls", ["async", "sync"])
@pytest.mark.parametrize(("kwargs", "exc", "needle"), BAD_TRANSPORT_ARGS, ids=[repr(a[0]).split(" at 0x")[0] for a in BAD_TRANSPORT_ARGS])
def test_transport_arguments_are_checked_at_construction(cls: str, kwargs: dict, exc: type, needle: str) -> None:
    # Issue 13: a bad `timeout` used to surface only at the first request.
    transport = BulkheadTransport if cls == "async" else SyncBulkheadTransport
    with pytest.raises(exc, match=needle):
        transport(**kwargs)


def test_transport_of_the_other_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="transport must be an httpx.AsyncBaseTransport"):
        BulkheadTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transport must be an httpx.BaseTransport"):
        SyncBulkheadTransport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    for t in (0, 0.5, math.inf, None):  # the valid timeouts
        BulkheadTransport(mock, timeout=t)
        SyncBulkheadTransport(mock, timeout=t)


@pytest.mark.asyncio
async def test_redirect_hops_use_their_own_origin(upstream: _Server, other: _Server) -> None:
    target = other.url + "/ok"

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "start.example":
            return httpx.Response(302, headers={"Location": target})
        raise AssertionError("unexpected")

    class Split(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.mock = httpx.MockTransport(handler)
            self.real = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.host == "start.example":
                return await self.mock.handle_async_request(request)
            return await self.real.handle_async_request(request)

        async def aclose(self) -> None:
            await self.real.aclose()

    reg = hullguard.Registry()
    transport = BulkheadTransport(Split(), registry=reg)
    async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
        r = await client.get("http://start.example/")
        assert r.status_code == 200 and r.text == "ok\n"
    assert reg.keys() == sorted(["http://start.example:80", hullguard.origin_key(other.url)])
    assert all(s["active"] == 0 and s["admitted_total"] == 1 for s in reg.stats().values())


# ---------------------------------------------------------------------------------------------
# sync


def test_sync_client_isolation_and_release(upstream: _Server, other: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    with httpx.Client(transport=SyncBulkheadTransport(registry=reg)) as client:
        results: list = []
        t = threading.Thread(target=lambda: results.append(client.get(upstream.url + "/gate")))
        t.start()
        deadline = time.monotonic() + 5
        while _live(reg, upstream.url, "active") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        with pytest.raises(hullguard.BulkheadFullError) as e:
            client.get(upstream.url + "/ok")
        assert e.value.reason == "concurrency_limit"
        assert client.get(other.url + "/ok").status_code == 200
        upstream.gate.set()
        t.join(5)
        assert results[0].status_code == 200
        # Streaming: held until closed.
        with client.stream("GET", upstream.url + "/stream") as r:
            assert _stats(reg, upstream.url)["active"] == 1
            assert r.read() == b"first\nsecond\n"
        assert _stats(reg, upstream.url)["active"] == 0
        # Transport error.
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(upstream.url + "/drop")
        assert _stats(reg, upstream.url)["active"] == 0
    for u in (upstream.url, other.url):
        s = _stats(reg, u)
        assert (s["active"], s["leaked_total"], s["released_twice_total"]) == (0, 0, 0)


def test_sync_client_queues_and_times_out(upstream: _Server) -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=4, queue_timeout=0.05)
    transport = SyncBulkheadTransport(registry=reg)
    assert isinstance(transport.transport, httpx.HTTPTransport)
    with httpx.Client(transport=transport) as client:
        t = threading.Thread(target=lambda: client.get(upstream.url + "/slow?ms=300"))
        t.start()
        deadline = time.monotonic() + 5
        while _live(reg, upstream.url, "active") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            client.get(upstream.url + "/ok")
        t.join(5)
        # A longer per-transport timeout waits for the slow one instead.
        slow = threading.Thread(target=lambda: client.get(upstream.url + "/slow?ms=100"))
        slow.start()
        while _live(reg, upstream.url, "active") != 1:
            time.sleep(0.002)
        patient = SyncBulkheadTransport(registry=reg, timeout=5.0)
        with httpx.Client(transport=patient) as c2:
            assert c2.get(upstream.url + "/ok").status_code == 200
        slow.join(5)
    s = _stats(reg, upstream.url)
    assert (s["active"], s["queued"], s["rejected_by_reason"]["timeout"]) == (0, 0, 1)


def test_sync_mock_transport_error_releases() -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("mock", request=request)

    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    with httpx.Client(transport=SyncBulkheadTransport(httpx.MockTransport(boom), registry=reg)) as c:
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                c.get("http://[::1]:8080/")
    s = reg.stats()["http://[::1]:8080"]
    assert (s["active"], s["admitted_total"]) == (0, 3)
