"""hullguard.httpx outcome classification (docs/design.md §6.2): transport errors and 5xx are failures,
429 is overload (a failure for the adaptive limit only), anything else a success; recorded when
the response body is closed. ``httpx.MockTransport`` upstreams, a manual breaker clock."""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Iterator, List

import httpx
import pytest

import hullguard
from hullguard.httpx import BulkheadTransport, SyncBulkheadTransport, outcome_of_status

URL = "http://api.test/x"
KEY = "http://api.test:80"


def _registry(**breaker: Any) -> hullguard.Registry:
    b = {"failure_threshold": 3, "open_duration": 30.0}
    b.update(breaker)
    return hullguard.Registry(resilience={"breaker": b, "adaptive": {"algorithm": "aimd"}})


def _circuit(reg: hullguard.Registry) -> dict:
    return reg.stats()[KEY]["circuit"]


def _status_handler(codes: List[int]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(codes.pop(0), text="body")

    return handler


def test_outcome_of_status() -> None:
    assert [outcome_of_status(c) for c in (200, 204, 301, 404, 429, 500, 503, 599)] == [
        "success", "success", "success", "success", "overload", "failure", "failure", "failure",
    ]


@pytest.mark.asyncio
async def test_5xx_failures_open_the_breaker_and_429_is_overload() -> None:
    reg = _registry()
    codes = [500, 503, 429, 404, 500, 502, 500, 200]
    async with httpx.AsyncClient(transport=BulkheadTransport(httpx.MockTransport(_status_handler(codes)), registry=reg)) as c:
        assert (await c.get(URL)).status_code == 500
        assert (await c.get(URL)).status_code == 503
        assert _circuit(reg)["consecutive_failures"] == 2
        assert (await c.get(URL)).status_code == 429  # a success for the breaker
        assert _circuit(reg)["consecutive_failures"] == 0
        adaptive = reg.stats()[KEY]["adaptive"]
        assert adaptive["decreases_total"] >= 1  # ... and a failure for the adaptive limit
        assert (await c.get(URL)).status_code == 404  # a success
        for _ in range(3):
            await c.get(URL)
        assert _circuit(reg)["state"] == "open"
        with pytest.raises(hullguard.CircuitOpenError) as e:
            await c.get(URL)  # never sent
        assert e.value.snapshot["key"] == KEY
    assert codes == [200]
    assert reg.stats()[KEY]["rejected_by_reason"]["circuit_open"] == 1


@pytest.mark.asyncio
async def test_transport_errors_are_failures() -> None:
    reg = _registry()

    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=BulkheadTransport(httpx.MockTransport(boom), registry=reg)) as c:
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await c.get(URL)
    assert _circuit(reg)["state"] == "open"
    assert reg.stats()[KEY]["active"] == 0


class _Body(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A streamed body (not in memory): the permit is held until it is closed."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"part"
        if self.fail:
            raise httpx.ReadError("reset")
        yield b"rest"

    def __iter__(self) -> Iterator[bytes]:
        yield b"part"
        if self.fail:
            raise httpx.ReadError("reset")
        yield b"rest"

    async def aclose(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.asyncio
async def test_outcome_is_recorded_when_the_body_is_closed() -> None:
    reg = _registry(failure_threshold=10)

    def handler(request: httpx.Request) -> httpx.Response:
        status = int(request.url.params.get("status", "200"))
        return httpx.Response(status, stream=_Body(fail=request.url.params.get("fail") == "1"))

    async with httpx.AsyncClient(transport=BulkheadTransport(httpx.MockTransport(handler), registry=reg)) as c:
        async with c.stream("GET", URL, params={"status": "500"}) as r:
            assert r.status_code == 500
            assert reg.stats()[KEY]["active"] == 1
            assert _circuit(reg)["consecutive_failures"] == 0  # not yet: the body is open
        assert reg.stats()[KEY]["active"] == 0
        assert _circuit(reg)["consecutive_failures"] == 1
        r = await c.get(URL)  # read fully: success
        assert r.text == "partrest" and _circuit(reg)["consecutive_failures"] == 0
        with pytest.raises(httpx.ReadError):
            await c.get(URL, params={"fail": "1"})  # a 200 whose body breaks: failure
        assert _circuit(reg)["consecutive_failures"] == 1
        assert reg.stats()[KEY]["active"] == 0


def test_sync_transport_classifies() -> None:
    reg = _registry(failure_threshold=2)
    codes = [500, 429, 500, 500]
    with httpx.Client(transport=SyncBulkheadTransport(httpx.MockTransport(_status_handler(codes)), registry=reg)) as c:
        c.get(URL)
        assert _circuit(reg)["consecutive_failures"] == 1
        c.get(URL)  # 429: success for the breaker
        assert _circuit(reg)["consecutive_failures"] == 0
        c.get(URL)
        c.get(URL)
        assert _circuit(reg)["state"] == "open"
        with pytest.raises(hullguard.CircuitOpenError):
            c.get(URL)

    def boom(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("slow", request=request)

    reg = _registry(failure_threshold=1)
    with httpx.Client(transport=SyncBulkheadTransport(httpx.MockTransport(boom), registry=reg)) as c:
        with pytest.raises(httpx.ConnectTimeout):
            c.get(URL)
    assert _circuit(reg)["state"] == "open"

    reg = _registry(failure_threshold=1)

    def streamed(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, stream=_Body())

    with httpx.Client(transport=SyncBulkheadTransport(httpx.MockTransport(streamed), registry=reg)) as c:
        with c.stream("GET", URL) as r:
            assert r.status_code == 502 and _circuit(reg)["state"] == "closed"
        assert _circuit(reg)["state"] == "open"
