"""OpenTelemetry: the core's metric table as OpenTelemetry instruments (the optional extra
``hullguard[otel]``; needs ``opentelemetry-api`` only — any SDK or exporter reads them;
docs/design.md §8.3)::

    import hullguard
    from hullguard.otel import HullguardMetrics

    metrics = HullguardMetrics(bulkheads={"checkout": checkout_bh}, registries={"": origins})
    # or HullguardMetrics(meter=provider.get_meter("my-service"), ...)

Instruments (one per row of ``hullguard._native.metric_table()``, same names, help texts as
descriptions, unit ``s`` for seconds):

* the gauges (``hullguard_in_flight``, ``hullguard_queued``, ``hullguard_limit``,
  ``hullguard_circuit_state``, ``hullguard_budget_in_use``, ``hullguard_orphaned_in_flight``)
  are **observable gauges** and the counters (``hullguard_admitted_total``,
  ``hullguard_rejected_total``) **observable counters** (cumulative totals), read by callbacks
  when the SDK collects;
* ``hullguard_queue_wait_seconds`` is a **synchronous Histogram** (OpenTelemetry has no
  observable histogram) created with the core's power-of-two bucket bounds as its advisory
  explicit boundaries. The waits are recorded **at collection**: each collection reads the
  core's wait histogram and records, per key, the waits granted since the previous collection
  — per core bucket as many values as it gained, each placed inside that bucket (the same
  relative position in every bucket) so that their sum is the exact sum of those waits. So the
  count, the sum and (with the default aggregation) every bucket's count equal the core's, with
  no per-request cost and no ``events=True``; the individual values are the core's bucket
  placement, since the core keeps counts and a sum, not each wait. A key whose histogram went
  back (evicted and created again) is counted from zero.

Attributes: ``key`` (the name given to a bulkhead; ``prefix + key`` for a registry's keys),
``class`` (per-class points only; totals have none), ``dimension`` (``calls`` / ``budget``),
``reason`` (``hullguard_rejected_total``). A registry contributes only the keys that exist at
the collection (at most ``max_keys``; sampling never creates one): an evicted key's observable
points stop. Its wait-histogram series stays: the SDK keeps every attribute set a synchronous
instrument has recorded (cumulative temporality), and no API removes one — so for a registry
whose keys churn, use delta temporality or a View that drops the ``key`` attribute
(docs/design.md §8.3).

All the observable callbacks of one collection share one read of every source (the first
callback of a collection reads; a callback called a second time means a new collection).
Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from . import _native
from ._metrics import Registries, Sample, SourceMethods, Sources, metric_table
from ._native import Bulkhead

__all__ = ["HullguardMetrics"]

_UNITS = {"seconds": "s"}


def _attributes(row: Dict[str, Any], key: str, sample: Sample) -> Dict[str, str]:
    _, klass, dimension, reason, _ = sample
    attrs = {"key": key}
    if klass:
        attrs["class"] = klass
    if dimension:
        attrs["dimension"] = dimension
    if reason:
        attrs["reason"] = reason
    return attrs


def _placed(buckets: List[Tuple[float, int]], gained: List[int], total: float) -> List[float]:
    """Values for the waits gained per bucket (``gained[i]`` waits in ``[lo_i, hi_i)``, the core's
    buckets: ``buckets[i][0]`` is bucket ``i``'s exclusive upper bound) whose sum is ``total``:
    the last (unbounded) bucket's values at ``max(top, (total - the finite buckets' midpoints)
    / n)``, every finite bucket's values at one relative position ``f`` of their bucket that
    makes the sum exact (the same rule as Node's ``hullguard/metrics``). Exact whenever the
    waits' true sum is consistent with their buckets: the finite ones' lies in ``[Σ lo, Σ hi)``
    and the unbounded ones' is at least ``n * top``."""
    lows = [0.0] + [b for b, _ in buckets[:-1]]
    finite = [(lows[i], buckets[i][0], n) for i, n in enumerate(gained[:-1]) if n]
    n_inf = gained[-1]
    base = sum(n * lo for lo, _, n in finite)
    width = sum(n * (hi - lo) for lo, hi, n in finite)
    mid = base + width / 2
    top = lows[-1]
    v_inf = max(top * (1 + 1e-9), (total - mid) / n_inf) if n_inf else 0.0
    rest = total - n_inf * v_inf
    f = (rest - base) / width if width > 0 else 0.5
    # Strictly inside the bucket: OpenTelemetry's buckets are (lo, hi], the core's [lo, hi).
    f = min(max(f, 1e-9), 1.0 - 1e-9)
    out: List[float] = []
    for lo, hi, n in finite:
        out.extend([lo + f * (hi - lo)] * n)
    out.extend([v_inf] * n_inf)
    return out


class HullguardMetrics(SourceMethods):
    """Registers the core's metric table on an OpenTelemetry meter for ``bulkheads`` (``{key:
    Bulkhead}``) and ``registries`` (``{prefix: Registry}`` or an iterable of registries).

    Args:
        meter: the ``Meter`` (or a ``MeterProvider``, from which a meter named
            ``"hullguard"`` is taken) to create the instruments on; default: the global
            provider's ``"hullguard"`` meter.
        bulkheads, registries: the sources, as for ``hullguard.prometheus.HullguardCollector``;
            more may be added later (:meth:`add_bulkhead`, :meth:`add_registry`).

    ``instruments`` maps each metric name to its instrument.
    """

    def __init__(
        self,
        meter: Union[Meter, MeterProvider, None] = None,
        *,
        bulkheads: Optional[Mapping[str, Bulkhead]] = None,
        registries: Registries = None,
    ) -> None:
        if meter is None:
            meter = otel_metrics.get_meter("hullguard", _native.__version__)
        elif isinstance(meter, MeterProvider):
            meter = meter.get_meter("hullguard", _native.__version__)
        elif not isinstance(meter, Meter):
            raise TypeError(f"meter must be an opentelemetry Meter or MeterProvider, not "
                            f"{type(meter).__name__}")
        self._sources = Sources(bulkheads, registries)
        self._lock = threading.Lock()
        self._snapshot: Optional[List[Tuple[str, List[Sample]]]] = None
        self._served: Set[str] = set()
        self._waits: Dict[str, Tuple[List[int], float]] = {}
        self.instruments: Dict[str, Any] = {}
        self._rows: Dict[str, Dict[str, Any]] = {}
        for row in metric_table():
            name, kind = row["name"], row["kind"]
            self._rows[name] = row
            unit = _UNITS.get(row["unit"], row["unit"])
            if kind == "histogram":
                bounds = row["buckets"]  # the finite upper bounds, in seconds
                self._histogram_name = name
                self.instruments[name] = meter.create_histogram(
                    name, unit=unit, description=row["help"],
                    explicit_bucket_boundaries_advisory=bounds,
                )
            elif kind == "counter":
                self.instruments[name] = meter.create_observable_counter(
                    name, callbacks=[self._callback(name)], unit=unit, description=row["help"]
                )
            else:
                self.instruments[name] = meter.create_observable_gauge(
                    name, callbacks=[self._callback(name)], unit=unit, description=row["help"]
                )

    # -- collection ----------------------------------------------------------------------
    def _callback(self, name: str) -> Any:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            return self._observe(name)

        return callback

    def _observe(self, name: str) -> List[Observation]:
        with self._lock:
            if self._snapshot is None or name in self._served:
                self._snapshot = list(self._sources.samples())
                self._served = set()
                self._record_waits(self._snapshot)
            self._served.add(name)
            snapshot = self._snapshot
        row = self._rows[name]
        return [
            Observation(float(s[4]), _attributes(row, key, s))  # type: ignore[arg-type]
            for key, samples in snapshot
            for s in samples
            if s[0] == name
        ]

    def _record_waits(self, snapshot: List[Tuple[str, List[Sample]]]) -> None:
        """Records on the histogram the waits each key gained since the last collection."""
        hist = self.instruments[self._histogram_name]
        seen: Dict[str, Tuple[List[int], float]] = {}
        for key, samples in snapshot:
            for s in samples:
                if s[0] != self._histogram_name:
                    continue
                buckets, total, _count = s[4]  # type: ignore[misc]
                counts = _per_bucket(buckets)
                seen[key] = (counts, total)
                old_counts, old_total = self._waits.get(key, ([0] * len(counts), 0.0))
                if len(old_counts) != len(counts) or any(n < o for n, o in zip(counts, old_counts)):
                    old_counts, old_total = [0] * len(counts), 0.0  # a new bulkhead under the key
                gained = [n - o for n, o in zip(counts, old_counts)]
                if not any(gained):
                    continue
                attrs = {"key": key}
                for v in _placed(buckets, gained, max(0.0, total - old_total)):
                    hist.record(v, attributes=attrs)
        self._waits = seen


def _per_bucket(buckets: List[Tuple[float, int]]) -> List[int]:
    """Cumulative counts → per-bucket counts."""
    out, prev = [], 0
    for _, c in buckets:
        out.append(c - prev)
        prev = c
    return out

