"""Prometheus: a ``prometheus_client`` collector for bulkheads and registries (the optional extra
``hullguard[prometheus]``; docs/design.md §8.3)::

    import hullguard, prometheus_client
    from hullguard.prometheus import HullguardCollector

    collector = HullguardCollector(
        bulkheads={"checkout": checkout_bh},          # key="checkout"
        registries={"": origins},                     # key=<origin key> for every key
    )
    prometheus_client.REGISTRY.register(collector)
    prometheus_client.start_http_server(9100)

At each scrape the collector reads every source once, through the core's walk
(``Bulkhead._metric_samples()``; nothing is cached, nothing counted in Python) and yields the
families of the core's metric table (names, kinds, units, label names and help texts from
``hullguard._native.metric_table()``):

=====================================  =========  ==========================================
metric                                 type       labels
=====================================  =========  ==========================================
``hullguard_in_flight``                gauge      key, class, dimension (calls | budget)
``hullguard_queued``                   gauge      key, class
``hullguard_limit``                    gauge      key, class, dimension
``hullguard_admitted_total``           counter    key
``hullguard_rejected_total``           counter    key, reason (every reason, zeros included)
``hullguard_queue_wait_seconds``       histogram  key (the core's power-of-two buckets)
``hullguard_circuit_state``            gauge      key (0 closed, 1 open, 2 half-open; with a
                                                  breaker)
``hullguard_budget_in_use``            gauge      key, class (with a budget)
``hullguard_orphaned_in_flight``       gauge      key
=====================================  =========  ==========================================

``class`` is ``""`` (absent) on a bulkhead's totals and the class's name on per-class series
(a bulkhead with two classes or more; an unnamed class is its index).

**Keys and cardinality.** A bulkhead is exported under the name it is given (``key`` label); a
registry's keys under ``prefix + key``. Only the keys that exist at the scrape are exported, and
sampling never creates one, so a registry contributes at most ``max_keys`` keys: when a new key
evicts an idle one (at ``max_keys``), the evicted key's series disappear from the next scrape
(Prometheus marks them stale) and come back from zero if the key is created again. Per key the
series are bounded by the table: one per reason, per class and dimension. A key exported twice
(a bulkhead name equal to a registry key) keeps its first source; ``collector.duplicates``
counts the series dropped.

Thread-safety: ``collect()`` may run on the exposition server's thread while the bulkheads are
used anywhere; sources may be added and removed at any time.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, cast

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ._metrics import Registries, SourceMethods, Sources, label_values, metric_table
from ._native import Bulkhead

__all__ = ["HullguardCollector"]

# A bucket bound as prometheus_client writes its own `le` labels ("0.001", "+Inf").
_le = cast(Callable[[float], str], floatToGoString)


def _family(row: Dict[str, Any]) -> Metric:
    name, kind, help_, unit, labels = row["name"], row["kind"], row["help"], row["unit"], row["labels"]
    if kind == "counter":
        # prometheus_client names the family without "_total" and writes the sample with it.
        return CounterMetricFamily(name, help_, labels=labels, unit=unit)
    if kind == "histogram":
        return HistogramMetricFamily(name, help_, labels=labels, unit=unit)
    return GaugeMetricFamily(name, help_, labels=labels, unit=unit)


class HullguardCollector(SourceMethods, Collector):
    """A custom collector exporting the core's metric table for ``bulkheads`` (a mapping
    ``{key label: Bulkhead}``) and ``registries`` (a mapping ``{prefix: Registry}``, or an
    iterable of registries with no prefix). Register it on a ``CollectorRegistry`` (or
    ``prometheus_client.REGISTRY``). ``TypeError`` for a source of another type,
    ``ValueError`` for a name given twice."""

    def __init__(
        self,
        bulkheads: Optional[Mapping[str, Bulkhead]] = None,
        registries: Registries = None,
    ) -> None:
        self._sources = Sources(bulkheads, registries)
        self._table = metric_table()


    @property
    def duplicates(self) -> int:
        """Keys dropped at a scrape because an earlier source had the same ``key``."""
        return self._sources.duplicates

    def describe(self) -> Iterable[Metric]:
        """The families without samples (so registering never samples a bulkhead)."""
        return [_family(row) for row in self._table]

    def collect(self) -> Iterator[Metric]:
        families = {row["name"]: (row, _family(row)) for row in self._table}
        for key, samples in self._sources.samples():
            for s in samples:
                row, fam = families[s[0]]
                values = label_values(row["labels"], key, s)
                v = s[4]
                if isinstance(v, tuple):
                    buckets, total, _count = v
                    fam.add_metric(  # type: ignore[attr-defined]
                        values,
                        [(_le(b), float(c)) for b, c in buckets],
                        total,
                    )
                else:
                    fam.add_metric(values, v)  # type: ignore[attr-defined]
        for _, fam in families.values():
            yield fam
