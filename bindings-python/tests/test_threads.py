"""Threads: acquire_sync waits in slices and checks signals (Ctrl-C raises promptly, leaks
nothing), and threads using acquire_sync share a bulkhead with asyncio tasks."""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

import hullguard
from _support import LOOP_FACTORIES, assert_conserved, assert_idle


def _when(cond: Callable[[], bool], then: Callable[[], None], limit_s: float = 10.0) -> threading.Thread:
    """A thread that runs ``then`` once ``cond`` holds (polled; bounded)."""

    def run() -> None:
        deadline = time.monotonic() + limit_s
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.001)
        then()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


KILL_CASES = ["bulkhead", "weighted", "finite_timeout", "registry"]


@pytest.mark.usefixtures("default_sigint")
@pytest.mark.parametrize("case", KILL_CASES)
def test_sigint_interrupts_acquire_sync_promptly_and_leaks_nothing(case: str) -> None:
    reg = hullguard.Registry(max_concurrent=2)
    bh = reg.get("k") if case == "registry" else hullguard.Bulkhead(max_concurrent=2)
    holder = bh.try_acquire(2)
    assert holder is not None
    sent: Dict[str, float] = {}

    def kill() -> None:
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    killer = _when(lambda: bh.stats()["queued"] == 1, kill)
    with pytest.raises(KeyboardInterrupt):
        if case == "registry":
            reg.acquire_sync("k")
        elif case == "weighted":
            bh.acquire_sync(weight=2, timeout=math.inf)
        elif case == "finite_timeout":
            bh.acquire_sync(timeout=3600.0)
        else:
            bh.acquire_sync()
    raised_at = time.monotonic()
    killer.join()
    assert raised_at - sent["at"] < 1.0  # "promptly": slices of at most 100 ms
    s = assert_conserved(bh)
    assert (s["queued"], s["active"], s["granted_unclaimed"]) == (0, 2, 0)
    assert s["rejected_by_reason"]["aborted"] == 1
    holder.release()
    s = assert_idle(bh)  # the abandoned ticket got nothing
    assert s["available"] == 2 and s["admitted_total"] == 1
    p = bh.try_acquire(2)
    assert p is not None
    p.release()


@pytest.mark.usefixtures("default_sigint")
def test_sigint_when_the_grant_races_the_interrupt_passes_the_permit_on() -> None:
    """The release lands and SIGINT arrives around the same time: whichever wins, nothing is
    lost — either the acquire returns a permit, or KeyboardInterrupt and the permit is back."""
    outcomes = {"permit": 0, "interrupt": 0}
    for i in range(20):
        bh = hullguard.Bulkhead(max_concurrent=1)
        holder = bh.try_acquire()
        assert holder is not None

        def both() -> None:
            if i % 2:
                holder.release()
                os.kill(os.getpid(), signal.SIGINT)
            else:
                os.kill(os.getpid(), signal.SIGINT)
                holder.release()

        t = _when(lambda: bh.stats()["queued"] == 1, both)
        try:
            try:
                p = bh.acquire_sync(timeout=math.inf)
                outcomes["permit"] += 1
                p.release()
                time.sleep(0.2)  # let the pending SIGINT be delivered here, inside the try
            except KeyboardInterrupt:
                outcomes["interrupt"] += 1
            t.join()
        except KeyboardInterrupt:
            t.join()
        assert_idle(bh, f"round {i}")
    assert sum(outcomes.values()) == 20


@pytest.mark.usefixtures("default_sigint")
def test_drain_sync_is_interruptible() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    holder = bh.try_acquire()
    started = threading.Event()

    def kill() -> None:
        started.wait(10)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=kill)
    t.start()
    started.set()
    with pytest.raises(KeyboardInterrupt):
        bh.drain_sync()
    t.join()
    assert holder is not None
    holder.release()
    assert bh.drain_sync(0)["drained"]


def test_signal_handlers_run_while_acquire_sync_waits() -> None:
    """A handler that does not raise runs during the wait (the wait checks signals between
    slices) and the wait goes on until the permit comes."""
    bh = hullguard.Bulkhead(max_concurrent=1)
    holder = bh.try_acquire()
    assert holder is not None
    calls: List[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *_: calls.append(1))
    try:
        state: Dict[str, Any] = {}

        def drive() -> None:
            deadline = time.monotonic() + 10
            while bh.stats()["queued"] != 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            for n in range(1, 4):
                os.kill(os.getpid(), signal.SIGUSR1)
                while len(calls) < n and time.monotonic() < deadline:
                    time.sleep(0.001)
            state["handled_while_waiting"] = len(calls)
            state["still_queued"] = bh.stats()["queued"]
            holder.release()

        t = threading.Thread(target=drive)
        t.start()
        p = bh.acquire_sync(timeout=math.inf)
        t.join()
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert state == {"handled_while_waiting": 3, "still_queued": 1}
    p.release()
    assert_idle(bh)


def test_handler_exception_aborts_acquire_sync() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    holder = bh.try_acquire()
    assert holder is not None

    class Stop(Exception):
        pass

    def handler(*_: Any) -> None:
        raise Stop()

    old = signal.signal(signal.SIGUSR2, handler)
    try:
        t = _when(lambda: bh.stats()["queued"] == 1, lambda: os.kill(os.getpid(), signal.SIGUSR2))
        with pytest.raises(Stop):
            bh.acquire_sync()
        t.join()
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert bh.stats()["queued"] == 0
    holder.release()
    assert_idle(bh)


def test_threads_only_stress_conserves() -> None:
    limit, threads, rounds = 3, 8, 300
    bh = hullguard.Bulkhead(max_concurrent=limit, max_queue=threads)
    lock = threading.Lock()
    state = {"in": 0, "max": 0}
    errors: List[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(rounds):
                w = rng.randint(1, limit)
                with bh.acquire_sync(weight=w, timeout=math.inf):
                    with lock:
                        state["in"] += w
                        state["max"] = max(state["max"], state["in"])
                    with lock:
                        state["in"] -= w
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert errors == [] and 0 < state["max"] <= limit
    s = assert_idle(bh)
    assert s["admitted_total"] == threads * rounds


@pytest.mark.parametrize("factory", list(LOOP_FACTORIES))
def test_threads_and_tasks_share_one_bulkhead(factory: str) -> None:
    """Threads with acquire_sync (some with short timeouts) and asyncio tasks with acquire
    (some cancelled) on the same bulkhead; I1 throughout, conservation and I5 at the end."""
    limit = 4
    n_threads, thread_rounds = 4, 150
    n_tasks, task_rounds = 40, 15
    bh = hullguard.Bulkhead(max_concurrent=limit, max_queue=n_threads + n_tasks + 8)
    lock = threading.Lock()
    state = {"in": 0, "max": 0, "granted": 0, "timeouts": 0, "cancelled": 0}
    errors: List[BaseException] = []

    def enter(w: int) -> None:
        with lock:
            state["in"] += w
            state["granted"] += 1
            state["max"] = max(state["max"], state["in"])
            assert state["in"] <= limit

    def leave(w: int) -> None:
        with lock:
            state["in"] -= w

    def thread_worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(thread_rounds):
                w = rng.randint(1, 2)
                timeout = rng.choice([math.inf, None, 0.0005])
                try:
                    with bh.acquire_sync(weight=w, timeout=timeout):
                        enter(w)
                        time.sleep(0)
                        leave(w)
                except hullguard.BulkheadQueueTimeoutError:
                    with lock:
                        state["timeouts"] += 1
                except hullguard.BulkheadFullError as e:
                    assert e.reason == "concurrency_limit"  # timeout 0.0005 never rounds to 0
                    raise
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    async def task_worker(rng: random.Random) -> None:
        for _ in range(task_rounds):
            w = rng.randint(1, 3)
            async with bh.acquire(weight=w):
                enter(w)
                try:
                    await asyncio.sleep(0)  # a cancel may land here, or while queued
                finally:
                    leave(w)

    async def main() -> None:
        rng = random.Random(7)
        tasks = [asyncio.ensure_future(task_worker(random.Random(i))) for i in range(n_tasks)]
        for _ in range(20):
            await asyncio.sleep(0.001)
            victim = rng.choice(tasks)
            victim.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, asyncio.CancelledError):
                state["cancelled"] += 1
            elif r is not None:
                raise r

    threads = [threading.Thread(target=thread_worker, args=(100 + i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    loop = LOOP_FACTORIES[factory]()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 60))
    finally:
        loop.close()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert errors == []
    assert 0 < state["max"] <= limit and state["in"] == 0
    s = assert_idle(bh)
    assert s["admitted_total"] >= state["granted"]
    assert s["rejected_by_reason"]["timeout"] == state["timeouts"]
    assert state["granted"] > n_threads * thread_rounds // 2
