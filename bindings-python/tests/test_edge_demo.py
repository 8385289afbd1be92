"""The edge phase of the demo (examples/edge_demo.py, issue 18), scaled down: 60 requests a
second for 1.5 s, the injected CPU signal hot from 0.5 s to 1 s, ``--report-only``.

Asserts only what the set-up makes deterministic, never a latency: both runs ran against a real
uvicorn server process and printed every row and check; every request was answered once (200
or 503, no transport error) and has its record; without hullguard nothing is refused; with it
only batch requests are shed (a critical request is never shed by the signal), every shed one
was sent while the script was hot (give or take the slack), the server's bulkhead counted exactly
those sheds, and no 503 carried a Retry-After. The demo's own latency check runs in
``make demo``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "edge_demo.py"


def test_scaled_down_edge_phase(tmp_path: Path) -> None:
    out = tmp_path / "edge.json"
    args = ["--seconds", "1.5", "--rate", "60", "--hot-from", "0.5", "--hot-until", "1.0",
            "--json", str(out), "--report-only"]
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "== edge: AdmissionMiddleware on uvicorn, an injected CPU signal" in text
    assert text.count("check: ") == 7, text

    result = json.loads(out.read_text())
    runs = result["runs"]
    assert list(runs) == ["without hullguard", "with hullguard"]
    sent = {"critical": 18, "batch": 72}  # 90 requests, every 5th critical
    for name, per_class in runs.items():
        for cls, n in sent.items():
            row = per_class[cls]
            assert row["requests"] == n and row["200"] + row["503"] == n, (name, cls, row)
            assert result["per_class"][f"{cls}, {name}"] == row
    assert all(runs["without hullguard"][c]["503"] == 0 for c in sent)
    with_ = runs["with hullguard"]
    assert with_["critical"]["503"] == 0 and with_["critical"]["200"] == 18
    assert with_["batch"]["503"] == with_["batch"]["503 shed"] >= 1
    assert result["stats"]["load"]["shed_total"] == with_["batch"]["503 shed"]
    assert result["stats"]["rejected_by_reason"]["shed"] == with_["batch"]["503 shed"]

    records = result["records"]
    assert len(records) == 2 * 90
    shed = [r for r in records if r[1] == "batch, with hullguard" and r[2] == 503]
    assert len(shed) == with_["batch"]["503 shed"]
    assert all(0.5 - 0.25 <= t < 1.0 + 0.25 for t, _, _, _ in shed), shed
    assert {r[2] for r in records} <= {200, 503}
    checks = dict((t, ok) for t, ok in result["checks"])
    assert checks["no Retry-After on any 503 (no honest estimate of when an overload ends)"]
    assert result["cpu"][1] == [0.5, 0.95] and result["threshold"] == 0.8
    for name, per_class in runs.items():  # the server served exactly the 200s
        assert all(per_class[c]["admitted work"] == per_class[c]["200"] for c in sent), name
