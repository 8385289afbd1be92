# Type stubs of the PyO3 extension `hullguard._native` (bindings-python/src/*.rs).
# Checked against the built module by `python -m mypy.stubtest hullguard._native
# --allowlist stubtest-allowlist.txt` (run from bindings-python/, part of `make py-test`).

import os
import sys
from typing import (
    Any,
    Callable,
    Coroutine,
    Dict,
    Generator,
    Generic,
    List,
    Literal,
    Mapping,
    Optional,
    Tuple,
    TypeVar,
    Union,
    final,
    overload,
)

from contextvars import ContextVar

from typing_extensions import disjoint_base

from hullguard._events import EventStream
from hullguard._results import Admitted, Refused, UsageReport, WouldAdmit

__all__ = [
    "AcquireContext",
    "DrainAwaitable",
    "_Ready",
    "_Done",
    "Bulkhead",
    "Permit",
    "Registry",
    "origin_key",
    "outcome_of_status",
    "_check_timeout",
    "_check_deadline",
    "_grpc_timeout",
    "_parse_grpc_timeout",
    "_enable_ambient_deadline",
    "metric_table",
    "_FleetBulkhead",
    "_FleetCore",
    "FLEET_OPTIONS",
    "_FLEET_LIBRARY",
    "_FLEET_LIB_VERSION",
    "_FLEET_EVAL_SOURCE",
    "_fleet_cli",
    "MAX_PERMITS",
    "MAX_QUEUE",
    "MAX_BUDGET",
    "REASONS",
    "EVENT_KINDS",
    "__version__",
]
if sys.platform == "linux":
    __all__ += ["HostBulkhead", "HostPermit", "HostAcquireContext", "_host_reap", "_host_cli"]

__version__: str

MAX_PERMITS: int
"""2**60 - 1 on 64-bit targets: the largest `max_concurrent` / weight."""

MAX_QUEUE: int
"""2**20: the largest `max_queue`."""

MAX_BUDGET: int
"""The largest `budget` / `cost` / usage figure (budget units)."""

EVENT_KINDS: List[str]
"""The event names of `bh.on(name, callback)`, in the core's code order: `"state_change"`,
`"admit"`, `"reject"`, `"observe_bypass"`, `"release"`, `"usage"`, `"reconfigure"`, `"shed"`."""

REASONS: Tuple[Dict[str, Any], ...]
"""The core's reason table, in `hg_reason` order: one dict per reason, `{"name": str, "code":
str, "retryable": bool, "category": str}` (the keys of `stats()["rejected_by_reason"]` and the
attributes of the exception a rejection raises)."""

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)
_F = TypeVar("_F", bound=Callable[..., Any])

# Seconds: an int or float >= 0, or math.inf (no deadline). None = not given: the default (in a
# registry override, the defaults' value; a per-call timeout, the bulkhead's queue_timeout),
# never "no deadline".
_Seconds = Union[int, float]

# A deadline (docs/design.md §5.9): absolute seconds on the time.monotonic() scale (an int or a
# float); None, math.inf or anything >= 2**63/1e9 is none. Min'd with the ambient deadline of
# hullguard.deadline(...); one that has passed is refused "timeout" (BulkheadQueueTimeoutError).
_Deadline = Union[int, float]

# apply_limits(queue_delay={"target": seconds, "interval": seconds, "lifo": bool}) (§4.10).
_QueueDelay = Mapping[str, Union[int, float, bool]]

# Observe (shadow) mode (docs/design.md §4.7): the dimensions decided and counted but not enforced.
_Observe = Literal["off", "concurrency", "budget", "all"]

# The values of a `stats()` dict (docs/design.md §8.1): ints, the `rejected_by_reason` and
# `observed_by_reason` dicts, `observe` (a string), and `adaptive` / `circuit` / `budget` (dicts
# when on, else None).
_Stats = Dict[str, Any]

# `resilience={...}` (docs/design.md §6): {"adaptive": {...} | None, "breaker": {...} | None,
# "call_timeout": seconds | None}; durations in seconds. A part or call_timeout that is omitted or
# None is off (in a registry override, None turns off what the defaults turned on).
_Resilience = Mapping[str, Any]

# `on_state_change(key, old, new)`: key None outside a registry; states "closed", "open",
# "half_open".
_OnStateChange = Callable[[Optional[str], str, str], Any]

# One sample of the core's metric table (docs/design.md §8.3; `metric_table()`): (metric name,
# class name or "" for the total, dimension or "", reason or "", value); the histogram's value
# is (buckets [(upper bound in seconds, cumulative count)], sum in seconds, count).
_Histogram = Tuple[List[Tuple[float, int]], float, int]
_MetricSample = Tuple[str, str, str, str, Union[float, _Histogram]]

# The non-throwing style's answer: narrowed by `.ok`.
_Admission = Union[Admitted, Refused]

# The outcome of a guarded call.
_Outcome = str

# An admission class: its name (`classes=[{"name": ...}]`) or its index.
_Class = Union[str, int]

# The event names of `on` / `off` / `events()`.
_EventName = Literal[
    "state_change", "admit", "reject", "observe_bypass", "release", "usage", "reconfigure", "shed"
]

# An event dict: "kind", "key", "id", "class", "class_name" and the kind's fields (docs/design.md
# §8.2; times in seconds).
_Event = Dict[str, Any]

# `classes=[{"name", "priority", "floor", "ceiling", "budget_floor", "budget_ceiling", "observe"}]`,
# `reserve={"permits", "budget", "min_priority"}`, `rates={"requests"|"units": {"amount", "per"
# (seconds), "burst"}}` (docs/design.md §4.8, §4.9).
_ClassSpec = Mapping[str, Any]
_Reserve = Mapping[str, int]
_Rates = Mapping[str, Mapping[str, Union[int, float]]]

@final
class _Ready:
    """An already-finished awaitable of None (the result of `__aexit__`: it never swallows the
    block's exception)."""

    def __await__(self) -> Generator[Any, Any, None]: ...
    def __iter__(self) -> _Ready: ...
    def __next__(self) -> Any: ...
    def send(self, _value: Any = None) -> Any: ...
    def close(self) -> None: ...

@final
class Permit:
    """Permits held by one acquire."""

    def release(
        self, outcome: Optional[_Outcome] = None, usage: Optional[int] = None
    ) -> bool: ...
    def _finish(self, outcome: _Outcome) -> bool: ...
    def _call_timed_out(self) -> Any: ...
    def _call_timeout(self) -> Optional[float]: ...
    def release_partial(self, n: int) -> None: ...
    def refund(self, n: int) -> None: ...
    def report_usage(self, used: int, remaining: Optional[int] = None) -> UsageReport: ...
    def orphan(self) -> bool: ...
    @property
    def cost(self) -> int: ...
    @property
    def revision(self) -> int: ...
    @property
    def cancel_requested(self) -> bool: ...
    @property
    def weight(self) -> int: ...
    @property
    def released(self) -> bool: ...
    @property
    def key(self) -> Optional[str]: ...
    def __enter__(self) -> Permit: ...
    def __exit__(
        self, exc_type: object = None, _exc: object = None, _tb: object = None
    ) -> None: ...
    def __aenter__(self) -> _Done[Permit]: ...
    def __aexit__(
        self, exc_type: object = None, _exc: object = None, _tb: object = None
    ) -> _Ready: ...

@final
class _Done(Generic[_T_co]):
    """An already-finished awaitable of a value (what `Permit.__aenter__` returns)."""

    def __await__(self) -> Generator[Any, Any, _T_co]: ...
    def __iter__(self) -> _Done[_T_co]: ...
    def __next__(self) -> Any: ...
    def send(self, _value: Any = None) -> Any: ...
    def close(self) -> None: ...

@final
class AcquireContext(Generic[_T_co]):
    """`bh.acquire(...)`: awaitable (gives a `Permit`) and async context manager."""

    def __await__(self) -> Generator[Any, Any, _T_co]: ...
    def __iter__(self) -> AcquireContext: ...
    def __next__(self) -> Any: ...
    def send(self, _value: Any = None) -> Any: ...
    def throw(self, typ: Any, value: Any = None, _tb: Any = None) -> Any: ...
    def close(self) -> None: ...
    def __aenter__(self) -> AcquireContext[_T_co]: ...
    def __aexit__(
        self, exc_type: object = None, _exc: object = None, _tb: object = None
    ) -> _Ready: ...

@final
class DrainAwaitable:
    """`bh.drain(timeout)`: awaitable giving `{"drained", "active", "queued"}`."""

    def __await__(self) -> Generator[Any, Any, Dict[str, Any]]: ...
    def __iter__(self) -> DrainAwaitable: ...
    def close(self) -> None: ...
    def __next__(self) -> Any: ...
    def send(self, _value: Any = None) -> Any: ...
    def throw(self, typ: Any, value: Any = None, _tb: Any = None) -> Any: ...

@disjoint_base
class Bulkhead:
    def __new__(
        cls,
        max_concurrent: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[_Seconds] = None,
        enabled: Optional[bool] = None,
        *,
        budget: Optional[int] = None,
        max_queued_cost: Optional[int] = None,
        observe: Optional[_Observe] = None,
        max_orphaned: Optional[int] = None,
        start_limit: Optional[int] = None,
        max_reservations: Optional[int] = None,
        cancel_on_overrun: Optional[bool] = None,
        min_service_time: Optional[_Seconds] = None,
        queue_delay_target: Optional[_Seconds] = None,
        queue_delay_interval: Optional[_Seconds] = None,
        adaptive_lifo: Optional[bool] = None,
        shed_lag_threshold: Optional[_Seconds] = None,
        shed_cpu_threshold: Optional[Union[int, float]] = None,
        critical_priority: Optional[int] = None,
        resilience: Optional[_Resilience] = None,
        on_state_change: Optional[_OnStateChange] = None,
        events: Optional[bool] = None,
        classes: Optional[List[_ClassSpec]] = None,
        reserve: Optional[_Reserve] = None,
        lending: Optional[bool] = None,
        shed: Optional[bool] = None,
        rates: Optional[_Rates] = None,
        _clock: Optional[Callable[[], int]] = None,
    ) -> Bulkhead: ...
    def acquire(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[Permit]: ...
    def admit(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[_Admission]: ...
    def __aenter__(self) -> AcquireContext[None]: ...
    def __aexit__(
        self, exc_type: object = None, _exc: object = None, _tb: object = None
    ) -> _Ready: ...
    def acquire_sync(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Permit: ...
    def admit_sync(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def try_acquire(
        self,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Optional[Permit]: ...
    def try_admit(
        self,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def would_admit(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> WouldAdmit: ...
    @overload
    def guard(
        self,
        fn: None = None,
        *,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Callable[[_F], _F]: ...
    @overload
    def guard(
        self,
        fn: _F,
        *,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _F: ...
    def apply_limits(
        self,
        revision: int,
        *,
        limit: Optional[int] = None,
        budget: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[_Seconds] = None,
        reserve: Optional[_Reserve] = None,
        rates: Optional[_Rates] = None,
        queue_delay: Optional[_QueueDelay] = None,
    ) -> None: ...
    def set_budget(self, budget: int) -> None: ...
    def set_observe(self, mode: _Observe) -> None: ...
    def class_stats(self, admission_class: _Class) -> Dict[str, Any]: ...
    def class_shared_in_use(self) -> Optional[Tuple[int, int]]: ...
    def on(self, event: _EventName, callback: Callable[[_Event], Any]) -> None: ...
    def off(self, event: _EventName, callback: Callable[[_Event], Any]) -> bool: ...
    def events(self, *kinds: _EventName, maxsize: Optional[int] = None) -> EventStream: ...
    def set_limit(self, limit: int) -> None: ...
    def report_load(
        self,
        *,
        event_loop_lag: Optional[Union[int, float]] = None,
        cpu: Optional[Union[int, float]] = None,
    ) -> None: ...
    def _metric_samples(self) -> List[_MetricSample]: ...
    def stats(self) -> _Stats: ...
    def close(self) -> None: ...
    def drain(self, timeout: Optional[_Seconds] = None) -> DrainAwaitable: ...
    def drain_sync(self, timeout: Optional[_Seconds] = None) -> Dict[str, Any]: ...
    @property
    def classes(self) -> List[Optional[str]]: ...
    @property
    def revision(self) -> int: ...
    @property
    def listener_errors(self) -> int: ...
    @property
    def max_concurrent(self) -> int: ...
    @property
    def max_queue(self) -> int: ...
    @property
    def queue_timeout(self) -> float: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def limit(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def key(self) -> Optional[str]: ...
    @property
    def call_timeout(self) -> Optional[float]: ...
    @property
    def circuit_state(self) -> Optional[str]: ...

@disjoint_base
class Registry:
    def __new__(
        cls,
        max_concurrent: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[_Seconds] = None,
        enabled: Optional[bool] = None,
        *,
        budget: Optional[int] = None,
        max_queued_cost: Optional[int] = None,
        observe: Optional[_Observe] = None,
        max_orphaned: Optional[int] = None,
        start_limit: Optional[int] = None,
        max_reservations: Optional[int] = None,
        cancel_on_overrun: Optional[bool] = None,
        min_service_time: Optional[_Seconds] = None,
        queue_delay_target: Optional[_Seconds] = None,
        queue_delay_interval: Optional[_Seconds] = None,
        adaptive_lifo: Optional[bool] = None,
        shed_lag_threshold: Optional[_Seconds] = None,
        shed_cpu_threshold: Optional[Union[int, float]] = None,
        critical_priority: Optional[int] = None,
        resilience: Optional[_Resilience] = None,
        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
        max_keys: Optional[int] = None,
        on_state_change: Optional[_OnStateChange] = None,
        events: Optional[bool] = None,
        global_cap: Optional[Mapping[str, int]] = None,
        _clock: Optional[Callable[[], int]] = None,
    ) -> Registry: ...
    def get(self, key: str) -> Bulkhead: ...
    def acquire(
        self,
        key: str,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[Permit]: ...
    def admit(
        self,
        key: str,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[_Admission]: ...
    def guard(
        self,
        key: str,
        *,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Callable[[_F], _F]: ...
    def acquire_sync(
        self,
        key: str,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Permit: ...
    def admit_sync(
        self,
        key: str,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def try_acquire(
        self,
        key: str,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Optional[Permit]: ...
    def try_admit(
        self,
        key: str,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def would_admit(
        self,
        key: str,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[int] = None,
        observe: Optional[_Observe] = None,
        deadline: Optional[_Deadline] = None,
    ) -> WouldAdmit: ...
    def apply_limits(
        self,
        revision: int,
        *,
        defaults: Optional[Mapping[str, Any]] = None,
        overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
        global_cap: Optional[Mapping[str, Any]] = None,
    ) -> None: ...
    @property
    def revision(self) -> int: ...
    def key_stats(self, key: str) -> Optional[Dict[str, Any]]: ...
    def global_stats(self) -> Optional[_Stats]: ...
    def on(self, event: _EventName, callback: Callable[[_Event], Any]) -> None: ...
    def off(self, event: _EventName, callback: Callable[[_Event], Any]) -> bool: ...
    def set_limit(self, key: str, limit: int) -> None: ...
    def stats(self) -> Dict[str, _Stats]: ...
    def _metric_samples(self) -> List[Tuple[Optional[str], List[_MetricSample]]]: ...
    def keys(self) -> List[str]: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...
    @property
    def listener_errors(self) -> int: ...
    @property
    def max_keys(self) -> int: ...
    @property
    def overrides(self) -> Dict[str, Dict[str, Any]]: ...
    @property
    def key_limit_rejections(self) -> int: ...

def origin_key(url: str) -> str: ...
def _check_timeout(timeout: Optional[_Seconds]) -> Optional[float]: ...
def _check_deadline(deadline: Optional[_Deadline], name: str = "deadline") -> Optional[float]: ...
def _grpc_timeout(seconds: float) -> str: ...
def _parse_grpc_timeout(value: bytes) -> Optional[float]: ...
def _enable_ambient_deadline(var: ContextVar[Optional[float]]) -> None: ...
def metric_table() -> List[Dict[str, Any]]: ...
def outcome_of_status(status_code: int) -> _Outcome: ...

# ----- one limit across hosts (docs/design.md §16): hullguard.FleetBulkhead --------------------

FLEET_OPTIONS: List[str]
"""The option names of `FleetBulkhead(...)`, from the fleet crate's table (`pool` first)."""

_FLEET_LIBRARY: str
"""The `hullguard` Redis Functions library (`FUNCTION LOAD REPLACE`)."""

_FLEET_LIB_VERSION: int
"""What `FCALL_RO hg_version` answers when the library is loaded."""

_FLEET_EVAL_SOURCE: str
"""The library as one `EVAL` script (`EVALSHA sha 6 <keys> <function> <args>`)."""

def _fleet_cli(
    args: List[str], default_redis: Optional[str] = None, reply: Any = None
) -> Tuple[int, str, str, Optional[Dict[str, Any]]]:
    """`hullguard fleet show …` (args without the program name), parsed and rendered in Rust:
    without `reply` the usage error (status 2) or the plan `{"pool", "redis", "json", "check",
    "command"}`; with `hg_stats`' reply the report (status 0) or an error (status 1)."""

# One step of the driver loop: ("send", args) | ("wait", seconds) | ("closed", None).
_FleetStep = Tuple[str, Any]

@final
class _FleetCore:
    """The lease's driver handle (driven by `hullguard.fleet`; not public API)."""

    def step(self) -> _FleetStep: ...
    def complete(self, reply: Any) -> None: ...
    def fail(self, message: str) -> None: ...
    def wait(self, seconds: float) -> None: ...
    def arm(self, event_loop: Any, callback: Callable[[], Any], demand: bool) -> bool: ...
    def close(self) -> None: ...
    def _abandon(self) -> None: ...
    def release_command(self) -> Optional[List[str]]: ...
    def released(self, reply: Any) -> None: ...
    def apply_limits_commands(
        self,
        revision: int,
        limit: Optional[int] = None,
        budget: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[_Seconds] = None,
    ) -> List[List[str]]: ...
    def limits_applied(
        self, revision: int, limit: Optional[int], budget: Optional[int], replies: Any
    ) -> Dict[str, Any]: ...
    def pool_stats_command(
        self, dimension: Optional[Literal["permits", "budget"]] = None
    ) -> List[str]: ...
    @staticmethod
    def decode_pool_stats(reply: Any) -> Dict[str, Any]: ...
    def version_command(self) -> List[str]: ...
    @property
    def min_sync_interval(self) -> float: ...
    @property
    def lease_ttl(self) -> float: ...
    @property
    def pool(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def closed(self) -> bool: ...

@disjoint_base
class _FleetBulkhead:
    """The native base of `hullguard.FleetBulkhead` (`hullguard/fleet.py`): the local
    `Bulkhead`'s admission over the leased blocks (its classes partition this process's
    block), its events, and the stats with the `lease` and `budget_lease` sections."""

    def __new__(
        cls,
        pool: str,
        *,
        max_concurrent: Optional[int] = None,
        budget: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[_Seconds] = None,
        lease_ttl: Optional[_Seconds] = None,
        beat: Optional[_Seconds] = None,
        local_share: Optional[int] = None,
        clock_drift_ppm: Optional[int] = None,
        lease_margin: Optional[_Seconds] = None,
        min_sync_interval: Optional[_Seconds] = None,
        max_holders: Optional[int] = None,
        wait_replicas: Optional[int] = None,
        wait_timeout: Optional[_Seconds] = None,
        holder: Optional[str] = None,
        classes: Optional[List[_ClassSpec]] = None,
        reserve: Optional[_Reserve] = None,
        lending: Optional[bool] = None,
        shed: Optional[bool] = None,
        events: Optional[bool] = None,
    ) -> _FleetBulkhead: ...
    def acquire(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[Permit]: ...
    def admit(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> AcquireContext[_Admission]: ...
    def acquire_sync(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Permit: ...
    def admit_sync(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def try_acquire(
        self,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Optional[Permit]: ...
    def try_admit(
        self,
        weight: Optional[int] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _Admission: ...
    def would_admit(
        self,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        *,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> WouldAdmit: ...
    @overload
    def guard(
        self,
        fn: None = None,
        *,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> Callable[[_F], _F]: ...
    @overload
    def guard(
        self,
        fn: _F,
        *,
        weight: Optional[int] = None,
        timeout: Optional[_Seconds] = None,
        cost: Optional[int] = None,
        admission_class: Optional[_Class] = None,
        observe: Optional[Literal["off"]] = None,
        deadline: Optional[_Deadline] = None,
    ) -> _F: ...
    def drain(self, timeout: Optional[_Seconds] = None) -> DrainAwaitable: ...
    def drain_sync(self, timeout: Optional[_Seconds] = None) -> Dict[str, Any]: ...
    def stats(self) -> _Stats: ...
    def _metric_samples(self) -> List[_MetricSample]: ...
    def class_stats(self, admission_class: _Class) -> Dict[str, Any]: ...
    def on(self, event: _EventName, callback: Callable[[_Event], Any]) -> None: ...
    def off(self, event: _EventName, callback: Callable[[_Event], Any]) -> bool: ...
    def events(self, *kinds: _EventName, maxsize: Optional[int] = None) -> EventStream: ...
    @property
    def classes(self) -> List[Optional[str]]: ...
    @property
    def listener_errors(self) -> int: ...
    @property
    def bulkhead(self) -> Bulkhead: ...
    @property
    def _core(self) -> _FleetCore: ...
    @property
    def pool(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def limit(self) -> int: ...
    @property
    def max_queue(self) -> int: ...
    @property
    def queue_timeout(self) -> float: ...
    @property
    def lease_ttl(self) -> float: ...
    @property
    def closed(self) -> bool: ...

# ----- one limit per host (docs/design.md §14; Linux): hullguard.HostBulkhead -----------------

if sys.platform == "linux":
    @final
    class HostPermit:
        """Permits held on a `HostBulkhead`; `release()` raises `StaleLeaseError` /
        `ForeignLeaseError` when the release does not count."""

        def release(self) -> bool: ...
        @property
        def weight(self) -> int: ...
        @property
        def cost(self) -> int: ...
        @property
        def released(self) -> bool: ...
        def __enter__(self) -> HostPermit: ...
        def __exit__(
            self, exc_type: object = None, _exc: object = None, _tb: object = None
        ) -> None: ...
        def __aenter__(self) -> _Done[HostPermit]: ...
        def __aexit__(
            self, exc_type: object = None, _exc: object = None, _tb: object = None
        ) -> _Ready: ...

    @final
    class HostAcquireContext:
        """`host_bh.acquire(...)`: awaitable (gives a `HostPermit`) and async context manager."""

        def __await__(self) -> Generator[Any, Any, HostPermit]: ...
        def __iter__(self) -> HostAcquireContext: ...
        def __next__(self) -> Any: ...
        def send(self, _value: Any = None) -> Any: ...
        def throw(self, typ: Any, value: Any = None, _tb: Any = None) -> Any: ...
        def close(self) -> None: ...
        def __aenter__(self) -> HostAcquireContext: ...
        def __aexit__(
            self, exc_type: object = None, _exc: object = None, _tb: object = None
        ) -> _Ready: ...

    @final
    class HostBulkhead:
        """One limit shared by every process on this host that opens the same `name`."""

        def __new__(
            cls,
            name: str,
            *,
            max_concurrent: Optional[int] = None,
            max_queue: Optional[int] = None,
            queue_timeout: Optional[_Seconds] = None,
            budget: Optional[int] = None,
            lease_ttl: Optional[_Seconds] = None,
            beat: Optional[_Seconds] = None,
            probe: Optional[_Seconds] = None,
            slots: Optional[int] = None,
            dir: Optional[Union[str, os.PathLike[str]]] = None,
            mode: Optional[int] = None,
            on_mismatch: Optional[Literal["error", "adopt"]] = None,
        ) -> HostBulkhead: ...
        def try_acquire(
            self,
            weight: Optional[int] = None,
            *,
            cost: Optional[int] = None,
            deadline: Optional[_Deadline] = None,
        ) -> Optional[HostPermit]: ...
        def acquire(
            self,
            weight: Optional[int] = None,
            timeout: Optional[_Seconds] = None,
            *,
            cost: Optional[int] = None,
            deadline: Optional[_Deadline] = None,
        ) -> HostAcquireContext: ...
        def acquire_sync(
            self,
            weight: Optional[int] = None,
            timeout: Optional[_Seconds] = None,
            *,
            cost: Optional[int] = None,
            deadline: Optional[_Deadline] = None,
        ) -> HostPermit: ...
        def acquire_blocking(
            self,
            weight: Optional[int] = None,
            timeout: Optional[_Seconds] = None,
            *,
            cost: Optional[int] = None,
            deadline: Optional[_Deadline] = None,
        ) -> HostPermit: ...
        def stats(self) -> _Stats: ...
        def _metric_samples(self) -> List[_MetricSample]: ...
        def reap(self) -> int: ...
        def close(self) -> None: ...
        def drain(
            self, timeout: Optional[_Seconds] = None
        ) -> Coroutine[Any, Any, Dict[str, Any]]: ...
        def drain_sync(self, timeout: Optional[_Seconds] = None) -> Dict[str, Any]: ...
        def drain_blocking(self, timeout: Optional[_Seconds] = None) -> Dict[str, Any]: ...
        @property
        def closed(self) -> bool: ...
        @property
        def name(self) -> str: ...
        @property
        def path(self) -> str: ...
        @property
        def slot(self) -> int: ...
        @property
        def max_queue(self) -> int: ...
        @property
        def queue_timeout(self) -> float: ...

    def _host_reap(name: str, dir: str) -> int: ...
    def _host_cli(args: List[str]) -> Tuple[int, str, str]: ...
