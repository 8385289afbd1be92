"""The type stubs (python/hullguard/_native.pyi) as a type checker reads user code.

Issue 13 bug 4: `__exit__` / `__aexit__` typed as returning `bool` told mypy that a `with`
block may swallow its exception, so a function returning from inside one was reported
"Missing return statement". They return `None` (they never swallow).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SNIPPET = '''
import hullguard

bh = hullguard.Bulkhead(max_concurrent=2)


def sync_with() -> int:
    with bh.acquire_sync():
        return 1


async def async_with_acquire() -> int:
    async with bh.acquire() as permit:
        reveal_type(permit)
        return 1


async def async_with_bulkhead() -> int:
    async with bh:
        return 1


def try_acquire() -> int:
    permit = bh.try_acquire()
    assert permit is not None
    with permit:
        return 1
'''


def test_mypy_sees_that_with_blocks_never_swallow(tmp_path: Path) -> None:
    src = tmp_path / "user_code.py"
    src.write_text(textwrap.dedent(SNIPPET))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy_cache"), str(src)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "Missing return statement" not in out, out
    assert 'Revealed type is "hullguard._native.Permit"' in out, out
    # reveal_type is reported as a note; nothing else may be.
    assert proc.returncode == 0, out
    assert out.count("error:") == 0, out


GATEWAY = '''
import hullguard

bh = hullguard.Bulkhead(max_concurrent=8, budget=1000, events=True,
                        classes=[{"name": "interactive", "priority": 10}, {"name": "batch"}])


async def non_throwing() -> int:
    if (a := await bh.admit(cost=500, admission_class="batch")).ok:
        async with a.permit:
            reveal_type(a.permit)
            return 1
    reveal_type(a.reason)
    return len(a.reason) + len(a.detail)


def sync_style() -> None:
    r = bh.try_admit(cost=1)
    if not r.ok:
        raise r.error
    p = r.permit
    rep = p.report_usage(10, remaining=5)
    change: str = rep.change
    p.release(usage=12)
    w = bh.would_admit(cost=3, observe="budget")
    d: str = w.decision
    bh.apply_limits(2, limit=4, budget=500, rates={"requests": {"amount": 10, "per": 1.0, "burst": 5}})
    bh.on("admit", lambda e: None)
    try:
        bh.acquire_sync(cost=1)
    except hullguard.BulkheadFullError as e:
        bound: str = e.detail["bound"]
    del change, d
'''

MUST_FAIL = [
    "bh.acquire_sync(costs=1)",
    "bh.try_admit(admission_class=1.5)",
    "bh.on('admitted', print)",
    "bh.set_observe('loud')",
    "bh.apply_limits(1, limits=2)",
    "bh.acquire_sync(observe='shadow')",
]


def _mypy(tmp_path: Path, code: str) -> "subprocess.CompletedProcess[str]":
    src = tmp_path / "user_code.py"
    src.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy_cache"), str(src)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )


def test_mypy_reads_the_gateway_api(tmp_path: Path) -> None:
    """The non-throwing style narrows on ``.ok`` (``Admitted`` / ``Refused``); the gateway
    arguments and results type-check; each wrong option name or value is an error."""
    proc = _mypy(tmp_path, GATEWAY)
    out = proc.stdout + proc.stderr
    assert 'Revealed type is "hullguard._native.Permit"' in out, out
    assert 'Revealed type is "str"' in out or 'Revealed type is "builtins.str"' in out, out
    assert proc.returncode == 0 and out.count("error:") == 0, out
    bad = "import hullguard\nbh = hullguard.Bulkhead(budget=10)\n" + "\n".join(MUST_FAIL) + "\n"
    proc = _mypy(tmp_path, bad)
    out = proc.stdout + proc.stderr
    for line in range(3, 3 + len(MUST_FAIL)):
        assert f"user_code.py:{line}: error" in out, (MUST_FAIL[line - 3], out)


DEADLINES = '''
import math
import time
from typing import Optional

import hullguard
from hullguard.httpx import BulkheadTransport

bh = hullguard.Bulkhead(max_concurrent=2, min_service_time=0.1, queue_delay_target=0.01,
                        queue_delay_interval=0.1, adaptive_lifo=True)
reg = hullguard.Registry(min_service_time=0.1)
transport = BulkheadTransport(registry=reg, deadline_header="grpc-timeout")


async def budget() -> float:
    async with hullguard.deadline(1.5) as at:
        reveal_type(at)
        async with bh.acquire(deadline=time.monotonic() + 1):
            pass
        await reg.acquire("k", deadline=math.inf)
    with hullguard.deadline_at(None):
        bh.try_acquire(deadline=None)
    scope: hullguard.DeadlineScope = hullguard.deadline(2)
    with scope:
        bh.acquire_sync(deadline=10)
    left: Optional[float] = hullguard.remaining()
    d: Optional[float] = hullguard.current_deadline()
    bh.apply_limits(1, queue_delay={"target": 0.01, "interval": 0.1, "lifo": True})
    return (left or 0.0) + (d or 0.0)
'''

DEADLINE_MUST_FAIL = [
    'bh.acquire_sync(deadline="soon")',
    'hullguard.deadline("1s")',
    'bh.try_acquire(deadlines=1.0)',
    'hullguard.Bulkhead(adaptive_lifo=1.0)',
]


def test_mypy_reads_the_deadline_api(tmp_path: Path) -> None:
    """``deadline=`` on the acquires, the ambient budget's functions and scope, the queue-delay
    options and ``apply_limits(queue_delay=...)`` type-check; wrong spellings are errors."""
    proc = _mypy(tmp_path, DEADLINES)
    out = proc.stdout + proc.stderr
    assert any(f'Revealed type is "{t}"' in out for t in (
        "Union[builtins.float, None]", "builtins.float | None", "float | None")), out
    assert proc.returncode == 0 and out.count("error:") == 0, out
    bad = "import hullguard\nbh = hullguard.Bulkhead()\n" + "\n".join(DEADLINE_MUST_FAIL) + "\n"
    proc = _mypy(tmp_path, bad)
    out = proc.stdout + proc.stderr
    for line in range(3, 3 + len(DEADLINE_MUST_FAIL)):
        assert f"user_code.py:{line}: error" in out, (DEADLINE_MUST_FAIL[line - 3], out)


FLEET = '''
import redis
import redis.asyncio

import hullguard

r = redis.Redis()
fleet = hullguard.FleetBulkhead(r, "llm", max_concurrent=50, lease_ttl=10.0, local_share=2)


def sync_use() -> int:
    with fleet.acquire_sync(timeout=2.0):
        p = fleet.try_acquire()
        reveal_type(p)
        held: int = fleet.stats()["lease"]["held"]
        b: hullguard.Bulkhead = fleet.bulkhead
        del b
        fleet.close(timeout=1.0)
        return held


def budget_classes_events() -> None:
    f = hullguard.FleetBulkhead(r, "tokens", budget=100_000, events=True,
                                classes=[{"name": "hi", "priority": 1}, {"name": "lo"}])
    f.on("admit", print)
    with f.acquire_sync(cost=500, admission_class="hi"):
        pass
    f.apply_limits(2, budget=50_000)
    units: int = f.stats()["budget_lease"]["fleet_limit"]
    del units
    f.close()


async def async_use() -> None:
    async with hullguard.FleetBulkhead(redis.asyncio.Redis(), "llm", beat=1.0) as f:
        async with f.acquire() as permit:
            reveal_type(permit)
        await f.aclose()
'''

FLEET_MUST_FAIL = [
    'hullguard.FleetBulkhead(r, "x", lease_tll=1.0)',
    'hullguard.FleetBulkhead(r, "x", rates={})',
    'hullguard.FleetBulkhead(r, 5)',
    'hullguard.FleetBulkhead(r, "x", lease_ttl="1s")',
    'hullguard.FleetBulkhead(r, "x").try_acquire(observe="all")',
]


def test_mypy_reads_the_fleet_api(tmp_path: Path) -> None:
    """``FleetBulkhead``'s options and admission methods type-check (the local bulkhead's
    ``Permit``); a misspelled or local-only option, a wrong type and a request's observe mode
    are errors."""
    proc = _mypy(tmp_path, FLEET)
    out = proc.stdout + proc.stderr
    assert out.count('Revealed type is "Union[hullguard._native.Permit, None]"') + out.count(
        'Revealed type is "hullguard._native.Permit | None"') == 1, out
    assert 'Revealed type is "hullguard._native.Permit"' in out, out
    assert proc.returncode == 0 and out.count("error:") == 0, out
    bad = "import redis\nimport hullguard\nr = redis.Redis()\n" + "\n".join(FLEET_MUST_FAIL) + "\n"
    proc = _mypy(tmp_path, bad)
    out = proc.stdout + proc.stderr
    for line in range(4, 4 + len(FLEET_MUST_FAIL)):
        assert f"user_code.py:{line}: error" in out, (FLEET_MUST_FAIL[line - 4], out)
