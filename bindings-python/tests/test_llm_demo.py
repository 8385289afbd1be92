"""The LLM-gateway phase of the demo (examples/llm_gateway_demo.py, docs/design.md §13), scaled
down: 1 s of load per run, a fast provider stream and short queue timeouts, ``--report-only``.

Asserts only what the set-up makes deterministic: the phase ran its four runs against the fake
provider (its own process) and printed every row and check; every request of the schedule was
accounted for once; the bulkheads ended quiescent with the budget's settlement identity exact;
the refunding run refunded and the other did not; and the two runs with a token budget saw no
provider 429 — structural, not timing: the budget equals the provider's ceiling and a call
never holds less than the provider counts for it (the module docs of the demo give the
argument). Latencies and throughput are the demo's own checks, in ``make demo``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "llm_gateway_demo.py"
MODES = ("none", "count", "tokens", "tokens_no_refund")


def test_scaled_down_llm_gateway_phase(tmp_path: Path) -> None:
    out = tmp_path / "llm.json"
    args = ["--seconds", "0.5", "--tokens-per-second", "4000", "--chunk-ms", "20",
            "--batch-timeout", "0.5", "--interactive-timeout", "0.5", "--json", str(out),
            "--report-only"]
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = proc.stdout
    assert "lacks the gateway admission API" not in text, text
    for section in ("== phase 4: LLM gateway", "== LLM gateway: no bulkhead ==",
                    "== LLM gateway: count-only bulkhead ==",
                    "== LLM gateway: calls+tokens, refunds ==",
                    "== LLM gateway: calls+tokens, no refund ==",
                    "== LLM gateway: side by side =="):
        assert section in text, section
    for label in ("success rate", "p50 latency", "p99 latency", "429s from the provider",
                  "tokens/s delivered (output)"):
        assert text.count(label) >= 2, label  # once per class
    for label in ("billed by the provider", "provider ceiling use", "client budget utilisation",
                  "budget refunded / consumed", "run time"):
        assert label in text, label
    assert text.count("check: ") == 4
    for check in ("interactive p99", "zero 429s from the provider", "batch still progresses",
                  "refunds raise tokens/s"):
        assert check in text, check

    result = json.loads(out.read_text())
    assert set(result["checks"]) == {"interactive_p99", "zero_429", "batch_progresses",
                                     "refunds_raise_throughput"}
    for mode in MODES:
        run = result[mode]
        # The schedule: one interactive call every 50 ms and one batch call every 25 ms.
        assert run["requests"] == {"interactive": 10, "batch": 20}  # 0.5 s at 50 / 25 ms
        for cls, sent in run["requests"].items():
            settled = (run["ok"][cls] + run["provider_429"][cls]
                       + sum(run["refused"][cls].values()))
            assert settled + sum(run["errors"].values()) >= sent
            assert settled <= sent
        # The first call of each class finds an empty provider and bulkhead.
        assert run["ok"]["interactive"] >= 1 and run["ok"]["batch"] >= 1
        stats = run["stats"]
        if stats is None:
            assert mode == "none"
            continue
        assert (stats["active"], stats["queued"], stats["leaked_total"],
                stats["released_twice_total"]) == (0, 0, 0, 0), mode
    for mode in ("tokens", "tokens_no_refund"):
        run = result[mode]
        assert run["provider_total"]["refused_429"] == 0, mode
        assert run["provider_429"] == {"interactive": 0, "batch": 0}, mode
        assert run["provider_total"]["occupancy_peak"] <= run["provider_total"]["ceiling"]
        b = run["stats"]["budget"]
        assert (b["in_use"], b["granted_unclaimed"], b["overrun_total"], b["overrun_held"]) == (
            0, 0, 0, 0), mode
        assert b["reserved_total"] == b["consumed_total"] + b["refunded_total"], mode
    # Refunds: each completed call of the refunding run gave back its estimate's slack at
    # message_start and the unused rest of max_tokens at the end; the other run gave none.
    assert result["tokens"]["stats"]["budget"]["refunded_total"] > 0
    assert result["tokens_no_refund"]["stats"]["budget"]["refunded_total"] == 0
    # Consumption is what the provider billed, call by call (used = input + output tokens).
    billed = result["tokens"]["provider_total"]
    assert result["tokens"]["stats"]["budget"]["consumed_total"] == (
        billed["billed_input"] + billed["billed_output"])
