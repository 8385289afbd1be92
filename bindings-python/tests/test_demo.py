"""The Python isolation demo (examples/isolation_demo.py, docs/design.md §13), scaled down.

Runs it as a subprocess (its upstreams live in a process of their own) with a shared budget of
N = 4 connections, 3 s of load, a degraded origin answering in 1-2 s and short adaptive steps,
with ``--report-only``: the demo prints every check but its exit code says only whether it ran.
This test asserts what the demo does *deterministically* — it runs, prints every section, and
isolates the healthy origin by count (structural properties of the set-up, not of timing).
Latency figures and the adaptive limit's band are the demo's own checks, in ``make demo``; the
adaptive scenario is asserted on virtual time in ``tests/tests/adaptive_capacity.rs``. The LLM-gateway
phase is skipped here (``--no-llm``): ``test_llm_demo.py`` runs it on its own, scaled down, as
``test_deadline_demo.py`` runs the deadline phase (``--no-deadline``) and ``test_edge_demo.py``
the edge phase (``--no-edge``) and ``test_host_demo.py`` the host phase (``--no-host``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "isolation_demo.py"
REPORT_CHECK = Path(__file__).resolve().parents[2] / "ci" / "report_check.py"


def test_scaled_down_demo_isolates_the_healthy_origin(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    report = tmp_path / "report.html"
    args = ["--budget", "4", "--seconds", "3", "--degraded-min", "1.0", "--json", str(out),
            "--phase-seconds", "1.5", "--no-llm", "--no-deadline", "--no-edge", "--no-host",
            "--report-only",
            "--report", str(report)]
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out_text = proc.stdout
    # Every section printed, and every check (PASS or FAIL: timing is make demo's business).
    for section in ("== side by side ==", "== bulkhead stats", "== phase 2: circuit breaker",
                    "== phase 3: adaptive limit (gradient2)", "== phase 3: adaptive limit (aimd)"):
        assert section in out_text, section
    assert out_text.count("check: gradient2, C = ") == 3
    assert out_text.count("check: aimd, C = ") == 3
    assert "check: healthy p99" in out_text
    # The run's HTML report (docs/design.md §13): its structure (the render is make
    # report-test's and make demo's), one section per phase that ran.
    check = subprocess.run(
        [sys.executable, str(REPORT_CHECK), str(report), "--no-render",
         "--expect-section", "Isolation", "--expect-section", "Circuit breaker",
         "--expect-section", "Adaptive limit"],
        capture_output=True, text=True, timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    result = json.loads(out.read_text())
    without, with_ = result["without"], result["with"]
    assert set(result["checks"]) == {"p99", "isolated", "policies"}

    # Isolation by count. Without bulkheads the degraded origin (a request every 20 ms, each
    # holding a connection 1-2 s) fills the shared 4-connection pool, so healthy requests wait
    # behind it; with them the per-origin slices add up to the budget, so a healthy request
    # never even finds the pool full.
    assert without["healthy_waited_behind_degraded"] > 0
    assert with_["healthy_waited_behind_degraded"] == 0
    assert with_["healthy_waited"] == 0
    assert result["checks"]["isolated"] is True

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
