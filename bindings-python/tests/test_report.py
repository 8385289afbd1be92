"""The demo's HTML report (examples/report.py, docs/design.md §13) and its structure check
(ci/report_check.py), in pure Python: no browser, no network, no clock.

``make report-test`` renders reports in headless Chromium; these tests pin what a report is
made of: one self-contained file (no script, nothing fetched), one ``<svg>`` per chart with its
title, non-empty series, escaped text, "nice" axes, step charts that hold their value, the
demo's sections from a recording — and that the checker catches what it exists to catch.
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


report = _load("hg_examples_report", ROOT / "examples" / "report.py")
check = _load("hg_ci_report_check", ROOT / "ci" / "report_check.py")

SECTIONS = ["Isolation", "Circuit breaker", "Adaptive limit", "LLM gateway", "Deadlines", "Edge",
            "Run parameters"]


def test_the_sample_report_is_well_formed() -> None:
    text = report.demo_report(report.sample_recording()).render()
    s = check.check_structure(text, SECTIONS, strict_series=True)
    assert s.problems == []
    assert s.title == s.h1 == "hullguard demo report"
    assert len(s.charts) >= 20 and s.svgs == len(s.charts)
    assert {c.kind for c in s.charts} == {"line", "step", "bar", "scatter"}
    for c in s.charts:
        assert c.svgs == 1 and c.title and c.title == c.svg_title
        assert c.series and all(n > 0 for _, n in c.series)
    # Every chart of the demo's phases is there, by title.
    titles = [c.title for c in s.charts]
    for want in ("Healthy origin: latency over time, without and with hullguard",
                 "Degraded origin: outcomes", "Breaker state over time",
                 "gradient2: the limit follows the upstream's capacity C",
                 "aimd: the limit follows the upstream's capacity C",
                 "interactive: outcomes per run", "batch: outcomes per run",
                 "Request latency by send time", "Burst: outcomes", "HTTP statuses per class"):
        assert want in titles, want
    assert s.tables >= 5


def test_the_report_is_self_contained() -> None:
    text = report.demo_report(report.sample_recording()).render()
    assert "<script" not in text.lower()
    assert not re.search(r"<(link|img|iframe|object|embed|base)\b", text, re.I)
    assert not re.search(r"url\s*\(|@import|@font-face", text, re.I)
    # The only URL is the SVG namespace (an identifier, never fetched); links are fragments.
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', text))
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")


def test_rendering_is_deterministic_and_write_is_complete(tmp_path: Path) -> None:
    a = report.demo_report(report.sample_recording()).render()
    b = report.demo_report(report.sample_recording()).render()
    assert a == b
    out = tmp_path / "sub" / "r.html"
    assert report.demo_report(report.sample_recording()).write(str(out)) == str(out)
    assert out.read_text(encoding="utf-8") == a
    assert [p.name for p in out.parent.iterdir()] == ["r.html"]  # no temporary file left


def test_all_text_is_escaped() -> None:
    evil = "<script>alert('x')</script> & \"q\""
    r = report.Report(evil, subtitle=evil)
    r.section(evil, f"para `{evil}`")
    r.line_chart(evil, {evil: [(0, 1), (1, 2)]}, evil, evil, note=evil,
                 bands=[(0.2, 0.4, evil)], hlines=[(1.5, evil)])
    r.bar_chart(evil, [evil, "b"], {evil: [1, 2]}, evil)
    r.table([evil], [[evil]], caption=evil)
    text = r.render()
    assert "<script" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;q&quot;" in text
    s = check.check_structure(text, strict_series=True)
    assert s.problems == []
    assert s.title == s.h1 == evil and s.sections == [evil]
    assert [c.title for c in s.charts] == [evil, evil]


def test_series_carry_their_point_counts() -> None:
    r = report.Report("t")
    r.line_chart("lines", {"a": [(0, 1), (1, None), (2, float("nan")), (3, 4)],
                           "b": [(0, 2.5)]}, "x (s)", "y (ms)")
    r.bar_chart("bars", ["p", "q", "r"], {"c": [1, None, 0]}, "n")
    s = check.check_structure(r.render())
    assert [c.series for c in s.charts] == [[("a", 2), ("b", 1)], [("c", 2)]]


def test_step_chart_holds_each_value_until_the_next_and_to_the_axis_end() -> None:
    r = report.Report("t")
    r.step_chart("state", {"s": [(0.0, 0), (2.0, 2), (3.0, 0)]}, "time (s)", "state",
                 y_categories=["closed", "half_open", "open"], x_range=(0.0, 8.0))
    text = r.render()
    d = re.search(r'data-series="s"[^>]*><path d="([^"]*)"', text)
    assert d is not None
    cmds = re.findall(r"[MHVL]", d.group(1))
    assert cmds == ["M", "H", "V", "H", "V", "H"]  # no diagonal segment, extended to x = 8
    for label in ("closed", "half_open", "open"):
        assert f">{label}</text>" in text


def test_nice_ticks() -> None:
    for lo, hi in ((0, 1), (0, 7.3), (3, 4079), (-5, 5), (0.001, 0.0042), (12, 12), (0, 40000)):
        a, b, step, ticks = report.nice_ticks(lo, hi)
        assert a <= min(lo, hi) and b >= max(lo, hi)
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(abs(mantissa - m) < 1e-9 for m in (1, 2, 2.5, 5)), (lo, hi, step)
        assert 2 <= len(ticks) <= 12
        assert all(abs((t2 - t1) - step) < step * 1e-6 for t1, t2 in zip(ticks, ticks[1:]))
    a, b, major, minor = report.log_ticks(6.6, 4473)
    assert (a, b) == (1, 10000)
    assert [1, 10, 100, 1000, 10000] == [t for t in major if math.log10(t).is_integer()]


def test_log_axis_labels_and_kilo_labels() -> None:
    r = report.Report("t")
    r.line_chart("log", {"a": [(0, 6.6), (1, 4473)]}, "x", "ms", y_log=True)
    r.line_chart("lin", {"a": [(0, 0), (1, 40000)]}, "x", "tokens")
    text = r.render()
    labels = re.findall(r'class="tk"[^>]*text-anchor="end">([^<]*)<', text)
    assert {"1", "10", "100", "1000", "10k"} <= set(labels)
    assert {"0", "10k", "20k", "30k", "40k"} <= set(labels)


def test_windowed_percentiles_leave_gaps() -> None:
    pts = [(0.05, 1.0), (0.06, 3.0), (0.25, 7.0)]
    got = report.windowed(pts, 0.1, 99.0, end=0.4)
    assert [y for _, y in got] == [3.0, None, 7.0, None]  # p99 of each 0.1 s window
    assert [x for x, _ in got] == pytest.approx([0.05, 0.15, 0.25, 0.35])  # window middles


def test_malformed_charts_are_refused() -> None:
    r = report.Report("t")
    with pytest.raises(ValueError, match="2 values for 3 categories"):
        r.bar_chart("b", ["a", "b", "c"], {"s": [1, 2]}, "n")
    with pytest.raises(ValueError, match="colour"):
        r.line_chart("l", {"s": [(0, 1)]}, "x", "y", colors={"s": "red\" onload=\"x"})
    with pytest.raises(ValueError, match=r"\(x, y\) pairs"):
        r.line_chart("l", {"s": [(0, 1, 2)]}, "x", "y")


def test_a_partial_recording_has_only_its_sections() -> None:
    rec: Dict[str, Any] = report.sample_recording()
    partial = {k: rec[k] for k in ("isolation", "params")}
    s = check.check_structure(report.demo_report(partial).render(), strict_series=True)
    assert s.problems == []
    assert s.sections == ["1. Isolation: a shared connection budget", "Run parameters and checks"]


def test_the_edge_hook_draws_per_class_numbers_and_records() -> None:
    r = report.Report("t")
    report.edge_section(r, {
        "per_class": {"critical": {"p99 (ms)": 9.5, "503s": 0},
                      "bulk": {"p99 (ms)": 4.0, "503s": 3}},
        "records": [(0.0, "critical", 200, 0.01), (0.1, "bulk", 503, 0.001),
                    (0.2, "bulk", 200, 0.004)],
    })
    s = check.check_structure(r.render())
    assert s.problems == []
    assert [c.title for c in s.charts] == ["p99 latency over time, per class",
                                           "HTTP statuses per class"]
    assert s.tables == 1


BAD: List[str] = [
    '<script src="https://cdn.example/x.js"></script>',
    "<script>1</script>",
    '<img src="http://example/x.png">',
    '<link rel="stylesheet" href="https://fonts.example/css">',
    '<div style="background: url(http://example/x.png)"></div>',
    "<style>@import 'https://example/x.css';</style>",
    '<a href="https://example/">x</a>',
    '<svg><rect onload="x()"/></svg>',
    '<svg><title>stray</title></svg>',
]


@pytest.mark.parametrize("bad", BAD)
def test_the_checker_catches_what_would_run_or_fetch(bad: str) -> None:
    good = report.demo_report({"isolation": report.sample_recording()["isolation"]}).render()
    assert check.check_structure(good).problems == []
    text = good.replace("</main>", bad + "</main>")
    assert check.check_structure(text).problems != []


def test_the_checker_catches_broken_charts() -> None:
    r = report.Report("t")
    r.line_chart("empty", {"a": [(0, None)]}, "x", "y")
    s = check.check_structure(r.render())
    assert any("no series with data" in p for p in s.problems)
    two = report.Report("t")
    two.bar_chart("b", ["a"], {"s": [1]}, "n")
    text = two.render().replace("</svg></figure>", "</svg><svg><title>b</title></svg></figure>")
    assert any("2 <svg> elements" in p for p in check.check_structure(text).problems)
    s = check.check_structure(two.render(), expect_sections=["Deadlines"])
    assert any("Deadlines" in p for p in s.problems)


def test_the_demo_takes_report_options() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import isolation_demo as d; "
        "print(d.parse_args([]).report); print(d.parse_args(['--no-report']).report); "
        "print(d.parse_args(['--report', '/x/r.html']).report)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples")],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == [str(ROOT / "target" / "demo-report.html"), "None", "/x/r.html"]
