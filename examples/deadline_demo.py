#!/usr/bin/env python3
"""The deadline phase of ``make demo`` (docs/design.md §13, §5.9, §4.10): request budgets and
queue-delay shedding on real local HTTP traffic, in Python (httpx).

An upstream in a process of its own on loopback answers ``GET /sleep/<ms>`` after that many
milliseconds. Two short experiments run against it, each twice (without, then with):

1. **A request budget across two sequential calls.** A gateway serves each incoming request
   with two upstream calls, A then B, and its caller gives up after ``--budget`` (1 s). Call A
   is usually fast (200 ms) but a quarter of the time medium (750 ms) and a quarter slow
   (1 200 ms); B takes 400 ms.

   * *without a budget*: each call has its own 2 s timeout (the usual per-call setting), so B
     still starts after a slow A — after the caller has given up — and a medium A's B runs past
     the deadline: the upstream does work nobody waits for;
   * *with a budget*: ``with hullguard.deadline(budget):`` around both calls, through
     ``hullguard.httpx.BulkheadTransport``: every call takes the time left as its httpx timeout
     (the second call sees what the first left), and a call whose deadline has passed is
     refused ``timeout`` before it is sent.

2. **Queue-delay shedding under a burst.** A ``Bulkhead(max_concurrent=4, queue_timeout=1)``
   in front of a 50 ms upstream (capacity ≈ 80 requests a second) gets a burst of ``--burst``
   requests at once, then 100 a second for 2 s (more than it can serve); its callers wait
   ``--patience`` (0.5 s) for an answer.

   * *FIFO, queue timeout only*: a standing queue forms; every request waits about the whole
     second before it is served or times out, so few are served while their caller still
     waits;
   * *CoDel + adaptive LIFO* (``queue_delay_target=0.02``, ``adaptive_lifo=True``): while the
     queue stands, the newest waiter is served first and the oldest are shed
     (``BulkheadShedError``, retryable, earlier than a timeout), so most requests are served
     while their caller still waits.

Each prints a table and checks (PASS/FAIL). Standalone: ``python examples/deadline_demo.py
[--report-only] [--json PATH]``; ``make demo`` runs it after the other phases
(``isolation_demo.py`` calls :func:`deadline_phase`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import httpx

import hullguard
import hullguard.httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_phases import percentile, stop_child  # noqa: E402

_OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n" \
      b"Connection: keep-alive\r\n\r\nok\n"


# ---------------------------------------------------------------------------------------------
# The upstream (its own process).


async def _serve() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                if path.startswith(b"/sleep/"):
                    await asyncio.sleep(float(path[len(b"/sleep/"):]) / 1000.0)
                writer.write(_OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    # Serve until the parent closes our stdin.
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


class Upstream:
    """The upstream process; ``url(ms)`` answers after ``ms`` milliseconds."""

    def __init__(self) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), "--serve"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.close()
            raise RuntimeError(f"upstream process failed to start: {line!r}")
        self.base = f"http://127.0.0.1:{int(line[1])}"

    def url(self, ms: float) -> str:
        return f"{self.base}/sleep/{ms:g}"

    def close(self) -> None:
        stop_child(self.proc)


# ---------------------------------------------------------------------------------------------
# 1. A request budget across two sequential calls.


@dataclass
class BudgetRun:
    name: str
    ok_in_time: int = 0  # both calls answered before the caller's deadline
    failed: int = 0  # a call failed (timeout or refused)
    late: int = 0  # answered, but after the caller had given up
    b_sent_after_deadline: int = 0  # second calls sent when the caller had already given up
    b_refused: int = 0  # second calls refused before sending (the deadline had passed)
    work_past_deadline_ms: float = 0.0  # upstream time spent on calls after their deadline
    latency: List[float] = field(default_factory=list)  # seconds, every request


def _a_ms(i: int, budget: float) -> float:
    """Call A's latency for request ``i``, in ms: a fifth of the budget, but three quarters of it
    for 1 in 4 and 1.2 budgets for 1 in 4 (200 / 750 / 1 200 ms for the default 1 s)."""
    return {0: 1.2, 1: 0.75}.get(i % 4, 0.2) * budget * 1000.0


async def _budget_run(up: Upstream, name: str, use_budget: bool, args: argparse.Namespace,
                      trace: Optional[List[Tuple[float, float, str]]] = None) -> BudgetRun:
    """One run; ``trace`` (optional, for the report) receives every request as ``(sent_at_s,
    latency_s, outcome)``, outcome ``ok`` (in time), ``late`` or ``failed``."""
    run = BudgetRun(name)
    budget = args.budget
    b_ms = 0.4 * budget * 1000.0  # call B: 400 ms for the default 1 s budget
    if use_budget:
        transport = hullguard.httpx.BulkheadTransport(
            registry=hullguard.Registry(max_concurrent=64, max_queue=64)
        )
        client = httpx.AsyncClient(transport=transport, timeout=2.0 * budget)
    else:
        client = httpx.AsyncClient(timeout=2.0 * budget)

    async def call(url: str, deadline: float) -> str:
        """``ok``, ``refused`` (by hullguard, never sent) or ``failed``."""
        start = time.monotonic()
        try:
            (await client.get(url)).raise_for_status()
            return "ok"
        except hullguard.BulkheadError:
            return "refused"
        except httpx.HTTPError:
            return "failed"
        finally:
            end = time.monotonic()
            run.work_past_deadline_ms += max(0.0, end - max(start, deadline)) * 1000.0

    async def request(i: int) -> None:
        t0 = time.monotonic()
        deadline = t0 + budget

        async def both() -> bool:
            if await call(up.url(_a_ms(i, budget)), deadline) != "ok":
                return False
            after = time.monotonic() >= deadline
            got = await call(up.url(b_ms), deadline)
            if after and got == "refused":
                run.b_refused += 1
            elif after:
                run.b_sent_after_deadline += 1
            return got == "ok"

        if use_budget:
            with hullguard.deadline(budget):
                ok = await both()
        else:
            ok = await both()
        t1 = time.monotonic()
        run.latency.append(t1 - t0)
        if not ok:
            run.failed += 1
        elif t1 > deadline:
            run.late += 1
        else:
            run.ok_in_time += 1
        if trace is not None:
            outcome = "failed" if not ok else ("late" if t1 > deadline else "ok")
            trace.append((t0 - started, t1 - t0, outcome))

    async with client:
        await client.get(up.url(0))  # warm-up: a connection and httpx's lazy imports
        started = time.monotonic()
        tasks = []
        for i in range(args.requests):
            tasks.append(asyncio.create_task(request(i)))
            await asyncio.sleep(1.0 / args.rate)
        await asyncio.gather(*tasks)
    run.latency.sort()
    return run


async def budget_experiment(up: Upstream, args: argparse.Namespace,
                            record: Optional[Dict[str, Any]] = None
                            ) -> Tuple[bool, Dict[str, Any]]:
    print()
    b = args.budget * 1000.0
    print(f"== deadlines: a {args.budget:g} s request budget across two sequential calls "
          f"(A: {0.2 * b:.0f} ms, 1 in 4 {0.75 * b:.0f} ms, 1 in 4 {1.2 * b:.0f} ms; then B: "
          f"{0.4 * b:.0f} ms), {args.requests} requests at {args.rate:g}/s ==")
    traces: Dict[str, List[Tuple[float, float, str]]] = {}
    without = await _budget_run(up, f"per-call timeouts ({2 * args.budget:g} s)", False, args,
                                traces.setdefault("without", []))
    with_ = await _budget_run(up, f"hullguard.deadline({args.budget:g})", True, args,
                              traces.setdefault("with", []))
    print(f"  {'':34}{without.name:>26}{with_.name:>26}")

    def row(label: str, a: object, b: object) -> None:
        print(f"  {label:34}{str(a):>26}{str(b):>26}")

    row("answered within the budget", without.ok_in_time, with_.ok_in_time)
    row("answered after the caller left", without.late, with_.late)
    row("failed (timeout / refused)", without.failed, with_.failed)
    row("B sent after the deadline", without.b_sent_after_deadline, with_.b_sent_after_deadline)
    row("B refused before sending", without.b_refused, with_.b_refused)
    row("upstream work past deadlines", f"{without.work_past_deadline_ms:.0f} ms",
        f"{with_.work_past_deadline_ms:.0f} ms")
    row("request latency p50 / p99",
        f"{percentile(without.latency, 50) * 1000:.0f} / {percentile(without.latency, 99) * 1000:.0f} ms",
        f"{percentile(with_.latency, 50) * 1000:.0f} / {percentile(with_.latency, 99) * 1000:.0f} ms")
    slack = args.slack
    checks = {
        "no call sent after its request's deadline with the budget (some without)":
            without.b_sent_after_deadline > 0 and with_.b_sent_after_deadline == 0,
        f"with the budget every request ends by the deadline (p99 <= {args.budget:g} s + "
        f"{slack * 1000:.0f} ms; without: p99 past it)":
            percentile(with_.latency, 99) <= args.budget + slack
            and percentile(without.latency, 99) > args.budget + slack,
        "upstream work past deadlines with the budget at most a fifth of without":
            with_.work_past_deadline_ms * 5 <= without.work_past_deadline_ms,
        "as many requests answered within the budget (goodput not lower)":
            with_.ok_in_time >= without.ok_in_time,
    }
    for text, ok in checks.items():
        print(f"check: {text}: {'PASS' if ok else 'FAIL'}")
    if record is not None:
        record["budget_s"] = args.budget
        record["budget_runs"] = {without.name: traces["without"], with_.name: traces["with"]}
        record.setdefault("checks", []).extend((t, bool(ok)) for t, ok in checks.items())
    return all(checks.values()), {"without": without.__dict__, "with": with_.__dict__}


# ---------------------------------------------------------------------------------------------
# 2. Queue-delay shedding under a burst.


@dataclass
class BurstRun:
    name: str
    ok: int = 0
    timeout: int = 0
    shed: int = 0
    other: int = 0
    latency: List[float] = field(default_factory=list)  # seconds, every served request
    failure_wait: List[float] = field(default_factory=list)  # seconds until a refusal


async def _burst_run(up: Upstream, name: str, options: Dict[str, Any],
                     args: argparse.Namespace,
                     trace: Optional[List[Tuple[float, str, float]]] = None
                     ) -> Tuple[BurstRun, Dict[str, Any]]:
    """One run; ``trace`` (optional, for the report) receives every request as ``(arrived_s,
    outcome, seconds until served or refused)``, outcome ``ok``, ``timeout``, ``shed`` or
    ``other``."""
    run = BurstRun(name)
    bh = hullguard.Bulkhead(max_concurrent=4, max_queue=1000, queue_timeout=1.0, **options)
    url = up.url(50)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=8), timeout=5.0) as client:
        for _ in range(4):
            await client.get(up.url(0))  # warm-up

        async def request() -> None:
            t0 = time.monotonic()
            outcome = "other"
            try:
                async with bh.acquire():
                    (await client.get(url)).raise_for_status()
                run.ok += 1
                run.latency.append(time.monotonic() - t0)
                outcome = "ok"
            except hullguard.BulkheadShedError:
                run.shed += 1
                run.failure_wait.append(time.monotonic() - t0)
                outcome = "shed"
            except hullguard.BulkheadQueueTimeoutError:
                run.timeout += 1
                run.failure_wait.append(time.monotonic() - t0)
                outcome = "timeout"
            except (httpx.HTTPError, hullguard.BulkheadError):
                run.other += 1
            finally:
                if trace is not None:
                    trace.append((t0 - started, outcome, time.monotonic() - t0))

        started = time.monotonic()
        tasks = [asyncio.create_task(request()) for _ in range(args.burst)]
        steady = int(args.steady_rate * args.steady_seconds)
        for _ in range(steady):
            await asyncio.sleep(1.0 / args.steady_rate)
            tasks.append(asyncio.create_task(request()))
        await asyncio.gather(*tasks)
    run.latency.sort()
    return run, bh.stats()


async def burst_experiment(up: Upstream, args: argparse.Namespace,
                           record: Optional[Dict[str, Any]] = None
                           ) -> Tuple[bool, Dict[str, Any]]:
    print()
    steady = int(args.steady_rate * args.steady_seconds)
    patience = args.patience
    print(f"== queue-delay shedding: Bulkhead(max_concurrent=4, queue_timeout=1) before a 50 ms "
          f"upstream (≈ 80/s); a burst of {args.burst}, then {args.steady_rate:g}/s for "
          f"{args.steady_seconds:g} s ({steady} more); callers wait {patience * 1000:.0f} ms ==")
    traces: Dict[str, List[Tuple[float, str, float]]] = {}
    fifo, _ = await _burst_run(up, "FIFO, queue timeout only", {}, args,
                               traces.setdefault("fifo", []))
    codel, stats = await _burst_run(
        up, "CoDel 20 ms + adaptive LIFO",
        {"queue_delay_target": 0.02, "queue_delay_interval": 0.1, "adaptive_lifo": True}, args,
        traces.setdefault("codel", []),
    )
    print(f"  {'':34}{fifo.name:>28}{codel.name:>28}")

    def row(label: str, a: object, b: object) -> None:
        print(f"  {label:34}{str(a):>28}{str(b):>28}")

    def pct(xs: List[float], p: float) -> str:
        return f"{percentile(xs, p) * 1000:.0f} ms" if xs else "-"

    def in_time(r: BurstRun) -> int:
        return sum(1 for x in r.latency if x <= patience)

    def mean_ms(xs: List[float]) -> str:
        return f"{sum(xs) / len(xs) * 1000:.0f} ms" if xs else "-"

    row("served", fifo.ok, codel.ok)
    row(f"served within {patience * 1000:.0f} ms (goodput)", in_time(fifo), in_time(codel))
    row("served latency p50 / p99", f"{pct(fifo.latency, 50)} / {pct(fifo.latency, 99)}",
        f"{pct(codel.latency, 50)} / {pct(codel.latency, 99)}")
    row("timed out after waiting 1 s", fifo.timeout, codel.timeout)
    row("shed (fail fast, retryable)", fifo.shed, codel.shed)
    row("time until refused, mean", mean_ms(fifo.failure_wait), mean_ms(codel.failure_wait))
    f50 = percentile(fifo.latency, 50) if fifo.latency else float("inf")
    c50 = percentile(codel.latency, 50) if codel.latency else float("inf")
    checks = {
        "CoDel shed the standing queue (shed > 0, counted in the stats; none without it)":
            codel.shed > 0 and fifo.shed == 0 and stats["rejected_by_reason"]["shed"] == codel.shed,
        "served latency at the median at least 3x lower with CoDel + LIFO": c50 * 3 <= f50,
        f"at least twice the requests served within {patience * 1000:.0f} ms":
            in_time(codel) >= 2 * in_time(fifo),
    }
    for text, ok in checks.items():
        print(f"check: {text}: {'PASS' if ok else 'FAIL'}")
    if record is not None:
        record["patience_s"] = patience
        record["burst_runs"] = {fifo.name: traces["fifo"], codel.name: traces["codel"]}
        record.setdefault("checks", []).extend((t, bool(ok)) for t, ok in checks.items())
    return all(checks.values()), {"fifo": fifo.__dict__, "codel": codel.__dict__,
                                  "codel_stats_shed": stats["rejected_by_reason"]["shed"]}


# ---------------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The phase's options (``prefix`` when embedded in another demo's parser)."""
    p.add_argument(f"--{prefix}budget", type=float, default=1.0, help="request budget (s)")
    p.add_argument(f"--{prefix}requests", type=int, default=40, help="budget: requests sent")
    p.add_argument(f"--{prefix}rate", type=float, default=25.0, help="budget: requests a second")
    p.add_argument(f"--{prefix}slack", type=float, default=0.15,
                   help="budget: how far past the deadline a request may end (s)")
    p.add_argument(f"--{prefix}burst", type=int, default=120, help="shedding: burst size")
    p.add_argument(f"--{prefix}steady-rate", type=float, default=100.0,
                   help="shedding: steady arrivals a second (the upstream takes ~80)")
    p.add_argument(f"--{prefix}patience", type=float, default=0.5,
                   help="shedding: how long a caller waits (s) for the goodput count")
    p.add_argument(f"--{prefix}steady-seconds", type=float, default=2.0)


def phase_args(args: argparse.Namespace, prefix: str = "deadline_") -> argparse.Namespace:
    """The phase's own namespace from an embedding demo's (its ``--deadline-*`` options)."""
    names = ("budget", "requests", "rate", "slack", "burst", "steady_rate", "steady_seconds",
             "patience")
    return argparse.Namespace(**{n: getattr(args, prefix + n) for n in names})


async def deadline_phase(args: argparse.Namespace, record: Optional[Dict[str, Any]] = None
                         ) -> Tuple[bool, Dict[str, Any]]:
    """Both experiments against one upstream process; (all checks passed, summaries).
    ``record`` (optional, for the HTML report) receives ``budget_s``, ``budget_runs`` (per run
    name: ``[(sent_at_s, latency_s, outcome)]``), ``patience_s``, ``burst_runs`` (per run name:
    ``[(arrived_s, outcome, seconds)]``) and ``checks`` ``[(label, passed)]``."""
    up = Upstream()
    try:
        ok_a, a = await budget_experiment(up, args, record)
        ok_b, b = await burst_experiment(up, args, record)
    finally:
        up.close()
    return ok_a and ok_b, {"budget": a, "burst": b}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--json", metavar="PATH", help="also write the summaries as JSON")
    p.add_argument("--report-only", action="store_true", help="print the checks, exit 0")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(_serve())
        return 0
    ok, summary = asyncio.run(deadline_phase(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if ok or args.report_only else 1


if __name__ == "__main__":
    sys.exit(main())
