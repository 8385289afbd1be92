#!/usr/bin/env python3
"""The demo's picture report (docs/design.md §13): one self-contained HTML file.

Two parts, standard library only:

* :class:`Report`, a writer of **one** HTML file with inline CSS and inline SVG charts — no
  script, no external font, style sheet or image, no network: it opens from disk anywhere, in
  any browser, and renders the same headless (``ci/report_check.py``). Charts: line charts
  (several series, linear or log axes with "nice" ticks, units in the axis labels, a legend,
  shaded x ranges, reference lines), step charts (a state or a capacity over time), scatter
  charts, grouped or stacked bar charts, and small tables. Every text is escaped.
* :func:`demo_report`, which turns a *recording* of ``make demo`` (a plain dict the demo's phases
  fill, its shape below) into a :class:`Report`: one section per phase. ``sample_recording()``
  is a deterministic recording of the same shape (a synthetic run) for the tests and for
  ``make report-test``; ``python examples/report.py --sample PATH`` writes its report.

The recording (every key but ``params`` optional; a phase that did not run has no key):

``params``
    ``{name: value}``, the run's parameters (shown as a table).
``checks``
    ``[(phase, label, passed)]``.
``isolation``
    ``{"budget": N, "healthy_ms": float, "degraded_s": (lo, hi), "seconds": float,
    "runs": {"without hullguard" | "with hullguard": [(t_s, origin, outcome, latency_s)]}}`` —
    ``t_s`` the send time from the run's start, ``origin`` 0 healthy / 1 degraded.
``breaker``
    ``{"step": s, "seconds": s, "fail_at": s, "heal_at": s, "events": [(t_s, old, new)],
    "buckets": [{"ok", "failed", "fast_failed", "healthy_ok", "healthy_total": int,
    "healthy_p99_s": float}]}`` — one bucket per ``step`` seconds.
``adaptive``
    ``{algorithm: {"service_s": s, "phase_seconds": s, "ticks": [(t_s, C, limit, in_flight,
    queued, upstream_wait_in_service_times)]}}``.
``llm``
    ``{"classes": [cls], "modes": [[mode, title]], "ceiling": tokens, "runs": {mode:
    {"requests" | "ok" | "provider_429": {cls: int}, "refused": {cls: {reason: int}},
    "pct": {cls: [p50_s, p99_s]}, "tokens_per_s": {cls: float}}}, "traces": {mode: [(t_s, cls,
    outcome, latency_s)]}, "budget": {mode: [(t_s, in_use_tokens)]}}``.
``deadline``
    ``{"budget_s": s, "patience_s": s, "budget_runs": {name: [(t_s, latency_s, outcome)]},
    "burst_runs": {name: [(t_s, outcome, latency_s)]}}`` — outcomes ``ok`` / ``late`` /
    ``failed`` (budget) and ``ok`` / ``timeout`` / ``shed`` / ``other`` (burst).
``edge``
    ``{"per_class": {cls: {metric: number}}, "records": [(t_s, cls, http_status, latency_s)],
    "text": str}`` (the edge phase, when the demo has one: :func:`edge_section`).
``host``
    ``{"limit": n, "workers": n, "runs": {name: [(t_s, in_flight)]}, "killed_at_s": s,
    "recovered_after_s": s}`` — the origin's in-flight changes per run (``examples/host_demo.py``,
    :func:`host_section`).

Thread-safety: a :class:`Report` is plain data; use one from one thread. Errors: ``ValueError``
for a malformed chart (a series of the wrong shape, a colour that is not ``#rgb``/``#rrggbb``).
"""

from __future__ import annotations

import argparse
import html
import math
import os
import random
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

Number = Union[int, float]
Point = Tuple[Number, Optional[Number]]

# Okabe–Ito, colour-blind safe, in the order series take them.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#666666", "#000000")
# Colours with a meaning across the report.
WITHOUT, WITH = "#D55E00", "#0072B2"
GOOD, BAD, FAST, SHED, NEUTRAL = "#009E73", "#D55E00", "#E69F00", "#CC79A7", "#999999"

_COLOUR = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_CHAR_W = 6.6  # average width of a 12 px sans-serif glyph, for layout estimates
_FONT = "system-ui, 'DejaVu Sans', 'Liberation Sans', Arial, sans-serif"

_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f4f5f7; color: #1d232b; font: 14px/1.45 %(font)s; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
.subtitle { color: #555; margin: 0 0 16px; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 8px; padding: 14px 18px 18px;
  margin: 0 0 18px; }
h2 { font-size: 18px; margin: 0 0 6px; }
p { margin: 4px 0 10px; max-width: 1100px; }
code { font: 12.5px/1.3 'DejaVu Sans Mono', monospace; background: #f0f2f5; padding: 0 3px;
  border-radius: 3px; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 14px 18px; }
figure { margin: 0; }
figure.wide { grid-column: 1 / -1; }
figure svg { display: block; width: 100%%; height: auto; }
figcaption { color: #555; font-size: 12.5px; margin: 2px 4px 0; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: 2px 0 4px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f6f7f9; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #0a7a3e; font-weight: 600; }
.fail { color: #b3261e; font-weight: 600; }
.tables { display: flex; flex-wrap: wrap; gap: 0 28px; }
""" % {"font": _FONT}


def esc(text: object) -> str:
    """``text`` as HTML/SVG text or attribute value (``& < > " '`` escaped)."""
    return html.escape(str(text), quote=True)


def _colour(c: str) -> str:
    if not _COLOUR.match(c):
        raise ValueError(f"colour {c!r}: want #rgb or #rrggbb")
    return c


def _finite(v: Optional[Number]) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def fmt_num(v: float, step: Optional[float] = None) -> str:
    """A tick label: as many decimals as ``step`` needs (or 3 significant digits)."""
    if v == 0:
        return "0"
    if step is not None and step > 0:
        decimals = max(0, -int(math.floor(math.log10(step) + 1e-9)))
        if abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-6:
            decimals += 1
    else:
        decimals = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{min(decimals, 6)}f}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> Tuple[float, float, float, List[float]]:
    """A linear axis over ``[lo, hi]``: ``(axis_lo, axis_hi, step, ticks)`` with step 1, 2, 2.5
    or 5 × 10^k and about ``n`` intervals."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = 10 * mag
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw * (1 - 1e-9):
            step = m * mag
            break
    a = math.floor(lo / step + 1e-9) * step
    b = math.ceil(hi / step - 1e-9) * step
    ticks = []
    k = 0
    while a + k * step <= b + step * 1e-6 and k < 100:
        ticks.append(round(a + k * step, 12))
        k += 1
    return a, b, step, ticks


def log_ticks(lo: float, hi: float) -> Tuple[float, float, List[float], List[float]]:
    """A log10 axis over ``[lo, hi]`` (both > 0): ``(axis_lo, axis_hi, major, minor)`` — major
    ticks at powers of ten (and 2, 5 × 10^k when the axis spans at most two decades)."""
    lo = max(lo, 1e-12)
    hi = max(hi, lo * 1.0001)
    a = 10 ** math.floor(math.log10(lo) + 1e-9)
    b = 10 ** math.ceil(math.log10(hi) - 1e-9)
    if b <= a:
        b = a * 10
    decades = round(math.log10(b / a))
    major: List[float] = []
    minor: List[float] = []
    d = a
    for _ in range(decades + 1):
        major.append(d)
        for m in (2, 3, 4, 5, 6, 7, 8, 9):
            if d * m < b * (1 - 1e-9):
                (major if decades <= 2 and m in (2, 5) else minor).append(d * m)
        d *= 10
    return a, b, sorted(major), minor


@dataclass
class _Axis:
    lo: float
    hi: float
    log: bool
    ticks: List[float]
    minor: List[float]
    step: Optional[float]
    categories: Optional[Sequence[str]] = None

    def frac(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def label(self, v: float) -> str:
        if self.categories is not None:
            i = int(round(v))
            return self.categories[i] if 0 <= i < len(self.categories) else ""
        if self.log:
            return f"{v / 1000:g}k" if v >= 10000 else f"{v:g}"
        if v != 0 and self.step is not None and max(abs(self.lo), abs(self.hi)) >= 10000:
            return fmt_num(v / 1000, self.step / 1000) + "k"
        return fmt_num(v, self.step)


def _axis(values: Iterable[float], log: bool, rng: Optional[Tuple[float, float]],
          zero: bool, categories: Optional[Sequence[str]] = None) -> _Axis:
    if categories is not None:
        n = len(categories)
        return _Axis(-0.25, n - 0.75, False, [float(i) for i in range(n)], [], 1.0, categories)
    vs = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    lo = min(vs) if vs else (1.0 if log else 0.0)
    hi = max(vs) if vs else (10.0 if log else 1.0)
    if rng is not None:
        lo, hi = rng
    elif zero and not log:
        lo = min(lo, 0.0)
    if log:
        a, b, major, minor = log_ticks(lo, hi)
        return _Axis(a, b, True, major, minor, None)
    if rng is not None:
        _, _, step, ticks = nice_ticks(lo, hi)
        ticks = [t for t in ticks if lo - 1e-9 <= t <= hi + 1e-9]
        return _Axis(lo, hi, False, ticks, [], step)
    a, b, step, ticks = nice_ticks(lo, hi)
    return _Axis(a, b, False, ticks, [], step)


@dataclass
class _Part:
    html: str
    figure: bool  # a chart (flows in the two-column grid) or not (text, a table)
    height: float  # estimated CSS pixels, for Report.estimated_height
    wide: bool = False


@dataclass
class _Section:
    name: str
    text: str
    anchor: str
    parts: List[_Part] = field(default_factory=list)


def _slug(name: str, taken: Iterable[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "section"
    slug, k = base, 2
    used = set(taken)
    while slug in used:
        slug, k = f"{base}-{k}", k + 1
    return slug


def _paragraphs(text: str) -> str:
    """Paragraphs (blank-line separated), escaped; ```code``` spans kept as <code>."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip()):
        if not para.strip():
            continue
        pieces = para.split("`")
        body = "".join(esc(p) if i % 2 == 0 else f"<code>{esc(p)}</code>"
                       for i, p in enumerate(pieces))
        out.append(f"<p>{body}</p>")
    return "\n".join(out)


class Report:
    """One self-contained HTML report: a title, sections, and in each section charts (inline
    SVG) and tables, in call order. Charts flow two to a row; ``wide=True`` takes a whole row.

    Every chart is a ``<figure class="chart" data-kind=...>`` holding exactly one ``<svg>`` whose
    ``<title>`` is the chart's title; each series is a ``<g class="series" data-series=NAME
    data-points=N>`` (``ci/report_check.py`` reads these). Nothing refers outside the file."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections: List[_Section] = []
        self._charts = 0

    # -- structure ------------------------------------------------------------------------------

    def section(self, name: str, text: str = "") -> "Report":
        """Starts a section (``<section id=slug>`` with an ``<h2>``); ``text``: paragraphs
        separated by blank lines, ``code`` in backticks. Returns ``self``."""
        anchor = _slug(name, (s.anchor for s in self.sections))
        self.sections.append(_Section(name, text, anchor))
        return self

    def _add(self, part: _Part) -> None:
        if not self.sections:
            self.section("Report")
        self.sections[-1].parts.append(part)

    def text(self, text: str) -> "Report":
        """A paragraph (or several) in the current section."""
        self._add(_Part(f'<div class="text">{_paragraphs(text)}</div>', False, _text_height(text)))
        return self

    def table(self, headers: Sequence[object], rows: Sequence[Sequence[object]],
              caption: str = "") -> "Report":
        """A small table; numbers are right-aligned, ``True``/``False`` shown as PASS/FAIL."""
        head = "".join(f"<th>{esc(h)}</th>" for h in headers)
        body = []
        for row in rows:
            cells = []
            for v in row:
                if isinstance(v, bool):
                    cls = "pass" if v else "fail"
                    cells.append(f'<td class="{cls}">{"PASS" if v else "FAIL"}</td>')
                elif isinstance(v, (int, float)):
                    text = f"{v:g}" if isinstance(v, float) else str(v)
                    cells.append(f'<td class="num">{esc(text)}</td>')
                else:
                    cells.append(f"<td>{esc(v)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        cap = f"<caption>{esc(caption)}</caption>" if caption else ""
        self._add(_Part(f'<table class="data">{cap}<thead><tr>{head}</tr></thead>'
                        f'<tbody>{"".join(body)}</tbody></table>', False,
                        16 + (22 if caption else 0) + 26 * (len(rows) + 1)))
        return self

    # -- charts ---------------------------------------------------------------------------------

    def line_chart(
        self,
        title: str,
        series: Mapping[str, Sequence[Point]],
        x_label: str,
        y_label: str,
        *,
        y_log: bool = False,
        x_range: Optional[Tuple[float, float]] = None,
        y_range: Optional[Tuple[float, float]] = None,
        y_zero: bool = True,
        step: Union[bool, Sequence[str]] = False,
        scatter: Sequence[str] = (),
        markers: Optional[bool] = None,
        dashed: Sequence[str] = (),
        colors: Optional[Mapping[str, str]] = None,
        bands: Sequence[Tuple[float, float, str]] = (),
        hlines: Sequence[Tuple[float, str]] = (),
        y_categories: Optional[Sequence[str]] = None,
        note: str = "",
        wide: bool = False,
        height: int = 300,
    ) -> "Report":
        """A line chart: ``series`` maps a name to ``[(x, y), ...]`` in x order (``y`` None
        breaks the line; non-finite values are dropped). ``step`` (True: every series; or the
        names of some): each value holds until the next point (a state, a capacity), the last
        one until the axis end. Series named in
        ``scatter`` are drawn as dots only, those in ``dashed`` dashed. ``y_log``: a log10 axis
        (values ≤ 0 sit on its floor). ``y_categories``: the y values are indices into these
        labels (a state chart). ``bands``: shaded x ranges ``(x0, x1, label)``; ``hlines``:
        reference lines ``(y, label)``. Units belong in the axis labels."""
        steps = set(series) if step is True else set(step or ())
        kind = ("step" if steps and steps >= set(series) else
                "scatter" if scatter and set(scatter) >= set(series) else "line")
        for name, pts in series.items():
            for p in pts:
                if not isinstance(p, (tuple, list)) or len(p) != 2:
                    raise ValueError(f"series {name!r}: points are (x, y) pairs, got {p!r}")
        xs = [float(p[0]) for pts in series.values() for p in pts if _finite(p[0])]
        ys = [float(p[1]) for pts in series.values() for p in pts  # type: ignore[arg-type]
              if _finite(p[1])]
        xs += [b for band in bands for b in band[:2]]
        ys += [h[0] for h in hlines]
        xa = _axis(xs, False, x_range, False)
        ya = _axis(ys, y_log, y_range, y_zero, y_categories)
        self._chart(kind, title, xa, ya, x_label, y_label, series, colors, note, wide, height,
                    steps=steps, scatter=scatter, markers=markers, dashed=dashed, bands=bands,
                    hlines=hlines)
        return self

    def step_chart(self, title: str, series: Mapping[str, Sequence[Point]], x_label: str,
                   y_label: str, **kw: Any) -> "Report":
        """:meth:`line_chart` with ``step=True`` (a breaker's state, a capacity)."""
        return self.line_chart(title, series, x_label, y_label, step=True, **kw)

    def bar_chart(
        self,
        title: str,
        categories: Sequence[str],
        series: Mapping[str, Sequence[Optional[Number]]],
        y_label: str,
        *,
        x_label: str = "",
        stacked: bool = False,
        y_log: bool = False,
        colors: Optional[Mapping[str, str]] = None,
        value_labels: Optional[bool] = None,
        hlines: Sequence[Tuple[float, str]] = (),
        note: str = "",
        wide: bool = False,
        height: int = 300,
    ) -> "Report":
        """A bar chart: one group per category, one bar per series (``stacked``: the series
        stacked in one bar). ``series`` maps a name to one value per category (None: no bar).
        Values are printed on the bars when there is room (``value_labels``)."""
        for name, vals in series.items():
            if len(vals) != len(categories):
                raise ValueError(f"series {name!r}: {len(vals)} values for "
                                 f"{len(categories)} categories")
        if stacked:
            tops = [sum(float(v) for v in col if _finite(v))
                    for col in zip(*series.values())] if series else []
        else:
            tops = [float(v) for vals in series.values() for v in vals
                    if v is not None and _finite(v)]
        tops += [h[0] for h in hlines]
        # Headroom for the value labels above the bars.
        tops += [max(tops) * (1.6 if y_log else 1.07)] if tops else []
        ya = _axis(tops + ([] if y_log else [0.0]), y_log, None, True)
        xa = _Axis(0.0, float(max(1, len(categories))), False, [], [], None, list(categories))
        self._chart("bar", title, xa, ya, x_label, y_label, series, colors, note, wide, height,
                    stacked=stacked, value_labels=value_labels, hlines=hlines)
        return self

    # -- rendering ------------------------------------------------------------------------------

    def _chart(self, kind: str, title: str, xa: _Axis, ya: _Axis, x_label: str, y_label: str,
               series: Mapping[str, Sequence[Any]], colors: Optional[Mapping[str, str]],
               note: str, wide: bool, height: int, **kw: Any) -> None:
        self._charts += 1
        cid = f"chart-{self._charts}"
        width = 1180 if wide else 580
        names = list(series)
        col = {}
        for i, n in enumerate(names):
            col[n] = _colour((colors or {}).get(n, PALETTE[i % len(PALETTE)]))
        out: List[str] = []
        # Title, then the legend (wrapped), then the plot.
        out.append(f'<title id="{cid}-t">{esc(title)}</title>')
        out.append(f'<text class="ct" x="8" y="20">{esc(title)}</text>')
        x, y, rows = 10.0, 40.0, 1
        legend = []
        band_labels = list(dict.fromkeys(b[2] for b in kw.get("bands", ())))
        for n in names + band_labels:
            w = 26 + len(n) * _CHAR_W + 16
            if x + w > width - 8 and x > 10:
                x, y, rows = 10.0, y + 18, rows + 1
            if n not in col:
                sw = (f'<rect class="bandsw" x="{x:.1f}" y="{y - 10:.1f}" width="18" '
                      f'height="12"/>')
            elif kind == "bar" or kind == "scatter" or n in kw.get("scatter", ()):
                sw = (f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="12" height="10" rx="2" '
                      f'fill="{col[n]}"/>')
            else:
                dash = ' stroke-dasharray="5 3"' if n in kw.get("dashed", ()) else ""
                sw = (f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 18:.1f}" y2="{y - 4:.1f}" '
                      f'stroke="{col[n]}" stroke-width="2.5"{dash}/>')
            legend.append(f'{sw}<text class="lg" x="{x + 24:.1f}" y="{y:.1f}">{esc(n)}</text>')
            x += w
        out.append('<g class="legend">' + "".join(legend) + "</g>")
        ml = 62.0 if ya.categories is None else 34 + max(len(c) for c in ya.categories) * _CHAR_W
        mr, mt = 20.0, y + 14
        x_lines = 1
        if kind == "bar" and xa.categories:
            slot = (width - ml - mr) / max(1, len(xa.categories))
            x_lines = max(len(_wrap(c, slot)) for c in xa.categories)
        mb = 24 + 14 * x_lines + (18 if x_label else 0)
        total_h = float(max(height, mt + 120 + mb))
        pw, ph = width - ml - mr, total_h - mt - mb

        def sx(v: float) -> float:
            return ml + xa.frac(v) * pw

        def sy(v: float) -> float:
            return mt + ph - ya.frac(v) * ph

        # Grid and y ticks.
        grid = []
        for t in ya.minor:
            grid.append(f'<line class="gm" x1="{ml:.1f}" x2="{ml + pw:.1f}" y1="{sy(t):.1f}" '
                        f'y2="{sy(t):.1f}"/>')
        for t in ya.ticks:
            grid.append(f'<line class="g" x1="{ml:.1f}" x2="{ml + pw:.1f}" y1="{sy(t):.1f}" '
                        f'y2="{sy(t):.1f}"/>')
            grid.append(f'<text class="tk" x="{ml - 6:.1f}" y="{sy(t) + 4:.1f}" '
                        f'text-anchor="end">{esc(ya.label(t))}</text>')
        if kind != "bar":
            for t in xa.ticks:
                grid.append(f'<line class="g" x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{mt:.1f}" '
                            f'y2="{mt + ph:.1f}"/>')
                grid.append(f'<text class="tk" x="{sx(t):.1f}" y="{mt + ph + 16:.1f}" '
                            f'text-anchor="middle">{esc(xa.label(t))}</text>')
        out.append('<g class="grid">' + "".join(grid) + "</g>")
        # Shaded x ranges.
        for x0, x1, label in kw.get("bands", ()):
            a, b = sx(max(x0, xa.lo)), sx(min(x1, xa.hi))
            out.append(f'<g class="band"><rect x="{a:.1f}" y="{mt:.1f}" width="{max(0.0, b - a):.1f}" '
                       f'height="{ph:.1f}"><title>{esc(label)}</title></rect></g>')
        # Axes box.
        out.append(f'<rect class="frame" x="{ml:.1f}" y="{mt:.1f}" width="{pw:.1f}" '
                   f'height="{ph:.1f}"/>')
        # Data.
        if kind == "bar":
            out.append(self._bars(xa, ya, series, col, sx, sy, ml, mt, pw, ph, **kw))
        else:
            out.append(self._lines(kind, xa, series, col, sx, sy, **kw))
        # Reference lines.
        for yv, label in kw.get("hlines", ()):
            if not ya.lo <= yv <= ya.hi:
                continue
            out.append(f'<g class="ref"><line x1="{ml:.1f}" x2="{ml + pw:.1f}" y1="{sy(yv):.1f}" '
                       f'y2="{sy(yv):.1f}"/><text class="rl" x="{ml + pw - 4:.1f}" '
                       f'y="{sy(yv) - 4:.1f}" text-anchor="end">{esc(label)}</text></g>')
        # Axis labels.
        if x_label:
            out.append(f'<text class="al" x="{ml + pw / 2:.1f}" y="{total_h - 8:.1f}" '
                       f'text-anchor="middle">{esc(x_label)}</text>')
        if y_label:
            out.append(f'<text class="al" transform="translate(14 {mt + ph / 2:.1f}) rotate(-90)" '
                       f'text-anchor="middle">{esc(y_label)}</text>')
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {total_h:.0f}" '
               f'width="{width}" height="{total_h:.0f}" role="img" aria-labelledby="{cid}-t" '
               f'font-family="{esc(_FONT)}">'
               f"<style>{_SVG_CSS}</style>" + "".join(out) + "</svg>")
        cap = f"<figcaption>{esc(note)}</figcaption>" if note else ""
        cls = "chart wide" if wide else "chart"
        cap_h = 4 + 18 * math.ceil(len(note) / (170 if wide else 84)) if note else 0
        self._add(_Part(f'<figure class="{cls}" id="{cid}" data-kind="{kind}" '
                        f'data-title="{esc(title)}">{svg}{cap}</figure>', True,
                        total_h * 0.98 + cap_h, wide))

    @staticmethod
    def _lines(kind: str, xa: _Axis, series: Mapping[str, Sequence[Any]], col: Mapping[str, str],
               sx: Any, sy: Any, **kw: Any) -> str:
        out = []
        scatter = set(kw.get("scatter", ()))
        dashed = set(kw.get("dashed", ()))
        steps = set(kw.get("steps", ()))
        for name, pts in series.items():
            step = name in steps
            good = [(float(p[0]), None if not _finite(p[1]) else float(p[1])) for p in pts
                    if _finite(p[0])]
            n = sum(1 for _, v in good if v is not None)
            parts = []
            if name not in scatter:
                d: List[str] = []
                pen = False
                prev: Optional[Tuple[float, float]] = None
                for px, py in good:
                    if py is None:
                        pen = False
                        prev = None
                        continue
                    if not pen:
                        d.append(f"M{sx(px):.1f},{sy(py):.1f}")
                        pen = True
                    elif step and prev is not None:
                        d.append(f"H{sx(px):.1f}V{sy(py):.1f}")
                    else:
                        d.append(f"L{sx(px):.1f},{sy(py):.1f}")
                    prev = (px, py)
                if step and prev is not None and prev[0] < xa.hi:
                    d.append(f"H{sx(xa.hi):.1f}")
                dash = ' stroke-dasharray="6 4"' if name in dashed else ""
                width = "2.6" if step else "2"
                parts.append(f'<path d="{"".join(d)}" fill="none" stroke="{col[name]}" '
                             f'stroke-width="{width}" stroke-linejoin="round"{dash}/>')
            show = kw.get("markers")
            if name in scatter or (show is None and n <= 40 and not step) or show:
                r = 2.6 if name in scatter else 2.8
                op = ' fill-opacity="0.7"' if name in scatter else ""
                for px, py in good:
                    if py is None:
                        continue
                    parts.append(f'<circle cx="{sx(px):.1f}" cy="{sy(py):.1f}" r="{r}" '
                                 f'fill="{col[name]}"{op}><title>{esc(name)}: '
                                 f'{esc(_g(px))}, {esc(_g(py))}</title></circle>')
            out.append(f'<g class="series" data-series="{esc(name)}" data-points="{n}">'
                       + "".join(parts) + "</g>")
        return "".join(out)

    @staticmethod
    def _bars(xa: _Axis, ya: _Axis, series: Mapping[str, Sequence[Any]], col: Mapping[str, str],
              sx: Any, sy: Any, ml: float, mt: float, pw: float, ph: float, **kw: Any) -> str:
        cats = list(xa.categories or [])
        names = list(series)
        slot = pw / max(1, len(cats))
        stacked = kw.get("stacked", False)
        per = 1 if stacked else max(1, len(names))
        bw = min(56.0, slot * 0.78 / per)
        labels = kw.get("value_labels")
        if labels is None:
            labels = bw >= 14
        base = ya.lo if ya.log else 0.0
        out = []
        tops = [base] * len(cats)
        for si, name in enumerate(names):
            parts = []
            n = 0
            for ci, v in enumerate(series[name]):
                if not _finite(v):
                    continue
                n += 1
                fv = float(v)
                left = ml + slot * ci + (slot - bw * per) / 2 + (0 if stacked else si * bw)
                y0 = tops[ci] if stacked else base
                y1 = y0 + fv
                if stacked:
                    tops[ci] = y1
                top, bottom = sy(max(y0, y1)), sy(min(y0, y1))
                h = max(0.0, bottom - top)
                parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{max(0.5, bw - 1):.1f}" '
                             f'height="{h:.1f}" fill="{col[name]}"><title>{esc(cats[ci])} — '
                             f'{esc(name)}: {esc(_g(fv))}</title></rect>')
                if labels and fv != 0:
                    if stacked:
                        if h >= 14:
                            parts.append(f'<text class="vi" x="{left + bw / 2:.1f}" '
                                         f'y="{top + h / 2 + 4:.1f}" text-anchor="middle">'
                                         f'{esc(_g(fv))}</text>')
                    else:
                        parts.append(f'<text class="vl" x="{left + bw / 2:.1f}" y="{top - 3:.1f}" '
                                     f'text-anchor="middle">{esc(_g(fv))}</text>')
            out.append(f'<g class="series" data-series="{esc(name)}" data-points="{n}">'
                       + "".join(parts) + "</g>")
        ticks = []
        for ci, c in enumerate(cats):
            cx = ml + slot * ci + slot / 2
            for li, line in enumerate(_wrap(c, slot)):
                ticks.append(f'<text class="tk" x="{cx:.1f}" y="{mt + ph + 16 + 14 * li:.1f}" '
                             f'text-anchor="middle">{esc(line)}</text>')
        return "".join(out) + '<g class="xcats">' + "".join(ticks) + "</g>"

    # -- output ---------------------------------------------------------------------------------

    def render(self) -> str:
        """The whole HTML document as a string."""
        toc = "".join(f'<a href="#{s.anchor}">{esc(s.name)}</a>' for s in self.sections)
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="generator" content="hullguard examples/report.py">',
            f'<meta name="hullguard-report-height" content="{self.estimated_height()}">',
            f"<title>{esc(self.title)}</title>",
            f"<style>{_CSS}\nnav a {{ margin-right: 14px; color: #0b5cad; }}</style>",
            "</head><body><main>",
            f"<h1>{esc(self.title)}</h1>",
        ]
        if self.subtitle:
            parts.append(f'<p class="subtitle">{esc(self.subtitle)}</p>')
        if len(self.sections) > 1:
            parts.append(f"<nav>{toc}</nav><p></p>")
        for s in self.sections:
            parts.append(f'<section id="{s.anchor}"><h2>{esc(s.name)}</h2>')
            if s.text:
                parts.append(_paragraphs(s.text))
            # Consecutive figures share a grid; tables and text break it.
            grid_open = False
            for part in s.parts:
                if part.figure and not grid_open:
                    parts.append('<div class="grid">')
                    grid_open = True
                elif not part.figure and grid_open:
                    parts.append("</div>")
                    grid_open = False
                parts.append(part.html)
            if grid_open:
                parts.append("</div>")
            parts.append("</section>")
        parts.append("</main></body></html>\n")
        return "\n".join(parts)

    def estimated_height(self) -> int:
        """The page's height in CSS pixels at a 1280 px wide window, estimated from the
        layout (generous: a screenshot this tall shows the whole report, with some margin)."""
        h = 60.0 + (35 if self.subtitle else 0) + (50 if len(self.sections) > 1 else 0)
        for s in self.sections:
            h += 18 + 2 + 32 + 32 + (_text_height(s.text) if s.text else 0)
            row: List[float] = []  # the narrow figures of the current grid row
            rows = 0
            for part in s.parts:
                if not part.figure:
                    if row:
                        h, row, rows = h + max(row) + 14 * (rows > 0), [], rows + 1
                    h += part.height
                    rows = 0
                elif part.wide:
                    if row:
                        h, row, rows = h + max(row) + 14 * (rows > 0), [], rows + 1
                    h, rows = h + part.height + 14 * (rows > 0), rows + 1
                else:
                    row.append(part.height)
                    if len(row) == 2:
                        h, row, rows = h + max(row) + 14 * (rows > 0), [], rows + 1
            if row:
                h += max(row) + 14 * (rows > 0)
        return int(h + 250)

    def write(self, path: str) -> str:
        """Writes the report to ``path`` (UTF-8; parent directories created), atomically (a
        temporary file renamed over it). Returns the path."""
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.render())
        os.replace(tmp, path)
        return path


_SVG_CSS = (
    ".ct{font-size:15px;font-weight:600;fill:#1d232b}"
    ".lg{font-size:12px;fill:#333}"
    ".tk{font-size:11px;fill:#555}"
    ".al{font-size:12px;fill:#333}"
    ".g{stroke:#e6e8eb;stroke-width:1}"
    ".gm{stroke:#f2f3f5;stroke-width:1}"
    ".frame{fill:none;stroke:#b8bec6;stroke-width:1}"
    ".band rect{fill:#D55E00;fill-opacity:.09}"
    ".bandsw{fill:#D55E00;fill-opacity:.16;stroke:#D55E00;stroke-opacity:.35}"
    ".ref line{stroke:#444;stroke-width:1.2;stroke-dasharray:4 3}"
    ".rl{font-size:11px;fill:#444}"
    ".vl{font-size:10.5px;fill:#333}"
    ".vi{font-size:10.5px;fill:#fff}"
)


def _g(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _text_height(text: str) -> float:
    """Estimated height of :func:`_paragraphs` (14 px text, ~150 characters a line)."""
    paras = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return sum(14 + 20.3 * math.ceil(len(p) / 140) for p in paras)


def _wrap(text: str, width_px: float) -> List[str]:
    """``text`` in lines of at most ``width_px`` (estimated), at most three lines."""
    limit = max(4, int(width_px / (_CHAR_W * 0.92)))
    lines: List[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= limit:
            lines[-1] += " " + word
        else:
            lines.append(word)
    if len(lines) > 3:
        lines = lines[:2] + [" ".join(lines[2:])[: limit - 1] + "…"]
    return lines or [""]


# =============================================================================================
# The demo's report.


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list (0 for an empty one), as the demo prints."""
    if not sorted_values:
        return 0.0
    rank = int(min(max(-(-p * len(sorted_values) // 100), 1), len(sorted_values)))
    return float(sorted_values[rank - 1])


def windowed(points: Iterable[Tuple[float, float]], window: float, p: float,
             end: Optional[float] = None) -> List[Point]:
    """``[(t, v)]`` → one point per ``window`` seconds of ``t``: (window middle, the ``p``-th
    percentile of its ``v``), None for an empty window (a gap in the line)."""
    buckets: Dict[int, List[float]] = {}
    last = 0
    for t, v in points:
        k = int(t // window)
        buckets.setdefault(k, []).append(v)
        last = max(last, k)
    if end is not None:
        last = max(last, int(math.ceil(end / window)) - 1)
    out: List[Point] = []
    for k in range(last + 1):
        vs = sorted(buckets.get(k, []))
        out.append(((k + 0.5) * window, percentile(vs, p) if vs else None))
    return out


def _window_for(seconds: float) -> float:
    for w in (0.1, 0.25, 0.5, 1.0, 2.0):
        if seconds / w <= 40:
            return w
    return 5.0


def _outcome_colour(o: str) -> str:
    o = o.lower()
    if o.startswith("ok") or o.startswith("answered") or o.startswith("served within"):
        return GOOD
    if "circuit" in o or "fast" in o:
        return FAST
    if "shed" in o:
        return SHED
    if "reject" in o or "refused" in o:
        return "#CC79A7"
    if "late" in o or "served late" in o:
        return "#E69F00"
    return BAD


def isolation_section(r: Report, iso: Mapping[str, Any]) -> None:
    """Phase 1: the healthy origin's latency over time without / with hullguard, and the
    degraded origin's outcomes."""
    budget, (dlo, dhi) = iso.get("budget"), iso.get("degraded_s", (0, 0))
    r.section(
        "1. Isolation: a shared connection budget",
        f"One `httpx.AsyncClient` with a shared budget of {budget} connections sends the same "
        f"open-loop schedule twice to a healthy origin (~{iso.get('healthy_ms', 0):g} ms) and a "
        f"degraded one ({dlo:g}–{dhi:g} s): first without hullguard, then with one bulkhead per "
        f"origin whose slices add up to the budget. Without it the degraded origin's slow "
        f"requests hold the whole pool and healthy requests queue behind them.",
    )
    runs: Mapping[str, Sequence[Sequence[Any]]] = iso.get("runs", {})
    seconds = float(iso.get("seconds") or max((rec[0] for rs in runs.values() for rec in rs),
                                              default=1.0))
    w = _window_for(seconds)
    colours = {}
    series: Dict[str, List[Point]] = {}
    for name, recs in runs.items():
        base = WITHOUT if "without" in name else WITH
        pts = [(float(t), float(lat) * 1e3) for t, origin, _, lat in recs if origin == 0]
        series[f"{name}: p99"] = windowed(pts, w, 99.0, seconds)
        colours[f"{name}: p99"] = base
        series[f"{name}: p50"] = windowed(pts, w, 50.0, seconds)
        colours[f"{name}: p50"] = base
    r.line_chart(
        "Healthy origin: latency over time, without and with hullguard",
        series, f"request start, since the run's start (s; windows of {w:g} s)",
        "latency (ms, log scale)", y_log=True, colors=colours,
        dashed=[n for n in series if n.endswith("p50")], wide=True, height=330,
        note="p99 (solid) and p50 (dashed) of the healthy requests started in each window "
             "(a gap: none started, the client's event loop was busy).",
    )
    outcomes: List[str] = []
    for recs in runs.values():
        for _, origin, outcome, _ in recs:
            if origin == 1 and outcome not in outcomes:
                outcomes.append(outcome)
    outcomes.sort(key=lambda o: (not o.startswith("ok"), o))
    counts = {name: [sum(1 for rec in recs if rec[1] == 1 and rec[2] == o) for o in outcomes]
              for name, recs in runs.items()}
    r.bar_chart("Degraded origin: outcomes", outcomes, counts, "requests",
                colors={n: WITHOUT if "without" in n else WITH for n in counts},
                note="Without hullguard the degraded requests take the shared pool; with it they "
                     "are turned away by their own bulkhead once their slice is full.")
    ok_rates: Dict[str, List[Optional[Number]]] = {}
    cats = ["healthy p50", "healthy p99", "healthy max"]
    for name, recs in runs.items():
        lat = sorted(float(rec[3]) * 1e3 for rec in recs if rec[1] == 0)
        ok_rates[name] = [round(percentile(lat, 50), 1), round(percentile(lat, 99), 1),
                          round(lat[-1], 1) if lat else None]
    r.bar_chart("Healthy origin: latency percentiles", cats, ok_rates, "latency (ms, log scale)",
                y_log=True, colors={n: WITHOUT if "without" in n else WITH for n in ok_rates})
    rows = []
    for name, recs in runs.items():
        h = [rec for rec in recs if rec[1] == 0]
        d = [rec for rec in recs if rec[1] == 1]
        lat = sorted(float(rec[3]) * 1e3 for rec in h)
        rows.append([name, len(h), sum(1 for rec in h if rec[2] == "ok"),
                     f"{percentile(lat, 50):.1f}", f"{percentile(lat, 99):.1f}", len(d),
                     sum(1 for rec in d if rec[2] == "ok")])
    r.table(["run", "healthy requests", "healthy ok", "healthy p50 (ms)", "healthy p99 (ms)",
             "degraded requests", "degraded ok"], rows)


_STATES = ["closed", "half_open", "open"]


def breaker_section(r: Report, br: Mapping[str, Any]) -> None:
    """Phase 2: the breaker's state over time and the scripted upstream's outcomes."""
    step, seconds = float(br.get("step", 0.5)), float(br.get("seconds", 8.0))
    fail_at, heal_at = float(br.get("fail_at", 0)), float(br.get("heal_at", 0))
    r.section(
        "2. Circuit breaker",
        f"A scripted upstream works, answers 503 from t = {fail_at:g} s and heals at "
        f"t = {heal_at:g} s. Its bulkhead's breaker opens after the failures, fails calls fast "
        f"(`CircuitOpenError`, nothing sent), lets a probe through every `open_duration` and "
        f"closes once the upstream heals; the healthy origin beside it is untouched.",
    )
    pts: List[Point] = [(0.0, 0)]
    for t, _old, new in br.get("events", []):
        pts.append((float(t), _STATES.index(new) if new in _STATES else None))
    band = [(fail_at, heal_at, "upstream answers 503")]
    r.step_chart("Breaker state over time", {"breaker state": pts}, "time (s)", "state",
                 y_categories=_STATES, x_range=(0.0, seconds), bands=band, wide=True,
                 height=230, colors={"breaker state": "#CC79A7"},
                 note="From Registry(on_state_change=...): every transition, in order.")
    buckets: Sequence[Mapping[str, Any]] = br.get("buckets", [])
    cats = [f"{i * step:g}" for i in range(len(buckets))]
    r.bar_chart(
        f"Scripted upstream: outcomes per {step:g} s", cats,
        {"200": [b.get("ok", 0) for b in buckets],
         "5xx / error": [b.get("failed", 0) for b in buckets],
         "circuit_open (not sent)": [b.get("fast_failed", 0) for b in buckets]},
        "calls", x_label="window start (s)", stacked=True,
        colors={"200": GOOD, "5xx / error": BAD, "circuit_open (not sent)": FAST},
    )
    h_ok = sum(int(b.get("healthy_ok", 0)) for b in buckets)
    h_total = sum(int(b.get("healthy_total", 0)) for b in buckets)
    p99 = [(i * step + step / 2, float(b.get("healthy_p99_s", 0)) * 1e3 if b.get("healthy_total")
            else None) for i, b in enumerate(buckets)]
    r.line_chart("Healthy origin beside it: p99 latency", {"healthy p99": p99}, "time (s)",
                 "latency (ms)", x_range=(0.0, seconds), bands=band, colors={"healthy p99": WITH},
                 note=f"p99 per {step:g} s window; {h_ok} of {h_total} healthy requests "
                      f"succeeded.")


def adaptive_section(r: Report, ad: Mapping[str, Mapping[str, Any]]) -> None:
    """Phase 3: the adaptive limit against the upstream's capacity, per algorithm."""
    r.section(
        "3. Adaptive limit",
        "48 callers in a closed loop call an upstream of C workers through one bulkhead with an "
        "adaptive limit while C steps 16 → 4 → 16. The limit follows C (the band the check "
        "uses is [C/3, 3C] after 40 % of each step) and the upstream's own queueing delay "
        "stays under one service time: the queue waits in the bulkhead, not in the upstream.",
    )
    for algorithm, a in ad.items():
        ticks: Sequence[Sequence[Number]] = a.get("ticks", [])
        cap: List[Point] = []
        for i, tk in enumerate(ticks):
            start = float(ticks[i - 1][0]) if i else 0.0
            if not cap or cap[-1][1] != tk[1]:
                cap.append((start, tk[1]))
        hi_band = [(p[0], 3 * float(p[1] or 0)) for p in cap]
        lo_band = [(p[0], float(p[1] or 0) // 3) for p in cap]
        end = float(ticks[-1][0]) if ticks else 1.0
        r.line_chart(
            f"{algorithm}: the limit follows the upstream's capacity C",
            {"capacity C": cap, "band 3C": hi_band, "band C/3": lo_band,
             "limit": [(tk[0], tk[2]) for tk in ticks],
             "in flight": [(tk[0], tk[3]) for tk in ticks]},
            "time (s)", "requests (concurrent)", x_range=(0.0, end),
            colors={"capacity C": "#000000", "band 3C": "#bbbbbb", "band C/3": "#bbbbbb",
                    "limit": "#0072B2", "in flight": "#009E73"},
            dashed=["band 3C", "band C/3", "in flight"],
            step=["capacity C", "band 3C", "band C/3"], markers=False,
            note=(f"Sampled every {float(ticks[1][0]) - float(ticks[0][0]):g} s; the grey "
                  f"steps are the band the check applies after 40 % of each step."
                  if len(ticks) > 1 else ""),
        )
        r.line_chart(
            f"{algorithm}: the upstream's own queueing delay",
            {"upstream wait": [(tk[0], tk[5]) for tk in ticks]},
            "time (s)", "mean wait (service times)", x_range=(0.0, end),
            hlines=[(1.0, "the check's bound: 1 service time")], colors={"upstream wait": BAD},
            y_range=(0.0, max([1.5] + [float(tk[5]) * 1.1 for tk in ticks])),
        )


def llm_section(r: Report, llm: Mapping[str, Any]) -> None:
    """Phase 4: the LLM gateway, per class and per run."""
    classes: Sequence[str] = llm.get("classes", ["interactive", "batch"])
    modes: Sequence[Sequence[str]] = llm.get("modes", [])
    runs: Mapping[str, Mapping[str, Any]] = llm.get("runs", {})
    r.section(
        "4. LLM gateway: calls and tokens in one decision",
        f"A fake streaming provider with a concurrent-token ceiling of {llm.get('ceiling', 0)} "
        f"answers 429 past it. One gateway sends an interactive class and a flooding batch "
        f"class, four times: no bulkhead, a count-only bulkhead, calls and tokens in one "
        f"decision with refunds (classes with floors and a priority reserve), and the same "
        f"without refunds.",
    )
    title_of: Dict[str, str] = {str(m[0]): str(m[1]) for m in modes}
    titles = [title_of[m] for m in title_of if m in runs]
    keys = [m for m in title_of if m in runs]
    cls_col = {c: PALETTE[i] for i, c in enumerate(classes)}
    r.bar_chart("p99 latency per class (successful calls, to the last token)", titles,
                {c: [round(float(runs[m]["pct"][c][1]) * 1e3) for m in keys] for c in classes},
                "latency (ms)", colors=cls_col)
    r.bar_chart("Output tokens/s delivered, per class", titles,
                {c: [round(float(runs[m]["tokens_per_s"][c])) for m in keys] for c in classes},
                "tokens/s", stacked=True, colors=cls_col)
    for c in classes:
        series: Dict[str, List[Optional[Number]]] = {
            "ok": [runs[m]["ok"][c] for m in keys],
            "provider 429": [runs[m]["provider_429"][c] for m in keys],
        }
        reasons = sorted({k for m in keys for k in runs[m]["refused"][c]})
        for reason in reasons:
            series[f"refused: {reason}"] = [runs[m]["refused"][c].get(reason, 0) for m in keys]
        colors = {"ok": GOOD, "provider 429": BAD}
        for i, reason in enumerate(reasons):
            colors[f"refused: {reason}"] = ("#CC79A7", "#E69F00", "#56B4E9", "#666666")[i % 4]
        r.bar_chart(f"{c}: outcomes per run", titles, series, "requests", stacked=True,
                    colors=colors)
    traces: Mapping[str, Sequence[Sequence[Any]]] = llm.get("traces", {})
    if traces:
        end = max((float(rec[0]) for tr in traces.values() for rec in tr), default=1.0)
        w = _window_for(end)
        for c in classes[:1]:
            series2 = {title_of.get(m, m): windowed(
                [(float(t), float(lat) * 1e3) for t, cl, o, lat in tr if cl == c and o == "ok"],
                w, 99.0, end) for m, tr in traces.items()}
            r.line_chart(f"{c}: p99 latency over time, per run", series2,
                         f"send time (s; windows of {w:g} s)", "latency (ms, log scale)",
                         y_log=True, wide=True)
    budget: Mapping[str, Sequence[Sequence[Number]]] = llm.get("budget", {})
    if budget:
        series3 = {title_of.get(m, m): [(float(t), float(v)) for t, v in pts]
                   for m, pts in budget.items()}
        r.line_chart("Client token budget in use", series3, "time (s)", "tokens held",
                     hlines=[(float(llm.get("ceiling", 0)), "provider ceiling = budget")],
                     markers=False, wide=True, height=260,
                     note="Refunds shrink a call's hold to what the provider counts, so more "
                          "calls fit under the same ceiling.")
    rows = []
    for m in keys:
        run = runs[m]
        for c in classes:
            refused = sum(run["refused"][c].values())
            rows.append([title_of[m], c, run["requests"][c], run["ok"][c],
                         run["provider_429"][c], refused,
                         f"{float(run['pct'][c][0]) * 1e3:.0f}",
                         f"{float(run['pct'][c][1]) * 1e3:.0f}",
                         f"{float(run['tokens_per_s'][c]):.0f}"])
    r.table(["run", "class", "requests", "ok", "provider 429", "refused", "p50 (ms)", "p99 (ms)",
             "tokens/s"], rows)


def deadline_section(r: Report, dl: Mapping[str, Any]) -> None:
    """Phase 5: request budgets across sequential calls, and CoDel + adaptive LIFO."""
    budget = float(dl.get("budget_s", 1.0))
    patience = float(dl.get("patience_s", 0.5))
    r.section(
        "5. Deadlines and queue-delay shedding",
        f"A gateway serves each request with two sequential upstream calls and its caller gives "
        f"up after {budget:g} s: with `hullguard.deadline(...)` every call takes the time left "
        f"and a call past the deadline is refused before it is sent. Then a burst against a "
        f"bulkhead of 4 in front of a 50 ms upstream: FIFO with a queue timeout, against CoDel "
        f"with adaptive LIFO (callers wait {patience * 1e3:.0f} ms).",
    )
    runs: Mapping[str, Sequence[Sequence[Any]]] = dl.get("budget_runs", {})
    cols = {}
    for i, name in enumerate(runs):
        cols[name] = WITH if ("deadline" in name or "with" in name) and "without" not in name \
            else WITHOUT
    r.line_chart("Request latency by send time", {n: [(float(t), float(lat) * 1e3)
                                                     for t, lat, _ in recs]
                                                 for n, recs in runs.items()},
                 "send time (s)", "latency (ms)", scatter=list(runs),
                 hlines=[(budget * 1e3, "the caller's deadline")], colors=cols)
    outs = ["ok", "late", "failed"]
    labels = ["answered in time", "answered late", "failed / refused"]
    r.bar_chart("Request outcomes", labels,
                {n: [sum(1 for rec in recs if rec[2] == o) for o in outs] for n, recs in runs.items()},
                "requests", colors=cols)
    burst: Mapping[str, Sequence[Sequence[Any]]] = dl.get("burst_runs", {})
    bcols = {n: WITH if "codel" in n.lower() else WITHOUT for n in burst}
    r.line_chart("Burst: latency of served requests by arrival", {
        n: [(float(t), float(lat) * 1e3) for t, o, lat in recs if o == "ok"]
        for n, recs in burst.items()}, "arrival time (s)", "latency (ms)", scatter=list(burst),
        hlines=[(patience * 1e3, "the caller's patience")], colors=bcols)

    def cls(rec: Sequence[Any]) -> str:
        if rec[1] == "ok":
            return "served in time" if float(rec[2]) <= patience else "served late"
        return {"timeout": "timed out", "shed": "shed"}.get(rec[1], "other")

    bo = ["served in time", "served late", "timed out", "shed"]
    r.bar_chart("Burst: outcomes", bo,
                {n: [sum(1 for rec in recs if cls(rec) == o) for o in bo] for n, recs in burst.items()},
                "requests", colors=bcols)


def edge_section(r: Report, edge: Mapping[str, Any]) -> None:
    """The edge phase (server-side admission under an injected overload signal): per class
    (``"<class>, <run>"`` in ``examples/edge_demo.py``) p99 latency over time, HTTP statuses and
    a table of its numbers; with ``cpu`` (``[(t_s, cores)]``, the injected signal's steps) and
    ``threshold`` (cores), the signal as a step chart and its time over the threshold shaded.
    ``edge``: ``{"per_class": {cls: {metric: number}}, "records": [(t_s, cls, http_status,
    latency_s)], "text": str, "cpu": [...], "threshold": float}`` (all optional)."""
    r.section("6. Edge: load shedding at the server", edge.get("text", (
        "An ASGI app behind the hullguard middleware under a burst of mixed critical and "
        "non-critical requests, with an injected CPU signal: non-critical requests are shed "
        "with 503 while the signal is over its threshold; critical ones pass while capacity "
        "is left.")))
    per_class: Mapping[str, Mapping[str, Any]] = edge.get("per_class", {})
    records: Sequence[Sequence[Any]] = edge.get("records", [])
    classes = list(per_class) or sorted({str(rec[1]) for rec in records})
    cpu: Sequence[Sequence[Number]] = edge.get("cpu", [])
    threshold = edge.get("threshold")
    bands: List[Tuple[float, float, str]] = []
    if threshold is not None:
        for i, (t, v) in enumerate(cpu):
            if float(v) > float(threshold):
                end_t = float(cpu[i + 1][0]) if i + 1 < len(cpu) else float(t)
                bands.append((float(t), end_t, "CPU signal over the threshold"))
    # One hue per class (the part before ", <run>"); the run without hullguard dashed.
    hues: Dict[str, str] = {}
    for c in classes:
        hues.setdefault(c.split(",")[0], PALETTE[len(hues) % len(PALETTE)])
    colours = {c: hues[c.split(",")[0]] for c in classes}
    dashed = [c for c in classes if "without" in c]
    if records:
        end = max(float(rec[0]) for rec in records)
        w = _window_for(end)
        r.line_chart("p99 latency over time, per class", {
            c: windowed([(float(t), float(lat) * 1e3) for t, cl, st, lat in records
                         if cl == c and int(st) < 500], w, 99.0, end) for c in classes},
            f"send time (s; windows of {w:g} s)", "latency of the 200s (ms, log scale)",
            y_log=True, bands=bands, colors=colours, dashed=dashed, wide=True,
            note="A gap: no request of that class answered 200 in the window.")
        statuses = sorted({int(rec[2]) for rec in records})
        shades = {200: GOOD, 503: SHED}
        r.bar_chart("HTTP statuses per class", classes, {
            str(st): [sum(1 for rec in records if rec[1] == c and int(rec[2]) == st)
                      for c in classes] for st in statuses}, "responses", stacked=True,
            colors={str(st): shades.get(st, GOOD if st < 400 else BAD) for st in statuses})
    if cpu and threshold is not None:
        r.step_chart("The injected CPU signal", {"CPU (cores)": [(t, v) for t, v in cpu]},
                     "time (s)", "cores", hlines=[(float(threshold), "shed threshold")],
                     y_range=(0.0, max([1.0] + [float(v) for _, v in cpu])),
                     colors={"CPU (cores)": BAD})
    if per_class:
        metrics: List[str] = []
        for numbers in per_class.values():
            metrics += [k for k in numbers if k not in metrics]
        r.table(["class", *metrics], [[c, *[per_class[c].get(k, "") for k in metrics]]
                                      for c in classes])


def host_section(r: Report, host: Mapping[str, Any]) -> None:
    """The host phase (one limit across worker processes): the degraded origin's in-flight
    requests over time, per-process bulkheads against one host-wide bulkhead, the limit as a
    line and the SIGKILL of a worker as a shaded instant. ``host``: ``{"limit", "workers",
    "runs": {name: [(t_s, in_flight)]}, "killed_at_s", "recovered_after_s"}``."""
    limit = int(host.get("limit", 0))
    workers = int(host.get("workers", 0))
    killed = host.get("killed_at_s")
    recovered = host.get("recovered_after_s")
    r.section("7. One limit per host: worker processes, one segment", (
        f"{workers} worker processes send to an origin that takes {limit} at once, through a "
        f"bulkhead of max_concurrent={limit} each: per-process bulkheads let the origin see "
        f"the limit multiplied; one host-wide bulkhead (hullguard.HostBulkhead) holds it, and "
        f"when a worker is SIGKILLed while holding permits the others reclaim its slot"
        + ("" if recovered is None else
           f" (the origin back at the limit {float(recovered) * 1e3:.0f} ms after the kill)")
        + "."))
    runs: Mapping[str, Sequence[Sequence[Number]]] = host.get("runs", {})
    if runs:
        bands: List[Tuple[float, float, str]] = []
        if killed is not None:
            end = float(killed) + float(recovered if recovered is not None else 0.05)
            bands.append((float(killed), max(end, float(killed) + 0.02),
                          "SIGKILL of a worker → reclaimed"))
        r.step_chart("In flight at the origin", {
            name: [(float(t), float(n)) for t, n in pts] for name, pts in runs.items()},
            "time since the workers started (s)", "requests in flight at the origin",
            hlines=[(float(limit), f"limit {limit}")], bands=bands, wide=True,
            colors={name: (BAD if "per-process" in name else GOOD) for name in runs})


def demo_report(rec: Mapping[str, Any], title: str = "hullguard demo report") -> Report:
    """The report of a recorded demo run (shape in the module docs): the run's parameters and
    checks, then one section per phase that ran."""
    r = Report(title, rec.get("subtitle", "make demo: real local HTTP traffic, loopback only"))
    if "isolation" in rec:
        isolation_section(r, rec["isolation"])
    if "breaker" in rec:
        breaker_section(r, rec["breaker"])
    if rec.get("adaptive"):
        adaptive_section(r, rec["adaptive"])
    if "llm" in rec:
        llm_section(r, rec["llm"])
    if "deadline" in rec:
        deadline_section(r, rec["deadline"])
    if "edge" in rec:
        edge_section(r, rec["edge"])
    if "host" in rec:
        host_section(r, rec["host"])
    r.section("Run parameters and checks")
    checks = rec.get("checks", [])
    if checks:
        r.table(["phase", "check", "result"], [[p, label, bool(ok)] for p, label, ok in checks],
                caption="The demo's checks, as it printed them")
    params = list(rec.get("params", {}).items())
    if params:
        # Three parameter/value column pairs, filled column by column.
        n = -(-len(params) // 3)
        cols = [params[i * n:(i + 1) * n] for i in range(3)]
        rows = []
        for i in range(n):
            row: List[object] = []
            for c in cols:
                v = c[i][1] if i < len(c) else ""
                text = f"{v:g}" if isinstance(v, float) else str(v)
                row += [c[i][0], text] if i < len(c) else ["", ""]
            rows.append(row)
        r.table(["parameter", "value"] * 3, rows, caption="The run's parameters")
    return r


# =============================================================================================
# A synthetic recording (deterministic), for the tests and `make report-test`.


def sample_recording(seed: int = 18) -> Dict[str, Any]:
    """A deterministic recording of :func:`demo_report`'s shape, like a scaled-down demo run
    (about a thousand records); no clock, no network."""
    rng = random.Random(seed)
    rec: Dict[str, Any] = {"subtitle": "synthetic recording (examples/report.py sample_recording)"}
    runs: Dict[str, List[Tuple[float, int, str, float]]] = {}
    for name in ("without hullguard", "with hullguard"):
        rs = []
        for i in range(300):
            t = i * 0.01
            if name.startswith("without"):
                lat = 0.006 + (min(1.9, t * 0.8) if t > 0.2 else 0.0) * rng.random()
                outcome = "ok" if lat < 2.0 else "pool_timeout (shared budget)"
            else:
                lat = 0.004 + 0.003 * rng.random()
                outcome = "ok"
            rs.append((t, 0, outcome, lat))
        for i in range(150):
            t = i * 0.02
            if name.startswith("without"):
                outcome = "ok" if i % 3 else "pool_timeout (shared budget)"
            else:
                outcome = "ok" if i % 5 == 0 else "rejected by bulkhead: queue_full"
            rs.append((t, 1, outcome, 1.0 + rng.random() if outcome == "ok" else 0.1))
        runs[name] = sorted(rs)
    rec["isolation"] = {"budget": 4, "healthy_ms": 5.0, "degraded_s": (1.0, 2.0), "seconds": 3.0,
                        "runs": runs}
    buckets = []
    for i in range(16):
        t = i * 0.5
        failing = 2.0 <= t < 5.6
        open_ = failing and t >= 2.5
        buckets.append({"ok": 0 if failing else 25, "failed": 5 if failing and not open_ else
                        (1 if open_ and i % 3 == 0 else 0),
                        "fast_failed": 24 if open_ else 0, "healthy_ok": 25, "healthy_total": 25,
                        "healthy_p99_s": 0.006 + 0.002 * rng.random()})
    rec["breaker"] = {"step": 0.5, "seconds": 8.0, "fail_at": 2.0, "heal_at": 5.6, "buckets": buckets,
                      "events": [(2.1, "closed", "open"), (3.6, "open", "half_open"),
                                 (3.61, "half_open", "open"), (5.1, "open", "half_open"),
                                 (5.11, "half_open", "open"), (6.6, "open", "half_open"),
                                 (6.62, "half_open", "closed")]}
    ad: Dict[str, Any] = {}
    for alg in ("gradient2", "aimd"):
        ticks = []
        limit = 64.0
        for k in range(1, 19):
            t = k * 0.5
            c = 16 if t <= 3 or t > 6 else 4
            limit += (1.4 * c - limit) * 0.45 + rng.uniform(-1.5, 1.5)
            lim = max(1, int(limit))
            ticks.append((t, c, lim, min(lim, 48), max(0, 48 - lim), max(0.0, rng.gauss(0.2, 0.1))))
        ad[alg] = {"service_s": 0.08, "phase_seconds": 3.0, "ticks": ticks}
    rec["adaptive"] = ad
    modes = [["none", "no bulkhead"], ["count", "count-only bulkhead"],
             ["tokens", "calls+tokens, refunds"], ["tokens_no_refund", "calls+tokens, no refund"]]
    lruns: Dict[str, Any] = {}
    traces: Dict[str, List[Tuple[float, str, str, float]]] = {}
    budget: Dict[str, List[Tuple[float, float]]] = {}
    for i, (m, _) in enumerate(modes):
        slow = {"none": 3.0, "count": 2.2, "tokens": 0.35, "tokens_no_refund": 0.45}[m]
        lruns[m] = {
            "requests": {"interactive": 60, "batch": 120},
            "ok": {"interactive": 60 - (20 if m == "none" else 0), "batch": 40 + 10 * i},
            "provider_429": {"interactive": 20 if m == "none" else (3 if m == "count" else 0),
                             "batch": 70 if m in ("none", "count") else 0},
            "refused": {"interactive": {}, "batch": {} if m == "none" else {"queue_timeout": 30 + i,
                                                                            "shed": 5 * i}},
            "pct": {"interactive": [slow * 0.4, slow], "batch": [2.0, 3.5]},
            "tokens_per_s": {"interactive": 1500.0 + 100 * i, "batch": 6000.0 + 1500 * i},
        }
        traces[m] = [(k * 0.05, "interactive", "ok", slow * (0.3 + 0.7 * rng.random()))
                     for k in range(60)]
        if m.startswith("tokens"):
            budget[m] = [(k * 0.02, min(40000.0, 30000 + 9000 * rng.random())) for k in range(150)]
    rec["llm"] = {"classes": ["interactive", "batch"], "modes": modes, "ceiling": 40000,
                  "runs": lruns, "traces": traces, "budget": budget}
    brun: Dict[str, List[Tuple[float, float, str]]] = {}
    for name in ("per-call timeouts (2 s)", "hullguard.deadline(1)"):
        rows = []
        for i in range(40):
            a = {0: 1.2, 1: 0.75}.get(i % 4, 0.2)
            if name.startswith("per-call"):
                lat, o = a + 0.4, ("ok" if a + 0.4 <= 1.0 else "late")
            else:
                lat = min(a + 0.4, 1.0 + 0.01 * rng.random())
                o = "ok" if a + 0.4 <= 1.0 else "failed"
            rows.append((i / 25.0, lat, o))
        brun[name] = rows
    burst: Dict[str, List[Tuple[float, str, float]]] = {}
    for name in ("FIFO, queue timeout only", "CoDel 20 ms + adaptive LIFO"):
        rows2 = []
        for i in range(320):
            t = 0.0 if i < 120 else (i - 120) * 0.01
            if name.startswith("FIFO"):
                o = "ok" if i % 3 else "timeout"
                lat = 0.9 + 0.1 * rng.random() if o == "ok" else 1.0
            else:
                o = "shed" if i % 3 == 0 else "ok"
                lat = 0.05 + 0.1 * rng.random() if o == "ok" else 0.1
            rows2.append((t, o, lat))
        burst[name] = rows2
    rec["deadline"] = {"budget_s": 1.0, "patience_s": 0.5, "budget_runs": brun, "burst_runs": burst}
    records: List[Tuple[float, str, int, float]] = []
    per: Dict[str, Dict[str, Any]] = {}
    for run in ("without hullguard", "with hullguard"):
        for cls in ("batch", "critical"):
            rows3 = []
            for k in range(200 if cls == "batch" else 50):
                t = k * (0.02 if cls == "batch" else 0.08)
                hot = 1.0 <= t < 2.5
                if run.startswith("without"):
                    st, lat = 200, 0.02 + (max(0.0, t - 1.0) * 0.6 if t >= 1.0 else 0.0)
                elif cls == "batch" and hot:
                    st, lat = 503, 0.001
                else:
                    st, lat = 200, 0.02 + (0.03 if hot else 0.0) * rng.random()
                rows3.append((t, f"{cls}, {run}", st, lat))
            records += rows3
            ok = sorted(x[3] for x in rows3 if x[2] == 200)
            per[f"{cls}, {run}"] = {"requests": len(rows3), "200": len(ok),
                                    "503": len(rows3) - len(ok),
                                    "p99 (ms)": round(percentile(ok, 99) * 1e3, 1)}
    rec["edge"] = {"per_class": per, "records": sorted(records),
                   "cpu": [(0.0, 0.3), (1.0, 0.95), (2.5, 0.3), (4.0, 0.3)], "threshold": 0.8}
    local = [(0.0, 0)] + [(0.24 + 0.001 * i, i + 1) for i in range(16)] + [(4.3, 0)]
    host_run = [(0.0, 0)] + [(0.24 + 0.001 * i, i + 1) for i in range(4)] + [
        (2.0, 3), (2.08, 4), (4.3, 0)]
    rec["host"] = {"limit": 4, "workers": 4, "killed_at_s": 2.0, "recovered_after_s": 0.08,
                   "runs": {"per-process bulkheads": local, "one host-wide bulkhead": host_run}}
    rec["checks"] = [("isolation", "healthy p99 with hullguard at most a fifth of without", True),
                     ("isolation", "no healthy request waited behind a degraded one", True),
                     ("policies", "breaker and adaptive-limit checks", True),
                     ("llm", "LLM gateway checks", True), ("deadline", "deadline checks", False)]
    rec["params"] = {"budget": 4, "seconds": 3.0, "degraded_min": 1.0, "degraded_max": 2.0,
                     "phase_seconds": 3.0, "algorithms": "gradient2,aimd",
                     "note": "<synthetic> & \"escaped\""}
    return rec


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Write the report of a synthetic demo recording.")
    p.add_argument("--sample", metavar="PATH", required=True,
                   help="write the synthetic recording's report to PATH")
    args = p.parse_args(argv)
    demo_report(sample_recording(), "hullguard demo report (synthetic sample)").write(args.sample)
    print(args.sample)
    return 0


if __name__ == "__main__":
    sys.exit(main())
