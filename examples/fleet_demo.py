#!/usr/bin/env python3
"""One limit per fleet: the host demo's workers spread over three "hosts" sharing one limit
through Redis (``make demo-fleet``; docs/design.md §16, README "One limit per fleet").

A degraded origin (``host_demo.py --serve``: a local HTTP server, its own process, answering in
``--latency`` seconds and counting its own in-flight requests) can take ``--limit`` requests at
once. Three *hosts* — each a process group of ``--workers`` worker processes, as three machines
running ``uvicorn --workers 2`` would — send it open-loop streams of requests through one
``hullguard.FleetBulkhead`` per process (a ``redis.asyncio`` client, ``max_concurrent=--limit``,
``lease_ttl=--ttl``), all on the same pool of a ``redis-server`` the demo starts. Each process
leases a block of the limit and admits locally on it; the blocks follow demand by fair share.

The schedule (seconds from the start):

* ``0 .. --shift``: host A busy, B and C light (a request from each of their workers every
  ``1/--light-rate`` s, together) — A holds most of the limit;
* ``--shift .. --kill-at``: A and B busy — their shares converge;
* ``--kill-at``: host A's process group is SIGKILLed while it holds permits; its blocks stay
  counted in Redis until the first sync after their TTL reaps them, then B and C take the limit;
* ``--redis-kill-at``: ``redis-server`` is SIGKILLed and, ``--redis-down`` s later (past the
  TTL: the leases lapse and admission stops, fail closed), started again on the same port,
  empty (no persistence): the pool is recreated in learning mode, the workers' redis-py clients
  reconnect and their drivers lease again. (The kill waits, at most 10x the reap target, until
  A's blocks are reaped and B and C hold the limit, so a slow machine shifts it, never skips
  it);
* until ``--seconds`` (and until the leases have been back for ``--settle`` s).

The parent samples the pool every ``--sample`` s (``FCALL_RO hg_stats`` on the pool's six keys,
through redis-py) and maps every holder (``<label>:<pid>:<random>``, the label the worker's host)
to its host. Printed: a timeline of the origin's in-flight count and each host's block, the
measured reap and recovery times, the requests per host, the checks (exit code 1 if one fails).
Every process started (the workers, the origin, both redis-servers) is stopped and reaped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from host_demo import _get, _in_flight_at, _stop  # noqa: E402  (the host demo, next to this file)

HOST_DEMO = os.path.join(HERE, "host_demo.py")
HOSTS = ("host-a", "host-b", "host-c")
KEY_SUFFIXES = ("cfg", "held", "gen", "exp", "want", "served")


def _keys(pool: str) -> List[str]:
    """The pool's six keys, in the library's order (docs/design.md §16.2)."""
    return [f"{{hg:{pool}}}:{s}" for s in KEY_SUFFIXES]


# ----- a worker process (--worker) --------------------------------------------------------

def _rate_at(schedule: List[List[float]], t: float) -> float:
    """The requests a second in force at ``t`` (``[[from_s, rate], ...]``, sorted)."""
    rate = 0.0
    for start, r in schedule:
        if t >= start:
            rate = r
    return rate


async def _work(args: argparse.Namespace) -> None:
    """One worker of one host: opens the fleet bulkhead (``holder=`` its host), prints
    ``ready``, waits for ``go <t0>`` on stdin, sends requests at its host's scheduled rate until
    ``stop`` (or stdin closes, or ``--max-seconds``), printing its counts every 0.5 s (a killed
    worker's last line says what it did), then a final JSON summary."""
    import httpx
    import redis.asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    import hullguard

    schedule = json.loads(args.schedule)
    loop = asyncio.get_running_loop()
    # A socket timeout well under the TTL; one retry, no backoff (the driver backs off itself).
    r = redis.asyncio.Redis(host="127.0.0.1", port=args.redis_port, socket_timeout=0.3,
                            socket_connect_timeout=0.3, retry=Retry(NoBackoff(), 1))
    counts: Dict[str, int] = {}
    ok_at: List[float] = []
    try:
        async with hullguard.FleetBulkhead(r, args.pool, max_concurrent=args.limit,
                                           lease_ttl=args.ttl, max_queue=args.max_queue,
                                           queue_timeout=args.queue_timeout,
                                           holder=args.host) as fleet:
            print("ready", fleet.holder, flush=True)
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.startswith("go "):
                return
            t0 = float(line.split()[1])
            stop = asyncio.Event()

            async def watch_stdin() -> None:
                await loop.run_in_executor(None, sys.stdin.readline)  # "stop", or EOF
                stop.set()

            watcher = asyncio.create_task(watch_stdin())

            async def progress() -> None:  # what a killed worker managed is still known
                while True:
                    await asyncio.sleep(0.5)
                    print(json.dumps({"counts": counts}), flush=True)

            reporter = asyncio.create_task(progress())

            async def one(client: httpx.AsyncClient) -> None:
                try:
                    async with fleet.acquire():
                        resp = await client.get(args.url)
                        outcome = "ok" if resp.status_code == 200 else f"http {resp.status_code}"
                except hullguard.BulkheadError as e:
                    bound = e.detail.get("bound") if e.detail else None
                    outcome = f"refused: {e.reason}" + (f" ({bound})" if bound else "")
                except httpx.HTTPError as e:
                    outcome = type(e).__name__
                counts[outcome] = counts.get(outcome, 0) + 1
                if outcome == "ok":
                    ok_at.append(round(time.monotonic() - t0, 3))

            limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
            tasks: "set[asyncio.Task[None]]" = set()
            async with httpx.AsyncClient(limits=limits, timeout=10.0) as client:
                # Open loop: the next request is due 1/rate after the last, at the rate in force
                # now (so a rate change takes effect at once); the first at --phase s.
                rate0 = max(_rate_at(schedule, 0.0), 0.01)
                last = t0 + args.phase - 1.0 / rate0
                while not stop.is_set():
                    now = time.monotonic()
                    if now - t0 > args.max_seconds:
                        break
                    rate = _rate_at(schedule, now - t0)
                    if rate > 0 and now >= last + 1.0 / rate and now >= t0:
                        task = asyncio.create_task(one(client))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                        last = max(last + 1.0 / rate, now - 1.0 / rate)
                        continue
                    due = last + 1.0 / rate if rate > 0 else now + 0.05
                    try:
                        await asyncio.wait_for(stop.wait(), min(0.05, max(0.0, due - now)))
                    except asyncio.TimeoutError:
                        pass
                # What is queued or in flight ends within the queue timeout plus the latency.
                if tasks:
                    _, pending = await asyncio.wait(set(tasks),
                                                    timeout=args.queue_timeout + 10.0)
                    for task in pending:
                        task.cancel()
            lease = fleet.stats()["lease"]
            watcher.cancel()
            reporter.cancel()
            print(json.dumps({"final": True, "holder": fleet.holder, "counts": counts,
                              "ok_at": ok_at,
                              "lease": {k: lease[k] for k in ("syncs_total", "errors_total",
                                                              "losses_total", "expiries_total",
                                                              "epoch_changes_total")}}),
                  flush=True)
    finally:
        await r.aclose()


# ----- the parent's processes ---------------------------------------------------------------

class _Lines:
    """A child's stdout read by a daemon thread, so every read has a timeout."""

    def __init__(self, proc: "subprocess.Popen[str]") -> None:
        self.q: "queue.Queue[Optional[str]]" = queue.Queue()
        stream = proc.stdout
        assert stream is not None

        def pump() -> None:
            try:
                for line in stream:
                    self.q.put(line)
            except (OSError, ValueError):
                pass
            self.q.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def get(self, timeout: float) -> Optional[str]:
        """The next line, or None at EOF or after ``timeout`` seconds."""
        try:
            return self.q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def summary(self, deadline: float) -> Dict[str, Any]:
        """A worker's last JSON line: its final summary (``"final"``), or — killed, or past
        ``deadline`` — its last progress line (``{}`` if none)."""
        last: Dict[str, Any] = {}
        while True:
            line = self.get(deadline - time.monotonic())
            if line is None:
                return last
            if line.startswith("{"):
                last = json.loads(line)
                if last.get("final"):
                    return last


def _in_group(pgid: int) -> Dict[str, Any]:
    """``Popen`` options that put the child in process group ``pgid`` (0: a new group it
    leads): ``process_group`` from Python 3.11, ``setpgid`` in the child before."""
    if sys.version_info >= (3, 11):
        return {"process_group": pgid}
    return {"preexec_fn": lambda: os.setpgid(0, pgid)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Redis:
    """``redis-server`` on a free loopback port: no persistence, its own directory. Every
    instance started is kept in ``procs`` (to be reaped)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.port = _free_port()
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.procs: List["subprocess.Popen[bytes]"] = []

    def start(self, *, same_port: bool = False) -> None:
        for attempt in range(5):
            proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", self.dir,
                 "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.proc = proc
            self.procs.append(proc)
            until = time.monotonic() + 10
            while time.monotonic() < until and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            return
                except OSError:
                    time.sleep(0.01)
            self.kill()
            if same_port:
                time.sleep(0.2)  # the workers know this port: try it again
            else:
                self.port = _free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL, and reap."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        if proc is not None:
            proc.wait(10)


def _sampler(port: int, pool: str, t0: float, every: float, out: List[Dict[str, Any]],
             done: threading.Event) -> None:
    """Reads the pool every ``every`` seconds until ``done``: one ``FCALL_RO hg_stats``,
    decoded (``[now, limit, used, epoch, fence, rev, learn_until, want_sum, n, (holder, gen,
    held, want, exp) * n]``) and summed per host (the holder id's label)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.25,
                         socket_connect_timeout=0.25, retry=Retry(NoBackoff(), 0))
    keys = _keys(pool)
    tick = time.monotonic()
    try:
        while not done.is_set():
            s: Dict[str, Any] = {"t": round(time.monotonic() - t0, 3)}
            try:
                reply = client.execute_command("FCALL_RO", "hg_stats", 6, *keys)
            except redis.ConnectionError:
                s["state"] = "down"
            except redis.TimeoutError:
                s["state"] = "timeout"
            except redis.ResponseError as e:  # restarted, the library not loaded again yet
                s["state"] = "empty" if "function not found" in str(e).lower() else "error"
            else:
                now, limit, used, epoch = (int(x) for x in reply[:4])
                learn_until, n = int(reply[6]), int(reply[8])
                held = {h: 0 for h in HOSTS}
                holders = {h: 0 for h in HOSTS}
                for i in range(n):
                    name, _gen, h_held = reply[9 + 5 * i: 12 + 5 * i]
                    host = (name.decode() if isinstance(name, bytes) else str(name)).split(":")[0]
                    held[host] = held.get(host, 0) + int(h_held)
                    holders[host] = holders.get(host, 0) + 1
                s.update(state="ok" if limit >= 0 else "empty", limit=limit, used=used,
                         epoch=epoch, learning=learn_until > now, held=held, holders=holders)
            out.append(s)
            tick += every
            done.wait(max(0.0, tick - time.monotonic()))
    finally:
        client.close()


# ----- the run ----------------------------------------------------------------------------

def _wait_until(cond: Callable[[], bool], deadline: float, step: float = 0.05) -> bool:
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _schedules(args: argparse.Namespace) -> Dict[str, List[List[float]]]:
    """Each host's ``[[from_s, requests a second per worker], ...]``."""
    busy, light = args.busy_rate, args.light_rate
    return {"host-a": [[0.0, busy]],
            "host-b": [[0.0, light], [args.shift, busy]],
            "host-c": [[0.0, light]]}


def run_demo(args: argparse.Namespace) -> Dict[str, Any]:
    """Starts Redis, the origin and the hosts, runs the schedule, stops and reaps everything;
    returns what was measured."""
    target = args.ttl + args.ttl / 3  # a killed holder's block returns within TTL + one beat
    pool = f"demo-fleet-{os.getpid()}"
    tmp = tempfile.mkdtemp(prefix="hullguard-fleet-demo-")
    rs = _Redis(tmp)
    origin: Optional["subprocess.Popen[str]"] = None
    workers: Dict[str, List["subprocess.Popen[str]"]] = {h: [] for h in HOSTS}
    lines: Dict[int, _Lines] = {}
    samples: List[Dict[str, Any]] = []
    done = threading.Event()
    sampler: Optional[threading.Thread] = None
    ev: Dict[str, float] = {}
    summaries: Dict[str, List[Dict[str, Any]]] = {h: [] for h in HOSTS}
    holding_at_kill: Optional[int] = None
    origin_samples: List[Tuple[float, int]] = []
    t0 = 0.0
    result: Dict[str, Any] = {"target_s": target, "pool": pool}
    try:
        rs.start()
        origin = subprocess.Popen([sys.executable, HOST_DEMO, "--serve",
                                   "--latency", str(args.latency)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        olines = _Lines(origin)
        port_line = olines.get(30)
        if not port_line:
            raise RuntimeError("the origin did not start")
        port = int(port_line)
        url = f"http://127.0.0.1:{port}/work"
        print(f"  redis-server on 127.0.0.1:{rs.port} (pid {rs.proc.pid if rs.proc else '?'}, "
              f"no persistence); origin {url} answers in {args.latency:g} s "
              f"(pid {origin.pid})")
        print(f"  pool {pool!r}: max_concurrent={args.limit}, lease_ttl={args.ttl:g} s "
              f"(beat {args.ttl / 3:.2f} s); {len(HOSTS)} hosts × {args.workers} worker "
              f"processes, busy {args.busy_rate:g} / light {args.light_rate:g} requests/s per "
              f"worker")
        scheds = _schedules(args)
        for host in HOSTS:
            rate0 = _rate_at(scheds[host], 0.0)
            for i in range(args.workers):
                # A busy host's workers interleave their requests; a light host's send together
                # (its demand comes in bursts, every 1/--light-rate s).
                phase = i / args.workers / rate0 if rate0 > args.light_rate else 0.0
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--host", host,
                       "--phase", str(phase), "--url", url, "--redis-port", str(rs.port),
                       "--pool", pool, "--limit", str(args.limit), "--ttl", str(args.ttl),
                       "--max-queue", str(args.max_queue),
                       "--queue-timeout", str(args.queue_timeout),
                       "--schedule", json.dumps(scheds[host]),
                       "--max-seconds", str(args.seconds + 30 * target + 30)]
                # One process group per host (os.killpg kills the host): the first worker leads
                # a new group, the second joins it. (start_new_session would put each worker
                # in a session of its own, and a process cannot join another session's group.)
                pgid = 0 if i == 0 else workers[host][0].pid
                w = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, **_in_group(pgid))
                workers[host].append(w)
                lines[w.pid] = _Lines(w)
        until = time.monotonic() + 60
        for host in HOSTS:
            for w in workers[host]:
                line = lines[w.pid].get(until - time.monotonic())
                if not line or not line.startswith("ready"):
                    raise RuntimeError(f"worker {w.pid} of {host} did not start")
        _get(port, "/__reset")
        t0 = time.monotonic() + 0.2
        for host in HOSTS:
            for w in workers[host]:
                assert w.stdin is not None
                w.stdin.write(f"go {t0!r}\n")
                w.stdin.flush()
        sampler = threading.Thread(target=_sampler,
                                   args=(rs.port, pool, t0, args.sample, samples, done),
                                   daemon=True)
        sampler.start()

        def last_ok() -> Optional[Dict[str, Any]]:
            for s in reversed(samples):
                if s["state"] == "ok":
                    return s
            return None

        # Host A killed while it holds permits.
        time.sleep(max(0.0, t0 + args.kill_at - time.monotonic()))
        before = last_ok()
        holding_at_kill = before["held"]["host-a"] if before else None
        pgid_a = workers["host-a"][0].pid
        if workers["host-a"][0].poll() is None:  # the leader unreaped: the group id is ours
            os.killpg(pgid_a, signal.SIGKILL)
        ev["kill"] = time.monotonic() - t0
        for w in workers["host-a"]:
            w.wait(10)

        # Redis killed at --redis-kill-at, once A's blocks are reaped and B and C hold the
        # whole limit (waiting at most 10x the reap target for that).
        def taken_over() -> bool:
            s = last_ok()
            return (s is not None and s["t"] > ev["kill"] and s["holders"]["host-a"] == 0
                    and s["held"]["host-b"] + s["held"]["host-c"] >= args.limit)

        _wait_until(lambda: time.monotonic() >= t0 + args.redis_kill_at and taken_over(),
                    max(t0 + args.redis_kill_at, t0 + ev["kill"] + 10 * target))
        rs.kill()
        ev["redis_kill"] = time.monotonic() - t0
        time.sleep(args.redis_down)
        rs.start(same_port=True)
        ev["redis_restart"] = time.monotonic() - t0
        print(f"  redis-server restarted on 127.0.0.1:{rs.port} (pid "
              f"{rs.proc.pid if rs.proc else '?'}), empty")

        # Until --seconds, and until the leases have been back for --settle s (at most 10x the
        # target after the restart).
        def back_since() -> Optional[float]:
            for s in samples:
                if (s["t"] > ev["redis_restart"] and s["state"] == "ok"
                        and sum(s["held"].values()) > 0):
                    return float(s["t"])
            return None

        def settled() -> bool:
            b = back_since()
            return b is not None and time.monotonic() - t0 >= b + args.settle

        _wait_until(lambda: time.monotonic() >= t0 + args.seconds and settled(),
                    max(t0 + args.seconds, t0 + ev["redis_restart"] + 10 * target + args.settle))
        ev["end"] = time.monotonic() - t0
        done.set()
        sampler.join(5)

        # The surviving hosts stop sending, finish what is queued or in flight, report.
        for host in HOSTS[1:]:
            for w in workers[host]:
                try:
                    assert w.stdin is not None
                    w.stdin.write("stop\n")
                    w.stdin.flush()
                except OSError:
                    pass
        until = time.monotonic() + args.queue_timeout + 20
        for host in HOSTS:
            for w in workers[host]:
                sm = lines[w.pid].summary(until)
                if host != "host-a" and not sm.get("final"):
                    sm["missing"] = 1
                summaries[host].append(sm)
        origin_samples = [(float(t) - t0, int(n)) for t, n in json.loads(_get(port,
                                                                              "/__samples"))]
    finally:
        done.set()
        if sampler is not None:
            sampler.join(5)
        for host in HOSTS:
            for w in workers[host]:
                try:
                    if w.stdin is not None and not w.stdin.closed:
                        w.stdin.close()
                except OSError:
                    pass
        for host in HOSTS:
            group = workers[host]
            if not group:
                continue
            deadline = time.monotonic() + 10
            for w in group:
                try:
                    w.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            if group[0].poll() is None:  # still running: the whole group, by its id
                try:
                    os.killpg(group[0].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for w in group:
                _stop(w)
        if origin is not None:
            _stop(origin)
        try:
            rs.kill()
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        procs: List[Any] = [p for g in workers.values() for p in g] + rs.procs
        if origin is not None:
            procs.append(origin)
        result["started"] = len(procs)
        result["reaped"] = sum(1 for p in procs if p.returncode is not None)
        # No member of any host's group left (every member was our child, now reaped).
        left = 0
        for host in HOSTS:
            if workers[host]:
                try:
                    os.killpg(workers[host][0].pid, 0)
                    left += 1
                except (ProcessLookupError, PermissionError):
                    pass
        result["groups_left"] = left
    result.update(t0=t0, events=ev, samples=samples, origin=origin_samples,
                  summaries=summaries, holding_at_kill=holding_at_kill)
    return result


# ----- the report -------------------------------------------------------------------------

def _median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _fmt(x: Optional[float], unit: str = " s", spec: str = ".2f") -> str:
    return "never" if x is None else f"{x:{spec}}{unit}"


def report(args: argparse.Namespace, r: Dict[str, Any]) -> List[Tuple[str, bool]]:
    L = args.limit
    ev = r["events"]
    samples = [s for s in r["samples"] if s["t"] >= 0]
    ok_samples = [s for s in samples if s["state"] == "ok"]
    origin = r["origin"]
    target = r["target_s"]

    # The timeline.
    marks = {"shift": "host-b busy", "kill": "SIGKILL host-a (killpg)",
             "reaped": "host-a's blocks reaped", "redis_kill": "SIGKILL redis-server",
             "redis_restart": "redis-server restarted (empty)",
             "back": "leases back"}
    times = dict(ev)
    times["shift"] = args.shift
    reaped_at = next((s["t"] for s in ok_samples
                      if s["t"] > ev.get("kill", 1e9) and s["holders"]["host-a"] == 0), None)
    if reaped_at is not None:
        times["reaped"] = reaped_at
    back_at = next((s["t"] for s in ok_samples
                    if s["t"] > ev.get("redis_restart", 1e9) and sum(s["held"].values()) > 0),
                   None)
    if back_at is not None:
        times["back"] = back_at
    print()
    print(f"  the origin's in flight and each host's block (held in Redis), limit {L}")
    print(f"  {'t (s)':>6}  {'origin':>6}  {'host-a':>6}  {'host-b':>6}  {'host-c':>6}  "
          f"{'pool':<12}")
    step = args.step
    end = ev.get("end", args.seconds)
    k = 0
    while k * step <= end + 1e-9:
        t = round(k * step, 3)
        n = _in_flight_at(origin, t)
        s = None
        for x in samples:
            if x["t"] > t:
                break
            s = x
        if s is None or s["state"] != "ok":
            cells = ["-"] * 3
            pool = "—" if s is None else {"down": "redis down", "timeout": "redis timeout",
                                           "empty": "empty"}.get(s["state"], s["state"])
        else:
            cells = [str(s["held"][h]) if s["holders"][h] else "-" for h in HOSTS]
            pool = f"{s['used']}/{s['limit']}" + (" learning" if s["learning"] else "")
        why = [marks[m] for m, at in times.items() if m in marks and t - step < at <= t]
        print(f"  {t:6.2f}  {n:6d}  {cells[0]:>6}  {cells[1]:>6}  {cells[2]:>6}  {pool:<12} "
              f"{'#' * n:<{L}}" + (f"  <- {', '.join(why)}" if why else ""))
        k += 1

    # Figures.
    def held_in(host: str, lo: float, hi: float) -> List[int]:
        return [s["held"][host] for s in ok_samples if lo <= s["t"] <= hi]

    max_in_flight = max((n for t, n in origin if 0 <= t <= end + args.latency), default=0)
    a_only = (min(1.0, args.shift / 2), args.shift)
    a_b = (max(args.shift + 0.5, ev["kill"] - 2.0), ev["kill"])
    med = {name: {h: _median([float(x) for x in held_in(h, *win)]) for h in HOSTS}
           for name, win in (("a_only", a_only), ("a_b", a_b))}
    reap_s = None if reaped_at is None else reaped_at - ev["kill"]
    takeover_at = next((s["t"] for s in ok_samples
                        if s["t"] > ev["kill"] and s["t"] < ev["redis_kill"]
                        and s["holders"]["host-a"] == 0
                        and s["held"]["host-b"] + s["held"]["host-c"] >= L), None)
    after_restart = [n for t, n in origin if t >= ev["redis_restart"]]
    max_after = max(after_restart, default=0)
    flowing_at = next((t for t, n in origin if t >= ev["redis_restart"] and n > 0), None)
    # Redis down past the leases' deadline: the origin drains (fail closed) before the restart.
    down = [(t, n) for t, n in origin if ev["redis_kill"] <= t < ev["redis_restart"]]
    drained_at = None
    for i, (t, n) in enumerate(down):
        if n == 0 and all(m == 0 for _, m in down[i:]):
            drained_at = t
            break
    epochs_before = {s["epoch"] for s in ok_samples if s["t"] < ev["redis_kill"]}
    epochs_after = {s["epoch"] for s in ok_samples if s["t"] > ev["redis_restart"]}
    learning_seen = any(s["learning"] for s in ok_samples if s["t"] > ev["redis_restart"])
    back_s = None if back_at is None else back_at - ev["redis_restart"]
    flowing_s = None if flowing_at is None else flowing_at - ev["redis_restart"]
    per_host: Dict[str, Dict[str, int]] = {}
    ok_after: Dict[str, int] = {}
    for host, sums in r["summaries"].items():
        c: Dict[str, int] = {}
        for sm in sums:
            for kk, v in sm.get("counts", {}).items():
                c[kk] = c.get(kk, 0) + v
        per_host[host] = c
        ok_after[host] = sum(1 for sm in sums for t in sm.get("ok_at", [])
                             if t > ev["redis_restart"])
    missing = sum(1 for sums in r["summaries"].values() for sm in sums if "missing" in sm)

    print()
    print(f"  max in flight at the origin: {max_in_flight} (limit {L}); after the Redis "
          f"restart: {max_after}")
    for name, label, win in (("a_only", "host-a busy alone", a_only),
                             ("a_b", "host-a and host-b busy", a_b)):
        m = med[name]
        print(f"  {label} ({win[0]:.1f}–{win[1]:.1f} s): median blocks "
              + ", ".join(f"{h} {_fmt(m[h], '', 'g')}" for h in HOSTS))
    print(f"  host-a SIGKILLed at {ev['kill']:.2f} s holding {r['holding_at_kill']} permits: its "
          f"blocks reaped after {_fmt(reap_s)} (target TTL + a beat = {target:.2f} s; sampled "
          f"every {args.sample:g} s); host-b + host-c held the whole limit "
          f"{_fmt(None if takeover_at is None else takeover_at - ev['kill'])} after the kill")
    print(f"  redis-server SIGKILLed at {ev['redis_kill']:.2f} s, restarted empty at "
          f"{ev['redis_restart']:.2f} s; "
          + ("the origin drained (no lease, no admission: fail closed) "
             f"{drained_at - ev['redis_kill']:.2f} s after the kill; " if drained_at is not None
             else "the leases outlived the outage; ")
          + f"new epoch {bool(epochs_after - epochs_before)}, learning "
          f"seen {learning_seen}; leases back after {_fmt(back_s, ' s', '.3f')}, requests at "
          f"the origin again after {_fmt(flowing_s, ' s', '.3f')}")
    print("  requests per host (host-a: until its kill, from its workers' last progress lines):")
    for host in HOSTS:
        c = per_host[host]
        refused = sum(v for kk, v in c.items() if kk.startswith("refused"))
        other = {kk: v for kk, v in c.items() if kk != "ok"}
        after = "" if host == "host-a" else f", ok after the Redis restart {ok_after[host]}"
        print(f"    {host}: ok {c.get('ok', 0)}, refused {refused}{after}  "
              f"{json.dumps(other, sort_keys=True)}")
    leases = [sm["lease"] for sums in r["summaries"].values() for sm in sums if "lease" in sm]
    if leases:
        tot = {kk: sum(le.get(kk, 0) for le in leases)
               for kk in ("syncs_total", "errors_total", "losses_total", "expiries_total",
                          "epoch_changes_total")}
        print(f"  the surviving workers' leases: {json.dumps(tot)}")

    ma, mb = med["a_only"]["host-a"], med["a_b"]["host-b"]
    ma2 = med["a_b"]["host-a"]
    mb1 = med["a_only"]["host-b"]
    checks = [
        (f"the origin never saw more than {L} at once (max {max_in_flight})",
         0 < max_in_flight <= L),
        (f"shares moved with demand: host-a alone held most of the limit (median "
         f"{_fmt(ma, '', 'g')} > {L / 2:g}), then host-a and host-b converged (medians "
         f"{_fmt(ma2, '', 'g')} and {_fmt(mb, '', 'g')}, within 2; host-b's up from "
         f"{_fmt(mb1, '', 'g')})",
         ma is not None and ma > L / 2 and ma2 is not None and mb is not None
         and mb1 is not None and abs(ma2 - mb) <= 2 and mb > mb1),
        (f"host-a, killed holding {r['holding_at_kill']} permits, had its blocks reaped (took "
         f"{_fmt(reap_s)}; target {target:.2f} s, checked within {10 * target:.1f} s) and "
         f"host-b + host-c took the whole limit before the Redis kill",
         bool(r["holding_at_kill"]) and reap_s is not None and reap_s <= 10 * target
         and takeover_at is not None),
        (f"after the Redis restart leases came back (after {_fmt(back_s, ' s', '.3f')}, "
         f"checked within {10 * target:.1f} s; a new epoch, learning seen: {learning_seen}) and "
         f"{sum(ok_after.values())} requests succeeded, in flight still <= {L} "
         f"(max {max_after})",
         back_s is not None and back_s <= 10 * target
         and bool(epochs_after - epochs_before) and sum(ok_after.values()) > 0
         and max_after <= L and missing == 0),
        (f"every process started was reaped ({r['reaped']}/{r['started']}: "
         f"{len(HOSTS) * args.workers} workers, the origin, "
         f"{r['started'] - len(HOSTS) * args.workers - 1} redis-servers; "
         f"{r['groups_left']} host groups left)",
         r["reaped"] == r["started"] and r["groups_left"] == 0),
    ]
    for label, ok in checks:
        print(f"check: {label}: {'PASS' if ok else 'FAIL'}")
    return checks


# ----- options ------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=6, help="what the origin takes (the fleet limit)")
    p.add_argument("--latency", type=float, default=0.3, help="origin latency (s)")
    p.add_argument("--workers", type=int, default=2, help="worker processes per host")
    p.add_argument("--ttl", type=float, default=1.0, help="lease_ttl (s)")
    p.add_argument("--busy-rate", type=float, default=15.0,
                   help="requests a second per worker of a busy host")
    p.add_argument("--light-rate", type=float, default=0.2,
                   help="requests a second per worker of a light host")
    p.add_argument("--max-queue", type=int, default=10, help="each worker's max_queue")
    p.add_argument("--queue-timeout", type=float, default=2.0, help="queue timeout (s)")
    p.add_argument("--shift", type=float, default=4.0, help="host-b gets busy at (s)")
    p.add_argument("--kill-at", type=float, default=8.0, help="SIGKILL host-a at (s)")
    p.add_argument("--redis-kill-at", type=float, default=11.0,
                   help="SIGKILL and restart redis-server at (s)")
    p.add_argument("--redis-down", type=float, default=1.5,
                   help="how long redis-server stays down (s; past the TTL: the leases lapse)")
    p.add_argument("--seconds", type=float, default=15.0, help="run until (s)")
    p.add_argument("--settle", type=float, default=2.5,
                   help="run at least this long after the leases are back (s)")
    p.add_argument("--sample", type=float, default=0.1, help="pool sampling period (s)")
    p.add_argument("--step", type=float, default=0.5, help="timeline step (s)")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--phase", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--redis-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--pool", help=argparse.SUPPRESS)
    p.add_argument("--schedule", help=argparse.SUPPRESS)
    p.add_argument("--max-seconds", type=float, default=120.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        asyncio.run(_work(args))
        return 0
    if not (0 < args.shift < args.kill_at < args.redis_kill_at < args.seconds) \
            or args.limit < 1 or args.workers < 1:
        p.error("need 0 < --shift < --kill-at < --redis-kill-at < --seconds, --limit >= 1, "
                "--workers >= 1")
    if shutil.which("redis-server") is None:
        print("fleet demo: redis-server is not installed (`make redis` installs it)",
              file=sys.stderr)
        return 1
    print()
    print(f"== one limit per fleet: {len(HOSTS)} hosts × {args.workers} worker processes, one "
          f"Redis pool, an origin that takes {args.limit} at once ==")
    started = time.monotonic()
    # SIGTERM (a CI timeout, make interrupted) unwinds like Ctrl-C: every process is reaped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = run_demo(args)
    except Exception as e:  # everything is reaped by now
        print(f"check: the demo ran: FAIL ({type(e).__name__}: {e})")
        return 1
    checks = report(args, result)
    print(f"  ({time.monotonic() - started:.1f} s)")
    if args.json:
        result["checks"] = checks
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
