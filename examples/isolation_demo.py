#!/usr/bin/env python3
"""The isolation demo in Python (docs/design.md §13): ``make demo``.

Two real HTTP/1.1 upstreams listen on loopback, served by a separate process with its own
asyncio loop (so the client's loop measures only the client): a healthy origin that answers in
about 5 ms and a degraded origin that answers in 1-2 s. One ``httpx.AsyncClient`` sends an
open-loop schedule of requests to both. Its total outbound capacity is a shared budget of N
concurrent requests across all origins: ``httpx.Limits(max_connections=N)``, the connection
pool's total cap (HTTP/1.1: one request per connection). A request that gets no connection
within the pool timeout (``httpx.Timeout(pool=2.0)``) fails with ``httpx.PoolTimeout``.

The same schedule runs twice, each time with a fresh client:

1. **without hullguard**: the degraded origin's slow requests take every connection of the
   shared pool, and the healthy origin's requests queue behind them;
2. **with hullguard**: the same client with one line added,
   ``transport=BulkheadTransport(inner, registry=Registry(..., overrides={degraded_key: ...}))``:
   one bulkhead per canonical origin key (``hullguard.origin_key``), acquired *before* the pool.
   The bulkheads' ``max_concurrent`` add up to N, so the degraded origin can only ever hold its
   own slice of the pool and a healthy request never waits behind a degraded one.

Then it prints both runs side by side and each bulkhead's stats, and checks the two properties
the demo exists to show (exit code 1 if either fails), as the Rust demo does: the healthy
origin's p99 latency with hullguard is at most a fifth of its p99 without, and with hullguard no
healthy request waited behind a degraded one for the shared budget.

How "waited behind a degraded one for the shared budget" is measured: a thin instrumenting
transport sits directly around ``httpx.AsyncHTTPTransport`` (inside the bulkhead transport). It
counts the requests inside the pool: *holding* a connection (from httpcore's first
``trace`` event, which fires only once the pool has assigned a connection, until the response
is closed or fails) or *waiting* for one (entered, not yet assigned). With HTTP/1.1 and
``max_connections=N`` a request that enters while ``holding + waiting >= N`` cannot get a
connection at once: it "waited for the shared budget". If at that moment at least one degraded
request holds a connection, it "waited behind a degraded one". This is the Python form of the
Rust demo's ``try_acquire`` on the budget semaphore failing while ``degraded_in_budget > 0``.
Beside it, the measured time from entering the pool to getting a connection is reported. (It
can exceed the pool timeout: httpcore restarts the pool timeout when a connection it assigned
was taken by another request first and it retries, ``ConnectionNotAvailable``; that happens
often in a saturated pool.)

Then the policy phases run (``demo_phases.py``; ``--no-policies`` skips them): a circuit
breaker against a third, scripted upstream that fails outright, then heals (it opens, fails
fast, probes and closes, with the healthy origin unaffected); and the adaptive limit against a
fourth, *capacity* upstream (``C`` workers of ``--service-ms`` each; what exceeds ``C`` queues in
the upstream), with ``C`` stepped 16 → 4 → 16 (``--phase-seconds`` each), once per algorithm of
``--algorithms``: the limit must track ``C`` within a stated band while the upstream's own
queueing delay stays under one service time.

Then the LLM-gateway phase runs (``llm_gateway_demo.py``; ``--no-llm`` skips it, ``--llm-*``
options scale it): a fake streaming LLM provider with a concurrent-token ceiling, an interactive
and a batch class through one client, without a bulkhead, with a count-only one and with calls
and tokens in one decision (refunds, classes).

Then the deadline phase runs (``deadline_demo.py``; ``--no-deadline`` skips it,
``--deadline-*`` options scale it): a request budget across two sequential upstream calls (the
second sees what the first left), with and without the budget, and CoDel shedding with adaptive
LIFO under a burst, against FIFO with a queue timeout.

Then the edge phase runs (``edge_demo.py``; ``--no-edge`` skips it, ``--edge-*`` options scale
it): an ASGI app behind hullguard's ``AdmissionMiddleware`` on uvicorn under a burst of mixed
critical / non-critical requests with an injected CPU signal, without and with the middleware:
per class p99, 503s and admitted work.

Then the host phase runs (``host_demo.py``, also ``make demo-host``; ``--no-host`` skips it,
``--host-*`` options scale it): 4 worker processes send to a degraded origin through a limit of
4, first with per-process bulkheads (the origin sees the limit multiplied), then with one
``HostBulkhead`` (never more than the limit), and one worker is SIGKILLed mid-run while holding
permits: the others reclaim its slot and the origin is back at the limit.

At the end it writes a self-contained HTML report with the pictures of every phase that ran
(``examples/report.py``: inline SVG, no script, no network): ``target/demo-report.html`` by
default, ``--report PATH`` elsewhere, ``--no-report`` not at all.

Everything is bounded: only 127.0.0.1, a fixed number of requests per run, every wait has a
deadline. The whole demo takes about 2 minutes. Smaller runs: ``--budget 4 --seconds 3
--degraded-min 1.0 --phase-seconds 1.5``; ``--report-only`` prints the checks but exits 0
whatever they say.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Tuple

import httpx

import hullguard
from hullguard.httpx import BulkheadTransport

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_phases  # noqa: E402  (the policy phases, next to this file)
import deadline_demo  # noqa: E402  (the deadline phase, next to this file)
import edge_demo  # noqa: E402  (the edge phase, next to this file)
import host_demo  # noqa: E402  (the host phase, next to this file)
import llm_gateway_demo  # noqa: E402  (the LLM-gateway phase, next to this file)
import report  # noqa: E402  (the HTML report, next to this file)
from demo_phases import percentile, stop_child  # noqa: E402

HEALTHY, DEGRADED = 0, 1
DEFAULT_REPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "target", "demo-report.html")

# ---------------------------------------------------------------------------------------------
# The upstreams (a separate process: `isolation_demo.py --serve ...`).

_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
    b"Connection: keep-alive\r\n\r\nok\n"
)


def _delay_fn(kind: int, args: argparse.Namespace) -> Callable[[int], float]:
    if kind == HEALTHY:
        return lambda n: args.healthy_ms / 1000.0
    lo, hi = args.degraded_min, args.degraded_max
    # Spread deterministically over [lo, hi) (mean (lo + hi) / 2), like the Rust demo.
    return lambda n: lo + (hi - lo) * ((n * 379) % 1000) / 1000.0


_FAILURE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
    b"Connection: keep-alive\r\n\r\ndown\n"
)


class _Script:
    """The scripted upstream's mode, switched by the client with ``GET /__mode/<mode>``:
    ``ok`` (answers 200 after the healthy latency), ``fail`` (answers 503 at once) or
    ``slow:<ms>`` (answers 200 after that many ms). Used by the policy phases."""

    def __init__(self, healthy_ms: float) -> None:
        self.healthy_ms = healthy_ms
        self.fail = False
        self.delay = healthy_ms / 1000.0

    def control(self, path: bytes) -> None:
        mode = path[len(b"/__mode/"):].decode()
        self.fail = mode == "fail"
        if mode.startswith("slow:"):
            self.delay = float(mode[5:]) / 1000.0
        elif mode == "ok":
            self.delay = self.healthy_ms / 1000.0


class _Pool:
    """The capacity upstream of the adaptive phase: ``capacity`` workers, each request holding
    one for ``service_ms`` (±10 %, seeded); requests beyond the workers wait in this upstream's
    own FIFO queue, so its latency grows with what a client sends beyond its capacity.
    ``GET /__pool/<C>`` sets the capacity (a rise lets queued requests in at once);
    ``GET /__pool/stats`` answers ``served wait_ns`` (totals since start: requests served and
    the nanoseconds they waited for a worker)."""

    def __init__(self, service_ms: float) -> None:
        self.service = service_ms / 1000.0
        self.capacity = 16
        self.busy = 0
        self.queue: "collections.deque[asyncio.Future[None]]" = collections.deque()
        self.served = 0
        self.wait_ns = 0
        self.rng = random.Random(0x4847)

    def control(self, path: bytes) -> bytes:
        arg = path[len(b"/__pool/"):].decode()
        if arg == "stats":
            return f"{self.served} {self.wait_ns}\n".encode()
        self.capacity = int(arg)
        self._admit()
        return b"ok\n"

    def _admit(self) -> None:
        while self.busy < self.capacity and self.queue:
            f = self.queue.popleft()
            if not f.done():
                self.busy += 1
                f.set_result(None)

    async def serve(self) -> None:
        arrived = time.perf_counter_ns()
        if self.busy < self.capacity and not self.queue:
            self.busy += 1
        else:
            f = asyncio.get_running_loop().create_future()
            self.queue.append(f)
            try:
                await f
            except asyncio.CancelledError:
                if f.done() and not f.cancelled():
                    self.busy -= 1
                    self._admit()
                raise
        self.wait_ns += time.perf_counter_ns() - arrived
        try:
            await asyncio.sleep(self.service * (0.9 + 0.2 * self.rng.random()))
        finally:
            self.served += 1
            self.busy -= 1
            self._admit()


def _reply(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: keep-alive\r\n\r\n"
        + body
    )


async def _serve_upstream(
    delay: Callable[[int], float],
    script: Optional[_Script] = None,
    pool: Optional[_Pool] = None,
) -> asyncio.Server:
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                if pool is not None:
                    if path.startswith(b"/__pool/"):
                        writer.write(_reply(pool.control(path)))
                    else:
                        await pool.serve()
                        writer.write(_RESPONSE)
                    await writer.drain()
                    continue
                if script is not None:
                    if path.startswith(b"/__mode/"):
                        script.control(path)
                        writer.write(_RESPONSE)
                    elif script.fail:
                        writer.write(_FAILURE)
                    else:
                        await asyncio.sleep(script.delay)
                        writer.write(_RESPONSE)
                    await writer.drain()
                    continue
                pause = delay(served)
                served += 1
                await asyncio.sleep(pause)
                writer.write(_RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client went away: this connection ends
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)


async def _serve_main(args: argparse.Namespace) -> None:
    servers = [await _serve_upstream(_delay_fn(k, args)) for k in (HEALTHY, DEGRADED)]
    servers.append(await _serve_upstream(_delay_fn(HEALTHY, args), _Script(args.healthy_ms)))
    servers.append(await _serve_upstream(_delay_fn(HEALTHY, args), pool=_Pool(args.service_ms)))
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print("PORTS " + " ".join(map(str, ports)), flush=True)
    # Serve until the parent closes our stdin (or dies).
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(finish)

    threading.Thread(target=watch_stdin, daemon=True).start()
    await stop
    for s in servers:
        s.close()


class Upstreams:
    """The two upstreams, in a child process with its own event loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--serve",
            f"--healthy-ms={args.healthy_ms}",
            f"--degraded-min={args.degraded_min}",
            f"--degraded-max={args.degraded_max}",
            f"--service-ms={args.service_ms}",
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 5 or line[0] != "PORTS":
            self.close()
            raise RuntimeError(f"upstream process failed to start: {line!r}")
        self.ports = (int(line[1]), int(line[2]))
        self.urls = tuple(f"http://127.0.0.1:{p}/" for p in self.ports)
        # The scripted upstream of the policy phases (demo_phases.py).
        self.scripted_url = f"http://127.0.0.1:{int(line[3])}/"
        # The capacity upstream of the adaptive phase.
        self.pool_url = f"http://127.0.0.1:{int(line[4])}/"

    def close(self) -> None:
        stop_child(self.proc)


# ---------------------------------------------------------------------------------------------
# The client side.


@dataclass
class Live:
    """Live counters, read by the progress line and the summary."""

    sent: List[int] = field(default_factory=lambda: [0, 0])
    done: List[int] = field(default_factory=lambda: [0, 0])
    ok: List[int] = field(default_factory=lambda: [0, 0])
    # Inside the pool right now, per origin: holding a connection / waiting for one.
    holding: List[int] = field(default_factory=lambda: [0, 0])
    waiting: List[int] = field(default_factory=lambda: [0, 0])
    # Healthy requests that found the shared budget full on entering the pool ...
    healthy_waited: int = 0
    # ... while at least one degraded request held a connection.
    healthy_waited_behind_degraded: int = 0
    # Seconds from entering the pool to getting a connection, per healthy request.
    healthy_conn_wait: List[float] = field(default_factory=list)


class _PoolSlotStream(httpx.AsyncByteStream):
    """Marks the end of holding a connection when the response body is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[], None]) -> None:
        self._inner = inner
        self._done = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._done()


class PoolCounter(httpx.AsyncBaseTransport):
    """``httpx.AsyncHTTPTransport(limits=Limits(max_connections=budget))`` plus the counting
    described in the module docs."""

    def __init__(self, budget: int, ports: Tuple[int, int], live: Live) -> None:
        self.inner = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=budget, max_keepalive_connections=budget)
        )
        self.budget = budget
        self.ports = ports
        self.live = live

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        live = self.live
        origin = HEALTHY if request.url.port == self.ports[HEALTHY] else DEGRADED
        if origin == HEALTHY and sum(live.holding) + sum(live.waiting) >= self.budget:
            live.healthy_waited += 1
            if live.holding[DEGRADED] > 0:
                live.healthy_waited_behind_degraded += 1
        live.waiting[origin] += 1
        held = over = False
        entered = time.perf_counter()
        user_trace = request.extensions.get("trace")

        async def trace(name: str, info: Dict[str, Any]) -> None:
            # httpcore emits trace events only once the pool has assigned a connection.
            nonlocal held
            if not held and not over:
                held = True
                live.waiting[origin] -= 1
                live.holding[origin] += 1
                if origin == HEALTHY:
                    live.healthy_conn_wait.append(time.perf_counter() - entered)
            if user_trace is not None:
                await user_trace(name, info)

        def leave() -> None:
            nonlocal over
            if over:
                return
            over = True
            if held:
                live.holding[origin] -= 1
            else:
                live.waiting[origin] -= 1

        request.extensions = {**request.extensions, "trace": trace}
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException:
            leave()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _PoolSlotStream(response.stream, leave)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Record:
    origin: int
    outcome: str
    latency: float
    sent_at: float = 0.0  # seconds from the run's start


@dataclass
class Summary:
    healthy_total: int
    healthy_ok: int
    healthy_pct: List[float]  # p50, p95, p99 in seconds, over every healthy request
    healthy_waited: int
    healthy_waited_behind_degraded: int
    healthy_conn_wait_max: float
    degraded_total: int
    degraded_outcomes: Dict[str, int]
    wall: float


def schedule(args: argparse.Namespace) -> List[Tuple[float, int]]:
    at: List[Tuple[float, int]] = []
    for every_ms, origin in ((args.healthy_every_ms, HEALTHY), (args.degraded_every_ms, DEGRADED)):
        n = 0
        while n * every_ms < args.seconds * 1000:
            at.append((n * every_ms / 1000.0, origin))
            n += 1
    at.sort()
    return at


OUTCOME_ORDER = ["ok", "pool_timeout (shared budget)", "http_error"]


def outcome_sort_key(o: str) -> Tuple[int, str]:
    return (OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else len(OUTCOME_ORDER), o)


async def run_once(
    name: str,
    args: argparse.Namespace,
    up: Upstreams,
    registry: Optional[Any],
    trace: Optional[List[Tuple[float, int, str, float]]] = None,
) -> Summary:
    """One run of the schedule. ``trace``, when given, receives every request as
    ``(sent_at_s, origin, outcome, latency_s)`` (for the report)."""
    live = Live()
    pool = PoolCounter(args.budget, up.ports, live)
    # The one line that adds isolation: wrap the client's transport.
    transport = pool if registry is None else BulkheadTransport(pool, registry=registry)
    timeout = httpx.Timeout(args.request_timeout, pool=args.pool_timeout)
    records: List[Record] = []

    async def request(client: Any, origin: int) -> None:
        start = time.perf_counter()
        try:
            r = await client.get(up.urls[origin])
            outcome = "ok" if r.status_code == 200 and r.content == b"ok\n" else "http_error"
        except hullguard.BulkheadError as e:
            outcome = f"rejected by bulkhead: {e.reason}"
        except httpx.PoolTimeout:
            outcome = "pool_timeout (shared budget)"
        except httpx.HTTPError:
            outcome = "http_error"
        latency = time.perf_counter() - start
        live.done[origin] += 1
        if outcome == "ok":
            live.ok[origin] += 1
        records.append(Record(origin, outcome, latency, start - started))

    async def progress(start: float) -> None:
        second = 1
        while True:
            await asyncio.sleep(max(0.0, start + second - time.perf_counter()))
            phase = "sending " if second <= args.seconds else "settling"
            h, d = HEALTHY, DEGRADED
            print(
                f"  [{name:<17}] {second:>2}s {phase} | healthy {live.sent[h]:>3} sent "
                f"{live.done[h]:>3} done {live.ok[h]:>3} ok | degraded {live.sent[d]:>3} sent "
                f"{live.done[d]:>3} done {live.ok[d]:>3} ok | pool {sum(live.holding)}/"
                f"{args.budget} connections in use ({live.holding[d]} degraded), "
                f"{sum(live.waiting):>3} waiting",
                flush=True,
            )
            second += 1

    print(f"\n== {name} ==", flush=True)
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
        started = time.perf_counter()
        ticker = asyncio.create_task(progress(started))
        tasks = []
        for offset, origin in schedule(args):
            delay = started + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            live.sent[origin] += 1
            tasks.append(asyncio.create_task(request(client, origin)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
        ticker.cancel()
        try:
            await ticker
        except asyncio.CancelledError:
            pass

    if trace is not None:
        trace.extend((r.sent_at, r.origin, r.outcome, r.latency) for r in records)
    healthy = sorted(r.latency for r in records if r.origin == HEALTHY)
    degraded: Dict[str, int] = {}
    for r in records:
        if r.origin == DEGRADED:
            degraded[r.outcome] = degraded.get(r.outcome, 0) + 1
    return Summary(
        healthy_total=len(healthy),
        healthy_ok=sum(1 for r in records if r.origin == HEALTHY and r.outcome == "ok"),
        healthy_pct=[percentile(healthy, p) for p in (50.0, 95.0, 99.0)],
        healthy_waited=live.healthy_waited,
        healthy_waited_behind_degraded=live.healthy_waited_behind_degraded,
        healthy_conn_wait_max=max(live.healthy_conn_wait, default=0.0),
        degraded_total=len(records) - len(healthy),
        degraded_outcomes=degraded,
        wall=wall,
    )


# ---------------------------------------------------------------------------------------------
# Output.


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def rate(ok: int, total: int) -> str:
    if total == 0:
        return "-"
    return f"{ok * 100.0 / total:.1f} % ({ok}/{total})"


def row(label: str, a: object, b: object) -> None:
    print(f"  {label:<46} {str(a):>22} {str(b):>22}")


def print_table(without: Summary, with_: Summary, args: argparse.Namespace) -> None:
    print("\n== side by side ==")
    row("", "without hullguard", "with hullguard")
    print(f"  healthy origin (~{args.healthy_ms:g} ms)")
    row("  requests", without.healthy_total, with_.healthy_total)
    row(
        "  success rate",
        rate(without.healthy_ok, without.healthy_total),
        rate(with_.healthy_ok, with_.healthy_total),
    )
    for i, p in enumerate(("p50", "p95", "p99")):
        row(f"  {p} latency (all requests)", ms(without.healthy_pct[i]), ms(with_.healthy_pct[i]))
    row("  waited for the shared budget", without.healthy_waited, with_.healthy_waited)
    row(
        "  ... behind a degraded request holding a slot",
        without.healthy_waited_behind_degraded,
        with_.healthy_waited_behind_degraded,
    )
    row(
        "  max time waiting for a connection",
        ms(without.healthy_conn_wait_max),
        ms(with_.healthy_conn_wait_max),
    )
    print(f"  degraded origin ({args.degraded_min:g}-{args.degraded_max:g} s), outcomes")
    row("  requests", without.degraded_total, with_.degraded_total)
    for o in sorted(set(without.degraded_outcomes) | set(with_.degraded_outcomes), key=outcome_sort_key):
        row(f"  {o}", without.degraded_outcomes.get(o, 0), with_.degraded_outcomes.get(o, 0))
    row("run time (sending + settling)", f"{without.wall:.1f} s", f"{with_.wall:.1f} s")


def print_stats(healthy: Dict[str, Any], degraded: Dict[str, Any]) -> None:
    print("\n== bulkhead stats (with hullguard, after the run) ==")
    row("", "healthy bulkhead", "degraded bulkhead")
    for k in (
        "max_concurrent", "limit", "active", "queued", "granted_unclaimed", "available",
        "admitted_total",
    ):
        row(k, healthy[k], degraded[k])
    for reason in healthy["rejected_by_reason"]:
        row(
            f"rejected_by_reason.{reason}",
            healthy["rejected_by_reason"][reason],
            degraded["rejected_by_reason"][reason],
        )
    for k in ("released_twice_total", "leaked_total", "ring_free", "queue_wait_count"):
        row(k, healthy[k], degraded[k])

    def wait(s: Dict[str, Any], ns: int) -> str:
        return "-" if s["queue_wait_count"] == 0 else ms(ns / 1e9)

    row(
        "queue wait mean (queue_wait_sum_ns / count)",
        wait(healthy, healthy["queue_wait_sum_ns"] // max(healthy["queue_wait_count"], 1)),
        wait(degraded, degraded["queue_wait_sum_ns"] // max(degraded["queue_wait_count"], 1)),
    )
    row(
        "queue wait max (queue_wait_max_ns)",
        wait(healthy, healthy["queue_wait_max_ns"]),
        wait(degraded, degraded["queue_wait_max_ns"]),
    )


# ---------------------------------------------------------------------------------------------


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=8, help="shared budget N (max_connections)")
    p.add_argument("--seconds", type=float, default=8.0, help="how long each run sends")
    p.add_argument("--healthy-every-ms", type=float, default=10.0)
    p.add_argument("--degraded-every-ms", type=float, default=20.0)
    p.add_argument("--healthy-ms", type=float, default=5.0, help="healthy upstream latency")
    p.add_argument("--degraded-min", type=float, default=1.0, help="degraded latency min (s)")
    p.add_argument("--degraded-max", type=float, default=None, help="default: min + 1 s")
    p.add_argument("--pool-timeout", type=float, default=2.0, help="httpx Timeout(pool=...)")
    p.add_argument("--request-timeout", type=float, default=5.0)
    p.add_argument("--degraded-slice", type=int, default=None,
                   help="degraded bulkhead's max_concurrent (default: max(1, budget // 4))")
    p.add_argument("--json", metavar="PATH", help="also write both summaries as JSON")
    p.add_argument("--no-policies", action="store_true",
                   help="skip the breaker and adaptive-limit phases")
    p.add_argument("--service-ms", type=float, default=80.0,
                   help="adaptive phase: the capacity upstream's service time per request")
    p.add_argument("--phase-seconds", type=float, default=6.0,
                   help="adaptive phase: seconds per capacity step (16 → 4 → 16)")
    p.add_argument("--algorithms", default="gradient2,aimd",
                   help="adaptive phase: the algorithms to run, comma-separated")
    p.add_argument("--no-llm", action="store_true", help="skip the LLM-gateway phase")
    llm_gateway_demo.add_arguments(p, prefix="llm-")
    p.add_argument("--no-deadline", action="store_true", help="skip the deadline phase")
    deadline_demo.add_arguments(p, prefix="deadline-")
    p.add_argument("--no-edge", action="store_true", help="skip the edge phase")
    edge_demo.add_arguments(p, prefix="edge-")
    p.add_argument("--no-host", action="store_true", help="skip the host phase")
    host_demo.add_arguments(p, prefix="host-")
    p.add_argument("--report-only", action="store_true",
                   help="print every check but exit 0 whatever they say (make test's scaled-down "
                        "run: the timing-dependent checks belong to make demo)")
    p.add_argument("--report", metavar="PATH", default=DEFAULT_REPORT,
                   help="write the HTML report (pictures of every phase) here "
                        "(default: target/demo-report.html)")
    p.add_argument("--no-report", dest="report", action="store_const", const=None,
                   help="write no HTML report")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.degraded_max is None:
        args.degraded_max = args.degraded_min + 1.0
    if args.degraded_slice is None:
        args.degraded_slice = max(1, args.budget // 4)
    if args.budget < 2 or not 1 <= args.degraded_slice < args.budget:
        p.error("need --budget >= 2 and 1 <= --degraded-slice < --budget")
    unknown = set(args.algorithms.split(",")) - {"gradient2", "aimd"}
    if unknown:
        p.error(f"--algorithms: unknown {sorted(unknown)}; allowed: gradient2, aimd")
    if args.phase_seconds <= 0 or args.service_ms <= 0:
        p.error("need --phase-seconds > 0 and --service-ms > 0")
    if args.degraded_max < args.degraded_min or args.degraded_max >= args.request_timeout:
        p.error("need degraded-min <= degraded-max < request-timeout")
    return args


async def amain(args: argparse.Namespace) -> int:
    healthy_cfg = {"max_concurrent": args.budget - args.degraded_slice, "max_queue": 100,
                   "queue_timeout": 1.0}
    degraded_cfg = {"max_concurrent": args.degraded_slice, "max_queue": 4, "queue_timeout": 0.1}
    # What the report shows (examples/report.py documents the shape); None: no report.
    rec: Optional[Dict[str, Any]] = None if args.report is None else {}
    traces: Dict[str, List[Tuple[float, int, str, float]]] = {}
    up = Upstreams(args)
    try:
        keys = [hullguard.origin_key(u) for u in up.urls]
        print("hullguard isolation demo (Python, httpx)")
        print(f"  healthy upstream  {up.urls[0]}  answers in ~{args.healthy_ms:g} ms")
        print(f"  degraded upstream {up.urls[1]}  answers in {args.degraded_min:g}-"
              f"{args.degraded_max:g} s   (both served by a separate process, pid {up.proc.pid})")
        print(f"  load: {args.seconds:g} s open loop, a healthy request every "
              f"{args.healthy_every_ms:g} ms and a degraded one every {args.degraded_every_ms:g} ms")
        print(f"  shared budget: one httpx.AsyncClient, Limits(max_connections={args.budget}) "
              f"across all origins; Timeout(pool={args.pool_timeout:g})")
        print(f"  with hullguard: BulkheadTransport(registry=Registry(**{healthy_cfg}, "
              f"overrides={{{keys[1]!r}: {degraded_cfg}}}))")

        # Warm-up, untimed: the first request of a process pays httpx's lazy imports (anyio's
        # backend, h11) and would otherwise count against the first run only.
        async with httpx.AsyncClient() as warm:
            for url in up.urls[:1]:
                (await warm.get(url)).raise_for_status()

        without = await run_once("without hullguard", args, up, None,
                                 traces.setdefault("without hullguard", []))
        registry = hullguard.Registry(**healthy_cfg, overrides={keys[1]: degraded_cfg})
        with_ = await run_once("with hullguard", args, up, registry,
                               traces.setdefault("with hullguard", []))
        print_table(without, with_, args)
        stats = registry.stats()
        print_stats(stats[keys[0]], stats[keys[1]])
        phases_ok = True
        # Each phase fills its part of the recording when there is one (a None record: none).
        def part(name: str) -> Optional[Dict[str, Any]]:
            return None if rec is None else rec.setdefault(name, {})

        if not args.no_policies:
            phases_ok &= await demo_phases.breaker_phase(up.urls[0], up.scripted_url,
                                                         record=part("breaker"))
            for algorithm in args.algorithms.split(","):
                phases_ok &= await demo_phases.adaptive_phase(
                    up.pool_url, algorithm, args.service_ms / 1000.0, args.phase_seconds,
                    record=None if rec is None else rec.setdefault("adaptive", {}).setdefault(
                        algorithm, {}),
                )
        if not args.no_llm:
            llm_ok, _ = await llm_gateway_demo.gateway_phase(llm_gateway_demo.phase_args(args),
                                                             record=part("llm"))
            phases_ok &= llm_ok
        if not args.no_deadline:
            deadline_ok, _ = await deadline_demo.deadline_phase(deadline_demo.phase_args(args),
                                                                record=part("deadline"))
            phases_ok &= deadline_ok
        if not args.no_edge:
            edge_ok, _ = await edge_demo.edge_phase(edge_demo.phase_args(args),
                                                    record=part("edge"))
            phases_ok &= edge_ok
        if not args.no_host:
            host_ok, _ = await host_demo.host_phase(host_demo.phase_args(args),
                                                    record=part("host"))
            phases_ok &= host_ok
    finally:
        up.close()

    p99_ok = with_.healthy_pct[2] * 5 <= without.healthy_pct[2]
    # The strict form, as in the Rust demo: with hullguard a healthy request never even finds
    # the shared budget full (the slices add up to the budget), so it cannot wait behind a
    # degraded one.
    isolated = with_.healthy_waited == 0 and with_.healthy_waited_behind_degraded == 0
    print()
    print(f"check: healthy p99 with hullguard ({ms(with_.healthy_pct[2])}) at most a fifth of "
          f"without ({ms(without.healthy_pct[2])}): {'PASS' if p99_ok else 'FAIL'}")
    print(f"check: healthy requests that waited behind a degraded one for the shared budget, "
          f"with hullguard: {with_.healthy_waited_behind_degraded} (want 0; waited at all: "
          f"{with_.healthy_waited}): {'PASS' if isolated else 'FAIL'}")
    if rec is not None:
        write_report(rec, args, traces, [
            ("isolation", f"healthy p99 with hullguard ({ms(with_.healthy_pct[2])}) at most a "
                          f"fifth of without ({ms(without.healthy_pct[2])})", p99_ok),
            ("isolation", f"no healthy request waited behind a degraded one for the shared "
                          f"budget, with hullguard (saw {with_.healthy_waited_behind_degraded})",
             isolated),
        ])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"without": without.__dict__, "with": with_.__dict__, "stats": stats,
                 "checks": {"p99": p99_ok, "isolated": isolated, "policies": phases_ok}},
                f, indent=2,
            )
    if args.report_only:
        return 0
    return 0 if p99_ok and isolated and phases_ok else 1


def write_report(rec: Dict[str, Any], args: argparse.Namespace,
                 traces: Dict[str, List[Tuple[float, int, str, float]]],
                 isolation_checks: List[Tuple[str, str, bool]]) -> None:
    """Completes the recording (the isolation runs, the run's parameters, every phase's checks)
    and writes the HTML report to ``args.report``."""
    rec["isolation"] = {"budget": args.budget, "healthy_ms": args.healthy_ms,
                        "degraded_s": (args.degraded_min, args.degraded_max),
                        "seconds": args.seconds, "runs": traces}
    checks = list(isolation_checks)
    checks += [("breaker", label, ok) for label, ok in rec.get("breaker", {}).get("checks", [])]
    for algorithm, a in rec.get("adaptive", {}).items():
        checks += [(f"adaptive ({algorithm})", label, ok) for label, ok in a.get("checks", [])]
    for name in ("llm", "deadline", "edge", "host"):
        checks += [(name, label, ok) for label, ok in rec.get(name, {}).get("checks", [])]
    rec["checks"] = checks
    rec["params"] = {k: v for k, v in sorted(vars(args).items())
                     if k not in ("serve", "report", "json")}
    rec["subtitle"] = (f"make demo (examples/isolation_demo.py), {time.strftime('%Y-%m-%d %H:%M:%S')}"
                       f": real local HTTP traffic on 127.0.0.1")
    path = report.demo_report(rec).write(args.report)
    print(f"\nreport: {path}")


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.serve:
        asyncio.run(_serve_main(args))
        return 0
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
