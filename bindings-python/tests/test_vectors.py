"""The Python runner of the scenario vectors: ``tests/vectors/*.json`` and the
policy vectors ``tests/vectors/policies/*.json`` at the repository root, the same decisions as
the Rust runner (``tests/tests/vectors.rs``, mirrored here step for step).

Policy vectors add ``resilience`` to the config (durations as integer ``…_ms``, converted to
the binding's seconds), ``release`` / ``record_outcome`` with an ``outcome``, ``expect_state``
(``bh.circuit_state``), ``expect_events`` (the ``on_state_change`` calls since the previous
check: ``[old, new]``, or ``[key, old, new]`` in a registry) and the ``circuit`` / ``adaptive``
stats.

Each vector runs on a :class:`VirtualClockLoop`; the bulkhead / registry gets the loop's
virtual clock through the binding's ``_clock`` hook, so the binding's queue timers
(``loop.call_later``) and the core's ``*_ns`` stats share one virtual time. Acquires are
driven as asyncio tasks. After every step the loop runs to quiescence and exactly the acquires
that settled during the step are compared with ``settles``.
"""

from __future__ import annotations

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


def _files(folder: Path) -> List[Path]:
    return sorted(p for p in folder.glob("*.json") if p.name != "schema.json")


# A folder missing or empty is a failure, never a skip (nor an empty run): each test below then
# runs once on a placeholder that is no file and fails saying so.
FILES = _files(VECTORS)
POLICY_FILES = _files(POLICY_VECTORS)


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


class Runner:
    def __init__(self, vector: Dict[str, Any], loop: VirtualClockLoop) -> None:
        self.name = vector["name"]
        self.loop = loop
        self.reg: Optional[hullguard.Registry] = None
        self.bh: Optional[hullguard.Bulkhead] = None
        # on_state_change calls since the last expect_events: [old, new] / [key, old, new]
        self.events: List[List[str]] = []
        if "registry" in vector:
            r = vector["registry"]
            self.reg = hullguard.Registry(
                **_config(r.get("defaults") or {}),
                overrides={k: _config(v) for k, v in r.get("overrides", {}).items()},
                max_keys=r.get("max_keys"),
                on_state_change=lambda key, old, new: self.events.append([key, old, new]),
                _clock=loop.clock,
            )
        else:
            self.bh = hullguard.Bulkhead(
                **_config(vector.get("config") or {}),
                on_state_change=lambda key, old, new: self.events.append([old, new]),
                _clock=loop.clock,
            )
        # id -> ("queued", task) | ("held", permit) | ("released", permit) | ("rejected", None)
        self.acquires: Dict[str, Tuple[str, Any]] = {}
        # the runner's own records, never read back from the binding: the key each acquire
        # named and the permits it holds (its weight, less what release_partial returned)
        self.key_of: Dict[str, Optional[str]] = {}
        self.weight_of: Dict[str, int] = {}

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

    def acquire(self, step: Dict[str, Any], queue: bool) -> str:
        aid, key = step["id"], step.get("key")
        self.key_of[aid], self.weight_of[aid] = key, step.get("weight", 1)
        kwargs: Dict[str, Any] = {}
        if "weight" in step:
            kwargs["weight"] = step["weight"]
        if not queue:
            try:
                if self.reg is not None:
                    assert key is not None
                    p = self.reg.try_acquire(key, **kwargs)
                else:
                    p = self.bulkhead(key).try_acquire(**kwargs)
            except (ValueError, TypeError):
                self.acquires[aid] = ("rejected", None)
                return "invalid"
            except hullguard.BulkheadError as e:
                self.acquires[aid] = ("rejected", None)
                return e.reason
            if p is None:
                self.acquires[aid] = ("rejected", None)
                return "concurrency_limit"
            self.acquires[aid] = ("held", p)
            return "granted"
        if "timeout_ms" in step:
            kwargs["timeout"] = _seconds(step["timeout_ms"])
        try:
            if self.reg is not None:
                assert key is not None
                ctx = self.reg.acquire(key, **kwargs)
            else:
                ctx = self.bulkhead(key).acquire(**kwargs)
        except (ValueError, TypeError):
            self.acquires[aid] = ("rejected", None)
            return "invalid"
        task = self.loop.create_task(_await([ctx]))
        del ctx
        self.loop.run_until_quiet()
        if not task.done():
            self.acquires[aid] = ("queued", task)
            return "queued"
        got = outcome_of(task)
        self.acquires[aid] = ("held", task.result()) if got == "granted" else ("rejected", None)
        return got

    def collect_settled(self, settled: Dict[str, str]) -> None:
        for aid, (state, obj) in list(self.acquires.items()):
            if state == "queued" and obj.done():
                got = outcome_of(obj)
                settled[aid] = got
                # drop the task: a finished task keeps its traceback and frames alive
                self.acquires[aid] = ("held", obj.result()) if got == "granted" else ("rejected", None)

    def all_stats(self) -> Dict[Optional[str], Dict[str, Any]]:
        if self.reg is not None:
            return dict(self.reg.stats())
        assert self.bh is not None
        return {None: self.bh.stats()}

    def check_invariants(self, ctx: str) -> None:
        """After every step, for every bulkhead: ``active`` is what the runner holds of it (its
        own records), ``queued`` its pending acquires, no grant is left unclaimed, and I2 holds
        with the runner's count: ``available + held == limit``."""
        held: Dict[Optional[str], int] = {}
        queued: Dict[Optional[str], int] = {}
        for aid, (state, _) in self.acquires.items():
            key = self.key_of[aid]
            if state == "held":
                held[key] = held.get(key, 0) + self.weight_of[aid]
            elif state == "queued":
                queued[key] = queued.get(key, 0) + 1
        for key, s in self.all_stats().items():
            h, q = held.pop(key, 0), queued.pop(key, 0)
            assert s["active"] == h, f"{ctx}: active of {key!r} vs the {h} permits the runner holds: {s}"
            assert s["queued"] == q, f"{ctx}: queued of {key!r} vs the runner's {q} pending: {s}"
            assert s["granted_unclaimed"] == 0, f"{ctx}: the runner claims every grant {s}"
            assert s["available"] + h == s["limit"], f"{ctx}: I2 with the runner's count ({h} held): {s}"
        left = {k: v for k, v in held.items() if v} | queued
        assert not left, f"{ctx}: permits or waiters in bulkheads missing from the stats: {left}"

    # -- one step --------------------------------------------------------------------------
    def step(self, i: int, step: Dict[str, Any]) -> None:
        ctx = f"{self.name} step {i} {json.dumps(step)}"
        op = step.get("op")
        key = step.get("key")
        settled: Dict[str, str] = {}
        if op in ("acquire", "try_acquire"):
            got = self.acquire(step, op == "acquire")
            assert got == step["expect"], ctx
        elif op in ("release", "record_outcome"):
            aid = step["id"]
            state, p = self.acquires.get(aid, ("missing", None))
            assert state in ("held", "released"), f"{ctx}: {aid} holds no permit ({state})"
            released = p.release(outcome=step["outcome"]) if "outcome" in step else p.release()
            assert released is (state == "held"), ctx
            self.acquires[aid] = ("released", p)
            assert released is step.get("expect", True), ctx
        elif op == "release_partial":
            aid = step["id"]
            state, p = self.acquires.get(aid, ("missing", None))
            assert state == "held", f"{ctx}: {aid} holds no permit ({state})"
            try:
                p.release_partial(step["n"])
                self.weight_of[aid] -= step["n"]
                got = "ok"
            except (ValueError, TypeError):
                got = "invalid"
            assert got == step.get("expect", "ok"), ctx
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
        assert settled == step.get("settles", {}), f"{ctx}: settles (at {self.loop.now_ns // 1_000_000} ms)"
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
    extra = set(vector) - {"name", "description", "config", "registry", "steps"}
    assert not extra, f"{where}: unknown fields {extra}"
    assert not ("config" in vector and "registry" in vector), where
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


@pytest.mark.parametrize("case", list(BROKEN))
def test_runner_can_fail(case: str, vloop: VirtualClockLoop) -> None:
    """The runner is not vacuous: an unknown op, a wrong `settles`, a wrong expectation all
    fail it (without the shape check, too: the runner itself rejects an unknown op)."""
    vector = BROKEN[case]
    with pytest.raises(AssertionError):
        Runner(vector, vloop).run(vector)


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
                 "test_policy_vector[policies/"):
        assert any(f"::{name}" in line for line in failed), (name, out)
