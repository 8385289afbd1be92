#!/usr/bin/env python3
"""One limit per host: the isolation demo's client as worker processes (``make demo-host``, and
the host phase of ``make demo``; docs/design.md §14).

A degraded origin (a local HTTP server, its own process, answering in ``--latency`` seconds)
can take ``--limit`` requests at once. ``--workers`` worker processes — as gunicorn or
``uvicorn --workers`` would run a service — each send it an open-loop stream of requests through
a bulkhead of ``max_concurrent=--limit``, twice:

1. **per-process bulkheads** (``hullguard.Bulkhead``): each worker keeps its own limit, so the
   origin sees up to ``workers × limit`` at once — the limit multiplied (C26);
2. **one host-wide bulkhead** (``hullguard.HostBulkhead``, one segment every worker attaches):
   the origin never sees more than ``limit``; mid-run one worker is SIGKILLed while it holds
   permits, and the others' probes reclaim its slot (its OFD lock dropped with it) — the origin
   is back at ``limit`` within about one probe period.

The origin counts its own in-flight requests (a request ends when answered or when its client
goes away), so the figures are what the dependency saw. Printed: in-flight over time for both
runs, the reclaim time, the checks. Every process started is stopped and reaped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))


# ----- the degraded origin (its own process: --serve) ---------------------------------------

async def _serve(args: argparse.Namespace) -> None:
    """Serves until stdin closes. ``GET /__samples`` answers the in-flight changes since the
    last ``GET /__reset`` as JSON ``[[t_monotonic_s, in_flight], ...]`` (CLOCK_MONOTONIC: the
    same clock in every process of the host)."""
    in_flight = 0
    samples: List[Tuple[float, int]] = []

    def note() -> None:
        samples.append((time.monotonic(), in_flight))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, samples
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
        body = b"ok"
        if path == b"/__reset":
            samples = [(time.monotonic(), in_flight)]
        elif path == b"/__samples":
            body = json.dumps(samples).encode()
        else:
            in_flight += 1
            note()
            try:
                # The latency, or until the client goes away (EOF: a killed worker's sockets
                # close with it), whichever comes first.
                gone = await asyncio.wait_for(reader.read(1), timeout=args.latency)
                if gone == b"":
                    in_flight -= 1
                    note()
                    writer.close()
                    return
            except asyncio.TimeoutError:
                pass
            except ConnectionError:
                in_flight -= 1
                note()
                writer.close()
                return
            in_flight -= 1
            note()
        try:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n"
                         b"Content-Type: text/plain\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.close()


# ----- a worker process (--worker) --------------------------------------------------------

async def _work(args: argparse.Namespace) -> None:
    """One worker: waits for ``go`` on stdin, sends ``--rate`` requests a second for
    ``--seconds`` through its bulkhead, prints a JSON summary."""
    import httpx

    import hullguard

    if args.mode == "host":
        bh: Any = hullguard.HostBulkhead(args.name, max_concurrent=args.limit, dir=args.dir,
                                         max_queue=10_000, queue_timeout=args.queue_timeout,
                                         probe=args.probe)
    else:
        bh = hullguard.Bulkhead(max_concurrent=args.limit, max_queue=10_000,
                                queue_timeout=args.queue_timeout)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    counts: Dict[str, int] = {}

    async def one(client: httpx.AsyncClient) -> None:
        try:
            async with bh.acquire():
                r = await client.get(args.url)
                outcome = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except hullguard.BulkheadError as e:
            outcome = f"refused: {e.code}"
        except httpx.HTTPError as e:
            outcome = type(e).__name__
        counts[outcome] = counts.get(outcome, 0) + 1

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        start = time.monotonic()
        tasks = []
        i = 0
        while time.monotonic() - start < args.seconds:
            tasks.append(asyncio.create_task(one(client)))
            i += 1
            await asyncio.sleep(max(0.0, start + i / args.rate - time.monotonic()))
        await asyncio.gather(*tasks)
    print(json.dumps(counts), flush=True)


# ----- the phase ----------------------------------------------------------------------------

def _stop(proc: "subprocess.Popen[str]") -> None:
    """Closes a child's stdin, waits 10 s, then kills it; always reaped."""
    try:
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _get(port: int, path: str) -> bytes:
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read()


def _in_flight_at(samples: List[Tuple[float, int]], t: float) -> int:
    """The in-flight count in force at time ``t`` (the last change at or before it)."""
    v = 0
    for ts, n in samples:
        if ts > t:
            break
        v = n
    return v


def _run(args: argparse.Namespace, mode: str, port: int, seg_dir: str, name: str
         ) -> Dict[str, Any]:
    """One run of ``--workers`` workers in ``mode`` (``local`` / ``host``); in ``host`` mode
    worker 0 is SIGKILLed at ``--kill-at`` s."""
    _get(port, "/__reset")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode,
           "--url", f"http://127.0.0.1:{port}/work", "--name", name, "--dir", seg_dir,
           "--limit", str(args.limit), "--rate", str(args.rate), "--seconds", str(args.seconds),
           "--queue-timeout", str(args.queue_timeout), "--probe", str(args.probe)]
    workers = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(args.workers)]
    killed_at: Optional[float] = None
    summaries: List[Dict[str, int]] = []
    try:
        for w in workers:
            assert w.stdout is not None
            if w.stdout.readline().strip() != "ready":
                raise RuntimeError(f"worker {w.pid} did not start")
        go = time.monotonic()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        if mode == "host":
            time.sleep(max(0.0, go + args.kill_at - time.monotonic()))
            os.kill(workers[0].pid, signal.SIGKILL)
            killed_at = time.monotonic()
        for i, w in enumerate(workers):
            assert w.stdout is not None
            line = w.stdout.readline() if not (mode == "host" and i == 0) else ""
            summaries.append(json.loads(line) if line.strip() else {"killed": 1})
    finally:
        for w in workers:
            _stop(w)
    samples = [(float(t), int(n)) for t, n in json.loads(_get(port, "/__samples"))]
    end = go + args.seconds
    timeline = [(round(k * args.step, 3), _in_flight_at(samples, go + k * args.step))
                for k in range(int(args.seconds / args.step) + 1)]
    during = [n for t, n in samples if go <= t <= end + args.latency]
    out: Dict[str, Any] = {"mode": mode, "max_in_flight": max(during, default=0),
                           "timeline": timeline, "summaries": summaries,
                           "series": [(round(t - go, 4), n) for t, n in samples
                                      if go - 0.1 <= t <= end + args.latency]}
    if killed_at is not None:
        out["killed_at_s"] = round(killed_at - go, 3)
        # Recovered: the first moment after the kill at which the origin is back at the limit,
        # after the dip the dead worker's closed connections made.
        dipped = False
        recovered = None
        for t, n in samples:
            if t < killed_at:
                continue
            if n < args.limit:
                dipped = True
            elif dipped:
                recovered = t
                break
        out["dipped"] = dipped
        out["recovered_after_s"] = None if recovered is None else round(recovered - killed_at, 4)
    return out


async def host_phase(args: argparse.Namespace, record: Optional[Dict[str, Any]] = None
                     ) -> Tuple[bool, Dict[str, Any]]:
    """The phase as ``make demo`` runs it: (all checks passed, the result). ``record``
    (optional, ``examples/report.py``'s ``host``) receives ``limit``, ``workers``, ``runs``
    (``{name: [(t_s, in_flight)]}``), ``killed_at_s``, ``recovered_after_s`` and ``checks``."""
    return await asyncio.get_running_loop().run_in_executor(None, run_phase, args, record)


def run_phase(args: argparse.Namespace, record: Optional[Dict[str, Any]] = None
              ) -> Tuple[bool, Dict[str, Any]]:
    import hullguard

    print()
    print(f"== one limit per host: {args.workers} worker processes, an origin that takes "
          f"{args.limit} at once ==")
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve",
                               "--latency", str(args.latency)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seg_dir = tempfile.mkdtemp(prefix="hullguard-host-demo-")
    name = f"demo-origin-{os.getpid()}"
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        print(f"  origin http://127.0.0.1:{port}/work answers in {args.latency:g} s "
              f"(pid {server.pid}); each worker sends {args.rate:g} requests/s for "
              f"{args.seconds:g} s through max_concurrent={args.limit}")
        local = _run(args, "local", port, seg_dir, name)
        host = _run(args, "host", port, seg_dir, name)
        after = hullguard.HostBulkhead(name, max_concurrent=args.limit, dir=seg_dir,
                                       probe=args.probe).stats()
    finally:
        _stop(server)
    # The timeline, side by side.
    print()
    print(f"  in flight at the origin (limit {args.limit}; worker 0 SIGKILLed at "
          f"{host.get('killed_at_s', 0):g} s in the host-wide run)")
    print(f"  {'t (s)':>6}  {'per-process':>11}  {'host-wide':>9}")
    for (t, a), (_, b) in zip(local["timeline"], host["timeline"]):
        mark = "  <- SIGKILL" if abs(t - round(args.kill_at / args.step) * args.step) < 1e-9 \
            else ""
        print(f"  {t:6.2f}  {a:11d}  {b:9d}  {'#' * b}{mark}")
    recovered = host.get("recovered_after_s")
    killed = host.get("killed_at_s")
    if killed is not None:
        # The dip is shorter than a timeline step: its own lines, from the origin's changes.
        dip = [(t, n) for t, n in host["series"] if killed <= t <= killed + (recovered or 0.5)]
        low = min((n for _, n in dip), default=args.limit)
        print(f"  after the SIGKILL at {killed:.3f} s: the origin dropped to {low} in flight (the "
              f"dead worker's connections closed) and was back at {args.limit} "
              + ("never" if recovered is None else f"{recovered * 1e3:.0f} ms later"))
    print()
    print(f"  per-process bulkheads: max in flight {local['max_in_flight']} "
          f"(the limit {args.limit} × {args.workers} workers = {args.limit * args.workers})")
    print(f"  host-wide bulkhead:    max in flight {host['max_in_flight']}")
    print(f"  after the SIGKILL: the origin back at {args.limit} in "
          f"{'never' if recovered is None else f'{recovered * 1e3:.0f} ms'} "
          f"(probe {args.probe * 1e3:.0f} ms; the others' probes reclaimed the dead worker's "
          f"slot: reclaimed_dead_total {after['reclaimed_dead_total']}, "
          f"reclaimed_permits_total {after['reclaimed_permits_total']}, "
          f"orphaned_total {after['orphaned_total']})")
    checks = [
        (f"per-process bulkheads multiply the limit: the origin saw {local['max_in_flight']} at "
         f"once (> {args.limit})", local["max_in_flight"] > args.limit),
        (f"host-wide: the origin never saw more than {args.limit} at once "
         f"(max {host['max_in_flight']})", host["max_in_flight"] <= args.limit),
        (f"host-wide: the limit was used (max {host['max_in_flight']} = {args.limit})",
         host["max_in_flight"] == args.limit),
        ("host-wide: the SIGKILLed worker's permits were reclaimed and the origin back at the "
         f"limit (took {'never' if recovered is None else f'{recovered:.3f} s'}; the README "
         f"promises about one probe, {args.probe:g} s; checked within 5 s)",
         recovered is not None and recovered <= 5.0 and after["reclaimed_dead_total"] >= 1),
    ]
    for label, ok in checks:
        print(f"check: {label}: {'PASS' if ok else 'FAIL'}")
    result = {"local": local, "host": host, "reclaimed_dead_total": after["reclaimed_dead_total"],
              "reclaimed_permits_total": after["reclaimed_permits_total"], "checks": checks}
    if record is not None:
        record["limit"] = args.limit
        record["workers"] = args.workers
        record["runs"] = {"per-process bulkheads": local["series"],
                          "one host-wide bulkhead": host["series"]}
        record["killed_at_s"] = host.get("killed_at_s")
        record["recovered_after_s"] = recovered
        record["checks"] = checks
    import shutil
    shutil.rmtree(seg_dir, ignore_errors=True)
    return all(ok for _, ok in checks), result


# ----- options ------------------------------------------------------------------------------

_NAMES = ("workers", "limit", "latency", "rate", "seconds", "kill_at", "probe",
          "queue_timeout", "step")


def add_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The phase's options (``prefix`` when embedded in another demo's parser)."""
    p.add_argument(f"--{prefix}workers", type=int, default=4, help="worker processes")
    p.add_argument(f"--{prefix}limit", type=int, default=4, help="what the origin takes")
    p.add_argument(f"--{prefix}latency", type=float, default=0.3, help="origin latency (s)")
    p.add_argument(f"--{prefix}rate", type=float, default=30.0,
                   help="requests a second per worker")
    p.add_argument(f"--{prefix}seconds", type=float, default=4.0, help="how long each run sends")
    p.add_argument(f"--{prefix}kill-at", type=float, default=2.0,
                   help="SIGKILL worker 0 at (s), host-wide run")
    p.add_argument(f"--{prefix}probe", type=float, default=0.25, help="liveness probe period (s)")
    p.add_argument(f"--{prefix}queue-timeout", type=float, default=3.0, help="queue timeout (s)")
    p.add_argument(f"--{prefix}step", type=float, default=0.25, help="timeline step (s)")


def phase_args(args: argparse.Namespace, prefix: str = "host_") -> argparse.Namespace:
    """The phase's own namespace from an embedding demo's (its ``--host-*`` options)."""
    return argparse.Namespace(**{n: getattr(args, prefix + n) for n in _NAMES})


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="local", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--name", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args))
        return 0
    if args.worker:
        asyncio.run(_work(args))
        return 0
    if not (0 < args.kill_at < args.seconds) or args.workers < 2 or args.limit < 1:
        p.error("need 0 < --kill-at < --seconds, --workers >= 2, --limit >= 1")
    ok, result = run_phase(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
