"""The host phase of the demo (examples/host_demo.py, ``make demo-host``; docs/design.md §14),
scaled down: 4 real worker processes against one host-wide limit, one SIGKILLed mid-run.

Asserts only what holds however busy the machine is: the demo runs and reaps its processes;
with the host-wide bulkhead the origin (which counts its own in-flight requests) never sees
more than the limit; the killed worker's slot is reclaimed and the origin gets back to the limit
within 10x the target. How far per-process bulkheads overshoot is the demo's own check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "host_demo.py"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="HostBulkhead is Linux-only")


def test_host_demo_holds_one_limit_and_reclaims_a_killed_worker(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--seconds", "2", "--kill-at", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert out.exists(), proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    limit = 4
    assert "in flight at the origin" in proc.stdout
    assert proc.stdout.count("check: ") == 4
    assert result["host"]["max_in_flight"] <= limit, proc.stdout
    assert result["local"]["max_in_flight"] >= 1, proc.stdout
    assert result["reclaimed_dead_total"] >= 1, proc.stdout
    recovered = result["host"]["recovered_after_s"]
    if result["host"]["dipped"]:
        assert recovered is not None and recovered <= 5.0, proc.stdout
