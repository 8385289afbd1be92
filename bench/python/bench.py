#!/usr/bin/env python3
"""The Python benchmark (docs/design.md § Benchmarks): hullguard beside its anchors, in one
process, one run.

Rows (hullguard / anchor, lower is better):

| row | one op | anchor | target |
|---|---|---|---|
| uncontended ``async with`` | ``async with bh:`` / ``async with bh.acquire():`` (limit 10, nothing else running) | ``async with asyncio.Semaphore(10)`` | ≤ 0.5 |
| ``try_acquire`` + ``release`` | ``bh.try_acquire().release()`` | ``threading.BoundedSemaphore.acquire(blocking=False)`` + ``release()`` | ≤ 0.2 |
| composed policy | ``async with bh:`` on a bulkhead with ``resilience={"breaker": {}}`` around an empty function | ``async with asyncio.Semaphore(10): pybreaker.CircuitBreaker().call(f)`` | ≤ 1.0 |
| gateway: calls + tokens (issue 16) | ``async with bh.acquire(cost=200):`` on a bulkhead with ``budget=10**9`` | ``asyncio.Semaphore(10)`` for the calls, then a token count under an ``asyncio.Condition`` (``TwoSemaphores``) | ≤ 0.7 |
| 1000 tasks through limit 10 | 1000 tasks, each ``async with lim: await asyncio.sleep(0)``, gathered; the limiter's cost per task = time per task minus the same tasks without a limiter | ``asyncio.Semaphore(10)`` | ≤ 0.5 |

Beside them, for reference (no target): ``bulklink.AsyncBulkhead`` (pure Python, PyPI), the
closest pure-Python bulkhead; it is async-only, so it has no ``try_acquire`` row.

Floors (issue 15 item 6): ``async with`` on an object whose ``__aenter__`` / ``__aexit__`` do
nothing (the uncontended floor; the rows "overhead above the floor" subtract it from both sides),
and a minimal deque+Future limiter (the task rows' floor). Cost curves (item 7, after the table):
one op at queue depth 10 / 1 000 / 100 000 (``bh.acquire()`` beside
``asyncio.Semaphore.acquire()``, each awaitable driven by ``send``), and ``try_acquire`` +
``release`` from 1 and 2 threads on one limiter (beside ``threading.BoundedSemaphore``); flat is
the target.

Method:

* **One process, interleaved.** A warm-up round calibrates each case to a batch of about 25 ms,
  then ``--reps`` (default 9, at least 5) repetitions run every case once, the order alternating
  (forward, reversed) so drift hits both sides of a ratio alike. A row's ratio is computed per
  repetition; the table prints the median and the min–max, and the median ns per op of each side.
* **Set-up is never timed**: limiters are built before the clock starts (the task rows reuse one
  limiter for every group of 1000 tasks; it is idle between groups). The task rows create and
  gather their 1000 tasks inside the timed region for every case alike (the no-limiter baseline
  too), so the subtraction leaves the limiter's own cost per task.
* **GC off while timing** (as ``timeit`` does), a collection before each batch.
* **Default loop**: ``asyncio``'s own event loop (the one ``asyncio.run`` uses).
* **Background check**: ``/proc/stat`` minus this process's own CPU; above 5 % of the machine the
  table says the timed rows are unreliable (a build running beside it on a 2-core machine).
* **Callgrind** (when ``valgrind`` is installed; ``--no-callgrind`` skips it): one
  ``python bench.py --callgrind-child`` under ``valgrind --tool=callgrind`` runs every case at two
  sizes after a warm-up, zeroing callgrind's counters before each batch and dumping them after
  (``--zero-before=os_getppid --dump-before=os_getpgrp``); instructions per op =
  ``(Ir(large) − Ir(small)) / (large − small)``, so fixed costs cancel out. Deterministic, so one
  run is enough.
* **Tables checked at start-up**: every case must have an entry in each per-prefix table
  (``BATCH_SECONDS``, ``CG_SIZES``) and every row must name known cases; a gap is an error
  before anything runs, not a crash after the timed rows.
* **Smoke mode** (``--smoke``): the same code paths and tables with one repetition, tiny
  batches and, when ``valgrind`` is installed, a tiny callgrind pass; it proves the script runs
  end to end in seconds (``bench/smoke.sh``, ``make test``). Its numbers mean nothing.

Benchmarks are never unit tests: nothing here asserts a time. ``make bench`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Optional, Tuple

import hullguard

bulklink: Any
try:
    import bulklink
except ImportError:  # pragma: no cover - bench/python/requirements.txt installs it
    bulklink = None
pybreaker: Any
try:
    import pybreaker
except ImportError:  # pragma: no cover - bench/python/requirements.txt installs it
    pybreaker = None

TASKS = 1000
LIMIT = 10
BATCH_SECONDS = {"with/": 0.025, "try/": 0.025, "tasks/": 0.1, "policy/": 0.025, "gateway/": 0.025}
BUSY = 0.05
# --smoke: ops per batch, and tasks per gathered group (TASKS is set to it: task batches are
# one or two groups; still more tasks than the limit, so they queue).
SMOKE_OPS = 50
SMOKE_TASKS = 40

# ---------------------------------------------------------------------------------------------
# The cases. A case runs `n` ops and returns the seconds they took (set-up excluded).

Runner = Callable[[int], float]


def _async(make: Callable[[], object], body: Callable[[object, int], Awaitable[None]]) -> Runner:
    """An async case on a private event loop (created once per case)."""
    loop = asyncio.new_event_loop()

    def run(n: int) -> float:
        lim = make()

        async def timed() -> float:
            t0 = time.perf_counter()
            await body(lim, n)
            return time.perf_counter() - t0

        return loop.run_until_complete(timed())

    return run


async def _async_with(lim: object, n: int) -> None:
    for _ in range(n):
        async with lim:  # type: ignore[attr-defined]
            pass


def _work() -> None:
    """The guarded work of the policy rows: nothing (so the rows measure the policy)."""


async def _breaker_anchor(lim: object, n: int) -> None:
    """pybreaker's breaker around the work, inside an ``asyncio.Semaphore``: the composition
    an asyncio service builds from the two most used libraries."""
    sem, breaker = lim  # type: ignore[misc]
    call = breaker.call
    for _ in range(n):
        async with sem:
            call(_work)


async def _guarded_with(bh: object, n: int) -> None:
    """hullguard's breaker (+ limit) around the same work: one ``async with``."""
    for _ in range(n):
        async with bh:  # type: ignore[attr-defined]
            _work()


async def _acquire_with(bh: object, n: int) -> None:
    acquire = bh.acquire  # type: ignore[attr-defined]
    for _ in range(n):
        async with acquire():
            pass


async def _slot_with(bb: object, n: int) -> None:
    slot = bb.slot  # type: ignore[attr-defined]
    for _ in range(n):
        async with slot():
            pass


def _sync_try_hullguard() -> Runner:
    def run(n: int) -> float:
        bh = hullguard.Bulkhead(max_concurrent=LIMIT)
        try_acquire = bh.try_acquire
        t0 = time.perf_counter()
        for _ in range(n):
            try_acquire().release()  # type: ignore[union-attr]
        return time.perf_counter() - t0

    return run


def _sync_try_bounded() -> Runner:
    def run(n: int) -> float:
        sem = threading.BoundedSemaphore(LIMIT)
        acquire, release = sem.acquire, sem.release
        t0 = time.perf_counter()
        for _ in range(n):
            acquire(blocking=False)
            release()
        return time.perf_counter() - t0

    return run


def _tasks(make: Optional[Callable[[], object]], form: str = "with") -> Runner:
    """`n` tasks (a multiple of 1000) in gathered groups of 1000, each task
    ``async with lim: await asyncio.sleep(0)`` (or only the sleep when `make` is None). One
    limiter, built before the clock starts, serves every group (it is idle between groups)."""

    async def body(lim: object, n: int) -> None:
        if lim is None:

            async def task() -> None:
                await asyncio.sleep(0)

        elif form == "slot":
            slot = lim.slot  # type: ignore[attr-defined]

            async def task() -> None:
                async with slot():
                    await asyncio.sleep(0)

        else:

            async def task() -> None:
                async with lim:  # type: ignore[attr-defined]
                    await asyncio.sleep(0)

        for _ in range(max(1, n // TASKS)):
            await asyncio.gather(*[task() for _ in range(TASKS)])

    return _async(make if make is not None else (lambda: None), body)


class NoopContext:
    """The floor of ``async with`` itself (issue 15 item 6): ``__aenter__`` / ``__aexit__`` that
    do nothing. Every uncontended row pays this much before any limiting."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


class TwoSemaphores:
    """The calls + tokens baseline of a hand-rolled asyncio gateway (issue 16): an
    ``asyncio.Semaphore`` for the calls and a token count under an ``asyncio.Condition`` for the
    budget (``asyncio.Semaphore`` cannot take ``n`` units at once), taken one after the other —
    what a Python worker writes today before it has a two-dimension limiter. ``acquire(cost)`` is
    an async context manager."""

    def __init__(self, limit: int, budget: int) -> None:
        self.calls = asyncio.Semaphore(limit)
        self.tokens = asyncio.Condition()
        self.budget = budget
        self.used = 0

    @contextlib.asynccontextmanager
    async def acquire(self, cost: int) -> AsyncIterator[None]:
        async with self.calls:
            async with self.tokens:
                await self.tokens.wait_for(lambda: self.used + cost <= self.budget)
                self.used += cost
            try:
                yield
            finally:
                async with self.tokens:
                    self.used -= cost
                    self.tokens.notify_all()


GATEWAY_BUDGET = 1_000_000_000
GATEWAY_COST = 200


def _hg_listening() -> object:
    """A bulkhead with admission events and one ``admit`` listener that does nothing."""
    bh = hullguard.Bulkhead(max_concurrent=LIMIT, events=True)
    bh.on("admit", lambda event: None)
    return bh


async def _callback_with(lim: object, n: int) -> None:
    """The floor plus one Python call of a one-argument callback per op: what a listener call
    costs the runtime itself, beside the cost per event of hullguard's events."""
    cb = lambda event: None  # noqa: E731
    event = {"kind": "admit"}
    for _ in range(n):
        async with lim:  # type: ignore[attr-defined]
            cb(event)


async def _cost_with(lim: object, n: int) -> None:
    acquire = lim.acquire  # type: ignore[attr-defined]
    for _ in range(n):
        async with acquire(cost=GATEWAY_COST):
            pass


class MinimalLimiter:
    """The floor of any asyncio limiter that suspends: a counter, a deque of Futures, FIFO
    handoff, nothing else (no cancellation safety, no timeout, no stats). Not a real limiter:
    it shows how much of a queued acquire is the event loop's own cost (Future, set_result,
    the task's wake-up), which every asyncio limiter pays."""

    __slots__ = ("free", "waiters")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self.waiters: Deque["asyncio.Future[None]"] = collections.deque()

    async def __aenter__(self) -> None:
        if self.free > 0 and not self.waiters:
            self.free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        await fut  # the releaser hands its permit over

    async def __aexit__(self, *exc: object) -> None:
        if self.waiters:
            self.waiters.popleft().set_result(None)
        else:
            self.free += 1


def _hg(**kw: Any) -> Callable[[], object]:
    return lambda: hullguard.Bulkhead(max_concurrent=LIMIT, **kw)


def _bulklink() -> object:
    assert bulklink is not None
    return bulklink.AsyncBulkhead(label="bench", parallelism=LIMIT, waiting_room=TASKS)


# name -> (label, factory of the runner, unit)
CASES: Dict[str, Tuple[str, Callable[[], Runner]]] = {
    "with/asyncio": ("asyncio.Semaphore", lambda: _async(lambda: asyncio.Semaphore(LIMIT), _async_with)),
    "with/hullguard": ("hullguard: async with bh", lambda: _async(_hg(), _async_with)),
    "with/hullguard-acquire": (
        "hullguard: async with bh.acquire()",
        lambda: _async(_hg(), _acquire_with),
    ),
    "with/bulklink": ("bulklink: async with b.slot()", lambda: _async(_bulklink, _slot_with)),
    "with/floor": ("no-op async with (floor)", lambda: _async(NoopContext, _async_with)),
    "try/threading": ("threading.BoundedSemaphore", _sync_try_bounded),
    "try/hullguard": ("hullguard: try_acquire().release()", _sync_try_hullguard),
    "tasks/none": ("no limiter (baseline)", lambda: _tasks(None)),
    "tasks/asyncio": ("asyncio.Semaphore", lambda: _tasks(lambda: asyncio.Semaphore(LIMIT))),
    "tasks/hullguard": (
        "hullguard, queue_timeout=inf",
        lambda: _tasks(_hg(max_queue=TASKS, queue_timeout=math.inf)),
    ),
    "tasks/hullguard-timer": (
        "hullguard, queue_timeout=30 s",
        lambda: _tasks(_hg(max_queue=TASKS, queue_timeout=30.0)),
    ),
    "tasks/bulklink": ("bulklink", lambda: _tasks(_bulklink, form="slot")),
    "policy/anchor": (
        "pybreaker + asyncio.Semaphore",
        lambda: _async(
            lambda: (asyncio.Semaphore(LIMIT), pybreaker.CircuitBreaker(fail_max=5)),
            _breaker_anchor,
        ),
    ),
    "policy/hullguard-breaker": (
        "hullguard: async with bh (breaker)",
        lambda: _async(_hg(resilience={"breaker": {}}), _guarded_with),
    ),
    "policy/hullguard-both": (
        "hullguard: async with bh (breaker + adaptive)",
        lambda: _async(_hg(resilience={"breaker": {}, "adaptive": {}}), _guarded_with),
    ),
    "tasks/floor": ("minimal deque+Future limiter", lambda: _tasks(lambda: MinimalLimiter(LIMIT))),
    "gateway/two-semaphores": (
        "Semaphore + token Condition",
        lambda: _async(lambda: TwoSemaphores(LIMIT, GATEWAY_BUDGET), _cost_with),
    ),
    "gateway/events": (
        "hullguard: async with bh.acquire(), events + an admit listener",
        lambda: _async(_hg_listening, _acquire_with),
    ),
    "gateway/callback": ("no-op with + one callback", lambda: _async(NoopContext, _callback_with)),
    "gateway/hullguard": (
        "hullguard: async with bh.acquire(cost=…)",
        lambda: _async(_hg(budget=GATEWAY_BUDGET), _cost_with),
    ),
}
ALL_CASES = tuple(CASES)  # before the optional anchors are left out (for the table check)
if bulklink is None:
    CASES = {k: v for k, v in CASES.items() if "bulklink" not in k}
if pybreaker is None:
    CASES = {k: v for k, v in CASES.items() if not k.startswith("policy/")}


@dataclass
class Row:
    label: str
    hg: str
    anchor: str
    target: Optional[float]  # None: information only
    baseline: Optional[str] = None  # subtracted from both sides (per-task overhead rows)
    # subtracted from the anchor instead of `baseline` (a row comparing two increments)
    anchor_baseline: Optional[str] = None

    def anchor_base(self) -> Optional[str]:
        return self.anchor_baseline if self.anchor_baseline is not None else self.baseline


ROWS = [
    Row("uncontended `async with bh`", "with/hullguard", "with/asyncio", 0.5),
    Row("uncontended `async with bh.acquire()`", "with/hullguard-acquire", "with/asyncio", 0.5),
    Row("uncontended, bulklink `async with slot()`", "with/bulklink", "with/asyncio", None),
    Row("  floor: no-op `async with`", "with/floor", "with/asyncio", None),
    Row("  `async with bh`, overhead above the floor", "with/hullguard", "with/asyncio", None,
        "with/floor"),
    Row("  `async with bh.acquire()`, overhead above the floor", "with/hullguard-acquire",
        "with/asyncio", None, "with/floor"),
    Row("try_acquire + release", "try/hullguard", "try/threading", 0.2),
    # The headline: hullguard as a user builds it (the default 30 s queue timeout).
    Row("1000 tasks / limit 10, overhead per task", "tasks/hullguard-timer", "tasks/asyncio", 0.5,
        "tasks/none"),
    Row(
        "  same, queue_timeout=inf (like for like)",
        "tasks/hullguard",
        "tasks/asyncio",
        None,
        "tasks/none",
    ),
    Row("  same, bulklink", "tasks/bulklink", "tasks/asyncio", None, "tasks/none"),
    Row(
        "  floor: minimal deque+Future limiter (see docs)",
        "tasks/floor",
        "tasks/asyncio",
        None,
        "tasks/none",
    ),
    Row("composed policy: breaker + bulkhead, per call", "policy/hullguard-breaker",
        "policy/anchor", 1.0),
    Row("  + adaptive limit (gradient2)", "policy/hullguard-both", "policy/anchor", None),
    Row("gateway: calls + tokens, `acquire(cost=…)`", "gateway/hullguard",
        "gateway/two-semaphores", 0.7),
    Row("  what the budget adds", "gateway/hullguard", "with/hullguard-acquire", None),
    Row("events: an `admit` listener attached", "gateway/events", "with/hullguard-acquire", None),
    # hullguard's cost per delivered event beside what one Python call of the listener costs.
    Row("  per event vs one Python callback call", "gateway/events", "gateway/callback", None,
        "with/hullguard-acquire", "with/floor"),
]
ALL_ROWS = tuple(ROWS)
ROWS = [r for r in ROWS if r.hg in CASES and r.anchor in CASES]


def unit_ops(name: str, n: int) -> int:
    """How many ops `n` stands for (task cases round to whole groups of 1000)."""
    return max(1, n // TASKS) * TASKS if name.startswith("tasks/") else n


# ---------------------------------------------------------------------------------------------
# Timing.


class Background:
    """The share of the machine other processes (and hypervisor steal) took meanwhile."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> Optional[Tuple[float, float, float, float]]:
        try:
            with open("/proc/stat") as f:
                fields = [float(x) for x in f.readline().split()[1:]]
        except OSError:
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        idle = fields[3] + fields[4]
        steal = fields[7] if len(fields) > 7 else 0.0
        total = sum(fields[:8])
        own = sum(os.times()[:2]) * ticks
        return total, idle, steal, own

    def shares(self) -> Optional[Tuple[float, float]]:
        end = self._read()
        if self.start is None or end is None:
            return None
        total, idle, steal, own = (e - s for e, s in zip(end, self.start))
        if total <= 0:
            return None
        others = max(0.0, total - idle - steal - own)
        return others / total, steal / total


def _by_prefix(table: Dict[str, Any], table_name: str, name: str) -> Any:
    """The entry of a per-prefix table for case `name`; a missing one is a clear error."""
    for prefix, value in table.items():
        if name.startswith(prefix):
            return value
    raise KeyError(
        f"case {name!r} has no entry in {table_name} (its prefixes: {', '.join(table)}); "
        f"add one for {name.split('/')[0] + '/'!r}"
    )


def batch_seconds(name: str) -> float:
    return float(_by_prefix(BATCH_SECONDS, "BATCH_SECONDS", name))


def calibrate(run: Runner, name: str, smoke: bool = False) -> int:
    target = batch_seconds(name)
    if smoke:  # one tiny batch stands for the calibration: nothing is measured
        _measure(run, SMOKE_OPS)
        return unit_ops(name, SMOKE_OPS)
    n = 1000 if not name.startswith("tasks/") else TASKS
    while True:
        dt = _measure(run, n)
        if dt >= target / 4 or n > 50_000_000:
            break
        n *= 4
    n = max(1, int(n * target / max(dt, 1e-9)))
    return unit_ops(name, n)


def _measure(run: Runner, n: int) -> float:
    """One batch with the cyclic GC off (as ``timeit`` does), collected before."""
    gc.collect()
    gc.disable()
    try:
        return run(n)
    finally:
        gc.enable()


def timed_rows(
    reps: int,
    smoke: bool = False,
) -> Tuple[Dict[str, List[float]], float, Optional[Tuple[float, float]]]:
    runners = {name: make() for name, (_, make) in CASES.items()}
    sizes = {name: calibrate(run, name, smoke) for name, run in runners.items()}
    order = list(runners)
    ns: Dict[str, List[float]] = {name: [] for name in order}
    bg = Background()
    started = time.perf_counter()
    for rep in range(reps):
        for name in order if rep % 2 == 0 else reversed(order):
            n = sizes[name]
            ns[name].append(_measure(runners[name], n) / n * 1e9)
    return ns, time.perf_counter() - started, bg.shares()


def med_min_max(values: List[float]) -> Tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 (possible after a baseline subtraction, e.g. in smoke mode)."""
    return a / b if b != 0 else math.nan


def print_timed(
    ns: Dict[str, List[float]],
    reps: int,
    seconds: float,
    shares: Optional[Tuple[float, float]],
    smoke: bool = False,
) -> int:
    if smoke:
        print("SMOKE RUN (--smoke): 1 repetition of tiny batches; the numbers below mean nothing")
    print(
        f"== hullguard (Python {sys.version.split()[0]}, {hullguard.__version__}) vs anchors: "
        f"{reps} interleaved repetitions, median (min–max) of per-repetition ratios =="
    )
    header = (
        f"{'row':<52} {'anchor':<27} {'hullguard ns':>12} {'anchor ns':>10}  "
        f"{'ratio median (min–max)':<24} {'target':<8} result"
    )
    print(header)
    print("-" * len(header))
    misses = 0
    for r in ROWS:
        hg, an = ns[r.hg], ns[r.anchor]
        if r.baseline is not None:
            hg = [h - b for h, b in zip(hg, ns[r.baseline])]
        if r.anchor_base() is not None:
            an = [a - b for a, b in zip(an, ns[r.anchor_base()])]
        ratios = [ratio(h, a) for h, a in zip(hg, an)]
        med, lo, hi = med_min_max(ratios)
        if r.target is None:
            target, result = "—", "info"
        elif med <= r.target:
            target, result = f"≤ {r.target:.2f}", "pass"
        else:
            target, result = f"≤ {r.target:.2f}", "MISS"
            misses += 1
        print(
            f"{r.label:<52} {CASES[r.anchor][0]:<27} {statistics.median(hg):>12.1f} "
            f"{statistics.median(an):>10.1f}  {f'{med:.2f} ({lo:.2f}–{hi:.2f})':<24} "
            f"{target:<8} {result}"
        )
    if "tasks/none" in ns:
        print(
            f"(task rows: ns per task after subtracting the no-limiter baseline, "
            f"{statistics.median(ns['tasks/none']):.0f} ns per task)"
        )
    if shares is None:
        print("background during the run: unknown (no /proc)")
    else:
        others, steal = shares
        busy = others + steal > BUSY
        print(
            f"background during the run: other processes {others * 100:.0f}% of the machine's "
            f"CPU, hypervisor steal {steal * 100:.0f}%"
            + (" — BUSY MACHINE: the timed rows are unreliable, run again when idle" if busy else "")
        )
    print(f"{misses} target(s) missed; {seconds:.0f} s")
    return misses


# ---------------------------------------------------------------------------------------------
# Callgrind.

# (small, large) ops per case prefix: per op = (Ir(large) − Ir(small)) / (large − small). The
# policy rows build a fresh bulkhead (and its breaker / adaptive limit) per batch, like the with/
# rows; at these sizes their per-op counts agree within 0.1 % with those at 2× and 4× the sizes.
CG_SIZES = {
    "with/": (1_000, 4_000),
    "try/": (2_000, 12_000),
    "tasks/": (1_000, 3_000),
    "policy/": (1_000, 4_000),
    "gateway/": (1_000, 4_000),
}
CG_SIZES_SLOW = {"with/bulklink": (200, 800), "tasks/bulklink": (1_000, 2_000)}


def cg_sizes(name: str, smoke: bool = False) -> Tuple[int, int]:
    sizes = CG_SIZES_SLOW.get(name) or _by_prefix(CG_SIZES, "CG_SIZES", name)
    if smoke:  # the table entry is still looked up (a gap fails), the sizes are tiny
        return (TASKS, 2 * TASKS) if name.startswith("tasks/") else (20, 60)
    return tuple(sizes)  # type: ignore[return-value]


def check_tables() -> None:
    """Every case has an entry in each per-prefix table, every row names known cases, every
    case is in a row: a gap fails here, before anything runs (not after the timed rows)."""
    errors = []
    for name in ALL_CASES:
        for lookup in (batch_seconds, cg_sizes):
            try:
                lookup(name)
            except KeyError as e:
                errors.append(e.args[0])
    errors += [f"CG_SIZES_SLOW names an unknown case {n!r}"
               for n in CG_SIZES_SLOW if n not in ALL_CASES]
    for r in ALL_ROWS:
        for case in (r.hg, r.anchor, r.baseline, r.anchor_baseline):
            if case is not None and case not in ALL_CASES:
                errors.append(f"row {r.label.strip()!r} names an unknown case {case!r}")
    used = {c for r in ALL_ROWS for c in (r.hg, r.anchor, r.baseline)}
    errors += [f"case {n!r} is in no row (measured, never reported)"
               for n in ALL_CASES if n not in used]
    if errors:
        raise SystemExit("bench.py: the case tables have gaps:\n  " + "\n  ".join(errors))


def callgrind_child(smoke: bool = False) -> None:
    """Under callgrind (``--zero-before=os_getppid --dump-before=os_getpgrp``): for each case,
    a warm-up, then zero → small batch → dump, zero → large batch → dump."""
    for name in CASES:
        run = CASES[name][1]()
        small, large = cg_sizes(name, smoke)
        _measure(run, small)  # warm-up: imports, caches, free lists
        for n in (small, large):
            os.getppid()  # zero the counters
            _measure(run, n)
            os.getpgrp()  # dump them


def callgrind_rows(valgrind: str, smoke: bool = False) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "cg.out")
        # valgrind's own messages go to a log file, so the child's stderr is its own.
        log = os.path.join(tmp, "valgrind.log")
        cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={base}", f"--log-file={log}",
               "--zero-before=os_getppid", "--dump-before=os_getpgrp",
               sys.executable, os.path.abspath(__file__), "--callgrind-child"]
        if smoke:
            cmd.append("--smoke")
        child = subprocess.run(
            cmd, env=dict(os.environ, PYTHONHASHSEED="0"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        dumps = [f"{base}.{i}" for i in range(1, 2 * len(CASES) + 1)]
        missing = [d for d in dumps if not os.path.exists(d)]
        if child.returncode != 0 or missing:
            vg_log = open(log, errors="replace").read() if os.path.exists(log) else ""
            sys.stderr.write(
                f"bench.py: the callgrind child failed (exit {child.returncode}, "
                f"{len(dumps) - len(missing)} of {len(dumps)} dumps written)\n"
                f"--- its stderr ---\n{child.stderr}"
                f"--- valgrind's log (last 20 lines) ---\n"
                + "".join(vg_log.splitlines(keepends=True)[-20:])
            )
            raise SystemExit(1)
        totals = []
        for d in dumps:
            with open(d) as f:
                totals.append(next(int(m.group(1)) for m in map(re.compile(r"totals:\s+(\d+)").match, f) if m))
    per_op = {}
    for k, name in enumerate(CASES):
        small, large = cg_sizes(name, smoke)
        per_op[name] = (totals[2 * k + 1] - totals[2 * k]) / (unit_ops(name, large) - unit_ops(name, small))
    print()
    if smoke:
        print("SMOKE RUN (--smoke): callgrind at tiny sizes; the counts below mean nothing")
    print("== callgrind: instructions per op (Ir), deterministic ==")
    header = f"{'row':<52} {'anchor':<27} {'hullguard Ir':>12} {'anchor Ir':>10}  ratio"
    print(header)
    print("-" * len(header))
    for r in ROWS:
        hg, an = per_op[r.hg], per_op[r.anchor]
        if r.baseline is not None:
            hg -= per_op[r.baseline]
        if r.anchor_base() is not None:
            an -= per_op[r.anchor_base()]
        print(f"{r.label:<52} {CASES[r.anchor][0]:<27} {hg:>12.0f} {an:>10.0f}  {ratio(hg, an):.2f}")
    print(f"({time.perf_counter() - started:.0f} s under valgrind)")


# ---------------------------------------------------------------------------------------------


# ----- cost curves (issue 15 item 7) ---------------------------------------------------------

DEPTHS = (10, 1_000, 100_000)
SMOKE_DEPTHS = (10, 100)


def _depth_cycle(kind: str, depth: int, ops: int) -> float:
    """Seconds per op at queue depth ``depth``: the single permit held and ``depth`` acquires
    queued (each awaitable driven by ``send`` on the running loop, as a task would, without
    the task); an op releases the permit, finishes the head's acquire (now the holder) and
    queues a new one at the tail. ``kind``: ``hullguard`` (``bh.acquire()``) or ``asyncio``
    (``asyncio.Semaphore.acquire()``)."""

    async def body() -> float:
        if kind == "hullguard":
            bh = hullguard.Bulkhead(max_concurrent=1, max_queue=depth + 1)
            held: Any = bh.try_acquire()
            take: Callable[[], Any] = bh.acquire

            def give(p: Any) -> None:
                p.release()
        else:
            sem = asyncio.Semaphore(1)
            held = await sem.acquire()
            take = sem.acquire

            def give(_p: Any) -> None:
                sem.release()

        def queue_one() -> Any:
            aw = take()
            aw.send(None)  # yields its future: queued
            return aw

        q = collections.deque(queue_one() for _ in range(depth))

        def finish_head() -> Any:
            try:
                q.popleft().send(None)
            except StopIteration as done:
                return done.value
            raise RuntimeError("the head was not granted")

        def cycle(n: int) -> None:
            nonlocal held
            for _ in range(n):
                give(held)
                held = finish_head()
                q.append(queue_one())

        cycle(min(ops, 1_000))
        gc.collect()
        t0 = time.perf_counter()
        cycle(ops)
        dt = time.perf_counter() - t0
        while q:  # every waiter granted and released in turn: the limiter ends idle
            give(held)
            held = finish_head()
        give(held)
        return dt / ops

    return asyncio.run(body())


def _threads_cycle(kind: str, threads: int, ops: int) -> float:
    """Seconds per op (wall time / all ops) of ``try_acquire`` + ``release`` on one shared
    limiter of limit 10 from ``threads`` threads: ``hullguard`` or ``threading``
    (``BoundedSemaphore.acquire(blocking=False)``). The GIL runs them one at a time: flat is the
    target, not a speed-up."""
    if kind == "hullguard":
        bh = hullguard.Bulkhead(max_concurrent=LIMIT)

        def work() -> None:
            start.wait()
            for _ in range(ops):
                bh.try_acquire().release()
    else:
        sem = threading.BoundedSemaphore(LIMIT)

        def work() -> None:
            start.wait()
            for _ in range(ops):
                sem.acquire(blocking=False)
                sem.release()

    start = threading.Barrier(threads + 1)
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    start.wait()
    for t in ts:
        t.join()
    return (time.perf_counter() - t0) / (ops * threads)


def _curve(title: str, axis: str, xs: Tuple[int, ...], anchor: Tuple[str, str],
           measure: Callable[[str, int], float], runs: int) -> None:
    """One cost-curve table: per x, the median seconds per op of hullguard and of the anchor
    (``(kind, label)``), their ratio, and each side's last / first (flat = 1.00)."""
    kind, label = anchor
    print(f"\n== cost curve: {title} ==")
    print(f"  {axis:>8} {'hullguard':>24} {label:>24} {'ratio':>7}")
    rows = []
    for x in xs:
        hg = statistics.median(measure("hullguard", x) for _ in range(runs))
        an = statistics.median(measure(kind, x) for _ in range(runs))
        rows.append((hg, an))
        print(f"  {x:>8} {hg * 1e9:>21.0f} ns {an * 1e9:>21.0f} ns {hg / an:>7.3f}")
    (hg0, an0), (hg1, an1) = rows[0], rows[-1]
    print(f"  {axis} {xs[-1]} / {axis} {xs[0]} (flat = 1.00): hullguard {hg1 / hg0:.2f}x, "
          f"{label} {an1 / an0:.2f}x")


def print_curves(smoke: bool) -> None:
    """The cost curves: per-op cost by queue depth and by thread count (median of 5 runs; 1 in
    smoke mode), hullguard beside its anchor, with hullguard's flatness."""
    runs = 1 if smoke else 5
    ops = 200 if smoke else 20_000
    _curve(f"one op at queue depth D (limit 1, D acquires queued; op = release + the head's "
           f"acquire finished + a new one queued; median of {runs} x {ops} ops)",
           "depth", SMOKE_DEPTHS if smoke else DEPTHS, ("asyncio", "asyncio.Semaphore"),
           lambda kind, d: _depth_cycle(kind, d, ops), runs)
    tops = 2_000 if smoke else 200_000
    _curve(f"try_acquire + release on one shared limiter by thread count (wall time / all "
           f"ops; median of {runs} x {tops} ops a thread)",
           "threads", (1, 2), ("threading", "threading.BoundedSemaphore"),
           lambda kind, n: _threads_cycle(kind, n, tops), runs)


def main() -> int:
    p = argparse.ArgumentParser(
        description="hullguard's Python benchmark (docs/design.md § Benchmarks)")
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 9)))
    p.add_argument("--no-callgrind", action="store_true")
    p.add_argument("--smoke", action="store_true",
                   help="run every case once, tiny batches, tiny callgrind pass: proves the "
                        "script runs end to end in seconds; measures nothing")
    p.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    check_tables()
    if args.smoke:
        global TASKS
        TASKS = SMOKE_TASKS
    if args.callgrind_child:
        callgrind_child(args.smoke)
        return 0
    if args.smoke:
        args.reps = 1
    elif args.reps < 5:
        p.error("--reps must be at least 5")
    if bulklink is None:
        print("note: bulklink is not installed (pip install -r bench/python/requirements.txt); "
              "its reference rows are left out")
    if pybreaker is None:
        print("note: pybreaker is not installed (pip install -r bench/python/requirements.txt); "
              "the composed-policy rows are left out")
    ns, seconds, shares = timed_rows(args.reps, args.smoke)
    print_timed(ns, args.reps, seconds, shares, args.smoke)
    print_curves(args.smoke)
    valgrind = shutil.which("valgrind")
    if args.no_callgrind:
        pass
    elif valgrind is None:
        print("\ncallgrind: valgrind not found; skipped (apt-get install valgrind)")
    else:
        callgrind_rows(valgrind, args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
