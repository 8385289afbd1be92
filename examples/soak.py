#!/usr/bin/env python3
"""The all-layers soak (``make soak``; not part of ``make test``): minutes, bounded.

Every layer at once against the HTTP demo upstreams, with random cancellations, timeouts, limit
changes and breaker trips, memory sampled to show that nothing grows:

* **Python** (this process): a ``hullguard.Registry`` with a breaker per origin, driven by
  asyncio tasks both through ``BulkheadTransport`` (httpx; some requests inside
  ``hullguard.deadline``) and through ``registry.acquire`` around a plain httpx client; a
  ``Bulkhead`` with a breaker and a ``call_timeout`` through ``guard``; a ``Bulkhead`` with a
  budget hammered by two threads (``try_acquire`` / ``acquire_sync``, weights, costs,
  ``release_partial``, ``refund``, ``release(usage=)``). A canceller task cancels random
  in-flight operations, others run under random ``asyncio.timeout``\\ s, and a chaos task
  changes limits at random (``set_limit``, ``apply_limits`` with limits and budgets).
* **Node** (``examples/soak_node.mjs``, a child): a ``Registry`` with a breaker and
  ``callTimeoutMs`` (``run`` with ``AbortController`` aborts and ``AbortSignal.timeout``,
  ``acquire`` / ``tryAcquire``), ``setLimit`` / ``applyLimits``; plus the host and fleet
  bulkheads below.
* **C** (``examples/soak_c.c``, compiled here against ``libhullguard.a``, a child): threads on a
  bulkhead with a breaker (``try_acquire``, ``acquire_timeout``, ``enqueue`` + polls + random
  ``hg_ticket_cancel``), ``set_limit`` / ``apply_limits``, its "upstream" a sleep of 0-6 ms
  against a 5 ms call timeout that fails in bursts of its own; plus the host bulkhead below.
* **Host** (``HostBulkhead``, one shared-memory segment): two Python worker processes
  (``soak.py --worker``), the Node child and the C child on one host-wide limit.
* **Fleet** (``FleetBulkhead``, one pool on a ``redis-server`` started here): the two Python
  workers (redis.asyncio) and the Node child (ioredis); worker 0 changes the fleet limit.
* **Breaker trips**: the scripted upstream answers 503 in random bursts.

Every ``--sample-every`` seconds the RSS of every process (``/proc/<pid>/status`` VmRSS) and the
core's counters (``stats()``) are sampled, and the invariants checked in every process, live:
``queued`` within ``max_queue``, ``active + granted_unclaimed`` within the largest limit in
force lately (I1: a shrink never revokes, so work admitted before it may stay above the new
limit until it ends), monotonic counters, nothing leaked or released twice, the host segment's
``in_flight`` within its limit, the fleet pool's ``used`` within its limits. At the end, once
everything was cancelled or released: quiescence (I5: ``active == 0``, ``queued == 0``,
``granted_unclaimed == 0``, ``available == limit``, the waiter ring all free, the budget idle
and its settlement identity), every started operation settled exactly once on the caller's side
(``started == granted + refused + timed_out + cancelled``) and on the core's (``admitted_total +
rejections (call_timeout aside: it ends an admitted call) == started``), the host segment and
the fleet pool empty.

Printed: ops done per layer, the invariant checks performed (and failures), peak RSS per process
and the RSS slope — a least-squares fit over the samples taken between the end of the warm-up
(``--warmup``, default a third of the run) and the end of the load, in KiB/min — and PASS or
FAIL. Exit 1 on an invariant failure, on a chaos kind that never happened, or on an RSS slope
above ``--max-slope`` (default 1024 KiB/min) in a process that runs hullguard (the upstreams and
redis-server are sampled but not gated; a fit window under 60 s is printed, not gated). Every
process runs a full collection every 2 s (the parent right before each sample; the Node child
runs with ``--expose-gc``), so RSS follows live memory rather than the collectors' schedules;
the parent's own malloc heap (glibc ``mallinfo2``: the core's allocations) and its gc-tracked
object count are printed beside, to tell native growth from Python objects. The Python
processes replace their httpx clients every 20 s (:class:`Clients`: httpcore 1.0.9 leaks
connection-pool slots on cancellation, which otherwise wedges the clients within minutes).

Why 1 MiB/min: the soak runs hundreds to thousands of operations a second in each process; a
leak of one permit, waiter or listener object per operation (≥ 100 bytes) would grow RSS by
several MiB a minute, while a process in a steady state moves by allocator noise (arenas, pools
of keep-alive connections, the V8 heap sizing itself) that the warm-up and the fit over the
rest of the run keep below it.

Every process started is stopped and reaped (also on Ctrl-C or a failure: only the parent takes
the Ctrl-C; a SIGKILLed parent takes its children with it, PR_SET_PDEATHSIG); every loop is
bounded by the duration (each child also stops when its stdin closes: the parent is gone).

    SOAK_SECONDS=60 make soak                  # or
    .venv/bin/python examples/soak.py --seconds 60 [--no-node] [--no-c] [--no-workers]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import httpx

import hullguard
import hullguard.httpx
from hullguard import _native

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# Shapes shared with the children (the same numbers in soak_node.mjs and soak_c.c).
HOST_LIMIT = 4          # the host segment's max_concurrent (host-wide)
FLEET_LIMIT = 8         # the fleet pool's starting limit
FLEET_LIMITS = (3, 12)  # the range worker 0 sets it in
FLEET_TTL = 3.0         # lease_ttl (s) of every fleet bulkhead
HOLD_BOUND = 10.0       # s: longer than any permit is held (request timeouts are 2 s)
MIN_FIT = 60.0          # s: a shorter RSS fit window is printed, not gated

REASONS = [r["name"] for r in _native.REASONS]
TALLY_KEYS = ("started", "granted", "refused", "timed_out", "cancelled", "ok", "failed",
              "call_timeout", "circuit_open", "cancelled_after_grant", "cancelled_waiting")


# ----- shared helpers ------------------------------------------------------------------------

def new_tally() -> Dict[str, int]:
    """One surface's caller-side counts. Each started operation ends exactly one of
    ``granted``, ``refused``, ``timed_out`` (queue timeout / deadline) or ``cancelled`` (a task
    cancel or an ``asyncio.timeout`` — where the caller cannot tell whether the grant came
    first, e.g. inside ``BulkheadTransport`` or ``guard``; ``cancelled_waiting`` counts those
    known to have been waiting). The rest are details: ``ok`` / ``failed`` / ``call_timeout``
    / ``cancelled_after_grant`` of the granted ones, ``circuit_open`` of the refused ones."""
    return dict.fromkeys(TALLY_KEYS, 0)


def settled(t: Dict[str, int]) -> int:
    return t["granted"] + t["refused"] + t["timed_out"] + t["cancelled"]


def add_tallies(ts: List[Dict[str, int]]) -> Dict[str, int]:
    out = new_tally()
    for t in ts:
        for k, v in t.items():
            out[k] = out.get(k, 0) + v
    return out


def refusal(t: Dict[str, int], e: hullguard.BulkheadError) -> None:
    """Counts a rejection by its reason."""
    if e.reason == "timeout":
        t["timed_out"] += 1
    else:
        t["refused"] += 1
        if e.reason == "circuit_open":
            t["circuit_open"] += 1


class Checker:
    """Counts the invariant checks of one process and keeps the first failures."""

    def __init__(self) -> None:
        self.n = 0
        self.failed = 0
        self.failures: List[str] = []

    def check(self, ok: bool, what: Callable[[], str]) -> bool:
        self.n += 1
        if not ok:
            self.failed += 1
            if len(self.failures) < 25:
                self.failures.append(what())
        return ok


class LimitHistory:
    """The limits a bulkhead had over the last ``window`` seconds: a shrink never revokes
    (I1), so until the calls admitted before it end, ``active`` may stay above the new limit —
    a live sample is checked against the largest limit in force lately."""

    def __init__(self, initial: int, window: float = HOLD_BOUND) -> None:
        self.window = window
        self.events: Deque[Tuple[float, int]] = collections.deque([(time.monotonic(), initial)])

    def set(self, limit: int, at: Optional[float] = None) -> None:
        at = time.monotonic() if at is None else at
        if self.events and self.events[-1][1] == limit:
            return
        self.events.append((at, limit))

    @property
    def current(self) -> int:
        return self.events[-1][1]

    def ceiling(self, now: Optional[float] = None) -> int:
        now = time.monotonic() if now is None else now
        # Drop what ended before the window (keep the one in force at its start).
        while len(self.events) > 1 and self.events[1][0] < now - self.window:
            self.events.popleft()
        return max(limit for _, limit in self.events)


class StatsWatch:
    """Live and quiescent checks of one bulkhead's ``stats()`` (Python names)."""

    def __init__(self, name: str, checker: Checker, history: Optional[LimitHistory],
                 max_queue: int, budget_history: Optional[LimitHistory] = None) -> None:
        self.name = name
        self.c = checker
        self.history = history
        self.max_queue = max_queue
        self.budget_history = budget_history
        self.prev: Optional[Dict[str, Any]] = None
        self.ring_free: Optional[int] = None

    def live(self, s: Dict[str, Any]) -> None:
        c, n = self.c, self.name
        c.check(s["queued"] >= 0 and s["queued"] <= self.max_queue,
                lambda: f"{n}: queued {s['queued']} outside 0..{self.max_queue}")
        c.check(s["active"] >= 0 and s["granted_unclaimed"] >= 0,
                lambda: f"{n}: negative active/granted_unclaimed: "
                        f"{s['active']}/{s['granted_unclaimed']}")
        if self.history is not None:
            ceiling = self.history.ceiling()
            c.check(s["active"] + s["granted_unclaimed"] <= ceiling,
                    lambda: f"{n}: I1 active {s['active']} + granted_unclaimed "
                            f"{s['granted_unclaimed']} above every limit of the last "
                            f"{HOLD_BOUND:g} s (max {ceiling}; limit now {s['limit']})")
        c.check(s["available"] <= s["limit"],
                lambda: f"{n}: available {s['available']} above limit {s['limit']}")
        c.check(s["leaked_total"] == 0, lambda: f"{n}: leaked_total {s['leaked_total']}")
        c.check(s["released_twice_total"] == 0,
                lambda: f"{n}: released_twice_total {s['released_twice_total']}")
        b = s.get("budget")
        if b is not None:
            c.check(b["in_use"] >= 0 and b["available"] <= b["limit"],
                    lambda: f"{n}: budget in_use {b['in_use']} / available {b['available']} / "
                            f"limit {b['limit']}")
            if self.budget_history is not None:
                bc = self.budget_history.ceiling()
                c.check(b["in_use"] + b["granted_unclaimed"] <= bc,
                        lambda: f"{n}: budget in_use {b['in_use']} + unclaimed above every "
                                f"budget of the last {HOLD_BOUND:g} s (max {bc})")
        p = self.prev
        if p is not None:
            c.check(s["admitted_total"] >= p["admitted_total"],
                    lambda: f"{n}: admitted_total went back {p['admitted_total']} -> "
                            f"{s['admitted_total']}")
            back = [r for r in REASONS if s["rejected_by_reason"][r] < p["rejected_by_reason"][r]]
            c.check(not back, lambda: f"{n}: rejected_by_reason went back for {back}")
        self.prev = s

    def quiescent(self, s: Dict[str, Any]) -> None:
        """I5 and the waiter ring back to what it was idle."""
        c, n = self.c, self.name
        c.check((s["active"], s["queued"], s["granted_unclaimed"]) == (0, 0, 0),
                lambda: f"{n}: not quiescent at the end: active {s['active']} queued "
                        f"{s['queued']} granted_unclaimed {s['granted_unclaimed']}")
        c.check(s["available"] == s["limit"],
                lambda: f"{n}: I2/I5 available {s['available']} != limit {s['limit']} at the end")
        c.check(s["orphaned_in_flight"] == 0 and s["reservations_held"] == 0,
                lambda: f"{n}: orphaned {s['orphaned_in_flight']} / reservations "
                        f"{s['reservations_held']} at the end")
        if self.ring_free is not None:
            c.check(s["ring_free"] == self.ring_free,
                    lambda: f"{n}: ring_free {s['ring_free']} at the end, {self.ring_free} idle "
                            f"at the start (waiter cells leaked)")
        b = s.get("budget")
        if b is not None:
            c.check(b["in_use"] == 0 and b["granted_unclaimed"] == 0 and b["queued_cost"] == 0
                    and b["available"] == b["limit"],
                    lambda: f"{n}: budget not idle at the end: {b}")
            lhs = b["reserved_total"] + b["overrun_total"]
            rhs = (b["consumed_total"] + b["refunded_total"] + b["in_use"]
                   + b["granted_unclaimed"] + b["overrun_held"])
            c.check(lhs == rhs, lambda: f"{n}: budget settlement (C30) {lhs} != {rhs}: {b}")
        self.live(s)

    def settlement(self, s: Dict[str, Any], t: Dict[str, int]) -> None:
        """Every started operation settled once, on both sides."""
        c, n = self.c, self.name
        c.check(t["started"] == settled(t),
                lambda: f"{n}: started {t['started']} != granted + refused + timed_out + "
                        f"cancelled {settled(t)} ({t})")
        rejected = sum(v for r, v in s["rejected_by_reason"].items() if r != "call_timeout")
        c.check(s["admitted_total"] + rejected == t["started"],
                lambda: f"{n}: core admitted_total {s['admitted_total']} + rejections "
                        f"{rejected} != operations started {t['started']} "
                        f"({s['rejected_by_reason']}; caller {t})")
        c.check(t["granted"] <= s["admitted_total"] <= t["granted"] + t["cancelled"],
                lambda: f"{n}: core admitted_total {s['admitted_total']} outside caller's granted "
                        f"{t['granted']} .. granted + cancelled {t['granted'] + t['cancelled']}")
        c.check(s["rejected_by_reason"]["circuit_open"] == t["circuit_open"],
                lambda: f"{n}: circuit_open core {s['rejected_by_reason']['circuit_open']} != "
                        f"caller {t['circuit_open']}")
        c.check(s["rejected_by_reason"]["call_timeout"] == t["call_timeout"],
                lambda: f"{n}: call_timeout core {s['rejected_by_reason']['call_timeout']} != "
                        f"caller {t['call_timeout']}")


def rss_kib(pid: int) -> Optional[int]:
    """VmRSS of ``pid`` in KiB (psutil is not needed: ``/proc/<pid>/status``)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def slope_kib_per_min(points: List[Tuple[float, int]]) -> Optional[float]:
    """The least-squares slope of ``(seconds, KiB)`` points, in KiB per minute."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mk = sum(k for _, k in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None
    return sum((t - mt) * (k - mk) for t, k in points) / den * 60.0


async def cancel_and_wait(tasks: "set[asyncio.Task[Any]]", grace: float) -> int:
    """Waits up to ``grace`` s for ``tasks``, then cancels what is left and waits for it
    (bounded too): returns how many never ended (a hang: reported)."""
    if tasks:
        await asyncio.wait(set(tasks), timeout=grace)
    left = {t for t in tasks if not t.done()}
    for t in left:
        t.cancel()
    if left:
        await asyncio.wait(left, timeout=5.0)
    return sum(1 for t in tasks if not t.done())


class OpPool:
    """Bounded concurrent loops of one operation; the canceller picks victims in ``live``."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.live: "set[asyncio.Task[Any]]" = set()
        self.loops: "set[asyncio.Task[Any]]" = set()

    def start(self, n: int, op: Callable[[random.Random], Any], rng: random.Random,
              think: float, timeout_share: float, counts: Dict[str, int]) -> None:
        for i in range(n):
            r = random.Random(rng.random())
            self.loops.add(asyncio.create_task(self._loop(op, r, think, timeout_share, counts)))

    async def _loop(self, op: Callable[[random.Random], Any], rng: random.Random, think: float,
                    timeout_share: float, counts: Dict[str, int]) -> None:
        while not self.stop.is_set():
            limit = rng.uniform(0.001, 0.4) if rng.random() < timeout_share else None
            task = asyncio.create_task(self._one(op, rng, limit, counts))
            self.live.add(task)
            await asyncio.wait({task})
            self.live.discard(task)
            if not task.cancelled():
                task.exception()  # retrieved (a surprise is re-raised below)
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(rng.uniform(0, think))

    @staticmethod
    async def _one(op: Callable[[random.Random], Any], rng: random.Random,
                   limit: Optional[float], counts: Dict[str, int]) -> None:
        try:
            async with asyncio.timeout(limit):
                await op(rng)
        except TimeoutError:
            counts["op_timeouts"] += 1

    def cancel_one(self, rng: random.Random) -> bool:
        if not self.live:
            return False
        victim = rng.choice(tuple(self.live))
        return victim.cancel()


class Clients:
    """httpx clients replaced every ``every`` seconds, each old set closed ``grace`` s later
    (every request has a 2 s timeout per phase, so nothing is still running on it then).

    Why: httpcore 1.0.9 (httpx 0.28's) leaks connection-pool slots when a request is cancelled
    at an unlucky point — connections left ``ACTIVE`` or ``CONNECTING`` and pool requests left
    queued forever (encode/httpcore#1093, #830; fixes open as #986, #1099). Under this soak's
    cancellations a long-lived client's pool (100 connections) filled within about 80 s, every
    request then waited for the pool until ``PoolTimeout`` (so every ``guard`` call timed out
    and its breaker stayed open), and the leaked sockets grew both this process's RSS and the
    upstream server's. Replacing the clients keeps the soak about hullguard."""

    def __init__(self, make: Callable[[], Tuple[httpx.AsyncClient, ...]], every: float = 20.0,
                 grace: float = 10.0) -> None:
        self.make = make
        self.every = every
        self.grace = grace
        self.current = make()
        self.recycled = 0
        self.old: List[Tuple[float, Tuple[httpx.AsyncClient, ...]]] = []  # (close at, clients)

    async def run(self, stop: asyncio.Event) -> None:
        next_swap = time.monotonic() + self.every
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            now = time.monotonic()
            while self.old and self.old[0][0] <= now:
                for c in self.old.pop(0)[1]:
                    await c.aclose()
            if now >= next_swap and not stop.is_set():
                self.old.append((now + self.grace, self.current))
                self.current = self.make()
                self.recycled += 1
                next_swap = now + self.every

    async def aclose(self) -> None:
        for _, clients in self.old:
            for c in clients:
                await c.aclose()
        self.old.clear()
        for c in self.current:
            await c.aclose()


# ----- the Python layer (in this process) ----------------------------------------------------

class Upstream5xx(Exception):
    pass


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts each request that reaches ``BulkheadTransport`` and how it ended, per origin key
    (the permit is taken in the same step as the count: nothing can cancel in between)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, tallies: Dict[str, Dict[str, int]]) -> None:
        self.inner = inner
        self.tallies = tallies

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        t = self.tallies[hullguard.origin_key(str(request.url))]
        t["started"] += 1
        try:
            response = await self.inner.handle_async_request(request)
        except hullguard.BulkheadError as e:
            refusal(t, e)
            raise
        except asyncio.CancelledError:
            t["cancelled"] += 1  # waiting or sending: the transport hides which
            raise
        except BaseException:
            t["granted"] += 1  # a transport error after the grant (or the deadline's PoolTimeout)
            t["failed"] += 1
            raise
        t["granted"] += 1
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class PyLayer:
    def __init__(self, urls: Dict[str, str], rng: random.Random, checker: Checker) -> None:
        self.urls = urls
        self.rng = rng
        self.c = checker
        self.keys = {name: hullguard.origin_key(u) for name, u in urls.items()}
        self.transitions: Dict[str, Dict[str, int]] = collections.defaultdict(collections.Counter)
        names = {key: name for name, key in self.keys.items()}
        self.counts: Dict[str, int] = collections.Counter(
            {"op_timeouts": 0, "cancels": 0, "limit_changes": 0, "breaker_opens": 0})

        def on_state_change(key: Optional[str], old: str, new: str) -> None:
            where = "guard" if key is None else f"registry[{names.get(key, key)}]"
            self.transitions[where][f"{old}->{new}"] += 1
            if new == "open":
                self.counts["breaker_opens"] += 1

        breaker = {"failure_threshold": 5, "open_duration": 0.5, "half_open_max_calls": 1}
        self.reg = hullguard.Registry(max_concurrent=6, max_queue=32, queue_timeout=0.3,
                                      resilience={"breaker": breaker},
                                      on_state_change=on_state_change)
        self.gb = hullguard.Bulkhead(max_concurrent=4, max_queue=16, queue_timeout=0.2,
                                     resilience={"breaker": breaker, "call_timeout": 0.4},
                                     on_state_change=on_state_change)
        self.tb = hullguard.Bulkhead(max_concurrent=6, max_queue=8, queue_timeout=0.05,
                                     budget=1000)
        # One tally per registry key, one for guard, one per thread.
        self.reg_tallies = {k: new_tally() for k in self.keys.values()}
        self.guard_tally = new_tally()
        self.thread_tallies = [new_tally(), new_tally()]
        self.watch: Dict[str, StatsWatch] = {}
        for name, key in self.keys.items():
            self.watch[key] = StatsWatch(f"py registry[{name}]", checker, LimitHistory(6), 32)
        self.watch["guard"] = StatsWatch("py guard bulkhead", checker, LimitHistory(4), 16)
        self.watch["threads"] = StatsWatch("py threads bulkhead", checker, LimitHistory(6), 8,
                                           LimitHistory(1000))
        self.rev = 0
        self.stop = asyncio.Event()
        self.stop_threads = threading.Event()
        self.pool = OpPool(self.stop)
        self.threads: List[threading.Thread] = []
        self.clients: Optional[Clients] = None
        self.guarded = self.gb.guard(self._guarded_call)

    # -- the bulkheads as the checks see them
    def stats_of(self) -> Dict[str, Dict[str, Any]]:
        out = dict(self.reg.stats())
        out["guard"] = self.gb.stats()
        out["threads"] = self.tb.stats()
        return out

    def check_live(self) -> None:
        for k, s in self.stats_of().items():
            self.watch[k].live(s)

    def ops(self) -> Dict[str, Dict[str, int]]:
        return {"registry+httpx": add_tallies(list(self.reg_tallies.values())),
                "guard (call_timeout)": dict(self.guard_tally),
                "threads (budget)": add_tallies(self.thread_tallies)}

    # -- operations
    async def _direct(self, rng: random.Random) -> None:
        """``registry.acquire`` around a plain client: the caller knows when it was granted."""
        name = rng.choices(("healthy", "degraded", "scripted"), (2, 1, 1))[0]
        key, url = self.keys[name], self.urls[name]
        t = self.reg_tallies[key]
        timeout = rng.choice((0, 0.005, 0.05, 0.2, None))
        t["started"] += 1
        try:
            permit = await self.reg.acquire(key, timeout=timeout)
        except hullguard.BulkheadError as e:
            refusal(t, e)
            return
        except asyncio.CancelledError:
            t["cancelled"] += 1
            t["cancelled_waiting"] += 1
            raise
        t["granted"] += 1
        outcome = "ignored"
        try:
            r = await self.plain.get(url)
            outcome = hullguard.httpx.outcome_of_status(r.status_code)
            t["ok" if outcome == "success" else "failed"] += 1
        except httpx.HTTPError:
            outcome = "failure"
            t["failed"] += 1
        except asyncio.CancelledError:
            t["cancelled_after_grant"] += 1
            raise
        finally:
            permit.release(outcome=outcome)

    async def _transport(self, rng: random.Random) -> None:
        """Through ``BulkheadTransport``; a third inside a ``hullguard.deadline``."""
        name = rng.choices(("healthy", "degraded", "scripted"), (2, 1, 1))[0]
        try:
            if rng.random() < 0.33:
                with hullguard.deadline(rng.uniform(0.01, 0.6)):
                    await self.guarded_client.get(self.urls[name])
            else:
                await self.guarded_client.get(self.urls[name])
        except (hullguard.BulkheadError, httpx.HTTPError):
            pass  # counted by CountingTransport

    async def _guarded_call(self, url: str) -> None:
        r = await self.plain.get(url)
        if r.status_code >= 500:
            raise Upstream5xx(r.status_code)

    async def _guard(self, rng: random.Random) -> None:
        """``guard`` with a breaker and a call timeout (0.4 s; the degraded origin answers in
        0.05–0.5 s)."""
        url = self.urls[rng.choices(("healthy", "degraded", "scripted"), (2, 1, 1))[0]]
        t = self.guard_tally
        t["started"] += 1
        try:
            await self.guarded(url)
        except hullguard.CallTimeoutError:
            t["granted"] += 1
            t["call_timeout"] += 1
        except hullguard.BulkheadError as e:
            refusal(t, e)
        except asyncio.CancelledError:
            t["cancelled"] += 1  # waiting or calling: guard hides which
            raise
        except (Upstream5xx, httpx.HTTPError):
            t["granted"] += 1
            t["failed"] += 1
        else:
            t["granted"] += 1
            t["ok"] += 1

    def _thread(self, idx: int, seed: float) -> None:
        rng = random.Random(seed)
        t = self.thread_tallies[idx]
        tb = self.tb
        while not self.stop_threads.is_set():
            weight = rng.choice((1, 1, 1, 2))
            cost = rng.choice((0, 10, 100, 300))
            t["started"] += 1
            try:
                if rng.random() < 0.4:
                    p = tb.try_acquire(weight, cost=cost)
                    if p is None:
                        t["refused"] += 1
                        time.sleep(rng.uniform(0, 0.002))
                        continue
                else:
                    p = tb.acquire_sync(weight, timeout=rng.choice((0, 0.001, 0.01, 0.05)),
                                        cost=cost)
            except hullguard.BulkheadError as e:
                refusal(t, e)
                time.sleep(rng.uniform(0, 0.002))
                continue
            t["granted"] += 1
            try:
                time.sleep(rng.uniform(0, 0.002))
                x = rng.random()
                if weight == 2 and x < 0.25:
                    p.release_partial(1)
                if p.cost >= 2 and x > 0.75:
                    p.refund(p.cost // 2)
            finally:
                if p.cost and rng.random() < 0.3:
                    p.release(usage=rng.randint(0, p.cost))
                else:
                    p.release()
                t["ok"] += 1
            time.sleep(rng.uniform(0, 0.002))

    # -- chaos
    def change_limit(self, rng: random.Random) -> None:
        self.rev += 1
        what = rng.randrange(6)
        name = rng.choice(tuple(self.keys))
        key = self.keys[name]
        n = rng.randint(1, 6)
        if what == 0:
            self.reg.set_limit(key, n)
            self._expect(key, n)
        elif what == 1:
            self.reg.apply_limits(self.rev, overrides={key: {"limit": n}})
            self._expect(key, n)
        elif what == 2:
            self.reg.apply_limits(self.rev, defaults={"limit": n})
        elif what == 3:
            n = rng.randint(1, 4)
            if rng.random() < 0.5:
                self.gb.set_limit(n)
            else:
                self.gb.apply_limits(self.rev, limit=n)
            self._expect("guard", n)
        elif what == 4:
            n = rng.randint(2, 6)
            b = rng.choice((400, 600, 800, 1000))
            self.tb.apply_limits(self.rev, limit=n, budget=b)
            self._expect("threads", n)
            self.watch["threads"].budget_history.set(b)  # type: ignore[union-attr]
        else:
            n = rng.randint(2, 6)
            self.tb.set_limit(n)
            self._expect("threads", n)
        self.counts["limit_changes"] += 1
        # Every limit as it is now (apply_limits(defaults=) may have moved several keys).
        for k, s in self.stats_of().items():
            self.watch[k].history.set(s["limit"])  # type: ignore[union-attr]

    def _expect(self, k: str, n: int) -> None:
        s = self.reg.stats()[k] if k in self.reg_tallies else (
            self.gb.stats() if k == "guard" else self.tb.stats())
        self.c.check(s["limit"] == n, lambda: f"{self.watch[k].name}: limit {s['limit']} after "
                                              f"setting {n}")

    async def chaos(self, rng: random.Random) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            if not self.stop.is_set():
                self.change_limit(rng)

    async def canceller(self, rng: random.Random) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(rng.uniform(0.002, 0.03))
            if self.pool.cancel_one(rng):
                self.counts["cancels"] += 1

    async def checker(self, every: float) -> None:
        while not self.stop.is_set():
            self.check_live()
            await asyncio.sleep(every)

    @property
    def plain(self) -> httpx.AsyncClient:
        assert self.clients is not None
        return self.clients.current[0]

    @property
    def guarded_client(self) -> httpx.AsyncClient:
        """Through ``CountingTransport(BulkheadTransport(registry=self.reg))``."""
        assert self.clients is not None
        return self.clients.current[1]

    def _make_clients(self) -> Tuple[httpx.AsyncClient, ...]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=16)
        inner = hullguard.httpx.BulkheadTransport(
            httpx.AsyncHTTPTransport(limits=limits), registry=self.reg)
        return (httpx.AsyncClient(timeout=2.0, limits=limits),
                httpx.AsyncClient(transport=CountingTransport(inner, self.reg_tallies),
                                  timeout=2.0))

    # -- life cycle
    async def start(self) -> None:
        for k in self.keys.values():  # every key exists (and is idle) before the checks
            self.reg.try_acquire(k).release()  # type: ignore[union-attr]
            self.reg_tallies[k]["started"] += 1
            self.reg_tallies[k]["granted"] += 1
        for k, s in self.stats_of().items():
            self.watch[k].ring_free = s["ring_free"]
        self.clients = Clients(self._make_clients)
        rng = self.rng
        self.pool.start(24, self._direct, rng, 0.01, 0.3, self.counts)
        self.pool.start(12, self._transport, rng, 0.01, 0.2, self.counts)
        self.pool.start(8, self._guard, rng, 0.01, 0.2, self.counts)
        self.aux = [asyncio.create_task(self.chaos(random.Random(rng.random()))),
                    asyncio.create_task(self.canceller(random.Random(rng.random()))),
                    asyncio.create_task(self.checker(0.25)),
                    asyncio.create_task(self.clients.run(self.stop))]
        for i in range(2):
            th = threading.Thread(target=self._thread, args=(i, rng.random()), daemon=True,
                                  name=f"soak-py-{i}")
            th.start()
            self.threads.append(th)

    async def finish(self) -> None:
        """Stops every loop, waits for (or cancels) what is in flight, then checks quiescence
        and the settlement of every operation."""
        self.stop.set()
        self.stop_threads.set()
        hung = await cancel_and_wait(self.pool.loops | self.pool.live | set(self.aux), 10.0)
        self.c.check(hung == 0, lambda: f"py: {hung} operation tasks never ended")
        for th in self.threads:
            th.join(10.0)
            self.c.check(not th.is_alive(), lambda: f"py: thread {th.name} never ended")
        await asyncio.sleep(0.05)  # guard's timed-out calls finish unwinding (released then)
        for bh in (self.gb, self.tb):
            r = await bh.drain(5.0)
            self.c.check(r["drained"], lambda: f"py: drain did not finish: {r}")
        for k, s in self.stats_of().items():
            self.watch[k].quiescent(s)
            tally = (self.reg_tallies[k] if k in self.reg_tallies else
                     self.guard_tally if k == "guard" else add_tallies(self.thread_tallies))
            self.watch[k].settlement(s, tally)
        if self.clients is not None:
            await self.clients.aclose()

    def close(self) -> None:
        self.stop_threads.set()
        for th in self.threads:
            th.join(5.0)
        self.reg.close()
        self.gb.close()
        self.tb.close()


# ----- a Python worker process: the host and the fleet bulkheads (--worker N) ----------------

async def worker_main(a: argparse.Namespace) -> int:
    import redis.asyncio as aredis

    rng = random.Random(a.seed)
    c = Checker()
    host = hullguard.HostBulkhead(a.host_name, max_concurrent=HOST_LIMIT, dir=a.host_dir,
                                  max_queue=64, queue_timeout=0.5)
    r = aredis.Redis(host="127.0.0.1", port=a.redis_port, socket_timeout=2.0)
    fleet = hullguard.FleetBulkhead(r, a.pool, max_concurrent=FLEET_LIMIT, max_queue=64,
                                    queue_timeout=0.5, lease_ttl=FLEET_TTL)
    await fleet.__aenter__()
    clients = Clients(lambda: (httpx.AsyncClient(timeout=2.0),))
    tallies = {"host": new_tally(), "fleet": new_tally()}
    counts: Dict[str, int] = collections.Counter(
        {"op_timeouts": 0, "cancels": 0, "limit_changes": 0})
    stop = asyncio.Event()
    pool = OpPool(stop)
    loop = asyncio.get_running_loop()

    def say(obj: Dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    say({"ready": True})
    line = await loop.run_in_executor(None, sys.stdin.readline)
    if line.strip() != "go":
        return 1
    end = time.monotonic() + a.seconds

    def watch_stdin() -> None:  # the parent is gone: stop at once
        sys.stdin.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, daemon=True).start()

    async def op(bh: Any, t: Dict[str, int], rng: random.Random, host_kind: bool) -> None:
        t["started"] += 1
        weight = rng.choice((1, 1, 2))
        try:
            if rng.random() < 0.2:
                p = bh.try_acquire(weight)
                if p is None:
                    t["refused"] += 1
                    return
            else:
                p = await bh.acquire(weight, timeout=rng.choice((0, 0.01, 0.1, 0.5)))
        except hullguard.BulkheadError as e:
            refusal(t, e)
            return
        except asyncio.CancelledError:
            t["cancelled"] += 1
            t["cancelled_waiting"] += 1
            raise
        t["granted"] += 1
        try:
            if rng.random() < 0.5:
                await clients.current[0].get(a.healthy_url)
            else:
                await asyncio.sleep(rng.uniform(0, 0.02))
            t["ok"] += 1
        except httpx.HTTPError:
            t["failed"] += 1
        except asyncio.CancelledError:
            t["cancelled_after_grant"] += 1
            raise
        finally:
            p.release()

    host_watch_prev: Dict[str, Any] = {}

    def check_live() -> None:
        hs = host.stats()
        c.check(hs["in_flight"] <= HOST_LIMIT,
                lambda: f"worker {a.worker}: host in_flight {hs['in_flight']} > {HOST_LIMIT}")
        c.check(0 <= hs["local_active"] <= HOST_LIMIT and 0 <= hs["local_queued"] <= 64,
                lambda: f"worker {a.worker}: host local_active {hs['local_active']} "
                        f"local_queued {hs['local_queued']}")
        if host_watch_prev:
            c.check(hs["admitted_total"] >= host_watch_prev["admitted_total"],
                    lambda: f"worker {a.worker}: host admitted_total went back")
        host_watch_prev.update(hs)
        fs = fleet.stats()
        c.check(0 <= fs["queued"] <= 64 and fs["active"] >= 0 and fs["granted_unclaimed"] >= 0,
                lambda: f"worker {a.worker}: fleet local queued {fs['queued']} active "
                        f"{fs['active']}")
        c.check(fs["leaked_total"] == 0 and fs["released_twice_total"] == 0,
                lambda: f"worker {a.worker}: fleet leaked/released twice")

    async def checker() -> None:
        while not stop.is_set():
            check_live()
            await asyncio.sleep(0.25)

    async def canceller(rng: random.Random) -> None:
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.005, 0.05))
            if pool.cancel_one(rng):
                counts["cancels"] += 1

    async def fleet_limits(rng: random.Random) -> None:
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            if stop.is_set():
                break
            n = rng.randint(*FLEET_LIMITS)
            rev = time.time_ns() // 1_000_000
            try:
                res = await fleet.apply_limits(rev, limit=n)
            except Exception as e:  # Redis trouble: reported, not fatal
                say({"note": f"fleet apply_limits failed: {e!r}"})
                continue
            counts["limit_changes"] += 1
            say({"fleet_limit": res["limit"], "at": time.monotonic(), "applied": res["applied"]})

    async def reporter() -> None:
        n = 0
        while not stop.is_set():
            report(False)
            n += 1
            if n % 2 == 0:
                gc.collect()  # as the parent before each sample: RSS follows live memory
            await asyncio.sleep(1.0)

    def report(final: bool, **extra: Any) -> None:
        say({"final": final, "ops": {k: dict(v) for k, v in tallies.items()},
             "counts": dict(counts), "checks": c.n, "failed": c.failed,
             "failures": c.failures, **extra})

    pool.start(6, lambda rng: op(host, tallies["host"], rng, True), rng, 0.01, 0.2, counts)
    pool.start(6, lambda rng: op(fleet, tallies["fleet"], rng, False), rng, 0.01, 0.2, counts)
    aux = [asyncio.create_task(checker()), asyncio.create_task(clients.run(stop)),
           asyncio.create_task(canceller(random.Random(rng.random()))),
           asyncio.create_task(reporter())]
    if a.worker == 0:
        aux.append(asyncio.create_task(fleet_limits(random.Random(rng.random()))))
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(0.0, end - time.monotonic()))
    except asyncio.TimeoutError:
        pass
    stop.set()
    hung = await cancel_and_wait(pool.loops | pool.live | set(aux), 10.0)
    c.check(hung == 0, lambda: f"worker {a.worker}: {hung} operation tasks never ended")
    hd = await host.drain(5.0)
    fd = await fleet.drain(5.0)
    c.check(hd["drained"] and fd["drained"], lambda: f"worker {a.worker}: drain {hd} {fd}")
    hs, fs = host.stats(), fleet.stats()
    c.check(hs["local_active"] == 0 and hs["local_queued"] == 0 and hs["local_in_flight"] == 0,
            lambda: f"worker {a.worker}: host not quiescent locally at the end: {hs}")
    c.check((fs["active"], fs["queued"], fs["granted_unclaimed"]) == (0, 0, 0),
            lambda: f"worker {a.worker}: fleet not quiescent at the end: active {fs['active']} "
                    f"queued {fs['queued']} unclaimed {fs['granted_unclaimed']}")
    for name, s in (("host", hs), ("fleet", fs)):
        t = tallies[name]
        c.check(t["started"] == settled(t),
                lambda: f"worker {a.worker} {name}: started {t['started']} != settled {settled(t)}")
    # The fleet's local bulkhead counts this process's admissions: both sides agree.
    t = tallies["fleet"]
    rejected = sum(fs["rejected_by_reason"].values())
    c.check(fs["admitted_total"] + rejected == t["started"],
            lambda: f"worker {a.worker} fleet: core admitted {fs['admitted_total']} + rejected "
                    f"{rejected} != started {t['started']}")
    lease = fs.get("lease")
    await fleet.aclose()
    host.close()
    await clients.aclose()
    await r.aclose()
    report(True, host_stats={k: hs[k] for k in ("admitted_total", "in_flight")},
           fleet_lease=lease)
    return 0


# ----- the parent ----------------------------------------------------------------------------

class Child:
    """A child process speaking JSON lines on stdout (read by a daemon thread)."""

    def __init__(self, name: str, cmd: List[str], layer: str, gated: bool = True,
                 cwd: Optional[str] = None) -> None:
        import fleet_demo  # the line reader of the fleet demo (examples/fleet_demo.py)

        self.name = name
        self.layer = layer
        self.gated = gated
        # Its own session: a Ctrl-C reaches only the parent, which stops every child.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=cwd, start_new_session=True,
                                     preexec_fn=_child_setup)
        self.lines = fleet_demo._Lines(self.proc)
        self.last: Dict[str, Any] = {}
        self.final: Optional[Dict[str, Any]] = None
        self.eof = False
        self.notes: List[str] = []

    def wait_ready(self, timeout: float) -> None:
        until = time.monotonic() + timeout
        while True:
            line = self.lines.get(until - time.monotonic())
            if line is None:
                raise RuntimeError(f"{self.name} did not start (exit {self.proc.poll()})")
            if line.startswith("{") and json.loads(line).get("ready"):
                return

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def pump(self, on_line: Callable[[Dict[str, Any]], None]) -> None:
        """Takes every line read so far."""
        while not self.eof:
            try:
                line = self.lines.q.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self.eof = True
                return
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if "note" in obj:
                self.notes.append(obj["note"])
            if "final" in obj:
                self.last = obj
                if obj["final"]:
                    self.final = obj
            on_line(obj)

    def stop(self) -> None:
        from host_demo import _stop  # closes stdin, waits 10 s, kills; always reaped

        _stop(self.proc)


def build_c_child(out_dir: str) -> str:
    """Compiles examples/soak_c.c against the release libhullguard.a (built first if needed)."""
    subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "hullguard-ffi"], cwd=ROOT,
                   check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(out_dir, "soak_c")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-g", "-std=c11", "-Wall", "-Wextra",
                    "-Werror", "-pthread", "-I", os.path.join(ROOT, "ffi", "include"),
                    os.path.join(HERE, "soak_c.c"),
                    os.path.join(target, "release", "libhullguard.a"),
                    "-lpthread", "-ldl", "-lm", "-o", exe], check=True)
    return exe


def malloc_in_use_kib() -> Optional[int]:
    """This process's bytes in use from malloc (glibc ``mallinfo2``: the Rust core's and the
    extension's allocations, and Python's large objects; pymalloc's arenas are mmapped apart),
    in KiB; None where there is no ``mallinfo2``."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = MallInfo2
    m = f()
    return int((m.uordblks + m.hblkhd) // 1024)


def _child_setup() -> None:
    """In a child between fork and exec: SIGINT ignored (a Ctrl-C in the terminal reaches the
    whole process group; only the parent acts on it, stopping and reaping every child) and
    SIGKILL when the parent dies (PR_SET_PDEATHSIG: nothing outlives a killed soak, not even
    redis-server, which has no stdin to watch)."""
    import ctypes

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@contextlib.contextmanager
def spawning_children() -> Any:
    """Every ``subprocess.Popen`` inside (the demo's upstream server, fleet_demo's redis-server)
    runs :func:`_child_setup` first."""
    real = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> "subprocess.Popen[Any]":
        kwargs.setdefault("preexec_fn", _child_setup)
        return real(*args, **kwargs)

    subprocess.Popen = popen  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]


def fresh_tmp() -> str:
    """A temp dir for this run (host segment, C binary, redis' dir), after removing those of
    earlier runs whose parent is gone (a SIGKILLed soak cannot clean up)."""
    base = tempfile.gettempdir()
    for name in os.listdir(base):
        if name.startswith("hg-soak-") and name.count("-") >= 3:
            pid = name.split("-")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"hg-soak-{os.getpid()}-")


class Samples:
    """RSS per process over time, and this process's malloc heap and gc-tracked objects (to
    tell native growth from Python objects)."""

    def __init__(self) -> None:
        self.pids: Dict[str, int] = {}
        self.gated: Dict[str, bool] = {}
        self.points: Dict[str, List[Tuple[float, int]]] = collections.defaultdict(list)
        self.own: Dict[str, List[Tuple[float, int]]] = collections.defaultdict(list)

    def add(self, name: str, pid: int, gated: bool) -> None:
        self.pids[name] = pid
        self.gated[name] = gated

    def sample(self, t: float) -> None:
        # A full collection first (the Node child collects every 2 s, the workers too): RSS then
        # follows live memory, not the collector's schedule (cancelled tasks leave cycles).
        gc.collect()
        for name, pid in self.pids.items():
            k = rss_kib(pid)
            if k is not None:
                self.points[name].append((t, k))
        m = malloc_in_use_kib()
        if m is not None:
            self.own["malloc in use"].append((t, m))
        self.own["gc objects"].append((t, len(gc.get_objects())))


async def soak_main(a: argparse.Namespace) -> int:
    import fleet_demo
    import isolation_demo

    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    warmup = a.warmup if a.warmup is not None else max(20.0, a.seconds / 3.0)
    print(f"hullguard soak: {a.seconds:g} s, seed {seed}, samples every {a.sample_every:g} s, "
          f"RSS slope fitted after a {warmup:g} s warm-up, threshold {a.max_slope:g} KiB/min",
          flush=True)
    c = Checker()
    tmp = fresh_tmp()
    up = None
    rs = None
    children: List[Child] = []
    py: Optional[PyLayer] = None
    bursts_task: "Optional[asyncio.Task[None]]" = None
    samples = Samples()
    samples.add("python (parent)", os.getpid(), True)
    try:
        ns = argparse.Namespace(healthy_ms=5.0, degraded_min=0.05, degraded_max=0.5,
                                service_ms=80.0)
        with spawning_children():
            up = isolation_demo.Upstreams(ns)  # healthy, degraded, scripted, capacity
        urls = {"healthy": up.urls[0], "degraded": up.urls[1], "scripted": up.scripted_url}
        samples.add("upstreams", up.proc.pid, False)
        print(f"  upstreams (pid {up.proc.pid}): healthy {urls['healthy']} (~5 ms), degraded "
              f"{urls['degraded']} (0.05-0.5 s), scripted {urls['scripted']} (503 bursts)")
        host_name, host_dir, pool = "soak", os.path.join(tmp, "shm"), "soak-pool"
        os.mkdir(host_dir)
        use_redis = not a.no_workers or not a.no_node
        if use_redis:
            rs = fleet_demo._Redis(tmp)
            with spawning_children():
                rs.start()
            assert rs.proc is not None
            samples.add("redis-server", rs.proc.pid, False)
            print(f"  redis-server on 127.0.0.1:{rs.port} (pid {rs.proc.pid}), fleet pool "
                  f"{pool!r} (limit {FLEET_LIMIT}, changed at random within {FLEET_LIMITS})")
        print(f"  host segment {host_name!r} in {host_dir} (limit {HOST_LIMIT} host-wide)")

        common = ["--seconds", str(a.seconds)]
        if not a.no_workers:
            for i in range(2):
                children.append(Child(
                    f"py-worker-{i}",
                    [sys.executable, os.path.abspath(__file__), "--worker", str(i), *common,
                     "--seed", str(rng.randrange(1 << 32)), "--host-name", host_name,
                     "--host-dir", host_dir, "--redis-port", str(rs.port if rs else 0),
                     "--pool", pool, "--healthy-url", urls["healthy"]], "host+fleet (python)"))
        if not a.no_node:
            children.append(Child(
                "node", ["node", "--expose-gc", os.path.join(HERE, "soak_node.mjs"), *common,
                         "--seed", str(rng.randrange(1 << 32)), "--healthy", urls["healthy"],
                         "--degraded", urls["degraded"], "--scripted", urls["scripted"],
                         "--host-name", host_name, "--host-dir", host_dir,
                         "--redis-port", str(rs.port if rs else 0), "--pool", pool], "node"))
        if not a.no_c:
            exe = build_c_child(tmp)
            children.append(Child(
                "c", [exe, str(a.seconds), str(rng.randrange(1 << 32)), host_name, host_dir],
                "c"))
        for ch in children:
            ch.wait_ready(120.0)
            samples.add(ch.name, ch.proc.pid, ch.gated)
            print(f"  {ch.name} (pid {ch.proc.pid}) ready")

        py = PyLayer(urls, random.Random(rng.random()), c)
        await py.start()
        fleet_hist = LimitHistory(FLEET_LIMIT, window=FLEET_TTL + HOLD_BOUND)
        t0 = time.monotonic()
        for ch in children:
            ch.go()
        end = t0 + a.seconds
        print(f"  go: every layer runs for {a.seconds:g} s", flush=True)

        async def set_mode(mode: str) -> None:
            async with httpx.AsyncClient() as cl:
                (await cl.get(urls["scripted"] + "__mode/" + mode)).raise_for_status()

        bursts = 0

        async def failure_bursts(brng: random.Random) -> None:
            nonlocal bursts
            try:
                while True:
                    await asyncio.sleep(brng.uniform(2.0, 6.0))
                    await set_mode("fail")
                    bursts += 1
                    await asyncio.sleep(brng.uniform(0.5, 2.0))
                    await set_mode("ok")
            finally:
                with contextlib.suppress(Exception):  # the upstream may be gone (Ctrl-C)
                    await set_mode("ok")

        bursts_task = asyncio.create_task(failure_bursts(random.Random(rng.random())))

        def on_line(obj: Dict[str, Any]) -> None:
            if "fleet_limit" in obj:
                fleet_hist.set(int(obj["fleet_limit"]), at=float(obj["at"]))

        host_prev: Dict[str, Any] = {}

        def check_host(final: bool) -> Optional[Dict[str, Any]]:
            status, out, err = _native._host_cli(["host", "show", host_name, "--dir", host_dir,
                                                  "--json"])
            if not c.check(status == 0, lambda: f"host show failed: {err.strip()}"):
                return None
            h = json.loads(out)
            c.check(h["in_flight"] <= HOST_LIMIT and h["active"] <= HOST_LIMIT,
                    lambda: f"host segment: in_flight {h['in_flight']} / active {h['active']} "
                            f"above the limit {HOST_LIMIT}")
            c.check(not h["poisoned"] and h["in_flight_in_dead_slots"] == 0,
                    lambda: f"host segment: poisoned {h['poisoned']}, in flight in dead slots "
                            f"{h['in_flight_in_dead_slots']}")
            if host_prev:
                c.check(h["admitted_total"] >= host_prev["admitted_total"],
                        lambda: "host segment: admitted_total went back")
            host_prev.update(h)
            if final:
                c.check(h["in_flight"] == 0 and h["active"] == 0 and h["cost_in_use"] == 0,
                        lambda: f"host segment not empty at the end: in_flight {h['in_flight']} "
                                f"active {h['active']} occupied {h['occupied']}")
            return h

        def fleet_show() -> Optional[Dict[str, Any]]:
            from hullguard.fleet import _cli

            assert rs is not None
            status, out, err = _cli(["fleet", "show", pool, "--redis",
                                     f"redis://127.0.0.1:{rs.port}", "--json"])
            if not c.check(status == 0, lambda: f"fleet show failed: {err.strip()}"):
                return None
            return json.loads(out)

        def check_fleet(final: bool) -> Optional[Dict[str, Any]]:
            f = fleet_show()
            if f is None or f.get("limit") is None:
                return f
            ceiling = fleet_hist.ceiling()
            c.check(f["used"] <= ceiling,
                    lambda: f"fleet pool: used {f['used']} above every limit of the last "
                            f"{fleet_hist.window:g} s (max {ceiling}; limit now {f['limit']})")
            c.check(sum(h["held"] for h in f["holders"]) == f["used"],
                    lambda: f"fleet pool: holders' blocks {sum(h['held'] for h in f['holders'])} "
                            f"!= used {f['used']}")
            if final:
                c.check(f["used"] == 0 and not f["holders"],
                        lambda: f"fleet pool not empty at the end: used {f['used']}, holders "
                                f"{f['holders']}")
            return f

        next_sample = t0
        next_progress = t0 + 10.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                samples.sample(now - t0)
                for ch in children:
                    ch.pump(on_line)
                    early = ch.proc.poll() is not None and ch.final is None
                    c.check(not early, lambda: "a child exited early: "
                            f"{[(x.name, x.proc.poll()) for x in children]}")
                if not a.no_workers or not a.no_node or not a.no_c:
                    check_host(False)
                if rs is not None:
                    check_fleet(False)
                next_sample += a.sample_every
            if now >= next_progress:
                next_progress += 10.0
                print(progress_line(now - t0, py, children, c, samples), flush=True)
            if now >= end:
                break
            await asyncio.sleep(min(0.1, max(0.0, min(next_sample, end) - time.monotonic())))

        # The end: the Python layer stops and settles; the children do the same on their own
        # (each stops at its own go + seconds) and report a final line.
        bursts_task.cancel()
        await asyncio.wait({bursts_task}, timeout=5.0)
        await py.finish()
        t_end = time.monotonic()
        deadline = t_end + 60.0
        while time.monotonic() < deadline and any(ch.final is None and not ch.eof
                                                   for ch in children):
            for ch in children:
                ch.pump(on_line)
            await asyncio.sleep(0.1)
        for ch in children:
            ch.pump(on_line)
            name, status = ch.name, ch.proc.poll()
            c.check(ch.final is not None, lambda: f"{name}: no final report (exit {status})")
        samples.sample(time.monotonic() - t0)
        host_end = check_host(True) if (not a.no_workers or not a.no_node or not a.no_c) else None
        # Every process's host grants are in the segment's admitted_total.
        finals = [ch.final for ch in children if ch.final is not None]
        if host_end is not None and len(finals) == len(children):
            granted = sum(f["ops"].get("host", {}).get("granted", 0) for f in finals)
            cancelled = sum(f["ops"].get("host", {}).get("cancelled", 0) for f in finals)
            c.check(granted <= host_end["admitted_total"] <= granted + cancelled,
                    lambda: f"host segment admitted_total {host_end['admitted_total']} outside "
                            f"the processes' granted {granted} .. + cancelled {cancelled}")
        fleet_end = None
        if rs is not None:
            # The last releases were sent by each process's close; wait for them a little.
            for _ in range(50):
                fleet_end = fleet_show()
                if fleet_end is None or not fleet_end.get("holders"):
                    break
                await asyncio.sleep(0.1)
            fleet_end = check_fleet(True)
        return summary(a, seed, warmup, t_end - t0, py, children, c, samples, bursts, fleet_end)
    finally:
        if bursts_task is not None and not bursts_task.done():
            bursts_task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait({bursts_task}, timeout=5.0)
        if py is not None:
            if py.clients is not None:  # interrupted: close the sockets before the upstreams go
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(py.clients.aclose(), 5.0)
                with warnings.catch_warnings():  # anyio's connect cut short: "never awaited"
                    warnings.simplefilter("ignore", RuntimeWarning)
                    gc.collect()  # sockets of connections httpcore lost track of (see Clients)
                with contextlib.suppress(Exception):
                    await asyncio.sleep(0.2)
            py.close()
        for ch in children:
            ch.stop()
        if up is not None:
            up.close()
        if rs is not None:
            for p in rs.procs:
                if p.poll() is None:
                    p.kill()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def layer_ops(py: Optional[PyLayer], children: List[Child]) -> Dict[str, Dict[str, Dict[str, int]]]:
    """``{process: {surface: tally}}`` as last reported."""
    out: Dict[str, Dict[str, Dict[str, int]]] = {}
    if py is not None:
        out["python (parent)"] = py.ops()
    for ch in children:
        if ch.last:
            out[ch.name] = ch.last["ops"]
    return out


def progress_line(t: float, py: Optional[PyLayer], children: List[Child], c: Checker,
                  samples: Samples) -> str:
    ops = layer_ops(py, children)
    total = {name: sum(settled(t) for t in surf.values()) for name, surf in ops.items()}
    checks = c.n + sum(ch.last.get("checks", 0) for ch in children)
    failed = c.failed + sum(ch.last.get("failed", 0) for ch in children)
    rss = " ".join(f"{n.split()[0]}={pts[-1][1] // 1024}M" for n, pts in samples.points.items()
                   if pts)
    return (f"  t={t:5.0f}s ops " + " ".join(f"{n.split()[0]}={v}" for n, v in total.items())
            + f" | checks {checks} failed {failed} | rss {rss}")


def summary(a: argparse.Namespace, seed: int, warmup: float, wall: float, py: Optional[PyLayer],
            children: List[Child], c: Checker, samples: Samples, bursts: int,
            fleet_end: Optional[Dict[str, Any]]) -> int:
    ok = True
    print(f"\n== soak summary: {wall:.0f} s, seed {seed} ==")
    print("ops done (settled), per process and surface:")
    print(f"  {'process':<16} {'surface':<22} {'ops':>9} {'granted':>9} {'refused':>8} "
          f"{'q-timeout':>9} {'cancelled':>9} {'call-t/o':>8} {'circ-open':>9}")
    grand = 0
    for name, surfaces in layer_ops(py, children).items():
        for surf, t in surfaces.items():
            n = settled(t)
            grand += n
            print(f"  {name:<16} {surf:<22} {n:>9} {t['granted']:>9} {t['refused']:>8} "
                  f"{t['timed_out']:>9} {t['cancelled']:>9} {t['call_timeout']:>8} "
                  f"{t['circuit_open']:>9}")
    print(f"  {'all':<16} {'':<22} {grand:>9}  ({grand / max(wall, 1e-9):.0f} ops/s)")

    # Chaos that happened (each kind must have, or the soak tested less than it says).
    chaos: Dict[str, Dict[str, int]] = {}
    if py is not None:
        chaos["python (parent)"] = {
            "cancels": py.counts["cancels"], "op timeouts": py.counts["op_timeouts"],
            "limit changes": py.counts["limit_changes"],
            "breaker opens": py.counts["breaker_opens"],
            "call timeouts": py.guard_tally["call_timeout"],
            "queue timeouts": sum(t["timed_out"] for t in py.ops().values())}
    for ch in children:
        cnt = ch.last.get("counts", {})
        chaos[ch.name] = {k.replace("_", " "): v for k, v in cnt.items()}
    print(f"chaos: upstream failure bursts {bursts}")
    for name, cnt in chaos.items():
        print(f"  {name:<16} " + ", ".join(f"{k} {v}" for k, v in cnt.items()))
    coverage_failures = []
    if bursts == 0:
        coverage_failures.append("no upstream failure burst")
    for name, cnt in chaos.items():
        for k, v in cnt.items():
            if v == 0 and not (k == "limit changes" and name == "py-worker-1"):
                coverage_failures.append(f"{name}: no {k}")
    if py is not None:
        for where, tr in sorted(py.transitions.items()):
            print(f"  python {where} breaker: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(tr.items())))
        if py.clients is not None:
            print(f"  python httpx clients replaced {py.clients.recycled} times (every "
                  f"{py.clients.every:g} s: httpcore 1.0.9 leaks pool slots on cancellation, "
                  f"see Clients)")

    checks = c.n + sum(ch.last.get("checks", 0) for ch in children)
    failed = c.failed + sum(ch.last.get("failed", 0) for ch in children)
    print(f"invariant checks: {checks} performed, {failed} failed "
          f"(parent {c.n}/{c.failed}" + "".join(
              f", {ch.name} {ch.last.get('checks', 0)}/{ch.last.get('failed', 0)}"
              for ch in children) + ")")
    failures = list(c.failures)
    for ch in children:
        failures += [f"{ch.name}: {f}" for f in ch.last.get("failures", [])]
        for note in ch.notes[:5]:
            print(f"  note from {ch.name}: {note}")
    for f in failures[:40]:
        print(f"  FAILED: {f}")
    if failed:
        ok = False
    for f in coverage_failures:
        print(f"  NOT EXERCISED: {f}")
    if coverage_failures:
        ok = False
    if fleet_end is not None:
        print(f"fleet pool at the end: limit {fleet_end.get('limit')}, "
              f"used {fleet_end.get('used')}, "
              f"holders {len(fleet_end.get('holders') or [])}")

    print(f"memory (RSS from /proc/<pid>/status; slope: least squares over the samples after "
          f"{warmup:g} s):")
    print(f"  {'process':<16} {'pid':>7} {'start':>9} {'peak':>9} {'end':>9} {'slope':>14}  gate")
    for name, pts in samples.points.items():
        if not pts:
            continue
        after = [(t, k) for t, k in pts if warmup <= t <= a.seconds]
        s = slope_kib_per_min(after)
        gated = samples.gated[name]
        verdict = "-"
        if gated and wall - warmup < MIN_FIT:
            verdict = f"not gated (fit window under {MIN_FIT:g} s)"
        elif gated:
            if s is None:
                verdict = "too few samples"
            elif s > a.max_slope:
                verdict = f"FAIL (> {a.max_slope:g})"
                ok = False
            else:
                verdict = f"ok (<= {a.max_slope:g})"
        else:
            verdict = "not gated (no hullguard inside)"
        s_txt = "-" if s is None else f"{s:+.1f} KiB/min"
        peak = max(k for _, k in pts)
        print(f"  {name:<16} {samples.pids[name]:>7} {pts[0][1]:>7}Ki {peak:>7}Ki "
              f"{pts[-1][1]:>7}Ki {s_txt:>14}  {verdict}")
    for what, pts in samples.own.items():  # the parent's breakdown (informational)
        after = [(t, k) for t, k in pts if warmup <= t <= a.seconds]
        s = slope_kib_per_min(after)
        unit = "Ki" if what == "malloc in use" else ""
        per = "KiB/min" if unit else "/min"
        s_txt = "-" if s is None else f"{s:+.1f} {per}"
        print(f"  {'  parent ' + what:<24} {pts[0][1]:>7}{unit} {max(k for _, k in pts):>7}{unit} "
              f"{pts[-1][1]:>7}{unit} {s_txt:>14}  (informational)")
    print(f"\n{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float,
                   default=float(os.environ.get("SOAK_SECONDS", "180")),
                   help="how long every layer runs (default $SOAK_SECONDS or 180)")
    p.add_argument("--sample-every", type=float, default=2.0, help="RSS / stats sample period (s)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds left out of the RSS fit (default max(20, seconds / 3))")
    p.add_argument("--max-slope", type=float, default=1024.0,
                   help="the RSS slope above which a hullguard process fails (KiB/min)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-node", action="store_true", help="without the Node child")
    p.add_argument("--no-c", action="store_true", help="without the C child")
    p.add_argument("--no-workers", action="store_true",
                   help="without the two Python host/fleet worker processes")
    # A worker process (started by the parent).
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--host-name", help=argparse.SUPPRESS)
    p.add_argument("--host-dir", help=argparse.SUPPRESS)
    p.add_argument("--redis-port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--pool", help=argparse.SUPPRESS)
    p.add_argument("--healthy-url", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.sample_every <= 0:
        p.error("need --seconds > 0 and --sample-every > 0")
    return a


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    if a.worker is not None:
        try:
            return asyncio.run(worker_main(a))
        except KeyboardInterrupt:
            return 130

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # the finally blocks stop and reap every child

    signal.signal(signal.SIGTERM, on_term)
    try:
        return asyncio.run(soak_main(a))
    except KeyboardInterrupt:
        print("soak: interrupted (every child stopped and reaped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
