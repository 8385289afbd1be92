"""hullguard.HostBulkhead: one limit per host (docs/design.md §14, issue 19), with real processes.

Every test uses its own temporary ``dir`` (removed afterwards) and a unique name, so the file
runs beside the others under ``pytest -n 2 --dist loadfile``. Every process started is killed
and reaped by its fixture; every wait is bounded. Time bounds: only lower bounds where time must
pass; upper bounds 10x the target (a reclaim promised within about 0.5 s is asserted within 5 s).

The segments use short lease settings (probe 50 ms, beat 50 ms, TTL 0.5 s) unless a test says
otherwise. This process's attachments live as long as it does (a process's slot is freed by its
death), so each test's segment keeps one slot of the test process.
"""

from __future__ import annotations

import asyncio
import itertools
import gc
import json
import math
import multiprocessing
import os
import pickle
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import hullguard
from hullguard import host as hghost

from _support import STATS_KEYS

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="host bulkheads need Linux")

FAST: Dict[str, Any] = {"probe": 0.05, "beat": 0.05, "lease_ttl": 0.5}
HOST_KEYS = (
    "in_flight",
    "attached",
    "slots",
    "reclaimed_dead_total",
    "reclaimed_expired_total",
    "reclaimed_permits_total",
    "stale_releases_total",
    "foreign_releases_total",
    "local_in_flight",
    "local_active",
    "local_queued",
    "slot",
    "path",
)
CHILD = str(Path(__file__).with_name("_host_child.py"))
HULLGUARD_CMD = str(Path(sys.executable).with_name("hullguard"))
_count = itertools.count()


def unique(tag: str = "t") -> str:
    return f"{tag}-{os.getpid()}-{next(_count)}-{uuid.uuid4().hex[:6]}"


def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "") -> float:
    """Polls ``cond`` until true (bounded); the seconds it took."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return time.monotonic() - start


async def until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.005)


@pytest.fixture
def hdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="hg-host-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def name() -> str:
    return unique()


@pytest.fixture
def open_host(hdir: str, name: str) -> Callable[..., hullguard.HostBulkhead]:
    def make(**opts: Any) -> hullguard.HostBulkhead:
        o = {**FAST, "dir": hdir, **opts}
        return hullguard.HostBulkhead(name, **o)

    return make


class Child:
    """A ``_host_child.py`` process on the segment ``name`` (killed and reaped by ``close``)."""

    def __init__(self, name: str, opts: Dict[str, Any]) -> None:
        cfg = json.dumps({"name": name, "opts": opts})
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, cfg],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.err: List[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for t in self.readers:
            t.start()
        ready = self.expect(timeout=30.0).split()
        assert ready[0] == "ready", ready
        self.slot, self.pid = int(ready[1]), int(ready[2])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    def send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def expect(self, timeout: float = 10.0) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"child {self.proc.pid}: no answer within {timeout} s") from None
        if line is None:
            raise AssertionError(f"child {self.proc.pid} ended: {''.join(self.err)}")
        return line

    def ask(self, cmd: str, timeout: float = 10.0) -> str:
        self.send(cmd)
        return self.expect(timeout)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        for t in self.readers:
            t.join(timeout=5)


@pytest.fixture
def children(hdir: str, name: str) -> Iterator[Callable[..., Child]]:
    made: List[Child] = []

    def spawn(**opts: Any) -> Child:
        c = Child(name, {**FAST, "dir": hdir, **opts})
        made.append(c)
        return c

    try:
        yield spawn
    finally:
        for c in made:
            c.close()


# ----- one process -----------------------------------------------------------------------------


def test_try_acquire_release_and_with(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    bh = open_host(max_concurrent=2)
    assert bh.name and bh.path.endswith("." + bh.name) and bh.slot >= 0
    a = bh.try_acquire()
    b = bh.try_acquire()
    assert isinstance(a, hullguard.HostPermit) and b is not None
    assert bh.try_acquire() is None  # concurrency_limit: None, as the local bulkhead's
    assert (a.weight, a.cost, a.released) == (1, 0, False)
    assert a.release() is True
    assert a.release() is False  # a second release: False, as the local bulkhead's
    assert (a.weight, a.released) == (0, True)
    with b:
        pass
    assert b.released
    with bh.try_acquire(2) as p:  # type: ignore[union-attr]
        assert p.weight == 2 and bh.stats()["active"] == 2
    s = bh.stats()
    assert (s["active"], s["in_flight"], s["local_active"]) == (0, 0, 0)
    assert s["admitted_total"] == 3


def test_stats_keys_are_the_local_ones_plus_the_host_ones(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=3, budget=100)
    local = hullguard.Bulkhead(max_concurrent=3, budget=100).stats()
    p = bh.try_acquire(2, cost=40)
    assert p is not None and (p.weight, p.cost) == (2, 40)
    s = bh.stats()
    assert list(s)[: len(STATS_KEYS)] == list(STATS_KEYS) == list(local)
    assert set(s) == set(STATS_KEYS) | set(HOST_KEYS)
    assert (s["active"], s["limit"], s["available"], s["in_flight"]) == (2, 3, 1, 1)
    assert s["budget"]["in_use"] == 40 and s["budget"]["limit"] == 100
    assert set(s["rejected_by_reason"]) == set(local["rejected_by_reason"])
    assert (s["local_active"], s["local_in_flight"], s["local_queued"]) == (2, 1, 0)
    assert s["attached"] >= 1 and s["slots"] == 256 and s["slot"] == bh.slot
    assert s["path"] == bh.path
    with pytest.raises(hullguard.BulkheadFullError) as e:
        bh.try_acquire(cost=61)  # budget_limit raises (only concurrency_limit is None)
    assert e.value.reason == "budget_limit"
    assert bh.stats()["rejected_by_reason"]["budget_limit"] == 1
    p.release()


def test_options_refused_by_name(hdir: str, name: str) -> None:
    def make(**kw: Any) -> Any:
        return hullguard.HostBulkhead(name, dir=hdir, **kw)

    with pytest.raises(TypeError, match=r"`classes` is a local bulkhead's option .* does not support"):
        make(classes=[{"name": "a"}])
    with pytest.raises(TypeError, match="`resilience` is a local bulkhead's option"):
        make(resilience={})
    with pytest.raises(TypeError, match="`shed_lag_threshold` is a local bulkhead's option"):
        make(shed_lag_threshold=0.1)
    with pytest.raises(TypeError, match=r"unknown option `bogus` \(known: max_concurrent"):
        make(bogus=1)
    with pytest.raises(TypeError, match="spelled `max_concurrent`"):
        make(maxConcurrent=3)
    with pytest.raises(ValueError, match=r"max_concurrent.*1 \.\.= "):
        make(max_concurrent=0)
    with pytest.raises(TypeError, match="`max_concurrent` must be an int"):
        make(max_concurrent="3")
    with pytest.raises(TypeError, match="`max_queue` must be an int"):
        make(max_queue=True)
    with pytest.raises(ValueError, match="lease_ttl"):
        make(lease_ttl=-1)
    with pytest.raises(ValueError, match="lease_ttl.*at least 3 beats"):
        make(lease_ttl=0.2, beat=0.1)
    with pytest.raises(ValueError, match="world-writable"):
        make(mode=0o666)
    with pytest.raises(ValueError, match="on_mismatch"):
        make(on_mismatch="maybe")
    with pytest.raises(ValueError, match="name"):
        hullguard.HostBulkhead("../etc", dir=hdir)
    with pytest.raises(TypeError, match="name must be a str"):
        hullguard.HostBulkhead(3, dir=hdir)  # type: ignore[arg-type]
    assert os.listdir(hdir) == []  # nothing was created by a refused construction
    # None is "not given" (the default), as for the local bulkhead.
    bh = hullguard.HostBulkhead(name, max_concurrent=None, budget=None, dir=Path(hdir), **FAST)
    assert bh.stats()["limit"] == 10 and bh.max_queue == 100 and bh.queue_timeout == 30.0
    # Arguments of an acquire: the local bulkhead's checks and messages.
    with pytest.raises(ValueError, match="weight"):
        bh.try_acquire(11)
    with pytest.raises(ValueError, match="cost"):
        bh.try_acquire(cost=1)  # no budget
    with pytest.raises(TypeError, match="weight"):
        bh.acquire("x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        bh.acquire_sync(timeout=-1)


def test_mismatch_and_adopt(hdir: str, name: str) -> None:
    a = hullguard.HostBulkhead(name, dir=hdir, max_concurrent=3, **FAST)
    with pytest.raises(hullguard.HostSegmentError) as e:
        hullguard.HostBulkhead(name, dir=hdir, max_concurrent=4, **FAST)
    assert e.value.kind == "mismatch" and e.value.path == a.path
    assert isinstance(e.value, OSError) and "max_concurrent is 3" in str(e.value)
    b = hullguard.HostBulkhead(name, dir=hdir, max_concurrent=4, on_mismatch="adopt", **FAST)
    assert b.stats()["limit"] == 3 and b.path == a.path and b.slot == a.slot


def test_errors_pickle() -> None:
    for e in (
        hullguard.StaleLeaseError("stale", code="BULKHEAD_STALE_LEASE"),
        hullguard.ForeignLeaseError("foreign"),
        hullguard.HostSegmentError("gone", kind="io", path="/x", errno=2),
    ):
        f = pickle.loads(pickle.dumps(e))
        assert type(f) is type(e) and str(f) == str(e) and f.code == e.code
    assert hullguard.StaleLeaseError.code == "BULKHEAD_STALE_LEASE"
    assert hullguard.ForeignLeaseError.code == "BULKHEAD_FOREIGN_LEASE"
    assert issubclass(hullguard.StaleLeaseError, hullguard.LeaseError)


def test_blocking_from_threads(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    bh = open_host(max_concurrent=2)
    lock = threading.Lock()
    now = [0, 0]  # in flight, most seen
    errors: List[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                acquire = bh.acquire_sync if i % 2 else bh.acquire_blocking
                with acquire(timeout=30):
                    with lock:
                        now[0] += 1
                        now[1] = max(now)
                    time.sleep(0.0005)
                    with lock:
                        now[0] -= 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert now == [0, 2]
    s = bh.stats()
    assert (s["active"], s["queued"], s["admitted_total"]) == (0, 0, 120)


def test_sync_queue_timeout_is_the_local_exception(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    local = hullguard.Bulkhead(max_concurrent=1)
    held, lheld = bh.try_acquire(), local.try_acquire()
    start = time.monotonic()
    with pytest.raises(hullguard.BulkheadError) as e:
        bh.acquire_sync(timeout=0.1)
    assert time.monotonic() - start >= 0.09
    with pytest.raises(hullguard.BulkheadError) as le:
        local.acquire_sync(timeout=0.01)
    assert type(e.value) is type(le.value) is hullguard.BulkheadQueueTimeoutError
    assert (e.value.reason, e.value.code) == (le.value.reason, le.value.code) == (
        "timeout",
        "BULKHEAD_QUEUE_TIMEOUT",
    )
    with pytest.raises(hullguard.BulkheadFullError) as e2:
        bh.acquire_sync(timeout=0)  # do not queue
    assert e2.value.reason == "concurrency_limit"
    s = bh.stats()
    assert s["queued"] == 0 and s["rejected_by_reason"]["timeout"] == 1
    held.release()  # type: ignore[union-attr]
    lheld.release()  # type: ignore[union-attr]


def test_close_and_drain_sync(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    bh = open_host(max_concurrent=1)
    p = bh.try_acquire()
    assert bh.drain_sync(0) == {"drained": False, "active": 1, "queued": 0}
    threading.Timer(0.05, p.release).start()  # type: ignore[union-attr]
    assert bh.drain_blocking(10)["drained"] is True
    bh.close()
    assert bh.closed
    with pytest.raises(hullguard.BulkheadClosedError):
        bh.try_acquire()
    with pytest.raises(hullguard.BulkheadClosedError):
        bh.acquire_sync()


@pytest.mark.usefixtures("default_sigint")
def test_sigint_interrupts_acquire_sync_and_gives_the_place_up(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    holder = bh.try_acquire()
    sent: Dict[str, float] = {}

    def kill() -> None:
        wait_until(lambda: bh.stats()["queued"] == 1, what="queued")
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bh.acquire_sync(timeout=math.inf)
        raised_at = time.monotonic()
    finally:
        killer.join(timeout=30)
    assert raised_at - sent["at"] < 1.0  # slices of at most 100 ms
    assert bh.stats()["queued"] == 0
    holder.release()  # type: ignore[union-attr]
    assert bh.try_acquire() is not None


# ----- asyncio (each test runs on asyncio and on uvloop) ----------------------------------------


@pytest.mark.asyncio
async def test_await_and_async_with(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    bh = open_host(max_concurrent=1)
    p = await bh.acquire()
    assert isinstance(p, hullguard.HostPermit) and p.weight == 1
    got: List[hullguard.HostPermit] = []

    async def waiter() -> None:
        async with bh.acquire(timeout=10) as q:
            got.append(q)
            assert bh.stats()["active"] == 1

    t = asyncio.ensure_future(waiter())
    await until(lambda: bh.stats()["queued"] == 1, what="queued")
    assert not got
    p.release()
    await asyncio.wait_for(t, 10)
    assert got and got[0].released
    s = bh.stats()
    assert (s["active"], s["queued"], s["queue_wait_count"]) == (0, 0, 1)
    async with p:  # a permit as an async context manager (already released: silent)
        pass
    acq = bh.acquire()
    await acq
    with pytest.raises(RuntimeError, match="already been awaited"):
        await acq


@pytest.mark.asyncio
async def test_async_timeout_is_the_local_exception(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    local = hullguard.Bulkhead(max_concurrent=1)
    held, lheld = await bh.acquire(), await local.acquire()
    start = time.monotonic()
    with pytest.raises(hullguard.BulkheadError) as e:
        await bh.acquire(timeout=0.1)
    assert time.monotonic() - start >= 0.09
    with pytest.raises(hullguard.BulkheadError) as le:
        await local.acquire(timeout=0.01)
    assert type(e.value) is type(le.value) is hullguard.BulkheadQueueTimeoutError
    assert e.value.reason == "timeout" and e.value.snapshot["limit"] == 1
    # A deadline that has passed: refused `timeout` at once, never a ValueError.
    with pytest.raises(hullguard.BulkheadQueueTimeoutError):
        await bh.acquire(deadline=time.monotonic() - 1)
    # The ambient deadline narrows the wait.
    start = time.monotonic()
    with hullguard.deadline(0.1):
        with pytest.raises(hullguard.BulkheadQueueTimeoutError):
            await bh.acquire(timeout=10)
    assert 0.09 <= time.monotonic() - start
    assert bh.stats()["queued"] == 0
    held.release()
    lheld.release()


@pytest.mark.asyncio
async def test_cancel_while_queued_gives_the_place_up(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    held = await bh.acquire()
    tasks = [asyncio.ensure_future(bh.acquire(timeout=30)) for _ in range(3)]
    await until(lambda: bh.stats()["queued"] == 3, what="3 queued")
    tasks[0].cancel()  # the head of this process
    tasks[2].cancel()
    done, _ = await asyncio.wait([tasks[0], tasks[2]], timeout=10)
    assert all(t.cancelled() for t in done) and len(done) == 2
    assert bh.stats()["queued"] == 1
    held.release()  # goes to the one left, in order
    p = await asyncio.wait_for(tasks[1], 10)
    s = bh.stats()
    assert (s["active"], s["queued"], s["local_queued"]) == (1, 0, 0)
    p.release()
    assert bh.stats()["active"] == 0


@pytest.mark.asyncio
async def test_cancel_racing_a_grant_leaks_nothing(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    rng = random.Random(19)
    kept = 0
    for i in range(40):
        held = await bh.acquire()
        t = asyncio.ensure_future(bh.acquire(timeout=30))
        await until(lambda: bh.stats()["queued"] == 1, what=f"queued ({i})")
        held.release()
        if rng.random() < 0.5:
            await asyncio.sleep(rng.random() * 0.002)
        t.cancel()
        try:
            p = await asyncio.wait_for(t, 10)
        except asyncio.CancelledError:
            pass
        else:  # the grant won the race: the permit is the task's
            kept += 1
            p.release()
        s = bh.stats()
        assert (s["active"], s["queued"]) == (0, 0), (i, s)
    assert bh.try_acquire() is not None  # nothing leaked: the one permit is free


@pytest.mark.asyncio
async def test_close_wakes_waiters_and_drain(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=1)
    held = await bh.acquire()
    assert await bh.drain(0) == {"drained": False, "active": 1, "queued": 0}
    t = asyncio.ensure_future(bh.acquire(timeout=30))
    await until(lambda: bh.stats()["queued"] == 1, what="queued")
    bh.close()
    with pytest.raises(hullguard.BulkheadClosedError):
        await asyncio.wait_for(t, 10)
    asyncio.get_running_loop().call_later(0.05, held.release)
    r = await asyncio.wait_for(bh.drain(), 10)
    assert r == {"drained": True, "active": 0, "queued": 0}


def test_several_loops_in_threads(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    from _support import LOOP_FACTORIES

    bh = open_host(max_concurrent=2)
    lock = threading.Lock()
    now = [0, 0]
    errors: List[BaseException] = []
    factories = list(LOOP_FACTORIES.values())

    async def work() -> None:
        for _ in range(15):
            async with bh.acquire(timeout=30):
                with lock:
                    now[0] += 1
                    now[1] = max(now)
                await asyncio.sleep(0.001)
                with lock:
                    now[0] -= 1

    async def main() -> None:
        await asyncio.gather(*(work() for _ in range(3)))

    def run(i: int) -> None:
        loop = factories[i % len(factories)]()
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            loop.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert now == [0, 2]
    s = bh.stats()
    assert (s["active"], s["queued"], s["admitted_total"]) == (0, 0, 4 * 3 * 15)


# ----- several processes -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_limit_across_processes_and_sigkill_reclaim(
    open_host: Callable[..., hullguard.HostBulkhead], children: Callable[..., Child]
) -> None:
    bh = open_host(max_concurrent=2)
    a, b = children(max_concurrent=2), children(max_concurrent=2)
    assert len({a.slot, b.slot, bh.slot}) == 3
    assert a.ask("acquire 10") == "held"
    assert b.ask("acquire 10") == "held"
    assert bh.try_acquire() is None  # 2 held by the two others: the limit is the host's
    s = bh.stats()
    assert (s["active"], s["attached"], s["local_active"]) == (2, 3, 0)
    t = asyncio.ensure_future(bh.acquire(timeout=30))
    await until(lambda: bh.stats()["queued"] == 1, what="queued")
    start = time.monotonic()
    a.kill()  # SIGKILL a holder: its permit comes back within about one probe period
    p = await asyncio.wait_for(t, 10)
    took = time.monotonic() - start
    assert took <= 5.0, took
    s = bh.stats()
    assert s["active"] == 2 and s["reclaimed_dead_total"] >= 1 and s["attached"] == 2
    assert b.ask("try") == "none"
    p.release()
    assert b.ask("try") == "held"


def test_waiting_child_granted_after_a_holder_is_killed(
    open_host: Callable[..., hullguard.HostBulkhead], children: Callable[..., Child]
) -> None:
    bh = open_host(max_concurrent=2)
    a, b, c = (children(max_concurrent=2) for _ in range(3))
    assert a.ask("acquire 10") == "held" and b.ask("acquire 10") == "held"
    c.send("acquire 30")
    wait_until(lambda: bh.stats()["queued"] == 1, what="the third child queued")
    start = time.monotonic()
    b.kill()
    assert c.expect(timeout=10) == "held"
    assert time.monotonic() - start <= 5.0
    s = bh.stats()
    assert (s["active"], s["queued"]) == (2, 0)
    assert a.ask("release") == "released True"
    assert c.ask("release") == "released True"
    assert bh.stats()["active"] == 0


def test_c37_prometheus_counts_only_live_holders(
    open_host: Callable[..., hullguard.HostBulkhead], children: Callable[..., Child]
) -> None:
    """C37: per-process metric files kept reporting a dead worker's values. A host bulkhead's
    metrics, scraped from any process, count live holders only: a SIGKILLed holder's permits
    leave the scrape at once (the scrape reaps first), not at its next restart."""
    from prometheus_client import CollectorRegistry, generate_latest

    from hullguard.prometheus import HullguardCollector

    bh = open_host(max_concurrent=4)
    a, b = children(max_concurrent=4), children(max_concurrent=4)
    assert a.ask("acquire 10") == "held" and a.ask("acquire 10") == "held"
    assert b.ask("acquire 10") == "held"
    registry = CollectorRegistry()
    registry.register(HullguardCollector(bulkheads={"db": bh}))

    def in_flight() -> float:
        for line in generate_latest(registry).decode().splitlines():
            if line.startswith('hullguard_in_flight{class="",dimension="calls",key="db"}'):
                return float(line.split()[-1])
        raise AssertionError("no in-flight series")

    assert in_flight() == 3.0  # two of a's, one of b's, scraped from a third process
    a.kill()
    assert in_flight() == 1.0  # only b's: a's slot reaped by the scrape itself
    assert b.ask("release") == "released True"
    assert in_flight() == 0.0


def test_stopped_holder_is_expired_and_its_release_is_stale(
    open_host: Callable[..., hullguard.HostBulkhead], children: Callable[..., Child]
) -> None:
    bh = open_host(max_concurrent=1)
    a = children(max_concurrent=1)
    assert a.ask("acquire 10") == "held"
    assert bh.try_acquire() is None
    a.kill(signal.SIGSTOP)
    # The TTL is 0.5 s: expired within 5 s, its permit back.
    wait_until(lambda: bh.stats()["reclaimed_expired_total"] >= 1, what="expired")
    p = bh.try_acquire()
    assert p is not None
    a.kill(signal.SIGCONT)
    assert a.ask("release") == "error StaleLeaseError BULKHEAD_STALE_LEASE"
    s = bh.stats()
    assert s["stale_releases_total"] == 1 and s["active"] == 1  # nothing released twice
    p.release()


def test_fork_child_gets_its_own_slot_and_parent_permits_are_foreign(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    bh = open_host(max_concurrent=3)

    async def queued_grant() -> bool:
        # A queued acquire on a loop: its wake-up crosses the wake thread of this process.
        every = await bh.acquire(bh.stats()["available"])
        t = asyncio.ensure_future(bh.acquire(timeout=30))
        await until(lambda: bh.stats()["local_queued"] == 1, what="queued")
        every.release()
        return (await asyncio.wait_for(t, 10)).release()

    assert asyncio.run(queued_grant())  # the wake thread runs in the parent before the fork
    parent = bh.try_acquire()
    assert parent is not None
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            out: Dict[str, Any] = {"slot": bh.slot}
            try:
                parent.release()
                out["release"] = "released"
            except hullguard.ForeignLeaseError as e:
                out["release"] = e.code
            mine = bh.try_acquire()
            out["mine"] = mine is not None and mine.release()
            out["async"] = asyncio.run(queued_grant())  # a wake thread of its own
            s = bh.stats()
            out["active"] = s["active"]
            out["foreign"] = s["foreign_releases_total"]
            os.write(w, json.dumps(out).encode())
            code = 0
        except BaseException:
            import traceback

            os.write(w, json.dumps({"error": traceback.format_exc()}).encode())
        finally:
            os._exit(code)
    os.close(w)
    try:
        data = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        _, status = _wait_pid(pid, 30)
    finally:
        os.close(r)
    out = json.loads(data or b"{}")
    assert "error" not in out, out["error"]
    assert os.waitstatus_to_exitcode(status) == 0
    assert out["slot"] != bh.slot  # the child attached with a slot of its own
    assert out["release"] == "BULKHEAD_FOREIGN_LEASE"
    assert out["mine"] is True and out["async"] is True
    assert out["active"] == 1 and out["foreign"] == 1  # the parent's permit is still held
    assert parent.release() is True  # the parent's release counts
    s = bh.stats()
    assert s["active"] == 0 and s["foreign_releases_total"] == 1


def test_fork_inherited_pending_acquire_is_the_parents(
    open_host: Callable[..., hullguard.HostBulkhead],
) -> None:
    """A queued acquire inherited across fork is the parent's: the child dropping its copy
    leaves the parent's published ticket (its place in the host's FIFO) alone, and polling it
    in the child refuses with kind "foreign", touching nothing (review found both)."""
    bh = open_host(max_concurrent=1)

    async def scenario() -> Dict[str, Any]:
        held = bh.acquire_sync()
        ctx = bh.acquire(timeout=20)
        it = ctx.__await__()
        next(it)  # queued: this process's ticket is published
        assert bh.stats()["queued"] == 1
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
            pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(r)
                out: Dict[str, Any] = {}
                try:
                    it.send(None)
                    out["poll"] = "ran"
                except hullguard.HostSegmentError as e:
                    out["poll"] = e.kind
                except BaseException as e:  # noqa: BLE001 (reported to the parent)
                    out["poll"] = type(e).__name__
                del it
                gc.collect()
                os.write(w, json.dumps(out).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        try:
            data = os.read(r, 65536)
            _, status = _wait_pid(pid, 30)
        finally:
            os.close(r)
        out = json.loads(data or b"{}")
        out["queued_after"] = bh.stats()["queued"]  # the parent's ticket is still published
        held.release()
        try:
            while True:
                it.send(None)
        except StopIteration as e:
            out["granted"] = e.value.release()
        out["status"] = os.waitstatus_to_exitcode(status)
        return out

    out = asyncio.run(scenario())
    assert out["status"] == 0, out
    assert out["poll"] == "foreign", out
    assert out["queued_after"] == 1, out
    assert out["granted"] is True, out


def test_max_queue_1_full_is_queue_limit(open_host: Callable[..., hullguard.HostBulkhead]) -> None:
    bh = open_host(max_concurrent=1, max_queue=1)
    held = bh.acquire_sync()

    async def two() -> None:
        first = asyncio.ensure_future(bh.acquire(timeout=10))
        await until(lambda: bh.stats()["queued"] == 1, what="queued")
        with pytest.raises(hullguard.BulkheadFullError) as e:  # the handle's one place is taken
            await bh.acquire(timeout=10)
        assert e.value.reason == "queue_limit"
        held.release()
        (await asyncio.wait_for(first, 10)).release()

    asyncio.run(two())
    assert bh.stats()["rejected_by_reason"]["queue_limit"] == 1


def _wait_pid(pid: int, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = os.waitpid(pid, os.WNOHANG)
        if got[0] == pid:
            return got
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)
        time.sleep(0.01)


def test_segment_survives_a_workers_normal_exit(hdir: str, name: str) -> None:
    """multiprocessing (spawn) workers that exit normally leave the segment in place: nothing
    registers it with multiprocessing's resource tracker (which unlinks shared memory)."""
    ctx = multiprocessing.get_context("spawn")
    opts = {**FAST, "dir": hdir, "max_concurrent": 2}
    from _host_child import spawn_worker

    path = os.path.join(hdir, f"hullguard.{os.geteuid()}.{name}")
    results = []
    try:
        for _ in range(2):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=spawn_worker, args=(name, opts, w))
            p.start()
            w.close()
            try:
                assert r.poll(60), "no answer from the worker"
                results.append(r.recv())
            finally:
                r.close()
                p.join(timeout=30)
                if p.is_alive():  # pragma: no cover
                    p.kill()
                    p.join(timeout=10)
            assert p.exitcode == 0
            assert os.path.exists(path)  # no resource tracker unlinked it
    finally:
        # spawn started multiprocessing's resource tracker for this process: stop it (nothing
        # is registered with it; a later use starts it again).
        from multiprocessing import resource_tracker

        stop = getattr(resource_tracker._resource_tracker, "_stop", None)
        if stop is not None:
            stop()
    assert [r["released"] for r in results] == [True, True]
    assert [r["admitted"] for r in results] == [1, 2]  # the second saw the first's count
    s = hullguard.HostBulkhead(name, **opts).stats()
    assert (s["admitted_total"], s["active"], s["attached"]) == (2, 0, 1)


def test_gunicorn_child_exit_hook_reaps_a_dead_worker(
    hdir: str, name: str, children: Callable[..., Child]
) -> None:
    # This process does not attach (so only the hook reaps): a probe of a minute keeps the
    # live child from reaping either.
    slow = {"probe": 60.0, "beat": 1.0, "lease_ttl": 10.0, "max_concurrent": 2}
    hook = hghost.child_exit(name, dir=hdir)
    assert hook(None, None) == 0  # no segment yet: nothing to do, no error
    a, b = children(**slow), children(**slow)
    assert a.ask("acquire 10") == "held" and a.ask("acquire 10") == "held"
    assert b.ask("try") == "none"
    a.kill()
    assert b.ask("try") == "none"  # nobody has reaped the dead worker yet
    assert hook(None, None) == 1  # gunicorn calls child_exit(server, worker)
    assert b.ask("try") == "held"  # its permits came back at once
    assert hghost.reap(name, dir=hdir) == 0
    show = subprocess.run(
        [HULLGUARD_CMD, "host", "show", name, "--dir", hdir, "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["name"] == name
    with pytest.raises(hullguard.HostSegmentError) as e:
        hghost.reap("no-such-segment", dir=hdir)
    assert e.value.kind == "io" and e.value.errno == 2


def test_hullguard_command(hdir: str, name: str, open_host: Callable[..., Any]) -> None:
    def run(*args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [HULLGUARD_CMD, *args], capture_output=True, text=True, timeout=60
        )

    bh = open_host(max_concurrent=3)
    p = bh.try_acquire()
    ls = run("host", "ls", "--dir", hdir)
    assert ls.returncode == 0, ls.stderr
    line = next(x for x in ls.stdout.splitlines() if x.startswith(name))
    assert line.split()[1:4] == ["3", "1", "1"]  # limit, in flight, attached
    js = run("host", "ls", "--dir", hdir, "--json")
    assert js.returncode == 0 and json.loads(js.stdout)[0]["name"] == name
    show = run("host", "show", name, "--dir", hdir)
    assert show.returncode == 0 and name in show.stdout and bh.path in show.stdout
    rm = run("host", "rm", name, "--dir", hdir)
    assert rm.returncode == 1 and "in use" in rm.stderr  # this process is attached
    assert os.path.exists(bh.path)
    assert run().returncode == 2 and "usage" in run().stderr
    assert run("host", "frob").returncode == 2
    # The same through the module function (what the script calls).
    assert hghost.main(["host", "ls", "--dir", hdir]) == 0
    rm = run("host", "rm", name, "--dir", hdir, "--force")
    assert rm.returncode == 0, rm.stderr
    assert not os.path.exists(bh.path)
    # This process notices at its next beat and refuses from then on (it would hold a limit
    # of its own).
    def removed() -> bool:
        try:
            q = bh.try_acquire()
        except hullguard.HostSegmentError as e:
            return e.kind == "removed"
        if q is not None:
            q.release()
        return False

    wait_until(removed, what="the removal noticed")
    p.release()  # type: ignore[union-attr]


TYPED = '''
import hullguard
from hullguard.host import child_exit, reap

bh = hullguard.HostBulkhead("db", max_concurrent=2, lease_ttl=5.0, dir="/tmp")


async def use() -> int:
    p = await bh.acquire(timeout=1.0)
    reveal_type(p)
    p.release()
    async with bh.acquire(cost=None) as q:
        reveal_type(q)
        return q.weight


def sync() -> int:
    with bh.acquire_sync() as p:
        return p.weight


def maybe() -> bool:
    p = bh.try_acquire(2)
    if p is None:
        return False
    try:
        return p.release()
    except hullguard.StaleLeaseError as e:
        return e.code == "BULKHEAD_STALE_LEASE"


hook = child_exit("db")
n: int = reap("db", dir="/tmp") + hook(None, None)
stats = bh.stats()
'''


def test_mypy_reads_the_host_api(tmp_path: Path) -> None:
    src = tmp_path / "user_code.py"
    src.write_text(TYPED)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / ".mypy_cache"), str(src)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert out.count('Revealed type is "hullguard._native.HostPermit"') == 2, out
    assert proc.returncode == 0 and out.count("error:") == 0, out
    bad = src.with_name("bad.py")
    bad.write_text(TYPED + "hullguard.HostBulkhead('x', max_concurrent='2')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / ".mypy_cache"), str(bad)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 1 and "max_concurrent" in proc.stdout, proc.stdout
