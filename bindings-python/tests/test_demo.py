"""The Python isolation demo (examples/isolation_demo.py, DESIGN.md §9), scaled down.

Runs it as a subprocess (its upstreams live in a process of their own) with a shared budget of
N = 4 connections, 3 s of load and a degraded origin answering in 1-2 s, and checks the
properties the demo exists to show. Relative figures only: no absolute latency bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "isolation_demo.py"


def test_scaled_down_demo_isolates_the_healthy_origin(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    args = ["--budget", "4", "--seconds", "3", "--degraded-min", "1.0", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== side by side ==" in proc.stdout
    assert "== bulkhead stats" in proc.stdout
    result = json.loads(out.read_text())
    without, with_ = result["without"], result["with"]

    # Without bulkheads the degraded origin holds the shared pool and healthy requests queue
    # behind it; with them, never.
    assert without["healthy_waited_behind_degraded"] > 0
    assert with_["healthy_waited_behind_degraded"] == 0
    assert with_["healthy_waited"] == 0
    # The healthy tail: at most a fifth with hullguard.
    assert with_["healthy_pct"][2] * 5 <= without["healthy_pct"][2]
    assert with_["healthy_ok"] > without["healthy_ok"]
    assert result["checks"] == {"p99": True, "isolated": True, "policies": True}
    # The policy phases printed their timelines and passed their own checks.
    assert "== phase 2: circuit breaker" in proc.stdout
    assert "== phase 3: adaptive limit" in proc.stdout
    assert "FAIL" not in proc.stdout

    # Every request of the schedule settled, and the degraded origin was turned away by its own
    # bulkhead (not by the shared pool) with hullguard.
    assert without["healthy_total"] == with_["healthy_total"] == 300
    assert without["degraded_total"] == with_["degraded_total"] == 150
    assert not any(k.startswith("pool_timeout") for k in with_["degraded_outcomes"])
    assert any(k.startswith("rejected by bulkhead") for k in with_["degraded_outcomes"])

    # The bulkheads: one per origin key, quiescent, no leak, the override applied.
    stats = result["stats"]
    assert len(stats) == 2
    by_limit = sorted(stats.values(), key=lambda s: s["max_concurrent"])
    assert [s["max_concurrent"] for s in by_limit] == [1, 3]
    for s in stats.values():
        assert (s["active"], s["queued"], s["leaked_total"], s["released_twice_total"]) == (
            0,
            0,
            0,
            0,
        )
