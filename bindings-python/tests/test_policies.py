"""Policies around the bulkhead (docs/design.md §6, issue 8): ``resilience={...}``, the guarded-call
path in every acquire form, outcomes, ``CircuitOpenError`` / ``CallTimeoutError``,
``on_state_change``, the ``adaptive`` / ``circuit`` stats, and cases C21, C22, C24.

Breaker timing runs on a manual clock (the ``_clock`` hook: integer ns); nothing here sleeps to
move the breaker.
"""

from __future__ import annotations

import asyncio
import gc
import math
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import hullguard
from _support import STATS_KEYS, assert_idle

MS = 1_000_000


class Clock:
    """A manual host clock for the ``_clock`` hook (integer ns)."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: int) -> None:
        self.ns += ms * MS


Events = List[Tuple[Optional[str], str, str]]


def _breaker_bh(
    clock: Clock, events: Optional[Events] = None, max_concurrent: int = 10, **breaker: Any
) -> hullguard.Bulkhead:
    b = {"failure_threshold": 5, "open_duration": 0.1}
    b.update(breaker)
    return hullguard.Bulkhead(
        max_concurrent=max_concurrent,
        resilience={"breaker": b},
        on_state_change=(lambda k, o, n: events.append((k, o, n))) if events is not None else None,
        _clock=clock,
    )


def _fail(bh: hullguard.Bulkhead, n: int) -> None:
    for _ in range(n):
        p = bh.try_acquire()
        assert p is not None
        assert p.release(outcome="failure") is True


# ----- options ---------------------------------------------------------------------------------


def test_plain_bulkhead_has_no_policies() -> None:
    bh = hullguard.Bulkhead()
    s = bh.stats()
    assert list(s) == list(STATS_KEYS)
    assert s["adaptive"] is None and s["circuit"] is None
    assert bh.call_timeout is None and bh.circuit_state is None
    for r in (None, {}, {"adaptive": None, "breaker": None, "call_timeout": None}):
        b = hullguard.Bulkhead(resilience=r)
        assert b.stats()["adaptive"] is None and b.stats()["circuit"] is None
    assert hullguard.Bulkhead(resilience={"call_timeout": math.inf}).call_timeout is None


def test_defaults_per_design() -> None:
    bh = hullguard.Bulkhead(max_concurrent=8, resilience={"adaptive": {}, "breaker": {}, "call_timeout": 2})
    s = bh.stats()
    assert s["adaptive"] == {
        "algorithm": "gradient2",
        "limit": 8,
        "min_limit": 1,
        "max_limit": 8,
        "samples_total": 0,
        "decreases_total": 0,
        "last_rtt_ns": 0,
        "long_rtt_ns": 0,
    }
    assert s["circuit"] == {
        "state": "closed",
        "generation": 0,
        "consecutive_failures": 0,
        "window_requests": 0,
        "window_failures": 0,
        "opened_at_ns": 0,
    }
    assert bh.call_timeout == 2.0
    assert bh.circuit_state == "closed"


BAD: List[Tuple[Any, type, str]] = [
    ({"breaker": {"open_duration": 0}}, ValueError, "resilience.breaker.open_duration must be at least 1e-9 seconds"),
    ({"breaker": {"open_duration": -1.5}}, ValueError, "resilience.breaker.open_duration"),
    ({"breaker": {"open_duration": math.nan}}, ValueError, "resilience.breaker.open_duration"),
    ({"breaker": {"open_duration": "1"}}, TypeError, "resilience.breaker.open_duration"),
    ({"breaker": {"half_open_timeout": 0}}, ValueError, "resilience.breaker.half_open_timeout"),
    ({"breaker": {"error_rate_window": 0}}, ValueError, "resilience.breaker.error_rate_window"),
    ({"breaker": {"failure_threshold": 0}}, ValueError, "resilience.breaker.failure_threshold"),
    ({"breaker": {"failure_threshold": 1.0}}, TypeError, "resilience.breaker.failure_threshold"),
    ({"breaker": {"failure_threshold": True}}, TypeError, "resilience.breaker.failure_threshold"),
    ({"breaker": {"error_rate_threshold": 0}}, ValueError, "resilience.breaker.error_rate_threshold"),
    ({"breaker": {"error_rate_threshold": 1.5}}, ValueError, "resilience.breaker.error_rate_threshold"),
    ({"breaker": {"error_rate_buckets": 33}}, ValueError, "resilience.breaker.error_rate_buckets"),
    ({"breaker": {"volume_threshold": 0}}, ValueError, "resilience.breaker.volume_threshold"),
    ({"breaker": {"half_open_max_calls": 0}}, ValueError, "resilience.breaker.half_open_max_calls"),
    ({"breaker": {"half_open_max_calls": 256}}, ValueError, "resilience.breaker.half_open_max_calls"),
    ({"breaker": {"bogus": 1}}, ValueError, '"bogus"'),
    ({"breaker": 5}, TypeError, "resilience.breaker must be a dict"),
    ({"adaptive": {"algorithm": "vegas"}}, ValueError, "resilience.adaptive.algorithm"),
    ({"adaptive": {"algorithm": 1}}, TypeError, "resilience.adaptive.algorithm"),
    ({"adaptive": {"max_limit": 11}}, ValueError, "resilience.adaptive.max_limit"),
    ({"adaptive": {"min_limit": 0}}, ValueError, "resilience.adaptive.min_limit"),
    ({"adaptive": {"min_limit": 6, "max_limit": 5}}, ValueError, "resilience.adaptive.min_limit"),
    ({"adaptive": {"initial_limit": 9, "max_limit": 5}}, ValueError, "resilience.adaptive.initial_limit"),
    ({"adaptive": {"target_latency": 0}}, ValueError, "resilience.adaptive.target_latency"),
    ({"adaptive": {"increase_step": 0}}, ValueError, "resilience.adaptive.increase_step"),
    ({"adaptive": {"decrease_ratio": 1.0}}, ValueError, "resilience.adaptive.decrease_ratio"),
    ({"adaptive": {"decrease_ratio": 0}}, ValueError, "resilience.adaptive.decrease_ratio"),
    ({"adaptive": {"smoothing": 0}}, ValueError, "resilience.adaptive.smoothing"),
    ({"adaptive": {"rtt_tolerance": 0.5}}, ValueError, "resilience.adaptive.rtt_tolerance"),
    ({"adaptive": {"rtt_tolerance": math.inf}}, ValueError, "resilience.adaptive.rtt_tolerance"),
    ({"adaptive": {"long_window": 0}}, ValueError, "resilience.adaptive.long_window"),
    ({"adaptive": {"queue_size": -1}}, ValueError, "resilience.adaptive.queue_size"),
    ({"adaptive": {"limit": 3}}, ValueError, '"limit"'),
    ({"adaptive": []}, TypeError, "resilience.adaptive must be a dict"),
    ({"call_timeout": 0}, ValueError, "resilience.call_timeout must be at least 1e-9 seconds"),
    ({"call_timeout": -1}, ValueError, "resilience.call_timeout"),
    ({"call_timeout": "2"}, TypeError, "resilience.call_timeout"),
    ({"retry": {}}, ValueError, '"retry"'),
    ([("breaker", {})], TypeError, "resilience must be a dict"),
]


@pytest.mark.parametrize("resilience,exc,needle", BAD, ids=[b[2] for b in BAD])
def test_bad_resilience_names_the_option(resilience: Any, exc: type, needle: str) -> None:
    with pytest.raises(exc) as e:
        hullguard.Bulkhead(max_concurrent=10, resilience=resilience)
    assert needle in str(e.value)
    with pytest.raises(exc) as e:
        hullguard.Registry(max_concurrent=10, resilience=resilience)
    assert needle in str(e.value)
    with pytest.raises(exc) as e:
        hullguard.Registry(max_concurrent=10, overrides={"k": {"resilience": resilience}})
    assert 'overrides["k"]' in str(e.value) and needle in str(e.value)


def test_initial_limit_defaults_to_max_limit() -> None:
    # docs/design.md §6.4: initial_limit = max_limit; a lowered max_limit alone is valid.
    bh = hullguard.Bulkhead(max_concurrent=10, resilience={"adaptive": {"max_limit": 5}})
    assert (bh.stats()["limit"], bh.stats()["adaptive"]["limit"]) == (5, 5)
    with pytest.raises(ValueError, match="initial_limit"):
        hullguard.Bulkhead(max_concurrent=10, resilience={"adaptive": {"initial_limit": 0}})


def test_on_state_change_must_be_callable() -> None:
    with pytest.raises(TypeError, match="on_state_change"):
        hullguard.Bulkhead(on_state_change=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_state_change"):
        hullguard.Registry(on_state_change="x")  # type: ignore[arg-type]


def test_registry_overrides_merge_key_by_key() -> None:
    clock = Clock()
    reg = hullguard.Registry(
        max_concurrent=10,
        resilience={"breaker": {"failure_threshold": 2, "open_duration": 1.0}, "adaptive": {"algorithm": "aimd"}},
        overrides={
            # breaker merges over the default's breaker: failure_threshold 2 stays
            "short": {"resilience": {"breaker": {"open_duration": 0.05}}},
            # adaptive defaults follow this key's max_concurrent
            "small": {"max_concurrent": 3},
            "plain": {"resilience": None},
            "no_adaptive": {"resilience": {"adaptive": None}},
        },
        _clock=clock,
    )
    assert reg.get("small").stats()["adaptive"]["max_limit"] == 3
    assert reg.get("small").stats()["adaptive"]["algorithm"] == "aimd"
    assert reg.get("other").stats()["adaptive"]["max_limit"] == 10
    assert reg.get("plain").stats()["circuit"] is None and reg.get("plain").stats()["adaptive"] is None
    assert reg.get("no_adaptive").stats()["adaptive"] is None
    assert reg.get("no_adaptive").stats()["circuit"]["state"] == "closed"
    for key in ("short", "other"):
        for _ in range(2):
            p = reg.try_acquire(key)
            assert p is not None
            p.release(outcome="failure")
        assert reg.get(key).circuit_state == "open", key
    clock.advance_ms(60)
    assert reg.get("short").circuit_state == "half_open"  # 50 ms
    assert reg.get("other").circuit_state == "open"  # 1 s
    assert reg.overrides["short"] == {"resilience": {"breaker": {"open_duration": 0.05}}}


# ----- outcomes --------------------------------------------------------------------------------


def test_release_outcome_values() -> None:
    clock = Clock()
    bh = _breaker_bh(clock)
    p = bh.try_acquire()
    assert p is not None
    with pytest.raises(ValueError, match="outcome"):
        p.release(outcome="boom")
    with pytest.raises(TypeError, match="outcome"):
        p.release(outcome=1)  # type: ignore[arg-type]
    assert not p.released  # a bad outcome releases nothing
    assert p.release(outcome="failure") is True
    assert p.release(outcome="failure") is False  # idempotent, counted
    s = bh.stats()
    assert s["circuit"]["consecutive_failures"] == 1 and s["released_twice_total"] == 1
    for outcome, want in (("ignored", 1), ("failure", 2), ("overload", 0), ("failure", 1), (None, 0)):
        p = bh.try_acquire()
        assert p is not None
        if outcome is None:
            p.release()  # plain release() = success
        else:
            p.release(outcome=outcome)
        assert bh.stats()["circuit"]["consecutive_failures"] == want, outcome
    assert_idle(bh)


def test_overload_is_a_failure_for_the_adaptive_limit_only() -> None:
    clock = Clock()
    bh = hullguard.Bulkhead(
        max_concurrent=10,
        resilience={"adaptive": {"algorithm": "aimd"}, "breaker": {"failure_threshold": 1}},
        _clock=clock,
    )
    p = bh.try_acquire()
    assert p is not None
    p.release(outcome="overload")
    s = bh.stats()
    assert s["adaptive"]["limit"] == 7 and s["adaptive"]["decreases_total"] == 1
    assert s["circuit"]["state"] == "closed"  # one failure would have opened it


def test_with_blocks_classify_the_exception() -> None:
    clock = Clock()
    bh = _breaker_bh(clock, failure_threshold=10)
    with bh.acquire_sync():
        pass
    assert bh.stats()["circuit"]["consecutive_failures"] == 0
    with pytest.raises(KeyError):
        with bh.acquire_sync():
            raise KeyError("x")
    assert bh.stats()["circuit"]["consecutive_failures"] == 1
    with pytest.raises(asyncio.CancelledError):
        with bh.acquire_sync():
            raise asyncio.CancelledError()
    assert bh.stats()["circuit"]["consecutive_failures"] == 1  # ignored
    with pytest.raises(ValueError):
        with bh.acquire_sync() as p:
            p.release(outcome="success")  # explicit outcome first; the exit skips it
            raise ValueError()
    assert bh.stats()["circuit"]["consecutive_failures"] == 0
    assert_idle(bh)


@pytest.mark.asyncio
async def test_async_with_forms_classify_the_exception() -> None:
    clock = Clock()
    bh = _breaker_bh(clock, failure_threshold=10)
    cf = lambda: bh.stats()["circuit"]["consecutive_failures"]  # noqa: E731
    with pytest.raises(RuntimeError):
        async with bh.acquire():
            raise RuntimeError()
    assert cf() == 1
    with pytest.raises(RuntimeError):
        async with bh:
            raise RuntimeError()
    assert cf() == 2
    async with bh:
        pass
    assert cf() == 0
    with pytest.raises(OSError):
        async with bh.acquire():
            raise OSError()
    with pytest.raises(asyncio.CancelledError):
        async with bh:
            raise asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        async with bh.acquire():
            raise asyncio.CancelledError()
    assert cf() == 1
    permit = await bh.acquire()
    permit.release(outcome="failure")
    assert cf() == 2
    assert_idle(bh)


@pytest.mark.asyncio
async def test_nested_bare_blocks_in_two_tasks_keep_their_own_calls() -> None:
    clock = Clock()
    bh = _breaker_bh(clock, failure_threshold=10)
    gate = asyncio.Event()

    async def failing() -> None:
        async with bh:
            await gate.wait()
            raise LookupError()

    async def fine() -> None:
        async with bh:
            async with bh:
                await gate.wait()

    t1, t2 = asyncio.ensure_future(failing()), asyncio.ensure_future(fine())
    await asyncio.sleep(0)
    assert bh.stats()["active"] == 3
    gate.set()
    r = await asyncio.gather(t1, t2, return_exceptions=True)
    assert isinstance(r[0], LookupError) and r[1] is None
    s = bh.stats()
    # The two successes ran last or first; either way the failure was recorded once.
    assert s["circuit"]["window_failures"] == 1 and s["circuit"]["window_requests"] == 3
    assert_idle(bh)


@pytest.mark.asyncio
async def test_a_stray_bare_exit_in_another_task_takes_no_block() -> None:
    """Each task finds its own `async with bh:` blocks (a per-bulkhead ContextVar stack): an
    `__aexit__` in a task that entered no block returns nothing, even when that task was
    created inside another task's block (its context is a copy of that task's), and is counted
    as a second release."""
    clock = Clock()
    bh = _breaker_bh(clock, failure_threshold=10)
    async with bh:
        async def stray() -> None:
            await bh.__aexit__(RuntimeError, RuntimeError(), None)

        await asyncio.ensure_future(stray())
        s = bh.stats()
        assert (s["active"], s["released_twice_total"]) == (1, 1)
        assert s["circuit"]["window_failures"] == 0  # the outer block's call is untouched
    s = assert_idle(bh)
    assert (s["circuit"]["window_requests"], s["circuit"]["window_failures"]) == (1, 0)


def test_finalized_permit_is_ignored_and_gives_the_probe_back() -> None:
    clock = Clock()
    bh = _breaker_bh(clock)
    _fail(bh, 5)
    clock.advance_ms(100)
    probe = bh.try_acquire()
    assert probe is not None and bh.circuit_state == "half_open"
    with pytest.raises(hullguard.CircuitOpenError):
        bh.try_acquire()
    del probe
    gc.collect()
    s = bh.stats()
    assert s["leaked_total"] == 1 and s["circuit"]["state"] == "half_open"
    probe = bh.try_acquire()  # the slot came back (ignored, not a failure)
    assert probe is not None
    probe.release()
    assert bh.circuit_state == "closed"


# ----- the breaker in every acquire path -----------------------------------------------------


@pytest.mark.asyncio
async def test_every_acquire_path_raises_circuit_open() -> None:
    clock = Clock()
    bh = _breaker_bh(clock)
    _fail(bh, 5)
    assert bh.circuit_state == "open"
    with pytest.raises(hullguard.CircuitOpenError) as e:
        bh.try_acquire()
    assert e.value.reason == "circuit_open" and e.value.code == "CIRCUIT_OPEN" and e.value.retryable
    assert isinstance(e.value, hullguard.BulkheadError)
    with pytest.raises(hullguard.CircuitOpenError):
        bh.acquire_sync()
    with pytest.raises(hullguard.CircuitOpenError):
        await bh.acquire()
    with pytest.raises(hullguard.CircuitOpenError):
        async with bh.acquire():
            pass
    with pytest.raises(hullguard.CircuitOpenError):
        async with bh:
            pass
    calls = []

    @bh.guard
    async def a() -> None:
        calls.append("a")

    @bh.guard(weight=2)
    def s() -> None:
        calls.append("s")

    with pytest.raises(hullguard.CircuitOpenError):
        await a()
    with pytest.raises(hullguard.CircuitOpenError):
        s()
    assert calls == []
    assert bh.stats()["rejected_by_reason"]["circuit_open"] == 7
    assert_idle(bh)


@pytest.mark.asyncio
async def test_registry_paths_raise_circuit_open_with_the_key() -> None:
    clock = Clock()
    events: Events = []
    reg = hullguard.Registry(
        resilience={"breaker": {"failure_threshold": 2, "open_duration": 0.1}},
        on_state_change=lambda k, o, n: events.append((k, o, n)),
        _clock=clock,
    )
    for _ in range(2):
        p = await reg.acquire("db")
        p.release(outcome="failure")
    assert events == [("db", "closed", "open")]
    for f in (lambda: reg.try_acquire("db"), lambda: reg.acquire_sync("db")):
        with pytest.raises(hullguard.CircuitOpenError) as e:
            f()
        assert e.value.snapshot["key"] == "db"
    with pytest.raises(hullguard.CircuitOpenError):
        await reg.acquire("db")

    @reg.guard("db")
    async def call() -> str:
        return "x"

    with pytest.raises(hullguard.CircuitOpenError):
        await call()
    assert reg.try_acquire("cache") is not None  # other keys are independent
    gc.collect()
    clock.advance_ms(100)
    assert reg.stats()["db"]["circuit"]["state"] == "half_open"
    assert events[-1] == ("db", "open", "half_open")
    assert await call() == "x"
    assert events[-1] == ("db", "half_open", "closed")


def test_breaker_lifecycle_with_events() -> None:
    clock = Clock()
    events: Events = []
    bh = _breaker_bh(clock, events)
    _fail(bh, 4)
    assert bh.circuit_state == "closed" and events == []
    _fail(bh, 1)
    assert events == [(None, "closed", "open")]
    s = bh.stats()["circuit"]
    assert s["state"] == "open" and s["generation"] == 1 and s["opened_at_ns"] == 0
    clock.advance_ms(99)
    assert bh.circuit_state == "open"
    clock.advance_ms(1)
    assert bh.circuit_state == "half_open"  # lazy: committed by this read
    assert events[-1] == (None, "open", "half_open")
    p = bh.try_acquire()
    assert p is not None
    p.release(outcome="failure")  # the probe fails: open again, at once
    assert events[-1] == (None, "half_open", "open") and bh.circuit_state == "open"
    clock.advance_ms(100)
    p = bh.try_acquire()  # the admission commits open → half_open itself
    assert p is not None and events[-1] == (None, "open", "half_open")
    p.release()
    assert events[-1] == (None, "half_open", "closed")
    assert [e[1:] for e in events] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]
    assert bh.stats()["circuit"]["generation"] == 5


def test_half_open_timeout_ends_a_silent_probe() -> None:
    clock = Clock()
    bh = _breaker_bh(clock, half_open_timeout=0.5)
    _fail(bh, 5)
    clock.advance_ms(100)
    probe = bh.try_acquire()
    assert probe is not None
    clock.advance_ms(500)
    with pytest.raises(hullguard.CircuitOpenError):
        bh.try_acquire()  # the silent probe counted as a failure: open again
    assert bh.circuit_state == "open"
    probe.release()  # an outcome of an older generation: ignored
    assert bh.circuit_state == "open"


def test_observer_exceptions_go_to_unraisablehook(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: List[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    clock = Clock()

    def boom(key: Optional[str], old: str, new: str) -> None:
        raise RuntimeError(f"observer {old}->{new}")

    bh = hullguard.Bulkhead(
        resilience={"breaker": {"failure_threshold": 1, "open_duration": 0.1}},
        on_state_change=boom,
        _clock=clock,
    )
    p = bh.try_acquire()
    assert p is not None
    assert p.release(outcome="failure") is True  # the release is not disturbed
    clock.advance_ms(100)
    p = bh.try_acquire()  # nor the admission
    assert p is not None
    p.release()
    assert [str(u.exc_value) for u in seen] == [
        "observer closed->open",
        "observer open->half_open",
        "observer half_open->closed",
    ]
    assert all(u.object is boom for u in seen)


def test_observer_may_use_the_registry_during_stats() -> None:
    """Events committed by a registry stats read are delivered after it (a callback that
    creates a key must not deadlock on the registry's lock)."""
    clock = Clock()
    seen: Events = []
    reg: List[hullguard.Registry] = []

    def on_change(key: Optional[str], old: str, new: str) -> None:
        seen.append((key, old, new))
        reg[0].get(f"created-by-{new}")

    reg.append(
        hullguard.Registry(
            resilience={"breaker": {"failure_threshold": 1, "open_duration": 0.1}},
            on_state_change=on_change,
            _clock=clock,
        )
    )
    p = reg[0].try_acquire("a")
    assert p is not None
    p.release(outcome="failure")
    clock.advance_ms(100)
    stats = reg[0].stats()
    assert stats["a"]["circuit"]["state"] == "half_open"
    assert seen == [("a", "closed", "open"), ("a", "open", "half_open")]
    assert "created-by-half_open" in reg[0].keys()


# ----- C24 ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_c24_half_open_admits_exactly_one_trial() -> None:
    """C24 (opossum#119): at t=110ms (half-open) 10 concurrent calls: exactly 1 reaches the
    backend, 9 are rejected circuit_open at once; a failed trial re-opens at once; 3 cycles,
    the backend healthy in the third: the trial closes it and the next 10 all get through."""
    clock = Clock()
    events: Events = []
    bh = _breaker_bh(clock, events)
    backend = {"up": False, "calls": 0}
    release = asyncio.Event()

    @bh.guard
    async def call() -> str:
        backend["calls"] += 1
        await release.wait()
        if not backend["up"]:
            raise ConnectionError("backend down")
        return "ok"

    release.set()
    for _ in range(5):
        with pytest.raises(ConnectionError):
            await call()
    assert bh.circuit_state == "open"
    for cycle in range(3):
        backend["up"] = cycle == 2
        backend["calls"] = 0
        clock.advance_ms(110)
        release.clear()
        tasks = [asyncio.ensure_future(call()) for _ in range(10)]
        await asyncio.sleep(0)
        rejected = [t for t in tasks if t.done()]
        assert len(rejected) == 9, cycle  # rejected in the same loop turn, before any wait
        assert all(isinstance(t.exception(), hullguard.CircuitOpenError) for t in rejected)
        assert backend["calls"] == 1
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        trial = [r for r in results if not isinstance(r, hullguard.CircuitOpenError)]
        assert len(trial) == 1
        if cycle < 2:
            assert isinstance(trial[0], ConnectionError)
            assert bh.circuit_state == "open"  # re-opened at once
        else:
            assert trial[0] == "ok" and bh.circuit_state == "closed"
    backend["calls"] = 0
    results = await asyncio.gather(*(call() for _ in range(10)))
    assert results == ["ok"] * 10 and backend["calls"] == 10
    assert [e[1:] for e in events] == [("closed", "open")] + [
        ("open", "half_open"),
        ("half_open", "open"),
    ] * 2 + [("open", "half_open"), ("half_open", "closed")]
    assert bh.stats()["rejected_by_reason"]["circuit_open"] == 27
    assert_idle(bh)


# ----- C21 ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_c21_cancelled_tasks_never_lower_the_adaptive_limit() -> None:
    """C21 (Netflix PR#146): AIMD initial 20, min 1, max 200, back-off 0.9; 1000 requests at
    concurrency 15, half cancelled by the client while running (and some while queued): 0
    limit decreases; then 10 genuine failures lower it multiplicatively."""
    clock = Clock()
    bh = hullguard.Bulkhead(
        max_concurrent=200,
        max_queue=1000,
        resilience={
            "adaptive": {
                "algorithm": "aimd",
                "initial_limit": 20,
                "min_limit": 1,
                "max_limit": 200,
                "decrease_ratio": 0.9,
                "target_latency": 0.5,
            }
        },
        _clock=clock,
    )

    @bh.guard
    async def request(hang: bool) -> None:
        clock.advance_ms(1)  # 1 ms per call on the host clock: well under target
        if hang:
            await asyncio.Event().wait()  # cancelled by the client

    done = finished = 0
    while done < 1000:
        batch = [asyncio.ensure_future(request(i % 2 == 0)) for i in range(15)]
        await asyncio.sleep(0)
        for i, t in enumerate(batch):
            if i % 2 == 0:
                t.cancel()
        results = await asyncio.gather(*batch, return_exceptions=True)
        assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 8
        finished += 7
        done += 15
    # Cancelled while queued, too.
    bh.set_limit(1)
    holder = await bh.acquire()
    queued = [asyncio.ensure_future(request(False)) for _ in range(5)]
    await asyncio.sleep(0)
    assert bh.stats()["queued"] == 5
    for t in queued:
        t.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    holder.release(outcome="ignored")
    a = bh.stats()["adaptive"]
    assert a["decreases_total"] == 0
    assert a["samples_total"] == finished  # cancelled and queued-then-cancelled: no sample
    bh.set_limit(200)
    limit = bh.stats()["adaptive"]["limit"]
    assert limit >= 20
    for _ in range(10):
        p = bh.try_acquire()
        assert p is not None
        p.release(outcome="failure")
    a = bh.stats()["adaptive"]
    assert a["decreases_total"] == 10 and a["limit"] >= 1
    assert a["limit"] <= math.floor(limit * 0.9**9)
    assert_idle(bh)


# ----- C22 ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_c22_set_limit_on_a_guarded_bulkhead() -> None:
    """C22 (anyio PR#1223 & co.) through set_limit on a bulkhead with policies attached (the
    guarded-call path adds no permits and loses none)."""
    clock = Clock()
    bh = hullguard.Bulkhead(
        max_concurrent=4,
        resilience={"breaker": {"failure_threshold": 100}, "call_timeout": 60.0},
        _clock=clock,
    )
    bh.set_limit(2)
    a, b = await bh.acquire(), await bh.acquire()
    c_task = asyncio.ensure_future(bh.acquire())
    d_task = asyncio.ensure_future(bh.acquire())
    await asyncio.sleep(0)
    bh.set_limit(1)  # step 2: 2 in use above the limit, nothing revoked
    s = bh.stats()
    assert (s["active"], s["limit"], s["available"], s["queued"]) == (2, 1, -1, 2)
    bh.set_limit(2)  # step 3: nobody admitted
    await asyncio.sleep(0)
    assert not c_task.done() and bh.stats()["active"] == 2
    a.release()  # step 4: C (FIFO) only
    await asyncio.sleep(0)
    assert c_task.done() and not d_task.done() and bh.stats()["active"] == 2
    bh.set_limit(4)  # step 5: D at once
    await asyncio.sleep(0)
    assert d_task.done()
    s = bh.stats()
    assert (s["active"], s["available"]) == (3, 1)
    bh.set_limit(1)  # step 6
    assert bh.try_acquire() is None
    for p in (b, c_task.result(), d_task.result()):
        p.release()
        if bh.stats()["active"] >= 1:
            assert bh.try_acquire() is None
    s = assert_idle(bh)
    assert s["available"] == 1
    # step 7: 1 -> 3 -> 1, then the maximum concurrency observed is 1
    bh.set_limit(3)
    bh.set_limit(1)
    live = peak = 0

    async def worker() -> None:
        nonlocal live, peak
        async with bh:
            live += 1
            peak = max(peak, live)
            await asyncio.sleep(0)
            live -= 1

    await asyncio.gather(*(worker() for _ in range(20)))
    assert peak == 1
    assert bh.stats()["circuit"]["state"] == "closed"


# ----- adaptive samples -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_queued_grant_measures_from_the_grant() -> None:
    clock = Clock()
    bh = hullguard.Bulkhead(
        max_concurrent=2,
        resilience={"adaptive": {"algorithm": "aimd", "initial_limit": 1, "target_latency": 0.05}},
        _clock=clock,
    )
    first = await bh.acquire()
    waiter = asyncio.ensure_future(bh.acquire())
    await asyncio.sleep(0)
    clock.advance_ms(1000)  # queued for a long time: not part of the sample
    first.release()  # RTT 1000 ms > 50 ms target: a congestion signal (1 × 0.7 clamps to 1)
    second = await waiter
    clock.advance_ms(10)
    second.release()  # RTT 10 ms from its grant (not 1010 ms from the enqueue): an increase
    a = bh.stats()["adaptive"]
    assert a["samples_total"] == 2
    assert a["last_rtt_ns"] == 10 * MS and a["limit"] == 2


# ----- call_timeout -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_guard_call_timeout_async() -> None:
    bh = hullguard.Bulkhead(
        max_concurrent=2, resilience={"call_timeout": 0.05, "breaker": {"failure_threshold": 10}}
    )
    unwound = asyncio.Event()
    cleanup = asyncio.Event()
    cancelled = []

    @bh.guard
    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            await cleanup.wait()  # a slow unwind: the caller does not wait for it
            unwound.set()
            raise

    t0 = time.monotonic()
    with pytest.raises(hullguard.CallTimeoutError) as e:
        await slow()
    assert time.monotonic() - t0 < 5
    assert e.value.code == "BULKHEAD_CALL_TIMEOUT" and e.value.reason == "call_timeout"
    await asyncio.sleep(0)
    assert cancelled == [True]
    s = bh.stats()
    assert s["active"] == 1  # held until the coroutine has unwound
    assert s["rejected_by_reason"]["call_timeout"] == 1
    assert s["circuit"]["consecutive_failures"] == 1  # ended as a failure at the deadline
    cleanup.set()
    await unwound.wait()
    await asyncio.sleep(0)
    s = assert_idle(bh)
    assert s["circuit"]["consecutive_failures"] == 1  # nothing more recorded at the release
    assert s["released_twice_total"] == 0

    @bh.guard
    async def fast(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    assert await fast(21) == 42
    assert bh.stats()["circuit"]["consecutive_failures"] == 0

    @bh.guard
    async def raises() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        await raises()
    assert bh.stats()["circuit"]["consecutive_failures"] == 1
    assert bh.stats()["rejected_by_reason"]["call_timeout"] == 1
    assert_idle(bh)


@pytest.mark.asyncio
async def test_guard_call_timeout_caller_cancelled() -> None:
    bh = hullguard.Bulkhead(resilience={"call_timeout": 30.0, "breaker": {}})
    inner_cancelled = asyncio.Event()

    @bh.guard
    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            inner_cancelled.set()
            raise

    t = asyncio.ensure_future(slow())
    await asyncio.sleep(0.01)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    await inner_cancelled.wait()
    await asyncio.sleep(0)
    s = assert_idle(bh)
    assert s["circuit"]["consecutive_failures"] == 0 and s["rejected_by_reason"]["call_timeout"] == 0


def test_guard_call_timeout_sync_is_classified_not_interrupted() -> None:
    bh = hullguard.Bulkhead(resilience={"call_timeout": 0.02, "breaker": {"failure_threshold": 10}})

    @bh.guard
    def slow(v: str) -> str:
        time.sleep(0.05)
        return v

    assert slow("mine") == "mine"  # its own result
    s = bh.stats()
    assert s["rejected_by_reason"]["call_timeout"] == 1
    assert s["circuit"]["consecutive_failures"] == 1

    @bh.guard
    def slow_raise() -> None:
        time.sleep(0.05)
        raise LookupError()

    with pytest.raises(LookupError):  # its own exception
        slow_raise()
    s = bh.stats()
    assert s["rejected_by_reason"]["call_timeout"] == 2
    assert s["circuit"]["consecutive_failures"] == 2

    @bh.guard
    def quick() -> int:
        return 1

    assert quick() == 1
    assert bh.stats()["circuit"]["consecutive_failures"] == 0
    assert_idle(bh)


@pytest.mark.asyncio
@pytest.mark.parametrize("form", ["acquire", "bare"])
async def test_async_with_call_timeout(form: str) -> None:
    bh = hullguard.Bulkhead(resilience={"call_timeout": 0.05, "breaker": {"failure_threshold": 10}})
    with pytest.raises(hullguard.CallTimeoutError):
        if form == "acquire":
            async with bh.acquire():
                await asyncio.sleep(10)
        else:
            async with bh:
                await asyncio.sleep(10)
    s = assert_idle(bh)
    assert s["rejected_by_reason"]["call_timeout"] == 1
    assert s["circuit"]["consecutive_failures"] == 1
    # The task is not left cancelled: it goes on awaiting normally.
    await asyncio.sleep(0.01)
    async with bh.acquire():
        await asyncio.sleep(0)
    assert bh.stats()["rejected_by_reason"]["call_timeout"] == 1
    # An outer cancellation stays a cancellation (ignored).
    t = asyncio.ensure_future(asyncio.sleep(0))

    async def body() -> None:
        async with bh:
            await asyncio.sleep(10)

    t = asyncio.ensure_future(body())
    await asyncio.sleep(0.01)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    s = assert_idle(bh)
    assert s["circuit"]["consecutive_failures"] == 0 and s["rejected_by_reason"]["call_timeout"] == 1


@pytest.mark.asyncio
async def test_registry_guard_uses_the_keys_call_timeout() -> None:
    reg = hullguard.Registry(overrides={"slow": {"resilience": {"call_timeout": 0.02}}})

    @reg.guard("slow")
    async def slow() -> None:
        await asyncio.sleep(10)

    @reg.guard("fast")
    async def fast() -> None:
        await asyncio.sleep(0.05)

    with pytest.raises(hullguard.CallTimeoutError) as e:
        await slow()
    assert e.value.snapshot["key"] == "slow"
    await fast()
    await asyncio.sleep(0.01)
    assert reg.stats()["slow"]["rejected_by_reason"]["call_timeout"] == 1
    assert reg.stats()["fast"]["rejected_by_reason"]["call_timeout"] == 0
