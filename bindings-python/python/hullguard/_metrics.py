"""What the metric exporters share (``hullguard.prometheus``, ``hullguard.otel``): the metric
table from the core and the set of bulkheads and registries to sample.

The table — names, kinds, units, label names, help texts — is the core's
(``hullguard_core::metrics``, read through ``hullguard._native.metric_table()``); the samples
are the core's walk of each bulkhead (``Bulkhead._metric_samples()``,
``Registry._metric_samples()``). This module only adds the ``key`` label and keeps the
sources.
"""

from __future__ import annotations

import threading
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _native
from ._native import Bulkhead, Registry

# One sample of the core's walk: (metric name, class label ("" for the bulkhead's total),
# dimension or "", reason or "", value). The histogram's value is (buckets [(upper bound in
# seconds, cumulative count)], sum in seconds, count).
Histogram = Tuple[List[Tuple[float, int]], float, int]
Sample = Tuple[str, str, str, str, Union[float, Histogram]]

# The key label of a registry with a global cap (its one shared admission), after the prefix.
GLOBAL_KEY = "global"

Registries = Union[Mapping[str, Registry], Iterable[Registry], None]


def metric_table() -> List[Dict[str, Any]]:
    """The core's metric table: one dict per metric, ``{"name", "kind" ("gauge" | "counter" |
    "histogram"), "unit" ("seconds" or ""), "labels" (label names, "key" first), "help"}``, in
    the order the samples come; the histogram's row also has ``"buckets"``, its finite upper
    bounds in seconds."""
    return _native.metric_table()


class Sources:
    """The bulkheads (each under a ``key`` label value of its own) and registries (each key
    under ``prefix + key``) an exporter samples. Thread-safe: sources may be added and removed
    while another thread collects."""

    def __init__(self, bulkheads: Optional[Mapping[str, Bulkhead]], registries: Registries) -> None:
        self._lock = threading.Lock()
        self._bulkheads: Dict[str, Bulkhead] = {}
        self._registries: List[Tuple[str, Registry]] = []
        self.duplicates = 0
        """Series dropped at a collection because an earlier source had the same ``key``."""
        for name, bh in (bulkheads or {}).items():
            self.add_bulkhead(name, bh)
        if registries is not None:
            if isinstance(registries, Mapping):
                for prefix, reg in registries.items():
                    self.add_registry(reg, prefix=prefix)
            else:
                if isinstance(registries, Registry):
                    raise TypeError("registries must be a mapping {prefix: Registry} or an "
                                    "iterable of Registry, not a Registry (wrap it in a list)")
                for reg in registries:
                    self.add_registry(reg)

    def add_bulkhead(self, name: str, bulkhead: Bulkhead) -> None:
        """Samples ``bulkhead`` under ``key=name``. ``ValueError`` if the name is taken."""
        if not isinstance(name, str):
            raise TypeError(f"a bulkhead's name must be a str, not {type(name).__name__}")
        # A host bulkhead (Linux) is sampled like a bulkhead: the host's figures, live
        # holders only (C37). A fleet bulkhead: its local bulkhead (this process's block).
        host = getattr(_native, "HostBulkhead", None)
        if not isinstance(bulkhead, (Bulkhead, _native._FleetBulkhead)) and not (
            host and isinstance(bulkhead, host)
        ):
            raise TypeError(
                "expected a hullguard.Bulkhead, HostBulkhead or FleetBulkhead, not "
                f"{type(bulkhead).__name__}")
        with self._lock:
            if name in self._bulkheads:
                raise ValueError(f"a bulkhead named {name!r} is sampled already")
            self._bulkheads[name] = bulkhead

    def add_registry(self, registry: Registry, prefix: str = "") -> None:
        """Samples every key of ``registry`` under ``key=prefix + key``."""
        if not isinstance(registry, Registry):
            raise TypeError(f"expected a hullguard.Registry, not {type(registry).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"a registry's prefix must be a str, not {type(prefix).__name__}")
        with self._lock:
            if any(r is registry for _, r in self._registries):
                raise ValueError("this registry is sampled already")
            self._registries.append((prefix, registry))

    def remove(self, source: Union[str, Registry]) -> bool:
        """Stops sampling a bulkhead (by its name) or a registry; whether it was sampled."""
        with self._lock:
            if isinstance(source, str):
                return self._bulkheads.pop(source, None) is not None
            n = len(self._registries)
            self._registries = [(p, r) for p, r in self._registries if r is not source]
            return len(self._registries) != n

    def samples(self) -> Iterator[Tuple[str, List[Sample]]]:
        """``(key label, samples)`` per bulkhead, then per registry key (the keys that exist
        now: sampling never creates a key, and an evicted key has no series; a registry with a
        global cap is its one shared admission, under ``prefix + "global"``, with its keys as
        the ``class`` label). A key seen twice keeps its first source (``duplicates`` counts
        the others)."""
        with self._lock:
            bulkheads = list(self._bulkheads.items())
            registries = list(self._registries)
        seen = set()
        for name, bh in bulkheads:
            seen.add(name)
            yield name, bh._metric_samples()
        for prefix, reg in registries:
            for key, samples in reg._metric_samples():
                k = prefix + (GLOBAL_KEY if key is None else key)
                if k in seen:
                    self.duplicates += 1
                    continue
                seen.add(k)
                yield k, samples


def label_values(labels: Sequence[str], key: str, sample: Sample) -> List[str]:
    """The values of a sample's labels, in the table's label order (``""`` where a label does
    not apply, which Prometheus reads as absent)."""
    _, klass, dimension, reason, _ = sample
    values = {"key": key, "class": klass, "dimension": dimension, "reason": reason}
    return [values[n] for n in labels]


class SourceMethods:
    """The source-set methods both exporters share (``HullguardCollector``,
    ``HullguardMetrics``): what they export, changed at run time under the set's lock; a
    change shows from the next read on."""

    _sources: Sources

    def add_bulkhead(self, name: str, bulkhead: Bulkhead) -> None:
        """Exports ``bulkhead`` under ``key=name`` from the next read on."""
        self._sources.add_bulkhead(name, bulkhead)

    def add_registry(self, registry: Registry, prefix: str = "") -> None:
        """Exports every key of ``registry`` under ``key=prefix + key``."""
        self._sources.add_registry(registry, prefix)

    def remove(self, source: Union[str, Registry]) -> bool:
        """Stops exporting a bulkhead (by name) or a registry; whether it was exported."""
        return self._sources.remove(source)
