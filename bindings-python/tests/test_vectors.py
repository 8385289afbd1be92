"""The Python runner of the scenario vectors: ``tests/vectors/*.json`` and the
policy vectors ``tests/vectors/policies/*.json`` at the repository root, the same decisions as
the Rust runner (``tests/tests/vectors.rs``, mirrored here step for step).

Policy vectors add ``resilience`` to the config (durations as integer ``…_ms``, converted to
the binding's seconds), ``release`` / ``record_outcome`` with an ``outcome``, ``expect_state``
(``bh.circuit_state``), ``expect_events`` (the ``on_state_change`` calls since the previous
check: ``[old, new]``, or ``[key, old, new]`` in a registry) and the ``circuit`` / ``adaptive``
stats.

The deadline vectors ``tests/vectors/deadline/*.json`` (docs/design.md §5.9, §4.10) add an
acquire's ``deadline_ms`` (``deadline=``: absolute seconds on the virtual clock) and the config's
``min_service_time_ms``, ``queue_delay_target_ms``, ``queue_delay_interval_ms``,
``adaptive_lifo``; they run in both styles too.

The admission vectors ``tests/vectors/admission/*.json`` (docs/design.md §4.5–4.9, §5, §9.2)
add the gateway steps: ``cost`` / ``class`` (an index) on acquires, the refusal's ``bound`` and
``retry_after_ms`` (read from the exception's or the non-throwing ``Admission``'s ``detail``:
every admission vector runs in both styles, ``try_acquire`` / ``await acquire()`` and
``try_admit`` / ``await admit()``), ``release`` with ``used``, ``refund``,
``report_usage``, ``orphan``, ``apply_limits``, ``would_admit``, ``set_budget``,
``set_observe``, ``class_stats``, ``key_stats``; a ``classes`` table (constructor arguments)
and a registry's ``global`` cap (``global_cap=``). Besides the permits, the runner keeps its own
record of the budget units each grant holds and checks them against the budget stats after
every step (``in_use``, ``overrun_held``, the budget's I2, the settlement identity C30,
``queued_cost``). A rate holds a head back until the binding's own rate timer (armed on the
loop, so on the virtual clock) ticks the bulkhead.

Each vector runs on a :class:`VirtualClockLoop`; the bulkhead / registry gets the loop's
virtual clock through the binding's ``_clock`` hook, so the binding's queue timers
(``loop.call_later``) and the core's ``*_ns`` stats share one virtual time. Acquires are
driven as asyncio tasks. After every step the loop runs to quiescence and exactly the acquires
that settled during the step are compared with ``settles``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

import hullguard
from _support import STATS_KEYS, VirtualClockLoop, outcome_of

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"
POLICY_VECTORS = VECTORS / "policies"
ADMISSION_VECTORS = VECTORS / "admission"
DEADLINE_VECTORS = VECTORS / "deadline"


def _files(folder: Path) -> List[Path]:
    return sorted(p for p in folder.glob("*.json") if p.name != "schema.json")


# A folder missing or empty is a failure, never a skip (nor an empty run): each test below then
# runs once on a placeholder that is no file and fails saying so.
FILES = _files(VECTORS)
POLICY_FILES = _files(POLICY_VECTORS)
ADMISSION_FILES = _files(ADMISSION_VECTORS)
DEADLINE_FILES = _files(DEADLINE_VECTORS)


def _or_missing(files: List[Path], folder: Path) -> List[Path]:
    return files or [folder / "<no vector files>"]


@functools.lru_cache(maxsize=None)
def _step_shapes() -> Dict[str, Tuple[set, set]]:
    """op -> (allowed fields, required fields), read from schema.json (the policy ops, should
    schema.json not describe them yet, from the runner's own list below)."""
    schema = json.loads((VECTORS / "schema.json").read_text())
    shapes = {}
    for alt in schema["$defs"]["step"]["oneOf"]:
        op = alt["properties"]["op"]["const"]
        shapes[op] = (set(alt["properties"]), set(alt.get("required", [])))
    for op, (allowed, required) in _POLICY_SHAPES.items():
        have = shapes.get(op, (set(), required))
        shapes[op] = (have[0] | allowed, have[1])
    return shapes


_POLICY_SHAPES = {
    "release": ({"op", "id", "outcome", "expect", "settles"}, {"op", "id"}),
    "record_outcome": ({"op", "id", "outcome", "expect", "settles"}, {"op", "id", "outcome"}),
    "expect_state": ({"op", "key", "state", "settles"}, {"op", "state"}),
    "expect_events": ({"op", "events", "settles"}, {"op", "events"}),
}


def _seconds(ms: Any) -> Any:
    """A vector duration (integer ms, "infinite" or null) in the binding's unit (seconds)."""
    if ms is None:
        return None
    if ms == "infinite":
        return math.inf
    assert isinstance(ms, int) and not isinstance(ms, bool) and ms >= 0, ms
    return ms / 1000


def _config(c: Any) -> Any:
    """A vector config (or a part of it) as the binding's options. The vector spelling is the
    option's name with ``_ms`` for a duration (integer ms); the binding's is the name, in
    seconds. Other names pass unchanged: the binding refuses those it does not know."""
    if not isinstance(c, dict):
        return c
    return {
        k[: -len("_ms")] if k.endswith("_ms") else k: _seconds(v) if k.endswith("_ms") else _config(v)
        for k, v in c.items()
    }


async def _await(box: List[Any]) -> Any:
    return await box.pop()  # no local keeps the AcquireContext (and its bulkhead) alive


class Held:
    """The runner's own record of what one granted acquire holds — never read back from the
    binding: permits (the step's weight less what it returned), budget units charged (the
    step's cost less refunds, plus report_usage growth through admission), units held past the
    budget (growth the step expected to overrun) and the cumulative usage it reported."""

    __slots__ = ("weight", "cost", "overrun", "reported")

    def __init__(self, weight: int, cost: int) -> None:
        self.weight, self.cost, self.overrun, self.reported = weight, cost, 0, 0


def _int(v: Any, default: int) -> Any:
    """A step's number as the Rust runner reads it (``as_u64``): anything but a non-negative
    int is passed on unchanged, for the binding to refuse (``invalid``)."""
    return default if v is None else v


class Runner:
    def __init__(self, vector: Dict[str, Any], loop: VirtualClockLoop, style: str = "raise") -> None:
        self.name = vector["name"]
        self.style = style
        self.loop = loop
        self.reg: Optional[hullguard.Registry] = None
        self.bh: Optional[hullguard.Bulkhead] = None
        self.global_cap = False
        # on_state_change calls since the last expect_events: [old, new] / [key, old, new]
        self.events: List[List[str]] = []
        if "registry" in vector:
            r = dict(vector["registry"])
            extra: Dict[str, Any] = {}
            if "global" in r:
                extra["global_cap"] = r.pop("global")
                self.global_cap = True
            self.reg = hullguard.Registry(
                **_config(r.get("defaults") or {}),
                overrides={k: _config(v) for k, v in r.get("overrides", {}).items()},
                max_keys=r.get("max_keys"),
                on_state_change=lambda key, old, new: self.events.append([key, old, new]),
                _clock=loop.clock,
                **extra,
            )
        else:
            # A classed bulkhead (docs/design.md §4.8): the class table's keys are constructor
            # arguments; rates' `per_ms` becomes `per` in seconds.
            table = _config(vector.get("classes") or {})
            self.bh = hullguard.Bulkhead(
                **_config(vector.get("config") or {}),
                **table,
                on_state_change=lambda key, old, new: self.events.append([old, new]),
                _clock=loop.clock,
            )
        # id -> ("queued", task) | ("held", permit) | ("released", permit) | ("rejected", None)
        self.acquires: Dict[str, Tuple[str, Any]] = {}
        # the runner's own records, never read back from the binding: the key each acquire
        # named, the weight and cost it asked for, and what each granted one holds
        self.key_of: Dict[str, Optional[str]] = {}
        self.asked: Dict[str, Tuple[int, int]] = {}
        self.held: Dict[str, Held] = {}

    # -- helpers ---------------------------------------------------------------------------
    def bulkhead(self, key: Optional[str]) -> hullguard.Bulkhead:
        if self.reg is not None:
            assert key is not None, f"{self.name}: registry steps need a key"
            return self.reg.get(key)
        assert key is None and self.bh is not None, f"{self.name}: a key outside a registry"
        return self.bh

    def stats(self, key: Optional[str]) -> Dict[str, Any]:
        if self.reg is not None:
            assert key is not None, f"{self.name}: registry steps need a key"
            return self.reg.stats()[key]
        assert key is None and self.bh is not None
        return self.bh.stats()

    def grant(self, aid: str, permit: Any) -> None:
        self.acquires[aid] = ("held", permit)
        self.held[aid] = Held(*self.asked[aid])

    def permit(self, ctx: str, aid: str) -> Any:
        state, p = self.acquires.get(aid, ("missing", None))
        assert state == "held", f"{ctx}: {aid} holds no permit ({state})"
        return p

    @staticmethod
    def request_kwargs(step: Dict[str, Any]) -> Dict[str, Any]:
        kwargs: Dict[str, Any] = {}
        if "weight" in step:
            kwargs["weight"] = step["weight"]
        if "cost" in step:
            kwargs["cost"] = step["cost"]
        if "class" in step:
            kwargs["admission_class"] = step["class"]  # the vectors name classes by index
        if "deadline_ms" in step:
            # An absolute deadline on the virtual clock (ms from 0; "infinite": none), as
            # absolute seconds on the same clock: the bulkhead's `_clock` is the loop's.
            kwargs["deadline"] = _seconds(step["deadline_ms"])
        return kwargs

    def check_refusal(self, ctx: str, step: Dict[str, Any], detail: Dict[str, Any]) -> None:
        """The constraint that bound and a rate refusal's retry time (docs/design.md §5.7)."""
        if "bound" in step:
            assert detail["bound"] == step["bound"], f"{ctx}: bound {detail}"
        if "retry_after_ms" in step:
            got = detail["retry_after"]
            assert got is not None, f"{ctx}: no retry time {detail}"
            assert int(round(got * 1000)) == step["retry_after_ms"], f"{ctx}: retry {detail}"

    def acquire(self, ctx: str, step: Dict[str, Any], queue: bool) -> str:
        """One acquire in the runner's style: ``"raise"`` (``try_acquire`` → a permit, ``None``
        for ``concurrency_limit``, or the exception; ``await acquire()``) or ``"admission"``
        (the non-throwing ``try_admit`` / ``await admit()`` → an ``Admission``)."""
        aid, key = step["id"], step.get("key")
        self.key_of[aid] = key
        kwargs = self.request_kwargs(step)
        self.asked[aid] = (step.get("weight", 1), step.get("cost", 0))
        admission = self.style == "admission"
        if not queue:
            try:
                if admission:
                    a = self.reg.try_admit(key, **kwargs) if self.reg is not None else self.bulkhead(key).try_admit(**kwargs)
                else:
                    a = self.reg.try_acquire(key, **kwargs) if self.reg is not None else self.bulkhead(key).try_acquire(**kwargs)
            except (ValueError, TypeError):
                self.acquires[aid] = ("rejected", None)
                return "invalid"
            except hullguard.BulkheadError as e:
                self.check_refusal(ctx, step, e.detail)
                self.acquires[aid] = ("rejected", None)
                return e.reason
            if a is None:  # try_acquire's concurrency_limit (its detail is not returned)
                self.acquires[aid] = ("rejected", None)
                return "concurrency_limit"
            return self.settle_now(ctx, step, aid, a)
        if "timeout_ms" in step:
            kwargs["timeout"] = _seconds(step["timeout_ms"])
        try:
            target = self.reg if self.reg is not None else self.bulkhead(key)
            method = getattr(target, "admit" if admission else "acquire")
            ctx_ = method(key, **kwargs) if self.reg is not None else method(**kwargs)
            del target, method
        except (ValueError, TypeError):
            self.acquires[aid] = ("rejected", None)
            return "invalid"
        task = self.loop.create_task(_await([ctx_]))
        del ctx_
        self.loop.run_until_quiet()
        if not task.done():
            self.acquires[aid] = ("queued", task)
            return "queued"
        if not task.cancelled() and isinstance(task.exception(), ValueError):
            self.acquires[aid] = ("rejected", None)
            return "invalid"
        return self.settle_task(ctx, step, aid, task)

    def settle_now(self, ctx: str, step: Dict[str, Any], aid: str, a: Any) -> str:
        """A granted permit, or an ``Admission``: recorded; the outcome's name."""
        if isinstance(a, hullguard.Permit):
            self.grant(aid, a)
            return "granted"
        assert isinstance(a, hullguard.Admission), ctx
        if not a.ok:
            assert isinstance(a, hullguard.Refused) and a.permit is None, ctx
            assert isinstance(a.error, hullguard.BulkheadError) and a.error.reason == a.reason, ctx
            assert a.error.detail == a.detail and a.detail["reason"] == a.reason, ctx
            self.check_refusal(ctx, step, a.detail)
            self.acquires[aid] = ("rejected", None)
            return a.reason
        assert isinstance(a, hullguard.Admitted) and isinstance(a.permit, hullguard.Permit), ctx
        self.grant(aid, a.permit)
        return "granted"

    def settle_task(self, ctx: str, step: Dict[str, Any], aid: str, task: "asyncio.Task[Any]") -> str:
        """A finished acquire task (``aborted`` if cancelled): recorded; the outcome's name."""
        if task.cancelled():
            self.acquires[aid] = ("rejected", None)
            return "aborted"
        exc = task.exception()
        if exc is not None:
            assert self.style == "raise" and isinstance(exc, hullguard.BulkheadError), f"{ctx}: {exc!r}"
            self.check_refusal(ctx, step, exc.detail)
            self.acquires[aid] = ("rejected", None)
            return exc.reason
        return self.settle_now(ctx, step, aid, task.result())

    def collect_settled(self, settled: Dict[str, str]) -> None:
        for aid, (state, obj) in list(self.acquires.items()):
            if state == "queued" and obj.done():
                # drop the task: a finished task keeps its traceback and frames alive
                settled[aid] = self.settle_task(f"{self.name} {aid}", {}, aid, obj)

    def all_stats(self) -> Dict[Optional[str], Dict[str, Any]]:
        if self.reg is not None:
            if self.global_cap:
                g = self.reg.global_stats()
                assert g is not None
                return {None: g}
            return dict(self.reg.stats())
        assert self.bh is not None
        return {None: self.bh.stats()}

    def check_invariants(self, ctx: str) -> None:
        """After every step, for every bulkhead: ``active`` is what the runner holds of it (its
        own records), ``queued`` its pending acquires, no grant is left unclaimed, and I2 holds
        with the runner's count: ``available + held == limit``. With a budget, the units the
        runner holds are ``in_use`` (plus ``overrun_held``), the budget's I2 and the settlement
        identity hold (C30), and ``queued_cost`` is the costs it has queued. Under a registry's
        global cap each key's class holds what the runner holds of it, and the shared
        admission what all keys hold."""
        held: Dict[Optional[str], int] = {}
        units: Dict[Optional[str], int] = {}
        over: Dict[Optional[str], int] = {}
        queued: Dict[Optional[str], int] = {}
        queued_cost: Dict[Optional[str], int] = {}
        for aid, (state, _) in self.acquires.items():
            key = self.key_of[aid]
            if state == "held":
                h = self.held[aid]
                held[key] = held.get(key, 0) + h.weight
                units[key] = units.get(key, 0) + h.cost
                over[key] = over.get(key, 0) + h.overrun
            elif state == "queued":
                queued[key] = queued.get(key, 0) + 1
                queued_cost[key] = queued_cost.get(key, 0) + self.asked[aid][1]
        if self.global_cap:
            assert self.reg is not None
            for k in self.reg.keys():
                c = self.reg.key_stats(k)
                assert c is not None, f"{ctx}: no key stats for {k!r}"
                want = (held.get(k, 0), queued.get(k, 0))
                assert (c["in_flight"], c["queued"]) == want, f"{ctx}: key {k!r}: {c} vs {want}"
            for m in (held, units, over, queued, queued_cost):
                total = sum(m.values())
                m.clear()
                m[None] = total
        for key, s in self.all_stats().items():
            h, q = held.pop(key, 0), queued.pop(key, 0)
            assert s["active"] == h, f"{ctx}: active of {key!r} vs the {h} permits the runner holds: {s}"
            assert s["queued"] == q, f"{ctx}: queued of {key!r} vs the runner's {q} pending: {s}"
            assert s["granted_unclaimed"] == 0, f"{ctx}: the runner claims every grant {s}"
            assert s["available"] + h == s["limit"], f"{ctx}: I2 with the runner's count ({h} held): {s}"
            u, o, qc = units.get(key, 0), over.get(key, 0), queued_cost.get(key, 0)
            b = s["budget"]
            if b is None:
                assert (u, o) == (0, 0), f"{ctx}: {key!r} has no budget but the runner holds {u} (+{o}) units"
                continue
            assert b["queued_cost"] == qc, f"{ctx}: queued_cost of {key!r} vs the runner's {qc}: {s}"
            assert b["overrun_held"] == o, f"{ctx}: overrun_held of {key!r} vs {o}: {s}"
            assert b["in_use"] == u, f"{ctx}: budget in_use of {key!r} vs the {u} units held: {s}"
            assert b["granted_unclaimed"] == 0, f"{ctx}: unclaimed units: {s}"
            assert b["available"] + u == b["limit"], f"{ctx}: the budget's I2 ({u} held): {s}"
            assert b["reserved_total"] + b["overrun_total"] == (
                b["consumed_total"] + b["refunded_total"] + b["in_use"] + b["overrun_held"]
            ), f"{ctx}: C30 settlement identity for {key!r}: {s}"
        left = {k: v for k, v in held.items() if v} | queued
        assert not left, f"{ctx}: permits or waiters in bulkheads missing from the stats: {left}"

    # -- the gateway ops -------------------------------------------------------------------
    def apply_limits(self, ctx: str, step: Dict[str, Any]) -> str:
        key = step.get("key")
        bh = self.bulkhead(key)
        kwargs: Dict[str, Any] = {}
        for k in ("limit", "budget", "max_queue"):
            if k in step:
                kwargs[k] = step[k]
        if "queue_timeout_ms" in step:
            kwargs["queue_timeout"] = _seconds(step["queue_timeout_ms"])
        if "reserve" in step:
            kwargs["reserve"] = step["reserve"]
        if "rates" in step:
            kwargs["rates"] = _config(step["rates"])
        before = self.stats(key)
        try:
            assert bh.apply_limits(step["revision"], **kwargs) is None, ctx
            got = "ok"
        except hullguard.StaleRevision as e:
            assert isinstance(e, ValueError) and e.current == before["revision"], ctx
            if "current" in step:
                assert e.current == step["current"], f"{ctx}: current {e.current}"
            got = "stale"
        except (ValueError, TypeError):
            got = "invalid"
        if got != "ok":
            after = self.stats(key)
            budget = lambda s: s["budget"] and s["budget"]["limit"]  # noqa: E731
            assert (after["revision"], after["limit"], budget(after)) == (
                before["revision"], before["limit"], budget(before)
            ), f"{ctx}: a refused apply_limits changes nothing"
        else:
            assert bh.revision == step["revision"], ctx
        return got

    def would_admit(self, ctx: str, step: Dict[str, Any]) -> None:
        key = step.get("key")
        kwargs = self.request_kwargs(step)
        if "timeout_ms" in step:
            kwargs["timeout"] = _seconds(step["timeout_ms"])
        before = self.all_stats() if self.reg is None else self.reg.stats()
        keys = None if self.reg is None else sorted(self.reg.keys())
        try:
            if self.reg is not None:
                assert key is not None
                w = self.reg.would_admit(key, **kwargs)
            else:
                w = self.bulkhead(key).would_admit(**kwargs)
            got, position = w.decision, w.position
            if got == "would_queue":
                assert position == w.ahead + 1, ctx
            elif got != "admit_now":
                assert w.detail is not None and w.detail["reason"] == got, ctx
        except (ValueError, TypeError):
            got, position = "invalid", None
        after = self.all_stats() if self.reg is None else self.reg.stats()
        assert after == before, f"{ctx}: a dry run changes nothing"
        if self.reg is not None:
            assert sorted(self.reg.keys()) == keys, f"{ctx}: a dry run creates no key"
        assert got == step["expect"], f"{ctx}: {got}"
        if "position" in step:
            assert position == step["position"], f"{ctx}: position {position}"

    def report_usage(self, ctx: str, step: Dict[str, Any]) -> str:
        aid = step["id"]
        p, h = self.permit(ctx, aid), self.held[aid]
        used, remaining = step["used"], step.get("remaining", 0)
        try:
            r = p.report_usage(used, remaining)
        except hullguard.UsageError as e:
            got = {"decreased": "decreased", "too_large": "invalid", "released": "released"}[e.kind]
        except (ValueError, TypeError):
            got = "invalid"
        else:
            got = r.change
            assert r.cancel is step.get("cancel", False), f"{ctx}: cancel {r}"
            assert p.cancel_requested is (p.cancel_requested or r.cancel), ctx
        if h.weight > 0:
            assert (got == "decreased") is (used < h.reported), f"{ctx}: cumulative usage"
        # The runner's own record, from the step: the hold becomes used + remaining; a shrink
        # takes the part past the budget first; a growth is charged or held past the budget
        # as the step expects.
        if got in ("unchanged", "shrank", "grew", "overran") and h.weight > 0:
            h.reported = used
            target, have = used + remaining, h.cost + h.overrun
            if target < have:
                o = min(have - target, h.overrun)
                h.overrun, h.cost = h.overrun - o, h.cost - (have - target - o)
            elif got == "grew":
                h.cost += target - have
            elif got == "overran":
                h.overrun += target - have
            if "by" in step:
                assert step["by"] == abs(target - have) == r.by, f"{ctx}: the change {r}"
        return got  # type: ignore[no-any-return]

    # -- one step --------------------------------------------------------------------------
    def step(self, i: int, step: Dict[str, Any]) -> None:
        ctx = f"{self.name} step {i} {json.dumps(step)}"
        op = step.get("op")
        key = step.get("key")
        settled: Dict[str, str] = {}
        if op in ("acquire", "try_acquire"):
            got = self.acquire(ctx, step, op == "acquire")
            assert got == step["expect"], f"{ctx}: {got}"
        elif op in ("release", "record_outcome"):
            aid = step["id"]
            state, p = self.acquires.get(aid, ("missing", None))
            assert state in ("held", "released"), f"{ctx}: {aid} holds no permit ({state})"
            kwargs = {}
            if "outcome" in step:
                kwargs["outcome"] = step["outcome"]
            if "used" in step:
                kwargs["usage"] = step["used"]
            released = p.release(**kwargs)
            assert released is (state == "held"), ctx
            self.acquires[aid] = ("released", p)
            self.held.pop(aid, None)
            assert released is step.get("expect", True), ctx
        elif op == "orphan":
            aid = step["id"]
            p = self.permit(ctx, aid)
            try:
                got = "ok" if p.orphan() else "none"
            except ValueError:
                got = "refused"
            if got == "ok":
                self.held[aid].weight = 0  # its units stay held
            assert got == step["expect"], f"{ctx}: {got}"
        elif op == "release_partial":
            aid = step["id"]
            p = self.permit(ctx, aid)
            try:
                p.release_partial(step["n"])
                h = self.held[aid]
                h.weight -= step["n"]
                if h.weight == 0:  # units return with the last permit (docs/design.md §4.5)
                    h.cost, h.overrun = 0, 0
                got = "ok"
            except (ValueError, TypeError):
                got = "invalid"
            assert got == step.get("expect", "ok"), ctx
        elif op == "refund":
            aid = step["id"]
            p = self.permit(ctx, aid)
            n = step["n"]
            try:
                p.refund(n)
                h = self.held[aid]
                o = min(n, h.overrun)  # the part held past the budget goes first
                h.overrun, h.cost = h.overrun - o, h.cost - (n - o)
                got = "ok"
            except (ValueError, TypeError):
                got = "invalid"
            assert got == step.get("expect", "ok"), f"{ctx}: {got}"
        elif op == "report_usage":
            got = self.report_usage(ctx, step)
            assert got == step["expect"], f"{ctx}: {got}"
        elif op == "apply_limits":
            got = self.apply_limits(ctx, step)
            assert got == step.get("expect", "ok"), f"{ctx}: {got}"
        elif op == "would_admit":
            self.would_admit(ctx, step)
        elif op == "report_load":
            # The signals of docs/design.md §4.11: the lag in seconds, the CPU in cores.
            lag = step.get("event_loop_lag_ms")
            self.bulkhead(key).report_load(
                event_loop_lag=None if lag is None else lag / 1000, cpu=step.get("cpu")
            )
        elif op in ("set_observe", "set_budget"):
            try:
                bh = self.bulkhead(key)
                bh.set_observe(step["mode"]) if op == "set_observe" else bh.set_budget(step["limit"])
                got = "ok"
            except (ValueError, TypeError):
                got = "invalid"
            assert got == step.get("expect", "ok"), f"{ctx}: {got}"
        elif op == "class_stats":
            assert self.bh is not None, f"{ctx}: not a bulkhead"
            c = self.bh.class_stats(step["class"])
            shared = self.bh.class_shared_in_use()
            assert shared is not None, ctx
            got_c = {"in_flight": c["in_flight"], "queued": c["queued"], "shared_in_use": shared[0]}
            _subset(ctx, step["expect"], got_c)
        elif op == "key_stats":
            assert self.reg is not None, f"{ctx}: not a registry"
            c = self.reg.key_stats(key)
            assert c is not None, f"{ctx}: no key stats (no global cap, or no key)"
            got_c = {k: c[k] for k in ("in_flight", "queued", "ceiling", "observed")}
            _subset(ctx, step["expect"], got_c)
        elif op == "cancel":
            aid = step["id"]
            state, task = self.acquires.get(aid, ("missing", None))
            assert state != "missing", f"{ctx}: no acquire {aid}"
            won = False
            if state == "queued":
                task.cancel()
                self.loop.run_until_quiet()
                if task.cancelled():
                    won = True
                    settled[aid] = "aborted"
                    self.acquires[aid] = ("rejected", None)
            assert ("cancelled" if won else "already_settled") == step.get("expect", "cancelled"), ctx
        elif op == "set_limit":
            try:
                if self.reg is not None:
                    assert key is not None
                    self.reg.set_limit(key, step["limit"])
                else:
                    self.bulkhead(key).set_limit(step["limit"])
                got = "ok"
            except (ValueError, TypeError):
                got = "invalid"
            assert got == step.get("expect", "ok"), ctx
        elif op == "close":
            if self.reg is not None and key is None:
                self.reg.close()
            else:
                self.bulkhead(key).close()
        elif op == "advance_clock":
            self.loop.advance(step["ms"])
        elif op == "drain":
            assert step.get("timeout_ms", 0) == 0, ctx
            bh = self.bulkhead(key)
            got_sync = bh.drain_sync(0)
            task = self.loop.create_task(_await([bh.drain(0)]))
            del bh
            self.loop.run_until_quiet()
            assert task.done() and task.result() == got_sync, ctx  # both forms agree
            _subset(ctx, step["expect"], got_sync)
        elif op == "stats":
            s = self.stats(key)
            assert list(s) == list(STATS_KEYS), ctx
            _subset(ctx, step["expect"], s)
        elif op == "expect_state":
            got = self.bulkhead(key).circuit_state
            assert got == step["state"], f"{ctx}: state {got!r}"
        elif op == "expect_events":
            got_events, self.events = self.events, []
            assert got_events == step["events"], f"{ctx}: events {got_events}"
        elif op == "keys":
            assert self.reg is not None, f"{ctx}: not a registry"
            assert sorted(self.reg.keys()) == step["expect"], ctx
        else:
            raise AssertionError(f"{ctx}: unknown op {op!r}")
        # every step runs to quiescence: collect what settled, then compare exactly
        self.loop.run_until_quiet()
        self.collect_settled(settled)
        assert settled == step.get("settles", {}), f"{ctx}: settles {settled} (at {self.loop.now_ns // 1_000_000} ms)"
        self.check_invariants(ctx)

    def run(self, vector: Dict[str, Any]) -> None:
        for i, step in enumerate(vector["steps"]):
            self.step(i, step)


def _subset(ctx: str, want: Any, got: Any) -> None:
    if isinstance(want, dict):
        for k, v in want.items():
            assert isinstance(got, dict) and k in got, f"{ctx}: no field {k} in {got}"
            _subset(f"{ctx}.{k}", v, got[k])
    else:
        assert type(want) is type(got) and want == got, f"{ctx}: want {want!r}, got {got!r}"


def _check_shape(vector: Dict[str, Any], where: str) -> None:
    """What the schema says about the top level and each step (fields per op)."""
    extra = set(vector) - {"name", "description", "config", "classes", "registry", "steps"}
    assert not extra, f"{where}: unknown fields {extra}"
    assert not ("config" in vector and "registry" in vector), where
    assert not ("classes" in vector and "registry" in vector), where
    assert vector["steps"], where
    for i, step in enumerate(vector["steps"]):
        op = step.get("op")
        assert op in _step_shapes(), f"{where} step {i}: unknown op {op!r}"
        allowed, required = _step_shapes()[op]
        assert required <= set(step), f"{where} step {i}: missing {required - set(step)}"
        assert set(step) <= allowed, f"{where} step {i}: unknown fields {set(step) - allowed}"


def test_every_vector_file_is_collected() -> None:
    assert len(FILES) >= 25, f"vectors in {VECTORS}: {FILES}"
    names = [json.loads(f.read_text())["name"] for f in FILES]
    assert len(set(names)) == len(names)
    assert [f.stem for f in FILES] == names  # file name = vector name


@pytest.mark.parametrize("path", _or_missing(FILES, VECTORS), ids=lambda p: p.stem)
def test_vector(path: Path, vloop: VirtualClockLoop) -> None:
    assert path.is_file(), f"no vector files in {VECTORS}"
    vector = json.loads(path.read_text())
    _check_shape(vector, path.name)
    Runner(vector, vloop).run(vector)


def test_policy_vector_files() -> None:
    """The policy vectors: unique names = file names. Without any (the folder missing or
    empty) this test fails."""
    assert POLICY_FILES, f"no policy vector files in {POLICY_VECTORS}"
    names = [json.loads(f.read_text())["name"] for f in POLICY_FILES]
    assert len(set(names)) == len(names)
    assert [f.stem for f in POLICY_FILES] == names
    assert not {f.stem for f in FILES} & set(names)


@pytest.mark.parametrize("path", _or_missing(POLICY_FILES, POLICY_VECTORS), ids=lambda p: f"policies/{p.stem}")
def test_policy_vector(path: Path, vloop: VirtualClockLoop) -> None:
    assert path.is_file(), f"no policy vector files in {POLICY_VECTORS}"
    vector = json.loads(path.read_text())
    _check_shape(vector, f"policies/{path.name}")
    Runner(vector, vloop).run(vector)


def test_admission_vector_files() -> None:
    """The admission vectors (docs/design.md §4.5–4.9, §9.2): at least the 99 of issue 14,
    unique names = file names, none shared with the other folders. Without any this test
    fails."""
    assert len(ADMISSION_FILES) >= 99, f"admission vectors in {ADMISSION_VECTORS}: {ADMISSION_FILES}"
    names = [json.loads(f.read_text())["name"] for f in ADMISSION_FILES]
    assert len(set(names)) == len(names)
    assert [f.stem for f in ADMISSION_FILES] == names
    assert not ({f.stem for f in FILES} | {f.stem for f in POLICY_FILES}) & set(names)


@pytest.mark.parametrize("style", ["raise", "admission"])
@pytest.mark.parametrize(
    "path", _or_missing(ADMISSION_FILES, ADMISSION_VECTORS), ids=lambda p: f"admission/{p.stem}"
)
def test_admission_vector(path: Path, style: str, vloop: VirtualClockLoop) -> None:
    """Every admission vector in both styles: the exceptions (``try_acquire`` /
    ``await acquire()``) and the non-throwing ``Admission`` (``try_admit`` / ``await
    admit()``)."""
    assert path.is_file(), f"no admission vector files in {ADMISSION_VECTORS}"
    vector = json.loads(path.read_text())
    _check_shape(vector, f"admission/{path.name}")
    Runner(vector, vloop, style).run(vector)


def test_deadline_vector_files() -> None:
    """The deadline vectors (docs/design.md §5.9, §4.10; issue 17): at least the 9 of the core's
    step, unique names = file names, none shared with the other folders. Without any this test
    fails."""
    assert len(DEADLINE_FILES) >= 9, f"deadline vectors in {DEADLINE_VECTORS}: {DEADLINE_FILES}"
    names = [json.loads(f.read_text())["name"] for f in DEADLINE_FILES]
    assert len(set(names)) == len(names)
    assert [f.stem for f in DEADLINE_FILES] == names
    others = {f.stem for f in FILES} | {f.stem for f in POLICY_FILES} | {f.stem for f in ADMISSION_FILES}
    assert not others & set(names)


@pytest.mark.parametrize("style", ["raise", "admission"])
@pytest.mark.parametrize(
    "path", _or_missing(DEADLINE_FILES, DEADLINE_VECTORS), ids=lambda p: f"deadline/{p.stem}"
)
def test_deadline_vector(path: Path, style: str, vloop: VirtualClockLoop) -> None:
    """Every deadline vector in both styles: ``deadline_ms`` becomes ``deadline=`` (absolute
    seconds on the loop's virtual clock, which the bulkhead reads through ``_clock``); the
    queue timer the binding arms is the waiter's capped wait (``Waiter::queue_timeout``)."""
    assert path.is_file(), f"no deadline vector files in {DEADLINE_VECTORS}"
    vector = json.loads(path.read_text())
    _check_shape(vector, f"deadline/{path.name}")
    Runner(vector, vloop, style).run(vector)


BROKEN = {
    "unknown_op": {"name": "u", "steps": [{"op": "frobnicate"}]},
    "missing_op": {"name": "m", "steps": [{"id": "a"}]},
    "wrong_settles": {
        "name": "w",
        "config": {"max_concurrent": 1},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "release", "id": "a", "settles": {"a": "granted"}},
        ],
    },
    "missing_settles": {
        "name": "s",
        "config": {"max_concurrent": 1},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "acquire", "id": "b", "expect": "queued"},
            {"op": "release", "id": "a"},
        ],
    },
    "wrong_expect": {"name": "e", "config": {"max_concurrent": 1}, "steps": [{"op": "acquire", "id": "a", "expect": "queued"}]},
    "wrong_stats": {"name": "t", "steps": [{"op": "stats", "expect": {"limit": 11}}]},
    "wrong_state": {
        "name": "ws",
        "config": {"resilience": {"breaker": {}}},
        "steps": [{"op": "expect_state", "state": "open"}],
    },
    "missing_event": {
        "name": "me",
        "config": {"resilience": {"breaker": {"failure_threshold": 1}}},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "release", "id": "a", "outcome": "failure"},
            {"op": "expect_events", "events": []},
        ],
    },
    "wrong_circuit_stats": {
        "name": "wc",
        "config": {"resilience": {"breaker": {}}},
        "steps": [{"op": "stats", "expect": {"circuit": {"generation": 1}}}],
    },
    # the gateway steps (issue 16): a wrong bound, wrong budget stats, a refund the core
    # refuses, a wrong reason for a cost above the ceiling, a wrong refund total, a rate timer
    # that did fire, a wrong retry time, a wrong usage change, a wrong dry run
    "wrong_bound": {
        "name": "b",
        "config": {"max_concurrent": 1, "max_queue": 0},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "acquire", "id": "b", "expect": "concurrency_limit", "bound": "kill_switch"},
        ],
    },
    "wrong_budget_stats": {
        "name": "bs",
        "config": {"max_concurrent": 2, "budget": 10},
        "steps": [
            {"op": "acquire", "id": "a", "cost": 5, "expect": "granted"},
            {"op": "stats", "expect": {"budget": {"in_use": 4}}},
        ],
    },
    "refund_too_large": {
        "name": "rf",
        "config": {"max_concurrent": 2, "budget": 10},
        "steps": [
            {"op": "acquire", "id": "a", "cost": 5, "expect": "granted"},
            {"op": "refund", "id": "a", "n": 6},
        ],
    },
    "cost_above_ceiling_is_invalid": {
        "name": "c",
        "config": {"max_concurrent": 2, "budget": 10},
        "steps": [{"op": "acquire", "id": "a", "cost": 11, "expect": "budget_limit"}],
    },
    "wrong_refunded_total": {
        "name": "u",
        "config": {"max_concurrent": 2, "budget": 10},
        "steps": [
            {"op": "acquire", "id": "a", "cost": 5, "expect": "granted"},
            {"op": "release", "id": "a", "used": 2},
            {"op": "stats", "expect": {"budget": {"refunded_total": 2}}},
        ],
    },
    "rate_timer_fires": {
        "name": "rt",
        "config": {"max_concurrent": 8, "max_queue": 4},
        "classes": {"classes": [{}], "rates": {"requests": {"amount": 1, "per_ms": 100, "burst": 1}}},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "acquire", "id": "b", "expect": "queued"},
            {"op": "advance_clock", "ms": 100},
        ],
    },
    "wrong_retry_after": {
        "name": "ra",
        "config": {"max_concurrent": 8, "max_queue": 4},
        "classes": {"classes": [{}], "rates": {"requests": {"amount": 1, "per_ms": 100, "burst": 1}}},
        "steps": [
            {"op": "try_acquire", "id": "a", "expect": "granted"},
            {"op": "try_acquire", "id": "b", "expect": "rate_limit", "retry_after_ms": 99},
        ],
    },
    "wrong_usage_change": {
        "name": "uc",
        "config": {"max_concurrent": 2, "budget": 10},
        "steps": [
            {"op": "acquire", "id": "a", "cost": 5, "expect": "granted"},
            {"op": "report_usage", "id": "a", "used": 1, "remaining": 1, "expect": "grew"},
        ],
    },
    "wrong_dry_run": {
        "name": "dr",
        "config": {"max_concurrent": 1, "max_queue": 2},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "would_admit", "expect": "would_queue", "position": 2},
        ],
    },
    # a deadline (issue 17): the waiter leaves at its deadline, not at its queue timeout
    "deadline_not_the_queue_timeout": {
        "name": "dq",
        "config": {"max_concurrent": 1, "queue_timeout_ms": 60000},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "acquire", "id": "b", "deadline_ms": 100, "expect": "queued"},
            {"op": "advance_clock", "ms": 100},
        ],
    },
    "timer_not_due": {
        "name": "d",
        "config": {"max_concurrent": 1, "queue_timeout_ms": 100},
        "steps": [
            {"op": "acquire", "id": "a", "expect": "granted"},
            {"op": "acquire", "id": "b", "expect": "queued"},
            {"op": "advance_clock", "ms": 99, "settles": {"b": "timeout"}},
        ],
    },
}


@pytest.mark.parametrize("style", ["raise", "admission"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_runner_can_fail(case: str, style: str, vloop: VirtualClockLoop) -> None:
    """The runner is not vacuous: an unknown op, a wrong `settles`, a wrong expectation all
    fail it (without the shape check, too: the runner itself rejects an unknown op)."""
    vector = BROKEN[case]
    with pytest.raises(AssertionError):
        Runner(vector, vloop, style).run(vector)


@pytest.mark.parametrize("layout", ["no_folders", "empty_folders"])
def test_missing_vector_folders_fail_the_run(tmp_path: Path, layout: str) -> None:
    """Without vector files (issue 12 item 6) this runner fails: no test skips, and pytest
    never ends with exit code 5 (nothing collected). Runs a copy of this file whose repository
    root is `tmp_path`."""
    here = Path(__file__).resolve().parent
    copy = tmp_path / "bindings-python" / "tests"
    copy.mkdir(parents=True)
    for name in ("test_vectors.py", "_support.py", "conftest.py"):
        shutil.copy(here / name, copy / name)
    if layout == "empty_folders":
        (tmp_path / "tests" / "vectors" / "policies").mkdir(parents=True)
        (tmp_path / "tests" / "vectors" / "admission").mkdir(parents=True)
        (tmp_path / "tests" / "vectors" / "deadline").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
         "-k", "not missing_vector_folders", str(copy)],
        capture_output=True, text=True, cwd=copy, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "skipped" not in out, out
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    for name in ("test_every_vector_file_is_collected", "test_vector[", "test_policy_vector_files",
                 "test_policy_vector[policies/", "test_admission_vector_files",
                 "test_admission_vector[admission/", "test_deadline_vector_files",
                 "test_deadline_vector[deadline/"):
        assert any(f"::{name}" in line for line in failed), (name, out)
