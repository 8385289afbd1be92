#!/usr/bin/env python3
"""The edge phase of ``make demo`` (docs/design.md §13, §4.11; issue 18): load shedding at the
server, in Python — an ASGI app behind ``hullguard.asgi.AdmissionMiddleware`` served by a real
uvicorn on loopback, under a burst of mixed critical and non-critical requests with an
**injected** CPU signal.

The server (a process of its own, so the load generator's loop measures only the client) runs a
Starlette app modelling a CPU-bound service: 4 "cores" (an ``asyncio.Semaphore(4)``, FIFO), and
each request holds one for ``--service-ms`` of work. A scripted CPU probe (the middleware's
``cpu_probe=``) reports the process's "CPU use" from a script instead of measuring it:
``--calm-cpu`` (0.3 cores), then ``--hot-cpu`` (0.95) from ``--hot-from`` to ``--hot-until``
seconds, then calm again; while the CPU is "hot" a request's work takes ``--hot-service-ms``
(the cores are as good as taken), so the server's capacity drops below the offered load —
exactly the moment the issue's gateway must shed.

The client (a lean keep-alive HTTP/1.1 load generator, :class:`LoadClient`) sends ``--rate``
requests a second for ``--seconds`` (open loop; every ``--critical-every``-th request carries
``x-class: critical``, the others ``x-class: batch``), twice, each against a fresh server:

1. **without hullguard** (the bare app): every request waits its turn for a core, FIFO; while
   the server is slow the backlog grows and critical requests wait behind batch ones;
2. **with hullguard**: the app behind ``AdmissionMiddleware(app, bulkhead=Bulkhead(
   max_concurrent=4, max_queue=400, queue_timeout=1, classes=[batch, critical (priority 10)],
   critical_priority=10, shed_cpu_threshold=0.8), classify="x-class", cpu_probe=<the script>)``:
   while the signal is over the threshold batch requests get 503 at once (reason ``shed``, bound
   ``overload``, no ``Retry-After`` — there is no honest estimate of when an overload ends) and
   critical ones pass while capacity is left.

It prints per run and class the requests, the 200s, the 503s by reason, p50/p99 latency of the
200s and the admitted work (the requests the server admitted and served, those served while the
CPU was hot, and the core time they took), then checks (PASS/FAIL). Standalone:
``python examples/edge_demo.py [--seconds 4] [--json PATH] [--report-only]`` (about 14 s);
``make demo`` runs it after the other phases (``isolation_demo.py`` calls :func:`edge_phase`);
:func:`run` returns the per-class numbers and the time series ``(t_s, class, http_status,
latency_s)``. Only 127.0.0.1; every server process is stopped; a fixed number of requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_phases import percentile, stop_child  # noqa: E402

CLASSES = ("critical", "batch")
THRESHOLD = 0.8


# ---------------------------------------------------------------------------------------------
# The server (its own process).


class ScriptedCpu:
    """The injected CPU signal: a probe object for ``AdmissionMiddleware(cpu_probe=...)`` that
    reports the scripted value every 20 ms instead of measuring the process. ``start()`` (the
    client's ``GET /__start``) starts the script's clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0: Optional[float] = None

    def elapsed(self) -> Optional[float]:
        return None if self.t0 is None else time.monotonic() - self.t0

    def hot(self) -> bool:
        t = self.elapsed()
        return t is not None and self.args.hot_from <= t < self.args.hot_until

    def value(self) -> float:
        return float(self.args.hot_cpu if self.hot() else self.args.calm_cpu)

    async def run(self, report: Any) -> None:
        while True:
            report(cpu=self.value())
            await asyncio.sleep(0.02)


def build_app(args: argparse.Namespace, guarded: bool) -> Tuple[Any, Optional[Any], ScriptedCpu]:
    """The server's ASGI app: ``/work`` — behind the middleware when ``guarded``, bare
    otherwise; ``/__start`` and ``/__stats`` (the demo's controls) beside it, never admitted.

    The handler models a CPU-bound server: 4 "cores" (an ``asyncio.Semaphore(4)``, FIFO) and a
    request holds one for its work — ``--service-ms``, or ``--hot-service-ms`` while the
    injected CPU is hot (the cores are as good as taken)."""
    import hullguard
    from hullguard.asgi import AdmissionMiddleware
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    cpu = ScriptedCpu(args)
    cores = asyncio.Semaphore(4)
    # The admitted work per class: requests served, those served while the CPU was hot, and
    # the core time they took.
    work: Dict[str, Dict[str, float]] = {c: {"served": 0, "served_hot": 0, "core_s": 0.0}
                                         for c in CLASSES}

    async def handler(request: Request) -> Response:
        async with cores:
            hot = cpu.hot()
            ms = args.hot_service_ms if hot else args.service_ms
            await asyncio.sleep(ms / 1000.0)
        w = work.get(request.headers.get("x-class", ""), work["batch"])
        w["served"] += 1
        w["served_hot"] += hot
        w["core_s"] += ms / 1000.0
        return PlainTextResponse("done")

    inner = Starlette(routes=[Route("/work", handler)])
    bh = None
    if guarded:
        bh = hullguard.Bulkhead(
            max_concurrent=4, max_queue=400, queue_timeout=1.0,
            classes=[{"name": "batch"}, {"name": "critical", "priority": 10}],
            critical_priority=10, shed_cpu_threshold=THRESHOLD,
        )
        served: Any = AdmissionMiddleware(inner, bulkhead=bh, classify="x-class", cpu_probe=cpu,
                                          lag_probe=False)
    else:
        served = inner

    async def control(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/__start":
            cpu.t0 = time.monotonic()
            body: Any = {"started": True}
        else:
            body = {"stats": None if bh is None else bh.stats(), "work": work}
        await JSONResponse(body)(scope, receive, send)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/__"):
            await control(scope, receive, send)
        else:
            await served(scope, receive, send)

    return app, bh, cpu


def serve(args: argparse.Namespace) -> None:
    """Serves until stdin closes; prints ``PORT <n>`` once listening."""
    import uvicorn

    app, _, _ = build_app(args, args.guarded)
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so (a socket of
    # proto 0 would leave Nagle on, and every response would wait ~40 ms for a delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", loop="asyncio", log_level="warning",
                                           access_log=False, backlog=2048,
                                           timeout_graceful_shutdown=3))

    def watch_stdin() -> None:
        sys.stdin.read()
        server.should_exit = True

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        print(f"PORT {sock.getsockname()[1]}", flush=True)

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=announce, daemon=True).start()
    server.run(sockets=[sock])


class Server:
    """The server process of one run (``guarded``: behind the middleware)."""

    def __init__(self, args: argparse.Namespace, guarded: bool) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), "--serve", *_server_argv(args)]
        if guarded:
            cmd.append("--guarded")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.close()
            raise RuntimeError(f"edge server failed to start: {line!r}")
        self.port = int(line[1])

    def close(self) -> None:
        stop_child(self.proc)


_SCRIPT = ("service_ms", "hot_service_ms", "calm_cpu", "hot_cpu", "hot_from", "hot_until")


def _server_argv(args: argparse.Namespace) -> List[str]:
    out = []
    for name in _SCRIPT:
        out += [f"--{name.replace('_', '-')}", repr(getattr(args, name))]
    return out


# ---------------------------------------------------------------------------------------------
# The client.


@dataclass
class ClassRun:
    sent: int = 0
    ok: int = 0
    refused: Dict[str, int] = field(default_factory=dict)  # 503s (and 429s) by reason
    retry_after: int = 0  # refusals that carried a Retry-After header
    errors: int = 0  # transport errors (none expected on loopback)
    latency: List[float] = field(default_factory=list)  # seconds, the 200s
    shed_at: List[float] = field(default_factory=list)  # send times (s) of the shed ones


@dataclass
class Run:
    name: str
    classes: Dict[str, ClassRun] = field(default_factory=lambda: {c: ClassRun() for c in CLASSES})
    records: List[Tuple[float, str, int, float]] = field(default_factory=list)
    stats: Dict[str, Any] = field(default_factory=dict)
    work: Dict[str, Dict[str, float]] = field(default_factory=dict)  # the server's counts


class LoadClient:
    """The load generator's HTTP/1.1 client: keep-alive connections over asyncio streams, one
    request per connection at a time, ``Content-Length`` bodies (what uvicorn answers here).
    Not httpx: with a hundred requests in flight, httpx's connection pool (httpcore) rescans
    its connections at every event and the client falls behind its own schedule — time that
    would be reported as the server's latency. This one costs a few tens of µs a request.
    Errors: ``OSError`` / ``asyncio.IncompleteReadError`` from the socket, ``ValueError`` for a
    response it cannot read."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened: List[asyncio.StreamWriter] = []

    async def _connect(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opened.append(writer)
        return reader, writer

    async def warm(self, n: int) -> None:
        """Opens ``n`` connections ahead (opening one costs more than a request)."""
        self.idle += await asyncio.gather(*(self._connect() for _ in range(n)))

    async def get(self, path: str, headers: Optional[Dict[str, str]] = None
                  ) -> Tuple[int, Dict[str, str], bytes]:
        """``(status, headers (lower-case names), body)`` of ``GET path``."""
        conn = self.idle.pop() if self.idle else await self._connect()
        reader, writer = conn
        head = f"GET {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write((head + "\r\n").encode("latin-1"))
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.1 response: {status_line!r}")
        got: Dict[str, str] = {}
        for line in (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n"):
            if b":" in line:
                k, v = line.split(b":", 1)
                got[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        body = await reader.readexactly(int(got.get("content-length", "0")))
        if got.get("connection", "").lower() == "close":
            writer.close()
        else:
            self.idle.append(conn)
        return int(parts[1]), got, body

    async def close(self) -> None:
        for w in self.opened:
            w.close()
        for w in self.opened:
            try:
                await w.wait_closed()
            except OSError:
                pass


async def _run(args: argparse.Namespace, name: str, guarded: bool) -> Run:
    run = Run(name)
    server = Server(args, guarded)
    client = LoadClient("127.0.0.1", server.port)
    try:
        await client.warm(args.warm_connections)
        await client.get("/__stats")
        await client.get("/__start")
        t0 = time.monotonic()

        async def one(i: int, cls: str) -> None:
            r = run.classes[cls]
            r.sent += 1
            start = time.monotonic()
            try:
                status, headers, body = await client.get("/work", {"x-class": cls})
            except (OSError, asyncio.IncompleteReadError, ValueError):
                r.errors += 1
                return
            end = time.monotonic()
            t, lat = start - t0, end - start
            run.records.append((round(t, 4), cls, status, round(lat, 5)))
            if status == 200:
                r.ok += 1
                r.latency.append(lat)
                return
            reason = json.loads(body).get("reason", "?")
            r.refused[reason] = r.refused.get(reason, 0) + 1
            if "retry-after" in headers:
                r.retry_after += 1
            if reason == "shed":
                r.shed_at.append(t)

        tasks = []
        n = int(args.rate * args.seconds)
        for i in range(n):
            cls = "critical" if i % args.critical_every == 0 else "batch"
            tasks.append(asyncio.create_task(one(i, cls)))
            await asyncio.sleep(max(0.0, t0 + (i + 1) / args.rate - time.monotonic()))
        await asyncio.gather(*tasks)
        run.stats = json.loads((await client.get("/__stats"))[2])
        for cls in CLASSES:
            run.classes[cls].latency.sort()
        run.work = run.stats["work"]
        run.records.sort()
    finally:
        await client.close()
        server.close()
    return run


def _per_class(run: Run) -> Dict[str, Dict[str, Any]]:
    out = {}
    for cls in CLASSES:
        r = run.classes[cls]
        out[cls] = {
            "requests": r.sent,
            "200": r.ok,
            "503": sum(r.refused.values()),
            "503 shed": r.refused.get("shed", 0),
            "503 timeout": r.refused.get("timeout", 0),
            "p50 (ms)": round(percentile(r.latency, 50) * 1e3, 1),
            "p99 (ms)": round(percentile(r.latency, 99) * 1e3, 1),
            "admitted work": int(run.work[cls]["served"]),
            "  of it while hot": int(run.work[cls]["served_hot"]),
            "  core time (s)": round(run.work[cls]["core_s"], 2),
        }
    return out


async def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Both runs; the result: ``{"ok": all checks passed, "checks": [(text, ok)],
    "per_class": {"<class>, <run>": {metric: number}}, "runs": {run: {class: {metric:
    number}}}, "records": [(t_s, "<class>, <run>", http_status, latency_s)] (each request, by
    send time from the run's start), "cpu": [(t_s, cores)] (the injected signal's steps),
    "threshold": cores, "stats": the server bulkhead's stats() at the end of the guarded run}``.
    Runs ``without hullguard`` and ``with hullguard``."""
    hot = f"{args.hot_cpu:g} from t={args.hot_from:g} s to {args.hot_until:g} s"
    print()
    print(f"== edge: AdmissionMiddleware on uvicorn, an injected CPU signal ({args.calm_cpu:g} "
          f"cores, {hot}, then {args.calm_cpu:g}) ==")
    print(f"  with hullguard: AdmissionMiddleware(app, bulkhead=Bulkhead(max_concurrent=4, "
          f"max_queue=400, queue_timeout=1, classes=[batch, critical (priority 10)], "
          f"critical_priority=10, shed_cpu_threshold={THRESHOLD:g}), classify='x-class', "
          f"cpu_probe=<the script>)")
    print(f"  load: {args.rate:g} requests/s for {args.seconds:g} s, 1 in {args.critical_every} "
          f"critical; 4 cores, a request holds one for {args.service_ms:g} ms, "
          f"{args.hot_service_ms:g} ms while the CPU is hot (capacity {4000 / args.service_ms:.0f}/s, "
          f"then {4000 / args.hot_service_ms:.0f}/s)")
    without = await _run(args, "without hullguard", False)
    with_ = await _run(args, "with hullguard", True)
    runs = {without.name: _per_class(without), with_.name: _per_class(with_)}

    metrics = list(runs[with_.name]["critical"])
    print(f"  {'':22}" + "".join(f"{f'{c}, {n.split()[0]}':>18}" for n in runs for c in CLASSES))
    print(f"  {'':22}" + "".join(f"{'hullguard':>18}" for n in runs for c in CLASSES))
    for m in metrics:
        print(f"  {m:22}" + "".join(f"{runs[n][c][m]:>18}" for n in runs for c in CLASSES))
    load = with_.stats["stats"]["load"]
    print(f"  with hullguard, the server's bulkhead: load={load}, "
          f"rejected_by_reason.shed={with_.stats['stats']['rejected_by_reason']['shed']}")

    crit_w, crit_wo = with_.classes["critical"], without.classes["critical"]
    batch_w = with_.classes["batch"]
    p99_w = percentile(crit_w.latency, 99)
    p99_wo = percentile(crit_wo.latency, 99)
    slack = args.slack
    hot_w = {c: int(with_.work[c]["served_hot"]) for c in CLASSES}
    hot_wo = {c: int(without.work[c]["served_hot"]) for c in CLASSES}
    all_refused = [r for run_ in (without, with_) for r in run_.classes.values()]
    checks = [
        (f"batch shed with 503 while the CPU signal was over the threshold ({len(batch_w.shed_at)}), "
         f"none before it (slack {slack:g} s)",
         len(batch_w.shed_at) > 0
         and all(args.hot_from - slack <= t < args.hot_until + slack for t in batch_w.shed_at)),
        ("critical never refused with hullguard (every critical request answered 200)",
         crit_w.ok == crit_w.sent and not crit_w.refused and crit_w.errors == 0),
        (f"critical p99 with hullguard at most a third of without ({p99_w * 1e3:.0f} ms vs "
         f"{p99_wo * 1e3:.0f} ms)",
         crit_w.latency != [] and p99_w * 3 <= p99_wo),
        (f"while the CPU was hot its cores went to critical work (served while hot: critical "
         f"{hot_w['critical']} vs {hot_wo['critical']} without, batch {hot_w['batch']} vs "
         f"{hot_wo['batch']})",
         hot_w["critical"] >= hot_wo["critical"] and hot_w["batch"] * 5 <= hot_wo["batch"]),
        ("no Retry-After on any 503 (no honest estimate of when an overload ends)",
         all(r.retry_after == 0 for r in all_refused)),
        ("the server's counts agree (load.shed_total == the batch 503s shed)",
         load["shed_total"] == len(batch_w.shed_at) + len(crit_w.shed_at)
         == with_.stats["stats"]["rejected_by_reason"]["shed"]),
        ("every request answered (no transport error)",
         all(r.errors == 0 for r in all_refused)),
    ]
    for text, ok in checks:
        print(f"check: {text}: {'PASS' if ok else 'FAIL'}")
    per_class = {f"{c}, {n}": runs[n][c] for n in runs for c in CLASSES}
    records = [(t, f"{c}, {r.name}", st, lat) for r in (without, with_) for t, c, st, lat in r.records]
    return {
        "ok": all(ok for _, ok in checks),
        "checks": [(t, bool(ok)) for t, ok in checks],
        "per_class": per_class,
        "runs": runs,
        "records": sorted(records),
        "cpu": [(0.0, args.calm_cpu), (args.hot_from, args.hot_cpu), (args.hot_until, args.calm_cpu),
                (args.seconds, args.calm_cpu)],
        "threshold": THRESHOLD,
        "stats": with_.stats["stats"],
    }


async def edge_phase(args: argparse.Namespace, record: Optional[Dict[str, Any]] = None
                     ) -> Tuple[bool, Dict[str, Any]]:
    """The phase as ``make demo`` runs it: (all checks passed, :func:`run`'s result).
    ``record`` (optional, for the HTML report, ``examples/report.py``'s ``edge``) receives
    ``per_class``, ``records`` (``(t_s, "<class>, <run>", http_status, latency_s)``), ``text``
    and ``checks``."""
    result = await run(args)
    if record is not None:
        record["per_class"] = result["per_class"]
        record["records"] = result["records"]
        record["cpu"] = result["cpu"]
        record["threshold"] = result["threshold"]
        record["text"] = (
            "An ASGI app (Starlette) behind hullguard's AdmissionMiddleware on uvicorn, under "
            f"{args.rate:g} requests/s (1 in {args.critical_every} critical) with a CPU signal "
            f"injected at {args.hot_cpu:g} cores from t={args.hot_from:g} s to "
            f"{args.hot_until:g} s (threshold {THRESHOLD:g}), while the handler slows from "
            f"{args.service_ms:g} to {args.hot_service_ms:g} ms: without hullguard the backlog "
            "builds and critical requests wait behind batch ones; with hullguard batch requests "
            "get 503 at once while the signal is high and critical ones pass.")
        record.setdefault("checks", []).extend(result["checks"])
    return result["ok"], result


# ---------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The phase's options (``prefix`` when embedded in another demo's parser)."""
    p.add_argument(f"--{prefix}seconds", type=float, default=6.0, help="how long each run sends")
    p.add_argument(f"--{prefix}rate", type=float, default=100.0, help="requests a second")
    p.add_argument(f"--{prefix}critical-every", type=int, default=5,
                   help="every n-th request is critical")
    p.add_argument(f"--{prefix}service-ms", type=float, default=10.0, help="handler work (ms)")
    p.add_argument(f"--{prefix}hot-service-ms", type=float, default=80.0,
                   help="handler work while the CPU is hot (ms)")
    p.add_argument(f"--{prefix}calm-cpu", type=float, default=0.3, help="injected CPU, calm")
    p.add_argument(f"--{prefix}hot-cpu", type=float, default=0.95, help="injected CPU, hot")
    p.add_argument(f"--{prefix}hot-from", type=float, default=2.0, help="hot from (s)")
    p.add_argument(f"--{prefix}hot-until", type=float, default=4.0, help="hot until (s)")
    p.add_argument(f"--{prefix}warm-connections", type=int, default=150,
                   help="connections the load generator opens before each run")
    p.add_argument(f"--{prefix}slack", type=float, default=0.25,
                   help="how far outside the hot window a shed may fall (s)")


_NAMES = ("seconds", "rate", "critical_every", "service_ms", "hot_service_ms", "calm_cpu",
          "hot_cpu", "hot_from", "hot_until", "warm_connections", "slack")


def phase_args(args: argparse.Namespace, prefix: str = "edge_") -> argparse.Namespace:
    """The phase's own namespace from an embedding demo's (its ``--edge-*`` options)."""
    return argparse.Namespace(**{n: getattr(args, prefix + n) for n in _NAMES})


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--json", metavar="PATH", help="also write run()'s result as JSON")
    p.add_argument("--report-only", action="store_true", help="print the checks, exit 0")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--guarded", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not (0 <= args.hot_from < args.hot_until <= args.seconds) or args.rate <= 0:
        p.error("need 0 <= --hot-from < --hot-until <= --seconds and --rate > 0")
    if args.serve:
        serve(args)
        return 0
    ok, result = asyncio.run(edge_phase(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if ok or args.report_only else 1


if __name__ == "__main__":
    sys.exit(main())
