"""hullguard: one bulkhead engine for every runtime.

A bulkhead caps concurrent work per dependency (per origin, per database pool, per LLM
provider) so one slow or failing upstream cannot eat all of a service's capacity. This package
is the Python face of the Rust engine ``hullguard-core``: the same decisions, reasons and stats
as the C, Node and Rust layers.

Quick start::

    import hullguard

    bh = hullguard.Bulkhead(max_concurrent=10, max_queue=100, queue_timeout=30.0)

    async def call():
        async with bh.acquire() as permit:   # waits FIFO; raises BulkheadFullError & co.
            ...

Policies (docs/design.md §6) around any bulkhead or registry::

    bh = hullguard.Bulkhead(
        max_concurrent=50,
        resilience={"adaptive": {}, "breaker": {"open_duration": 5.0}, "call_timeout": 2.0},
        on_state_change=lambda key, old, new: log.info("breaker %s -> %s", old, new),
    )
    permit = await bh.acquire()          # CircuitOpenError while the breaker is open
    permit.release(outcome="failure")    # "success" (default), "failure", "ignored", "overload"

Gateway admission (docs/design.md §4.5–4.9): calls and tokens in one decision::

    bh = hullguard.Bulkhead(max_concurrent=8, budget=100_000, events=True,
                            classes=[{"name": "interactive", "priority": 10},
                                     {"name": "batch"}])
    async with bh.acquire(cost=2_000, admission_class="interactive") as permit:
        ...                                   # BulkheadFullError .detail names the bound
        permit.report_usage(used=1_200, remaining=300)
    if (a := await bh.admit(cost=500)).ok:   # the non-throwing style
        async with a.permit:
            ...
    bh.on("reject", lambda e: log.info("refused %s", e["reason"]))

Deadlines (docs/design.md §5.9): a request's whole budget, absolute on the
``time.monotonic()`` scale, honoured by every acquire inside it::

    with hullguard.deadline(1.5):                  # also `async with`; nested budgets narrow
        async with bh.acquire():                   # queues at most what is left
            ...
    await bh.acquire(deadline=time.monotonic() + 0.2)   # or per call (min'd with the ambient)

A deadline that has passed is refused ``timeout`` (``BulkheadQueueTimeoutError``) at once.

At the edge (docs/design.md §4.11, §8.3), each in a module of its own, imported on demand::

    from hullguard.asgi import AdmissionMiddleware      # server-side admission, any ASGI app
    app = AdmissionMiddleware(app, bulkhead=bh, classify="x-priority")   # sheds non-critical
    bh.report_load(cpu=0.93)                            # overload signals (the probes do it)
    from hullguard.prometheus import HullguardCollector # hullguard[prometheus]
    from hullguard.otel import HullguardMetrics         # hullguard[otel]

One limit per host (docs/design.md §14; Linux): every process that opens the same name shares
the limit, crash-safe (a killed holder's permits return within about 0.25 s)::

    db = hullguard.HostBulkhead("payments-db", max_concurrent=5)
    async with db.acquire():                       # at most 5 on this host, FIFO
        ...

(``hullguard.host``: the gunicorn ``child_exit`` hook, ``reap``, the ``hullguard host`` command.)

One limit across hosts (docs/design.md §16): every process that opens the same pool on one Redis
shares the limit, through the redis-py client you already have (sync or asyncio); each leases a
block of permits and admits on it locally::

    llm = hullguard.FleetBulkhead(redis.Redis(socket_timeout=1.0), "llm-provider",
                                  max_concurrent=50)       # 50 in the whole fleet
    with llm.acquire_sync(timeout=2.0):                      # as a local bulkhead's
        ...

Times are in seconds (floats); ``math.inf`` means no deadline, ``0`` means do not queue.
Thread-safe; bulkheads may be shared by several event loops and threads. Free-threaded CPython
is not supported yet. After ``os.fork()`` the child's copy is independent: create bulkheads
after forking.
"""

from __future__ import annotations

import sys

from . import _native
from ._errors import (
    BulkheadClosedError,
    BulkheadError,
    BulkheadFullError,
    BulkheadQueueTimeoutError,
    BulkheadRateLimitError,
    BulkheadShedError,
    CallTimeoutError,
    CircuitOpenError,
    ForeignLeaseError,
    HostSegmentError,
    LeaseError,
    StaleLeaseError,
    StaleRevision,
    UsageError,
)
from ._deadline import DeadlineScope, current_deadline, deadline, deadline_at, remaining
from ._events import EventStream
from ._native import (
    EVENT_KINDS,
    MAX_BUDGET,
    MAX_PERMITS,
    MAX_QUEUE,
    AcquireContext,
    Bulkhead,
    Permit,
    Registry,
    origin_key,
)
from ._results import Admission, Admitted, Refused, UsageReport, WouldAdmit
from . import llm
from .dedup import SingleFlight, UnshareableResultError
from .fleet import FleetBulkhead

__version__: str = _native.__version__

if sys.platform == "linux":
    from ._native import HostBulkhead, HostPermit
    from . import host

__all__ = [
    "Bulkhead",
    "Registry",
    "Permit",
    "AcquireContext",
    "origin_key",
    "BulkheadError",
    "BulkheadFullError",
    "BulkheadQueueTimeoutError",
    "BulkheadClosedError",
    "BulkheadShedError",
    "BulkheadRateLimitError",
    "CircuitOpenError",
    "CallTimeoutError",
    "StaleRevision",
    "UsageError",
    "Admission",
    "Admitted",
    "Refused",
    "WouldAdmit",
    "UsageReport",
    "EventStream",
    "deadline",
    "deadline_at",
    "current_deadline",
    "remaining",
    "DeadlineScope",
    "SingleFlight",
    "UnshareableResultError",
    "llm",
    "FleetBulkhead",
    "EVENT_KINDS",
    "MAX_BUDGET",
    "MAX_PERMITS",
    "MAX_QUEUE",
    "LeaseError",
    "StaleLeaseError",
    "ForeignLeaseError",
    "HostSegmentError",
    "__version__",
]
if sys.platform == "linux":
    __all__ += ["HostBulkhead", "HostPermit", "host"]
