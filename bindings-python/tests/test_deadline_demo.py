"""The deadline phase of the demo (examples/deadline_demo.py, docs/design.md §13), scaled down:
a 0.25 s request budget, 8 requests, a burst of 20 and 0.5 s of steady load, ``--report-only``.

Asserts only what the set-up makes deterministic, never a latency: both experiments ran against
the upstream process and printed every row and check; every request was accounted for once;
with the budget no second call was ever *sent* after its request's deadline (a call whose
deadline has passed is refused before sending — structural), while without it the slow first
calls (1.2 budgets long) make some second calls start late; the FIFO run shed nothing and the
CoDel run's sheds are exactly what its bulkhead counted. The demo's own latency and goodput
checks run in ``make demo``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "deadline_demo.py"


def test_scaled_down_deadline_phase(tmp_path: Path) -> None:
    out = tmp_path / "deadline.json"
    args = ["--budget", "0.25", "--requests", "8", "--rate", "40", "--burst", "20",
            "--steady-seconds", "0.5", "--json", str(out), "--report-only"]
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    for section in ("== deadlines: a 0.25 s request budget", "== queue-delay shedding:"):
        assert section in text, section
    assert text.count("check: ") == 7, text

    result = json.loads(out.read_text())
    budget = result["budget"]
    for run in (budget["without"], budget["with"]):
        assert run["ok_in_time"] + run["late"] + run["failed"] == 8, run
        assert len(run["latency"]) == 8
    assert budget["with"]["b_sent_after_deadline"] == 0
    assert budget["without"]["b_sent_after_deadline"] >= 1  # requests 0 and 4: A is 1.2 budgets

    burst = result["burst"]
    steady = int(100 * 0.5)
    for run in (burst["fifo"], burst["codel"]):
        total = run["ok"] + run["timeout"] + run["shed"] + run["other"]
        assert total == 20 + steady, run
        assert run["other"] == 0, run
    assert burst["fifo"]["shed"] == 0
    assert burst["codel_stats_shed"] == burst["codel"]["shed"]
