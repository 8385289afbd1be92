"""Registry (docs/design.md §9) and origin_key."""

from __future__ import annotations

import asyncio
import gc
import math

import pytest

import hullguard
from _support import STATS_KEYS, VirtualClockLoop, assert_conserved, assert_idle, settle


def test_defaults_overrides_and_getters() -> None:
    overrides = {"slow": {"max_concurrent": 1, "queue_timeout": 0.5}, "off": {"enabled": False}}
    reg = hullguard.Registry(max_concurrent=3, max_queue=7, overrides=overrides)
    assert reg.max_keys == 1024
    assert reg.overrides == overrides
    got = reg.overrides
    got["new"] = {}  # a copy: changing it changes nothing
    assert reg.overrides == overrides
    overrides["slow"]["max_concurrent"] = 42  # neither does changing the caller's dict
    assert reg.overrides["slow"]["max_concurrent"] == 1
    assert reg.get("slow").max_concurrent == 1
    fast = reg.get("fast")
    assert (fast.key, fast.max_concurrent, fast.max_queue, fast.queue_timeout) == ("fast", 3, 7, 30.0)
    slow = reg.get("slow")
    assert (slow.key, slow.max_concurrent, slow.max_queue, slow.queue_timeout) == ("slow", 1, 7, 0.5)
    assert reg.get("off").enabled is False
    assert reg.keys() == ["fast", "off", "slow"] and len(reg) == 3
    assert 'key="fast"' in repr(fast)
    assert hullguard.Registry(max_keys=5).max_keys == 5


@pytest.mark.asyncio
async def test_acquire_forms_and_keys_are_independent() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=4)
    async with reg.acquire("a") as pa:
        assert isinstance(pa, hullguard.Permit) and pa.key == "a"
        pb = await reg.acquire("b", weight=1, timeout=0)
        assert pb.key == "b"
        assert reg.try_acquire("a") is None  # a is full, b is not affected
        pc = reg.try_acquire("c", weight=1)
        assert pc is not None and pc.key == "c"
        pc.release()
        stats = reg.stats()
        assert stats["a"]["active"] == 1 and stats["b"]["active"] == 1
        pb.release()
    st = reg.stats()
    assert set(st) == {"a", "b", "c"}
    for key, s in st.items():
        assert list(s) == list(STATS_KEYS), key
        assert s["active"] == 0
    assert st["a"]["rejected_by_reason"]["concurrency_limit"] == 1


@pytest.mark.asyncio
async def test_registry_errors_carry_the_key() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0)
    held = await reg.acquire("origin-a")
    with pytest.raises(hullguard.BulkheadFullError) as info:
        await reg.acquire("origin-a")
    e = info.value
    assert e.reason == "concurrency_limit"
    assert e.snapshot == {"active": 1, "queued": 0, "limit": 1, "available": 0, "key": "origin-a"}
    assert "origin-a" in str(e)
    with pytest.raises(hullguard.BulkheadFullError) as info:
        reg.acquire_sync("origin-a", timeout=0)
    assert info.value.snapshot["key"] == "origin-a"
    held.release()
    reg.close()
    with pytest.raises(hullguard.BulkheadClosedError) as closed:
        reg.try_acquire("origin-a")
    assert closed.value.snapshot["key"] == "origin-a"
    with pytest.raises(hullguard.BulkheadClosedError) as closed:
        await reg.acquire("brand-new")  # a new key after close: shutdown too
    assert closed.value.snapshot["key"] == "brand-new"


@pytest.mark.asyncio
async def test_queue_timeout_error_has_key() -> None:
    reg = hullguard.Registry(max_concurrent=1, overrides={"k": {"queue_timeout": 0.001}})
    held = reg.try_acquire("k")
    with pytest.raises(hullguard.BulkheadQueueTimeoutError) as info:
        await reg.acquire("k")
    assert (info.value.reason, info.value.code) == ("timeout", "BULKHEAD_QUEUE_TIMEOUT")
    assert info.value.snapshot["key"] == "k"
    assert held is not None
    held.release()
    assert_idle(reg.get("k"))


@pytest.mark.asyncio
async def test_key_limit_and_lru_eviction() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=0, max_keys=2)
    a = reg.try_acquire("k1")
    b = await reg.acquire("k2")
    assert a is not None
    ctx = reg.acquire("k3")  # raised when awaited, like every rejection
    with pytest.raises(hullguard.BulkheadFullError) as info:
        await ctx
    e = info.value
    assert (e.reason, e.code, e.retryable) == ("key_limit", "BULKHEAD_FULL", True)
    assert e.snapshot["key"] == "k3"
    with pytest.raises(hullguard.BulkheadFullError, match="key_limit"):
        reg.try_acquire("k3")  # try_acquire: None only for concurrency_limit
    with pytest.raises(hullguard.BulkheadFullError, match="key_limit"):
        reg.acquire_sync("k3")
    with pytest.raises(hullguard.BulkheadFullError, match="key_limit"):
        reg.get("k3")
    assert reg.key_limit_rejections == 4
    a.release()  # k1 idle, no outside handle: evictable
    d = reg.try_acquire("k3")
    assert d is not None
    assert reg.keys() == ["k2", "k3"]
    b.release()
    d.release()
    # an outside handle (a Bulkhead from get()) pins its entry
    pinned = reg.get("k2")
    e1 = reg.try_acquire("k1")
    assert e1 is not None
    assert reg.keys() == ["k1", "k2"]
    e1.release()
    del pinned
    gc.collect()
    f = reg.try_acquire("k4")
    assert f is not None
    assert reg.keys() == ["k1", "k4"]  # k2 (pinned, then unused) was the least recently used
    f.release()


@pytest.mark.asyncio
async def test_guard_per_key() -> None:
    reg = hullguard.Registry(max_concurrent=2, overrides={"db": {"max_concurrent": 3}})

    @reg.guard("db")
    async def query() -> int:
        return reg.stats()["db"]["active"]

    @reg.guard("db", weight=3, timeout=1.0)
    def bulk() -> int:
        return reg.stats()["db"]["active"]

    assert await query() == 1
    assert bulk() == 3
    assert_idle(reg.get("db"))
    with pytest.raises(ValueError, match="timeout"):
        reg.guard("db", timeout=-1)

    @reg.guard("db", weight=True)  # checked when called (the key's bulkhead may not exist yet)
    def bad() -> None:
        pass

    with pytest.raises(TypeError, match="weight"):
        bad()


def test_set_limit_acquire_sync_and_close() -> None:
    reg = hullguard.Registry(max_concurrent=4)
    reg.set_limit("x", 2)
    assert reg.get("x").limit == 2
    with pytest.raises(ValueError, match="limit"):
        reg.set_limit("x", 5)
    with pytest.raises(TypeError, match="limit"):
        reg.set_limit("x", True)
    p = reg.acquire_sync("x", weight=2, timeout=math.inf)
    assert p.key == "x" and reg.stats()["x"]["active"] == 2
    assert reg.try_acquire("x") is None
    with pytest.raises(hullguard.BulkheadFullError):
        reg.acquire_sync("x", timeout=0)
    with pytest.raises(ValueError, match="weight"):
        reg.acquire_sync("x", weight=5)
    reg.close()
    assert reg.get("x").closed
    with pytest.raises(hullguard.BulkheadClosedError):
        reg.acquire_sync("x")
    p.release()
    assert_idle(reg.get("x"))


BAD_REGISTRY = [
    ({"max_keys": 0}, ValueError, "max_keys"),
    ({"max_keys": True}, TypeError, "max_keys"),
    ({"max_keys": 1.0}, TypeError, "max_keys"),
    ({"max_concurrent": 0}, ValueError, "max_concurrent"),
    ({"queue_timeout": math.nan}, ValueError, "queue_timeout"),
    ({"overrides": []}, TypeError, "overrides"),
    ({"overrides": {"k": 3}}, TypeError, "overrides"),
    ({"overrides": {1: {}}}, TypeError, "overrides"),
    ({"overrides": {"k": {"bogus": 1}}}, ValueError, "bogus"),
    ({"overrides": {"k": {"max_concurrent": 0}}}, ValueError, "max_concurrent"),
    ({"overrides": {"k": {"max_queue": -1}}}, ValueError, "max_queue"),
    ({"overrides": {"k": {"queue_timeout": -1}}}, ValueError, "queue_timeout"),
]


@pytest.mark.parametrize(("kwargs", "exc", "name"), BAD_REGISTRY, ids=[repr(c[0]) for c in BAD_REGISTRY])
def test_bad_registry_config(kwargs: dict, exc: type, name: str) -> None:
    with pytest.raises(exc, match=name):
        hullguard.Registry(**kwargs)



@pytest.mark.parametrize("opt", [{"max_queue": True}, {"max_concurrent": 2.0}, {"enabled": "no"}, {"queue_timeout": "1"}])
def test_wrong_type_in_overrides_is_a_type_error(opt: dict) -> None:
    # registry.rs:47 override_config wraps every error of config_from in PyValueError, so
    # `Registry(overrides={"k": {"max_queue": True}})` raises ValueError while
    # `Bulkhead(max_queue=True)` raises TypeError (a bool as a count is a TypeError).
    # Fix: keep the class, prefix the message (e.g. build the new error with the same type:
    # `if e.is_instance_of::<PyTypeError>(py) { PyTypeError::new_err(msg) } else { ... }`).
    (name,) = opt
    with pytest.raises(TypeError, match=name):
        hullguard.Registry(overrides={"k": opt})



def test_overrides_getter_is_a_deep_copy() -> None:
    # registry.rs:243 `self.overrides.bind(py).copy()` copies only the outer dict: a caller
    # mutating `reg.overrides["k"][...]` rewrites what the registry reports (while the parsed
    # config stays as constructed, so the getter then lies). Fix: copy each inner dict too
    # (as the constructor already does), or return a read-only mapping.
    reg = hullguard.Registry(overrides={"k": {"max_concurrent": 1}})
    reg.overrides["k"]["max_concurrent"] = 99
    assert reg.overrides == {"k": {"max_concurrent": 1}}
    assert reg.get("k").max_concurrent == 1


@pytest.mark.asyncio
async def test_bad_arguments_on_registry_calls() -> None:
    reg = hullguard.Registry(max_concurrent=2)
    with pytest.raises(TypeError):
        reg.acquire(1)
    with pytest.raises(TypeError, match="weight"):
        reg.acquire("k", weight=1.0)
    with pytest.raises(ValueError, match="weight"):
        reg.try_acquire("k", weight=3)
    with pytest.raises(TypeError, match="weight"):
        reg.try_acquire("k", True)
    with pytest.raises(ValueError, match="weight"):
        reg.acquire_sync("k", weight=0)
    with pytest.raises(TypeError, match="limit"):
        reg.set_limit("k", 1.0)
    with pytest.raises(TypeError):
        reg.get(None)
    with pytest.raises(ValueError, match="timeout"):
        reg.acquire("k", timeout=math.nan)
    with pytest.raises(TypeError, match="timeout"):
        reg.acquire_sync("k", timeout="1")
    s = reg.stats()["k"]
    assert sum(s["rejected_by_reason"].values()) == 0
    assert_idle(reg.get("k"))


@pytest.mark.asyncio
async def test_registry_fifo_per_key() -> None:
    reg = hullguard.Registry(max_concurrent=1, max_queue=8)
    held = await reg.acquire("k")
    order = []

    async def waiter(i: int) -> None:
        async with reg.acquire("k"):
            order.append(i)
            await asyncio.sleep(0)

    tasks = [asyncio.ensure_future(waiter(i)) for i in range(5)]
    await settle()
    assert reg.stats()["k"]["queued"] == 5
    held.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]
    assert_conserved(reg.get("k"))
    assert_idle(reg.get("k"))


ORIGINS = [
    ("https://api.example.com", "https://api.example.com:443"),
    ("https://api.example.com/v1/chat?x=1#f", "https://api.example.com:443"),
    ("HTTP://API.Example.COM", "http://api.example.com:80"),
    ("http://example.com:8080/x", "http://example.com:8080"),
    ("https://example.com:443", "https://example.com:443"),
    ("https://Bücher.example/", "https://xn--bcher-kva.example:443"),
    ("http://[::1]:9000/", "http://[::1]:9000"),
    ("http://[::1]/", "http://[::1]:80"),
    ("http://127.0.0.1/", "http://127.0.0.1:80"),
    ("https://user:pw@example.com/", "https://example.com:443"),
]


@pytest.mark.parametrize(("url", "key"), ORIGINS)
def test_origin_key(url: str, key: str) -> None:
    assert hullguard.origin_key(url) == key


@pytest.mark.parametrize("url", ["", "not a url", "/relative/path", "example.com"])
def test_origin_key_rejects_urls_without_an_origin(url: str) -> None:
    with pytest.raises(ValueError):
        hullguard.origin_key(url)


def test_origin_key_type_error() -> None:
    with pytest.raises(TypeError, match="url must be a str, not bytes"):
        hullguard.origin_key(b"https://example.com")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="url must be a str, not NoneType"):
        hullguard.origin_key(None)  # type: ignore[arg-type]


def test_origin_keys_work_as_override_keys() -> None:
    key = hullguard.origin_key("https://Slow.Example")
    reg = hullguard.Registry(max_concurrent=8, overrides={key: {"max_concurrent": 2}})
    assert reg.get(hullguard.origin_key("https://slow.example:443/path")).max_concurrent == 2
    assert reg.get(hullguard.origin_key("https://fast.example")).max_concurrent == 8


def test_url_shaped_override_keys_are_canonicalised() -> None:
    # Issue 13 bug 5: an override keyed by a URL applies to the origin key of that URL.
    reg = hullguard.Registry(max_concurrent=8, overrides={"https://Slow.example": {"max_concurrent": 2}})
    key = hullguard.origin_key("https://slow.example/")
    assert key == "https://slow.example:443"
    assert reg.get(key).max_concurrent == 2
    assert reg.get(hullguard.origin_key("https://fast.example")).max_concurrent == 8
    assert reg.overrides == {"https://Slow.example": {"max_concurrent": 2}}  # as given
    # Plain names stay opaque (byte for byte).
    reg = hullguard.Registry(overrides={"DB": {"max_queue": 0}})
    assert reg.get("DB").max_queue == 0 and reg.get("db").max_queue == 100


def test_two_override_keys_of_one_origin_are_refused() -> None:
    with pytest.raises(ValueError, match=r'names the same key as another override: "https://slow\.example:443"'):
        hullguard.Registry(overrides={
            "https://slow.example:443": {"max_concurrent": 2},
            "https://SLOW.example/v1": {"max_concurrent": 3},
        })
    with pytest.raises(ValueError, match=r'overrides\["https://"\]: a URL-shaped key must be an origin'):
        hullguard.Registry(overrides={"https://": {}})


def test_overrides_merge_over_the_defaults_key_by_key() -> None:
    reg = hullguard.Registry(
        max_concurrent=6, max_queue=3, queue_timeout=2.0,
        overrides={"k": {"max_queue": 0}, "n": {"max_concurrent": None}},  # None: the default's
    )
    k, n = reg.get("k"), reg.get("n")
    assert (k.max_concurrent, k.max_queue, k.queue_timeout) == (6, 0, 2.0)
    assert (n.max_concurrent, n.max_queue) == (6, 3)


def test_none_follows_the_core_null_rule() -> None:
    """None is "not given" (the default; in an override the defaults' value), except that a
    part and call_timeout set to None are off; "no deadline" is math.inf, never None."""
    bh = hullguard.Bulkhead(max_concurrent=None, max_queue=None, queue_timeout=None, enabled=None)
    assert (bh.max_concurrent, bh.max_queue, bh.queue_timeout, bh.enabled) == (10, 100, 30.0, True)
    reg = hullguard.Registry(
        queue_timeout=0.5,
        resilience={"breaker": {"failure_threshold": 1}, "call_timeout": 2.0},
        overrides={
            "inherit": {"queue_timeout": None, "resilience": {"breaker": {"failure_threshold": None}}},
            "off": {"resilience": {"breaker": None, "call_timeout": None}},
            "none": None,
        },
        max_keys=None,
    )
    assert reg.max_keys == 1024
    for key in ("inherit", "none"):
        b = reg.get(key)
        assert b.queue_timeout == 0.5, key  # inherited, not infinite
        assert b.call_timeout == 2.0, key
        p = b.try_acquire()
        assert p is not None
        p.release(outcome="failure")
        assert b.circuit_state == "open", f"{key}: the breaker (threshold 1) is inherited"
    off = reg.get("off")
    assert off.call_timeout is None and off.circuit_state is None
    assert off.queue_timeout == 0.5


def test_a_granted_waiters_queue_deadline_does_not_pin_its_key(vloop: VirtualClockLoop) -> None:
    """A queued waiter's deadline stays on the loop's shared queue timer until it is due, also
    after the waiter was granted; it must not keep the key's bulkhead alive meanwhile (it did:
    the entry held a strong reference, so the key could not be evicted — and a new key at
    `max_keys` was refused `key_limit` — until the 30 s timer fired)."""
    reg = hullguard.Registry(max_concurrent=1, max_keys=1, _clock=vloop.clock)
    holder = reg.try_acquire("k")
    assert holder is not None

    async def waiter() -> None:
        (await reg.acquire("k", timeout=30.0)).release()

    vloop.create_task(waiter())
    vloop.run_until_quiet()
    vloop.now_ns += 10_000_000
    holder.release()
    vloop.run_until_quiet()  # the waiter is granted and releases; its deadline is still pending
    del holder
    gc.collect()
    assert vloop.pending_timers(), "the shared queue timer is still armed for the old deadline"
    other = reg.try_acquire("other")  # evicts the idle key "k" at once
    assert other is not None
    other.release()
    assert reg.keys() == ["other"]
    vloop.advance(30_001)  # the old deadline fires on a gone bulkhead: nothing happens
    assert reg.keys() == ["other"]
