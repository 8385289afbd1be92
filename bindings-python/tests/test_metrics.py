"""Metrics (issue 18; docs/design.md §8.3): ``hullguard.prometheus.HullguardCollector`` scraped
over HTTP from a real ``prometheus_client`` exposition server on 127.0.0.1 (a free port) and
parsed with the Prometheus text parser, and ``hullguard.otel.HullguardMetrics`` read through the
OpenTelemetry SDK's ``InMemoryMetricReader``.

What is checked: the families are the core's table (names, types, help, units, label names);
every value equals the bulkhead's ``stats()`` (totals, per class and dimension, every reason
with zeros, the breaker's state, the budget); a registry's keys are the ``key`` label, bounded
by ``max_keys`` (an evicted key's series go, a refused key never appears); C35 on the virtual
clock through both exporters; the OpenTelemetry histogram (recorded at collection on a
synchronous Histogram) has the core's bounds, per-bucket counts, count and sum.
"""

from __future__ import annotations

import asyncio
import math
import contextlib
import gc
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Sum,
)
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

import hullguard
from hullguard import _native
from hullguard.otel import HullguardMetrics
from hullguard.prometheus import HullguardCollector
from _support import REASONS, VirtualClockLoop, assert_idle

TABLE = _native.metric_table()
ROWS = {r["name"]: r for r in TABLE}
NAMES = [r["name"] for r in TABLE]


class Scrape:
    """One scrape of the exposition endpoint, parsed by ``prometheus_client.parser``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.values: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float] = {}
        for f in self.families.values():
            for s in f.samples:
                self.values[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def get(self, name: str, **labels: str) -> Optional[float]:
        """The sample ``name{labels}`` (every label given, ``class_`` for ``class``)."""
        if "class_" in labels:
            labels["class"] = labels.pop("class_")
        return self.values.get((name, tuple(sorted(labels.items()))))

    def __call__(self, name: str, **labels: str) -> float:
        v = self.get(name, **labels)
        assert v is not None, f"no sample {name}{labels} in\n{self.text}"
        return v

    def keys(self) -> List[str]:
        return sorted({dict(k[1]).get("key", "") for k in self.values})


@contextlib.contextmanager
def exposition(collector: HullguardCollector) -> Iterator[Callable[[], Scrape]]:
    """A real exposition server (``prometheus_client.start_http_server``) on 127.0.0.1, a free
    port, serving a registry with ``collector``; yields a function that scrapes it over HTTP.
    Stopped (shut down, socket closed, thread joined) at the end."""
    registry = CollectorRegistry()
    registry.register(collector)
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{httpd.server_port}/metrics"
    try:
        with httpx.Client(timeout=10.0) as client:
            def scrape() -> Scrape:
                r = client.get(url)
                r.raise_for_status()
                return Scrape(r.text)

            yield scrape
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
        assert not thread.is_alive()


def otel_reader(**sources: Any) -> Tuple[InMemoryMetricReader, HullguardMetrics, MeterProvider]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    return reader, HullguardMetrics(provider, **sources), provider


def otel_read(reader: InMemoryMetricReader) -> Dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def points(metric: Any, **attrs: str) -> List[Any]:
    """The data points of ``metric`` whose attributes are exactly ``attrs``."""
    return [p for p in metric.data.data_points if dict(p.attributes) == attrs]


def point(metric: Any, **attrs: str) -> Any:
    got = points(metric, **attrs)
    assert len(got) == 1, (attrs, [dict(p.attributes) for p in metric.data.data_points])
    return got[0]


# ----- the table --------------------------------------------------------------------------------


def test_the_table_is_the_issues() -> None:
    assert NAMES == [
        "hullguard_in_flight",
        "hullguard_queued",
        "hullguard_limit",
        "hullguard_admitted_total",
        "hullguard_rejected_total",
        "hullguard_queue_wait_seconds",
        "hullguard_circuit_state",
        "hullguard_budget_in_use",
        "hullguard_orphaned_in_flight",
    ]
    kinds = {r["name"]: r["kind"] for r in TABLE}
    assert kinds["hullguard_admitted_total"] == kinds["hullguard_rejected_total"] == "counter"
    assert kinds["hullguard_queue_wait_seconds"] == "histogram"
    assert ROWS["hullguard_queue_wait_seconds"]["unit"] == "seconds"
    assert ROWS["hullguard_in_flight"]["labels"] == ["key", "class", "dimension"]
    assert ROWS["hullguard_rejected_total"]["labels"] == ["key", "reason"]
    assert all(r["labels"][0] == "key" and r["help"] for r in TABLE)
    bounds = ROWS["hullguard_queue_wait_seconds"]["buckets"]
    assert len(bounds) == 27 and bounds[0] == 1024 / 1e9 and bounds[-1] == 2**36 / 1e9
    assert all(b == 2 * a for a, b in zip(bounds, bounds[1:]))


# ----- Prometheus ---------------------------------------------------------------------------------


def _gateway() -> Tuple[hullguard.Bulkhead, List[hullguard.Permit]]:
    gw = hullguard.Bulkhead(max_concurrent=4, budget=1000, events=True,
                            classes=[{"name": "interactive", "priority": 5, "ceiling": 3},
                                     {"name": "batch", "ceiling": 2}])
    held = [gw.try_acquire(cost=100, admission_class="interactive"),
            gw.try_acquire(cost=50, admission_class="batch")]
    assert gw.try_admit(cost=900).reason == "budget_limit"
    return gw, [p for p in held if p is not None]


def test_prometheus_scrape_matches_stats() -> None:
    gw, held = _gateway()
    br = hullguard.Bulkhead(max_concurrent=2, resilience={"breaker": {"failure_threshold": 1,
                                                                      "open_duration": 600}})
    p = br.try_acquire()
    assert p is not None
    p.release(outcome="failure")
    assert br.try_admit().reason == "circuit_open"
    reg = hullguard.Registry(max_concurrent=3, max_keys=4)
    a = reg.try_acquire("a")
    b = reg.try_acquire("b")
    assert a is not None and b is not None
    b.release()

    collector = HullguardCollector(bulkheads={"gw": gw, "breaker": br}, registries={"origin/": reg})
    with exposition(collector) as scrape:
        s = scrape()
    # The families: the core's table, the Prometheus types and help texts.
    for row in TABLE:
        fam_name = row["name"][: -len("_total")] if row["kind"] == "counter" else row["name"]
        fam = s.families[fam_name]
        assert (fam.type, fam.documentation) == (row["kind"], row["help"]), fam
        for smp in fam.samples:
            extra = {"le"} if smp.name.endswith("_bucket") else set()
            assert set(smp.labels) == set(row["labels"]) | extra, smp
    assert s.keys() == ["breaker", "gw", "origin/a", "origin/b"]

    st = gw.stats()
    calls = {"dimension": "calls"}
    budget = {"dimension": "budget"}
    assert s("hullguard_in_flight", key="gw", class_="", **calls) == st["active"] == 2
    assert s("hullguard_in_flight", key="gw", class_="", **budget) == st["budget"]["in_use"] == 150
    for name in ("interactive", "batch"):
        c = gw.class_stats(name)
        assert s("hullguard_in_flight", key="gw", class_=name, **calls) == c["in_flight"] == 1
        assert s("hullguard_in_flight", key="gw", class_=name, **budget) == c["budget_in_use"]
        assert s("hullguard_queued", key="gw", class_=name) == c["queued"] == 0
        assert s("hullguard_limit", key="gw", class_=name, **calls) == c["ceiling"]
        assert s("hullguard_limit", key="gw", class_=name, **budget) == c["budget_ceiling"]
        assert s("hullguard_budget_in_use", key="gw", class_=name) == c["budget_in_use"]
    assert s("hullguard_limit", key="gw", class_="interactive", **calls) == 3
    assert s("hullguard_queued", key="gw", class_="") == st["queued"] == 0
    assert s("hullguard_limit", key="gw", class_="", **calls) == st["limit"] == 4
    assert s("hullguard_limit", key="gw", class_="", **budget) == st["budget"]["limit"] == 1000
    assert s("hullguard_admitted_total", key="gw") == st["admitted_total"] == 2
    for reason in REASONS:  # every reason, zeros included
        assert s("hullguard_rejected_total", key="gw", reason=reason) == st["rejected_by_reason"][reason]
    assert s("hullguard_rejected_total", key="gw", reason="budget_limit") == 1
    assert s("hullguard_budget_in_use", key="gw", class_="") == 150
    assert s("hullguard_orphaned_in_flight", key="gw") == st["orphaned_in_flight"] == 0
    assert s.get("hullguard_circuit_state", key="gw") is None  # no breaker: no series
    # The histogram: the core's 28 buckets (27 bounds and +Inf), empty.
    buckets = [k for k in s.values if k[0] == "hullguard_queue_wait_seconds_bucket"
               and dict(k[1])["key"] == "gw"]
    assert len(buckets) == 28 and any(dict(k[1])["le"] == "+Inf" for k in buckets)
    assert s("hullguard_queue_wait_seconds_count", key="gw") == 0
    assert s("hullguard_queue_wait_seconds_sum", key="gw") == 0

    assert s("hullguard_circuit_state", key="breaker") == 1  # open
    assert s("hullguard_rejected_total", key="breaker", reason="circuit_open") == 1
    assert s.get("hullguard_budget_in_use", key="breaker", class_="") is None
    assert s.get("hullguard_in_flight", key="breaker", class_="", **budget) is None

    assert s("hullguard_in_flight", key="origin/a", class_="", **calls) == 1
    assert s("hullguard_in_flight", key="origin/b", class_="", **calls) == 0
    assert s("hullguard_admitted_total", key="origin/b") == 1
    assert s("hullguard_limit", key="origin/a", class_="", **calls) == 3

    for p in held:
        p.release()
    a.release()
    with exposition(collector) as scrape:
        assert scrape()("hullguard_in_flight", key="gw", class_="", **calls) == 0
    assert_idle(gw)


def test_c35_queue_wait_metrics(vloop: VirtualClockLoop) -> None:
    """C35 (../shared/cases/CASES.md) through the exporters, on the virtual clock: L=1, Q=10.
    H holds 0–100 ms, W1 queues at 10 ms (granted at 100 ms: a wait of exactly 90 ms), W2
    queues at 20 ms with a 50 ms timeout (times out at 70 ms: no wait recorded), W3 acquires at
    300 ms at once (no wait). Scraped over HTTP after each step: ``hullguard_queued`` equals
    the live waiters at every sample (1, 2, 1, 0); after step 1
    ``hullguard_queue_wait_seconds_count`` is 1 and ``_sum`` 0.09, and steps 2 and 3 leave
    them. OpenTelemetry (read through the SDK's in-memory reader) agrees at every sample."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=10, _clock=vloop.clock)
    reader, _, _ = otel_reader(bulkheads={"c35": bh})
    outcomes: Dict[str, str] = {}

    async def hold(name: str, ms: int, timeout: Optional[float] = None) -> None:
        try:
            p = await bh.acquire(timeout=timeout)
        except hullguard.BulkheadQueueTimeoutError:
            outcomes[name] = "timeout"
            return
        outcomes[name] = "granted"
        await asyncio.sleep(ms / 1000)
        p.release()

    def at(ms: int, coro: Any) -> None:
        vloop.advance(ms - vloop.now_ns // 1_000_000)
        vloop.create_task(coro)
        vloop.run_until_quiet()

    queued: List[float] = []
    otel_queued: List[float] = []
    waits: List[Tuple[float, float]] = []
    otel_waits: List[Tuple[int, float]] = []

    def sample(scrape: Callable[[], Scrape]) -> None:
        s = scrape()
        queued.append(s("hullguard_queued", key="c35", class_=""))
        assert queued[-1] == bh.stats()["queued"]
        waits.append((s("hullguard_queue_wait_seconds_count", key="c35"),
                      s("hullguard_queue_wait_seconds_sum", key="c35")))
        m = otel_read(reader)
        otel_queued.append(point(m["hullguard_queued"], key="c35").value)
        # The histogram appears once a wait has been recorded on it.
        h = points(m["hullguard_queue_wait_seconds"], key="c35") if "hullguard_queue_wait_seconds" in m else []
        otel_waits.append((h[0].count, h[0].sum) if h else (0, 0.0))

    with exposition(HullguardCollector(bulkheads={"c35": bh})) as scrape:
        at(0, hold("h", 100))
        at(10, hold("w1", 100))
        sample(scrape)  # t=10: W1 waits
        at(20, hold("w2", 0, timeout=0.05))
        sample(scrape)  # t=20: W1, W2 wait
        vloop.advance(50)  # t=70: W2 times out
        assert outcomes["w2"] == "timeout"
        sample(scrape)
        vloop.advance(30)  # t=100: H releases, W1 is granted after exactly 90 ms
        sample(scrape)
        assert outcomes["w1"] == "granted"
        at(300, hold("w3", 50))  # step 3: admitted at once
        assert outcomes["w3"] == "granted"
        sample(scrape)
        vloop.advance(1_000)
        sample(scrape)

    assert queued == [1, 2, 1, 0, 0, 0]
    assert otel_queued == queued
    assert waits[:3] == [(0, 0.0)] * 3  # W2's timeout is not a wait
    assert waits[3:] == [(1, 0.09)] * 3  # step 1's 90 ms; steps 2 and 3 leave it
    assert otel_waits[:3] == [(0, 0.0)] * 3
    for count, total in otel_waits[3:]:
        assert count == 1 and total == pytest.approx(0.09, abs=1e-9)
    s = bh.stats()
    assert (s["queue_wait_count"], s["queue_wait_sum_ns"]) == (1, 90_000_000)
    assert_idle(bh)


def test_registry_keys_are_bounded_by_max_keys() -> None:
    """A registry's keys are the ``key`` label; sampling never creates one. At ``max_keys``
    a new key evicts the least recently used idle key, whose series disappear from the next
    scrape; with nothing evictable the new key is refused ``key_limit`` and never appears.
    Label cardinality is thus bounded by ``max_keys`` per registry."""
    reg = hullguard.Registry(max_concurrent=2, max_keys=2)
    collector = HullguardCollector(registries=[reg])
    reader, _, provider = otel_reader(registries=[reg])

    def otel_keys() -> List[str]:
        m = otel_read(reader)
        got = {dict(p.attributes)["key"] for name in ("hullguard_in_flight", "hullguard_admitted_total")
               if name in m for p in m[name].data.data_points}
        return sorted(got)

    with exposition(collector) as scrape:
        assert scrape().keys() == []  # an empty registry exports nothing
        for k in ("a", "b"):
            p = reg.try_acquire(k)
            assert p is not None
            p.release()
        assert scrape().keys() == ["a", "b"]
        assert reg.keys() == ["a", "b"]  # scraping created nothing
        c = reg.try_acquire("c")  # evicts "a" (idle, least recently used)
        assert c is not None
        s = scrape()
        assert s.keys() == ["b", "c"] == otel_keys()  # "a"'s series are gone from both
        assert s("hullguard_in_flight", key="c", class_="", dimension="calls") == 1
        d = reg.try_acquire("b")
        assert d is not None
        with pytest.raises(hullguard.BulkheadFullError):
            reg.try_acquire("e")  # "b" and "c" are busy: key_limit
        assert reg.key_limit_rejections == 1
        assert scrape().keys() == ["b", "c"] == otel_keys()
        c.release()
        d.release()
    provider.shutdown()


def test_sources_prefixes_duplicates_and_changes() -> None:
    bh = hullguard.Bulkhead(max_concurrent=1)
    reg = hullguard.Registry(max_concurrent=1)
    reg.try_acquire("x").release()  # type: ignore[union-attr]
    reg.try_acquire("y").release()  # type: ignore[union-attr]
    collector = HullguardCollector(bulkheads={"x": bh}, registries=[reg])
    with exposition(collector) as scrape:
        assert scrape().keys() == ["x", "y"]  # the registry's "x" is dropped: the bulkhead's
        assert collector.duplicates == 1
        assert collector.remove(reg) and not collector.remove(reg)
        assert scrape().keys() == ["x"]
        collector.add_registry(reg, prefix="r/")
        collector.add_bulkhead("second", hullguard.Bulkhead(max_concurrent=3))
        assert scrape().keys() == ["r/x", "r/y", "second", "x"]
        assert collector.remove("x")
        assert scrape().keys() == ["r/x", "r/y", "second"]
    with pytest.raises(ValueError):
        collector.add_bulkhead("second", bh)
    with pytest.raises(ValueError):
        collector.add_registry(reg)
    with pytest.raises(TypeError):
        HullguardCollector(bulkheads={"x": reg})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        HullguardCollector(registries=reg)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        HullguardCollector(registries={"p": bh})  # type: ignore[arg-type]


def test_a_global_cap_registry_exports_its_shared_admission() -> None:
    """Under a global cap the keys are classes of one admission: one ``key="global"`` (after
    the prefix), the registry's keys as the ``class`` label."""
    reg = hullguard.Registry(max_concurrent=2, max_keys=4, global_cap={"limit": 3, "max_queue": 4})
    a = reg.try_acquire("a")
    b = reg.try_acquire("b")
    assert a is not None and b is not None
    with exposition(HullguardCollector(registries={"edge/": reg})) as scrape:
        s = scrape()
    assert s.keys() == ["edge/global"]
    assert s("hullguard_in_flight", key="edge/global", class_="", dimension="calls") == 2
    assert s("hullguard_limit", key="edge/global", class_="", dimension="calls") == 3
    for k in ("a", "b"):
        assert s("hullguard_in_flight", key="edge/global", class_=k, dimension="calls") == 1
        assert s("hullguard_limit", key="edge/global", class_=k, dimension="calls") == 2
    a.release()
    b.release()


# ----- OpenTelemetry -------------------------------------------------------------------------------


def test_otel_instruments_match_the_table_and_stats() -> None:
    gw, held = _gateway()
    reg = hullguard.Registry(max_concurrent=3)
    a = reg.try_acquire("a")
    assert a is not None
    reader, hm, provider = otel_reader(bulkheads={"gw": gw}, registries={"o/": reg})
    m = otel_read(reader)
    # No breaker: no circuit state; no wait yet: nothing recorded on the histogram (the SDK
    # leaves out an instrument without points).
    assert sorted(m) == sorted(set(NAMES) - {"hullguard_circuit_state", "hullguard_queue_wait_seconds"})
    for row in TABLE:
        if row["name"] not in m:
            continue
        metric = m[row["name"]]
        assert metric.description == row["help"]
        assert metric.unit == ("s" if row["unit"] == "seconds" else "")
        if row["kind"] == "counter":
            assert isinstance(metric.data, Sum) and metric.data.is_monotonic
            assert metric.data.aggregation_temporality == AggregationTemporality.CUMULATIVE
        elif row["kind"] == "gauge":
            assert isinstance(metric.data, Gauge)
        else:
            assert isinstance(metric.data, Histogram)
    assert set(hm.instruments) == set(NAMES)

    st = gw.stats()
    assert point(m["hullguard_in_flight"], key="gw", dimension="calls").value == st["active"] == 2
    assert point(m["hullguard_in_flight"], key="gw", dimension="budget").value == 150
    assert point(m["hullguard_in_flight"], key="gw", **{"class": "batch"}, dimension="budget").value == 50
    assert point(m["hullguard_limit"], key="gw", **{"class": "interactive"}, dimension="calls").value == 3
    assert point(m["hullguard_admitted_total"], key="gw").value == 2
    for reason in REASONS:
        assert point(m["hullguard_rejected_total"], key="gw", reason=reason).value == \
            st["rejected_by_reason"][reason]
    assert point(m["hullguard_budget_in_use"], key="gw").value == 150
    assert point(m["hullguard_in_flight"], key="o/a", dimension="calls").value == 1

    for p in held:
        p.release()
    a.release()
    m = otel_read(reader)
    assert point(m["hullguard_in_flight"], key="gw", dimension="calls").value == 0
    assert point(m["hullguard_admitted_total"], key="gw").value == 2
    provider.shutdown()


def _waits(vloop: VirtualClockLoop, bh: hullguard.Bulkhead, waits_ms: List[float]) -> None:
    """Makes one queued acquire wait exactly each of ``waits_ms`` (virtual time)."""
    async def waiter() -> None:
        p = await bh.acquire()
        p.release()

    for w in waits_ms:
        holder = bh.try_acquire()
        assert holder is not None
        vloop.create_task(waiter())
        vloop.run_until_quiet()
        vloop.now_ns += int(w * 1_000_000)
        holder.release()
        vloop.run_until_quiet()


def test_otel_wait_histogram_equals_the_cores(vloop: VirtualClockLoop) -> None:
    """Each collection records the waits granted since the previous one: per core bucket as
    many values as it gained, inside that bucket, summing to the exact sum. So the OpenTelemetry
    histogram (the core's bounds as its explicit bounds) has the core's per-bucket counts, count
    and sum, across collections — and no value is recorded twice."""
    bh = hullguard.Bulkhead(max_concurrent=1, max_queue=4, _clock=vloop.clock)
    reader, _, provider = otel_reader(bulkheads={"w": bh})
    bounds = ROWS["hullguard_queue_wait_seconds"]["buckets"]

    def check() -> None:
        metric = otel_read(reader)["hullguard_queue_wait_seconds"]
        assert metric.unit == "s"
        h = point(metric, key="w")
        s = bh.stats()
        core = list(s["queue_wait_histogram"].values())
        assert list(h.explicit_bounds) == bounds
        assert list(h.bucket_counts) == core
        assert h.count == s["queue_wait_count"]
        assert h.sum == pytest.approx(s["queue_wait_sum_ns"] / 1e9, rel=1e-9, abs=1e-9)

    _waits(vloop, bh, [90, 0.0005, 3, 3.5, 1500])
    check()
    check()  # a collection with nothing new records nothing
    _waits(vloop, bh, [90, 91, 0.001, 100_000])  # 100 s: the last (+Inf) bucket
    check()
    assert bh.stats()["queue_wait_histogram"]["inf"] == 1
    provider.shutdown()
    assert_idle(bh)


def test_otel_registry_key_recreated_counts_from_zero(vloop: VirtualClockLoop) -> None:
    """A key evicted and created again starts a new core histogram: its waits are recorded
    from zero (none lost, none recorded twice)."""
    reg = hullguard.Registry(max_concurrent=1, max_keys=1, _clock=vloop.clock)
    reader, _, provider = otel_reader(registries=[reg])

    def wait_on(key: str, ms: float) -> None:
        holder = reg.try_acquire(key)
        assert holder is not None

        async def waiter() -> None:
            (await reg.acquire(key)).release()

        vloop.create_task(waiter())
        vloop.run_until_quiet()
        vloop.now_ns += int(ms * 1_000_000)
        holder.release()
        vloop.run_until_quiet()

    wait_on("k", 10)
    wait_on("k", 20)
    h = point(otel_read(reader)["hullguard_queue_wait_seconds"], key="k")
    assert (h.count, h.sum) == (2, pytest.approx(0.03))
    # A granted waiter's queue timer holds its key until it fires (the 30 s queue timeout).
    vloop.advance(31_000)
    gc.collect()
    reg.try_acquire("other").release()  # type: ignore[union-attr]  # evicts "k"
    assert reg.keys() == ["other"]
    otel_read(reader)
    gc.collect()
    wait_on("k", 5)  # evicts "other"; "k" is new
    h = point(otel_read(reader)["hullguard_queue_wait_seconds"], key="k")
    assert (h.count, h.sum) == (3, pytest.approx(0.035))  # cumulative in OpenTelemetry
    provider.shutdown()


def test_otel_arguments() -> None:
    with pytest.raises(TypeError):
        HullguardMetrics(object())  # type: ignore[arg-type]
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    hm = HullguardMetrics(provider.get_meter("mine"))
    bh = hullguard.Bulkhead(max_concurrent=1)
    hm.add_bulkhead("late", bh)
    assert hm.remove("late") and not hm.remove("late")
    provider.shutdown()


def test_otel_placement_is_exact_with_waits_past_the_last_bound() -> None:
    """The OpenTelemetry histogram's values (hullguard.otel._placed) keep the core's bucket of
    every wait and sum to the core's exact sum — also with waits past the last finite bound
    (review: a 34.4 s and a 68.8 s wait were recorded summing to 120.26 s, not 103.2 s)."""
    from hullguard.otel import _placed

    table = {row["name"]: row for row in hullguard._native.metric_table()}
    bounds = list(table["hullguard_queue_wait_seconds"]["buckets"])
    buckets = [(b, 0) for b in bounds] + [(math.inf, 0)]
    lows = [0.0] + bounds

    def bucket(v: float) -> int:
        return next(i for i, hi in enumerate(bounds + [math.inf]) if v < hi or hi == math.inf)

    cases = [
        [34.4, 68.8],  # the review's pair: one finite (low in its bucket), one past the top
        [0.0001, 70.0, 500.0],
        [0.09],
        [1e-7, 2e-6, 0.5, 3.0],
        [100.0, 100.0],
    ]
    for waits in cases:
        gained = [0] * len(buckets)
        for w in waits:
            gained[bucket(w)] += 1
        placed = _placed(buckets, gained, sum(waits))
        assert math.isclose(sum(placed), sum(waits), rel_tol=1e-9), (waits, placed)
        got = [0] * len(buckets)
        for v in placed:
            i = bucket(v)
            got[i] += 1
            assert v > lows[i] or i == 0, (waits, placed)  # OpenTelemetry's (lo, hi]
        assert got == gained, (waits, placed)
