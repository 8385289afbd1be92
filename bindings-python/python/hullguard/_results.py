"""The small result objects of gateway admission (docs/design.md §5): what the non-throwing
``admit`` / ``admit_sync`` / ``try_admit`` answer, what the dry run ``would_admit`` answers and
what ``permit.report_usage`` answers. Built by the native module from the core's answers; plain
values, safe to keep, compare and print.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Literal, Optional

if TYPE_CHECKING:
    from ._errors import BulkheadError
    from ._native import Permit

__all__ = ["Admission", "Admitted", "Refused", "WouldAdmit", "UsageReport"]


class Admission:
    """The answer of ``bh.admit(...)`` / ``admit_sync`` / ``try_admit``: never raised. Either an
    :class:`Admitted` or a :class:`Refused` (a type checker narrows on ``.ok``).

    ``ok=True``: ``permit`` is the granted :class:`~hullguard.Permit` (release it, or use it as
    ``with`` / ``async with``). ``ok=False``: ``reason`` is the refusal's reason name
    (``"budget_limit"``, ``"concurrency_limit"``, ...), ``detail`` its detail dict (the bound
    that refused, per dimension ``limit`` / ``in_use`` / ``available``, ``retry_after``
    seconds for ``rate_limit``) and ``error`` the exception ``acquire`` would have raised.
    Truthy exactly when ``ok``::

        if (a := await bh.admit(cost=500)).ok:
            async with a.permit:
                ...
    """

    __slots__ = ("ok", "permit", "reason", "detail", "error")

    ok: bool
    permit: Optional["Permit"]
    reason: Optional[str]
    detail: Optional[Dict[str, Any]]
    error: Optional["BulkheadError"]

    def __bool__(self) -> bool:
        return self.ok


class Admitted(Admission):
    """An :class:`Admission` that was granted: ``ok`` is ``True``, ``permit`` the permit."""

    __slots__ = ()

    ok: Literal[True]
    permit: "Permit"
    reason: None
    detail: None
    error: None

    def __init__(self, permit: "Permit") -> None:
        self.ok = True
        self.permit = permit
        self.reason = None
        self.detail = None
        self.error = None

    def __repr__(self) -> str:
        return f"<Admitted ok permit={self.permit!r}>"


class Refused(Admission):
    """An :class:`Admission` that was refused: ``ok`` is ``False``; ``reason``, ``detail`` and
    ``error`` say why."""

    __slots__ = ()

    ok: Literal[False]
    permit: None
    reason: str
    detail: Dict[str, Any]
    error: "BulkheadError"

    def __init__(self, reason: str, detail: Dict[str, Any], error: "BulkheadError") -> None:
        self.ok = False
        self.permit = None
        self.reason = reason
        self.detail = detail
        self.error = error

    def __repr__(self) -> str:
        return f"<Refused reason={self.reason!r}>"


class WouldAdmit:
    """The dry run's answer (``bh.would_admit(...)``; nothing committed).

    ``decision``: ``"admit_now"``, ``"would_queue"`` (then ``position``, 1-based, and ``ahead``,
    the live waiters before it) or the reason it would be refused (then ``detail``).
    """

    __slots__ = ("decision", "position", "ahead", "detail")

    def __init__(
        self,
        *,
        decision: str,
        position: Optional[int] = None,
        ahead: Optional[int] = None,
        detail: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.decision = decision
        self.position = position
        self.ahead = ahead
        self.detail = detail

    @property
    def admit_now(self) -> bool:
        """Whether it would be admitted at once."""
        return self.decision == "admit_now"

    def __repr__(self) -> str:
        pos = f" position={self.position}" if self.position is not None else ""
        return f"<WouldAdmit {self.decision}{pos}>"


class UsageReport:
    """The answer of ``permit.report_usage(used, remaining)``.

    ``change``: ``"unchanged"``, ``"shrank"`` (units returned at once), ``"grew"`` (taken from
    the budget) or ``"overran"`` (held past the budget, counted); ``by`` the units it changed;
    ``cancel``: the bulkhead's ``cancel_on_overrun`` asks the caller to stop the work;
    ``used``, ``held`` (``used + remaining``) and ``overrun`` (the part of ``held`` past the
    budget) after the report.
    """

    __slots__ = ("change", "by", "cancel", "used", "held", "overrun")

    def __init__(
        self, *, change: str, by: int, cancel: bool, used: int, held: int, overrun: int
    ) -> None:
        self.change = change
        self.by = by
        self.cancel = cancel
        self.used = used
        self.held = held
        self.overrun = overrun

    def __repr__(self) -> str:
        return f"<UsageReport {self.change} by={self.by} held={self.held} cancel={self.cancel}>"
