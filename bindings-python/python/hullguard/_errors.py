"""The exception hierarchy of hullguard (the reasons of docs/design.md).

Every rejection raises a subclass of :class:`BulkheadError` carrying ``code``, ``reason``,
``retryable``, ``category`` and ``snapshot`` (``{"active", "queued", "limit", "available",
"key"}``). The class is the one declaring the reason's ``code`` (:func:`_class_for`); every
attribute comes from the core's reason table (``hullguard._native.REASONS``). Cancellation is
never wrapped: a cancelled task gets its own ``asyncio.CancelledError``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Type, Union

__all__ = [
    "BulkheadError",
    "BulkheadFullError",
    "BulkheadQueueTimeoutError",
    "BulkheadClosedError",
    "CircuitOpenError",
    "CallTimeoutError",
    "StaleRevision",
    "UsageError",
    "LeaseError",
    "StaleLeaseError",
    "ForeignLeaseError",
    "HostSegmentError",
]


class BulkheadError(Exception):
    """Base of every hullguard rejection.

    Attributes:
        code: the stable error code shared by every layer (``"BULKHEAD_FULL"``, ...).
        reason: the admission reason (``"concurrency_limit"``, ``"queue_limit"``, ...).
        retryable: whether retrying later may succeed.
        category: the rejection category (``"resilience"`` for every reason).
        snapshot: ``{"active", "queued", "limit", "available", "key"}`` when it was rejected.
        detail: the rejection's detail (docs/design.md §5.7): ``{"reason", "bound", "calls":
            {"limit", "in_use", "available"}, "budget": {...} or None, "queued", "max_queue",
            "queued_cost", "revision", "class": {"class", "bound", "dimension"} or None,
            "retry_after": seconds or None}``; ``bound`` names the constraint that refused
            (``"limit"``, ``"kill_switch"``, ``"budget"``, ``"queue"``, ``"class"``,
            ``"reserve"``, ``"rate"``, ...). ``{}`` for an error built by hand.
    """

    code: str = "BULKHEAD_ERROR"

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        code: Optional[str] = None,
        retryable: bool = True,
        category: str = "resilience",
        snapshot: Optional[Dict[str, Any]] = None,
        detail: Union[Dict[str, Any], Callable[[], Dict[str, Any]], None] = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.reason = reason
        self.retryable = retryable
        self.category = category
        self.snapshot: Dict[str, Any] = snapshot if snapshot is not None else {}
        # A dict, or (from the native module) a callable building it when first read: a
        # rejection nobody inspects builds no detail (docs/design.md §5.7, "details on demand").
        self._detail = detail

    @property
    def detail(self) -> Dict[str, Any]:
        d = self._detail
        if isinstance(d, dict):
            return d
        d = d() if d is not None else {}
        self._detail = d
        return d

    @detail.setter
    def detail(self, value: Dict[str, Any]) -> None:
        self._detail = value

    def __reduce__(self) -> Any:
        # `reason` is keyword-only: rebuild through a helper so pickle / copy work (a
        # rejection raised in a process pool reaches the parent intact).
        return (
            _rebuild,
            (type(self), str(self), self.reason, self.code, self.retryable, self.category,
             self.snapshot, self.detail),
        )


def _rebuild(
    cls: Any,
    message: str,
    reason: str,
    code: str,
    retryable: bool,
    category: str,
    snapshot: Dict[str, Any],
    detail: Optional[Dict[str, Any]] = None,
) -> BulkheadError:
    return cls(  # type: ignore[no-any-return]
        message, reason=reason, code=code, retryable=retryable, category=category,
        snapshot=snapshot, detail=detail,
    )


class BulkheadFullError(BulkheadError):
    """Not admitted: ``concurrency_limit``, ``queue_limit`` or ``key_limit`` (retryable)."""

    code = "BULKHEAD_FULL"


class BulkheadQueueTimeoutError(BulkheadError):
    """Waited in the queue longer than the queue timeout (``timeout``).

    Deliberately *not* a :class:`TimeoutError`: retry libraries must not treat local overload
    as a network timeout.
    """

    code = "BULKHEAD_QUEUE_TIMEOUT"


class BulkheadClosedError(BulkheadError):
    """The bulkhead is closed (``shutdown``); retrying will not help."""

    code = "BULKHEAD_CLOSED"


class CircuitOpenError(BulkheadError):
    """The paired circuit breaker is open (``circuit_open``)."""

    code = "CIRCUIT_OPEN"


class CallTimeoutError(BulkheadError):
    """A guarded call overran its per-call timeout (``call_timeout``)."""

    code = "BULKHEAD_CALL_TIMEOUT"


class BulkheadShedError(BulkheadError):
    """Evicted from a full queue for a higher-priority arrival (``shed``, a classed bulkhead;
    docs/design.md §4.8). Retryable."""

    code = "BULKHEAD_SHED"


class BulkheadRateLimitError(BulkheadError):
    """A rate limit (requests or units per interval) of a classed bulkhead refused
    (``rate_limit``; docs/design.md §4.9). Retryable."""

    code = "BULKHEAD_RATE_LIMITED"


class StaleRevision(ValueError):
    """``apply_limits`` refused a revision not above the one in force (a stale or repeated
    control-plane update); nothing was applied. ``current`` is the revision in force."""

    def __init__(self, message: str, *, current: int) -> None:
        super().__init__(message)
        self.current = current

    def __reduce__(self) -> Any:
        return (_rebuild_stale, (str(self), self.current))


def _rebuild_stale(message: str, current: int) -> "StaleRevision":
    return StaleRevision(message, current=current)


class UsageError(ValueError):
    """``permit.report_usage`` refused; nothing changed. ``kind``: ``"decreased"`` (usage is
    cumulative: ``used`` below an earlier report), ``"too_large"`` (``used + remaining`` above
    ``MAX_BUDGET``) or ``"released"`` (the permit holds no permits any more)."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> Any:
        return (_rebuild_usage, (str(self), self.kind))


def _rebuild_usage(message: str, kind: str) -> "UsageError":
    return UsageError(message, kind=kind)


class LeaseError(RuntimeError):
    """A host bulkhead's release that did not count (docs/design.md §14.3): nothing was
    released twice. ``code`` is the stable code every layer shares."""

    code: str = "BULKHEAD_LEASE"

    def __init__(self, message: str, *, code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def __reduce__(self) -> Any:
        return (_rebuild_lease, (type(self), str(self), self.code))


class StaleLeaseError(LeaseError):
    """``HostPermit.release()`` after this process's lease expired (it was stopped or hung past
    ``lease_ttl``) or was reclaimed: its permits were already returned to the host; this
    release changed nothing (``stats()["stale_releases_total"]``)."""

    code = "BULKHEAD_STALE_LEASE"


class ForeignLeaseError(LeaseError):
    """``HostPermit.release()`` in a process that did not acquire it (a child after
    ``os.fork()`` releasing its parent's permit): refused, nothing released
    (``stats()["foreign_releases_total"]``)."""

    code = "BULKHEAD_FOREIGN_LEASE"


def _rebuild_lease(cls: Any, message: str, code: str) -> LeaseError:
    return cls(message, code=code)  # type: ignore[no-any-return]


class HostSegmentError(OSError):
    """A host bulkhead's segment file could not be created, attached or used (docs/design.md
    §14.6); the message names the file. ``kind``: ``"io"`` (a system call failed: ``errno``),
    ``"permission"`` (another owner, or world-writable), ``"incompatible"`` (not a segment
    this library reads: layout or version), ``"mismatch"`` (created with another host-wide
    setting; ``on_mismatch="adopt"`` takes the segment's), ``"no_slot"`` (every slot is held by
    a live process), ``"poisoned"`` (found inconsistent: remove it with ``hullguard host rm``),
    ``"removed"`` (the file was removed while attached). ``path``: the file."""

    code = "HOST_SEGMENT"

    def __init__(
        self, message: str, *, kind: str, path: Optional[str] = None, errno: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.path = path
        # Not OSError's (errno, strerror, filename) form: str() stays the message.
        self.errno = errno

    def __reduce__(self) -> Any:
        return (_rebuild_host_segment, (str(self), self.kind, self.path, self.errno))


def _rebuild_host_segment(
    message: str, kind: str, path: Optional[str], errno: Optional[int]
) -> HostSegmentError:
    return HostSegmentError(message, kind=kind, path=path, errno=errno)


def _class_for(code: str) -> Type[BulkheadError]:
    """The class raised for a reason whose code is ``code``: the class declaring that ``code``,
    :class:`BulkheadFullError` for a code without a class of its own (``"ABORTED"``)."""
    return _BY_CODE.get(code, BulkheadFullError)


_BY_CODE: Dict[str, Type[BulkheadError]] = {cls.code: cls for cls in BulkheadError.__subclasses__()}
