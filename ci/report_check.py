#!/usr/bin/env python3
"""Checks the demo's HTML report (examples/report.py): its structure, then a headless render.

    python3 ci/report_check.py REPORT.html [--png OUT.png] [--expect-section TEXT ...]
                                           [--strict-series] [--no-render] [--timeout 60]

1. **Structure** (``html.parser``, standard library): a ``<title>`` and an ``<h1>``; every chart
   is a ``<figure class="chart">`` holding exactly one ``<svg>`` whose ``<title>`` is the
   figure's ``data-title`` (non-empty), and no ``<svg>`` outside one; every chart has at least
   one series with points (``<g class="series" data-points=N>``, N > 0; ``--strict-series``:
   every series); nothing that runs or loads anything: no ``<script>`` (with or without
   ``src``), ``<link>``, ``<iframe>``, ``<img>``, ``<object>``, ``<embed>``, ``<base>``, no
   ``on*=`` handler, no ``src`` / ``href`` / ``xlink:href`` other than a ``#fragment`` (so no
   http(s) URL), no ``url(`` / ``@import`` / ``@font-face`` in a style; each
   ``--expect-section`` is a substring of some ``<h2>``.
2. **Render** (Debian's ``chromium``, driven directly): one run
   ``chromium --headless --no-sandbox --disable-gpu ... --screenshot=PNG
   --window-size=1280,H file://REPORT`` (H: the report's own height estimate,
   ``<meta name="hullguard-report-height">``, at least 4000) with ``--enable-logging=stderr
   --v=0``: the PNG must be a valid PNG (signature, chunk CRCs, IHDR 1280 × H, 8-bit RGB(A),
   the inflated data exactly H rows with valid filter bytes), non-trivial (over 40 KB and at
   least 150 distinct scanlines: a blank or one-colour page has a handful) and the page must log
   nothing to the console (a ``CONSOLE`` line of the page or an ``Uncaught`` error fails: the
   report has no script, so any console output is an error such as an SVG attribute the browser
   rejected); a second run with ``--dump-dom`` must show the same number of charts and ``<svg>``
   elements as the file (the browser parsed it as written).

Every Chromium run has a fresh ``--user-data-dir`` and ``HOME`` in a temporary directory, runs
in a session of its own, is killed with its whole process group after ``--timeout`` seconds (and
any straggler of the group when it exits), and is reaped. Exit status 0 when every check passes,
1 otherwise (each problem printed), 2 when Chromium is missing (``make setup`` installs it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

FORBIDDEN_TAGS = {"script", "link", "iframe", "frame", "img", "object", "embed", "base", "audio",
                  "video", "source", "image", "foreignobject", "portal", "applet"}
URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data",
             "background", "ping", "manifest"}
CSS_FETCH = re.compile(r"url\s*\(|@import|@font-face", re.I)
MIN_HEIGHT, MAX_HEIGHT, WIDTH = 4000, 16000, 1280


@dataclass
class Chart:
    title: str
    kind: str
    svgs: int = 0
    svg_title: str = ""
    series: List[Tuple[str, int]] = field(default_factory=list)


@dataclass
class Structure:
    """What the parser saw (``problems`` empty when the report is well formed)."""

    title: str = ""
    h1: str = ""
    sections: List[str] = field(default_factory=list)
    charts: List[Chart] = field(default_factory=list)
    svgs: int = 0
    tables: int = 0
    height: Optional[int] = None
    problems: List[str] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(n for c in self.charts for _, n in c.series)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.s = Structure()
        self.chart: Optional[Chart] = None
        self.capture: Optional[str] = None  # "title" | "h1" | "h2" | "svgtitle" | "style"
        self.buf: List[str] = []
        self.svg_depth = 0
        self.svg_children = 0

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        a: Dict[str, str] = {k.lower(): v or "" for k, v in attrs}
        t = tag.lower()
        if t in FORBIDDEN_TAGS:
            self.s.problems.append(f"<{t}> is not allowed (the report runs and loads nothing)")
        for k, v in a.items():
            if k.startswith("on"):
                self.s.problems.append(f"<{t} {k}=...>: an event handler (a script)")
            if k in URL_ATTRS and not v.startswith("#"):
                what = "an http(s) URL" if re.match(r"\s*(https?:)?//", v, re.I) else "a reference"
                self.s.problems.append(f"<{t} {k}={v!r}>: {what} outside the file")
            if k == "style" and CSS_FETCH.search(v):
                self.s.problems.append(f"<{t} style=...>: fetches ({v[:60]!r})")
            if k == "http-equiv" and v.lower() == "refresh":
                self.s.problems.append("<meta http-equiv=refresh>")
        if t == "meta" and a.get("name") == "hullguard-report-height":
            try:
                self.s.height = int(a.get("content", ""))
            except ValueError:
                self.s.problems.append("hullguard-report-height is not a number")
        if t == "figure" and "chart" in a.get("class", "").split():
            if self.chart is not None:
                self.s.problems.append("a chart figure inside another")
            self.chart = Chart(a.get("data-title", ""), a.get("data-kind", ""))
        elif t == "svg":
            self.s.svgs += 1
            if self.svg_depth == 0:
                if self.chart is None:
                    self.s.problems.append("an <svg> outside a chart figure")
                else:
                    self.chart.svgs += 1
                self.svg_children = 0
            self.svg_depth += 1
        elif t == "table":
            self.s.tables += 1
        elif t == "g" and "series" in a.get("class", "").split():
            if self.chart is None:
                self.s.problems.append("a series outside a chart")
            else:
                try:
                    n = int(a.get("data-points", ""))
                except ValueError:
                    n = -1
                    self.s.problems.append(f"series {a.get('data-series')!r}: no data-points")
                self.chart.series.append((a.get("data-series", ""), n))
        if self.svg_depth >= 1 and t != "svg":
            self.svg_children += 1
        if t == "style":
            self._start("style")
        elif t == "title" and self.svg_depth >= 1:
            if self.svg_children <= 2:  # the svg's first element, or its second after <style>
                self._start("svgtitle")
        elif t in ("title", "h1", "h2") and self.svg_depth == 0:
            self._start(t)

    def _start(self, what: str) -> None:
        self.capture, self.buf = what, []

    def handle_endtag(self, tag: str) -> None:
        t = tag.lower()
        if self.capture is not None and (t == self.capture or
                                         (self.capture == "svgtitle" and t == "title")):
            text = " ".join("".join(self.buf).split())
            if self.capture == "title":
                self.s.title = text
            elif self.capture == "h1":
                self.s.h1 = text
            elif self.capture == "h2":
                self.s.sections.append(text)
            elif self.capture == "svgtitle" and self.chart is not None:
                self.chart.svg_title = text
            elif self.capture == "style" and CSS_FETCH.search(text):
                self.s.problems.append("a <style> that fetches (url( / @import / @font-face)")
            self.capture = None
        if t == "svg":
            self.svg_depth = max(0, self.svg_depth - 1)
        elif t == "figure" and self.chart is not None:
            self.s.charts.append(self.chart)
            self.chart = None

    def handle_data(self, data: str) -> None:
        if self.capture is not None:
            self.buf.append(data)


def check_structure(text: str, expect_sections: Sequence[str] = (),
                    strict_series: bool = False) -> Structure:
    """Parses a report and lists what is wrong with it in ``.problems`` (see the module docs)."""
    p = _Parser()
    p.feed(text)
    p.close()
    s = p.s
    if not s.title:
        s.problems.append("no <title>")
    if not s.h1:
        s.problems.append("no <h1>")
    if not s.charts:
        s.problems.append("no chart")
    for i, c in enumerate(s.charts, 1):
        name = f"chart {i} ({c.title!r})"
        if c.svgs != 1:
            s.problems.append(f"{name}: {c.svgs} <svg> elements, want exactly 1")
        if not c.title or not c.svg_title:
            s.problems.append(f"{name}: no title (data-title / <svg><title>)")
        elif c.title != c.svg_title:
            s.problems.append(f"{name}: <title> {c.svg_title!r} differs from data-title")
        if not any(n > 0 for _, n in c.series):
            s.problems.append(f"{name}: no series with data")
        if strict_series:
            for series, n in c.series:
                if n <= 0:
                    s.problems.append(f"{name}: series {series!r} is empty")
    if s.svgs != sum(c.svgs for c in s.charts):
        s.problems.append(f"{s.svgs} <svg> elements but {len(s.charts)} charts")
    for want in expect_sections:
        if not any(want.lower() in h.lower() for h in s.sections):
            s.problems.append(f"no section titled like {want!r} (have {s.sections})")
    return s


# ---------------------------------------------------------------------------------------------
# The PNG.


def check_png(path: Path, width: int, height: int) -> List[str]:
    """Problems with the screenshot (empty when it is a valid, non-trivial ``width`` ×
    ``height`` 8-bit RGB/RGBA PNG)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return [f"no screenshot: {e}"]
    problems: List[str] = []
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return [f"{path}: not a PNG (signature {data[:8]!r})"]
    pos, ihdr, idat, ended = 8, b"", [], False
    while pos + 12 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            return [f"{path}: chunk {kind!r} has a bad CRC"]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            ended = True
            break
        pos += 12 + n
    if len(ihdr) != 13 or not idat or not ended:
        return [f"{path}: missing IHDR, IDAT or IEND"]
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    if (w, h) != (width, height):
        problems.append(f"{path}: {w} x {h}, want {width} x {height}")
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        return problems + [f"{path}: depth {depth}, colour type {colour}, interlace {interlace}: "
                           f"want 8-bit RGB or RGBA, not interlaced"]
    raw = zlib.decompress(b"".join(idat))
    stride = 1 + w * (3 if colour == 2 else 4)
    if len(raw) != h * stride:
        return problems + [f"{path}: {len(raw)} bytes of pixel data, want {h * stride}"]
    rows = [raw[i:i + stride] for i in range(0, len(raw), stride)]
    if any(r[0] > 4 for r in rows):
        problems.append(f"{path}: a scanline with an invalid filter type")
    distinct = len(set(rows))
    if len(data) < 40_000 or distinct < 150:
        problems.append(f"{path}: looks blank ({len(data)} bytes, {distinct} distinct scanlines)")
    return problems


# ---------------------------------------------------------------------------------------------
# Chromium.

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions",
                  "--disable-default-apps", "--hide-scrollbars", "--mute-audio",
                  "--force-device-scale-factor=1"]
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught", re.I)


def find_chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def run_bounded(cmd: List[str], timeout: float, env: Dict[str, str], cwd: str
                ) -> Tuple[Optional[int], str, str]:
    """Runs ``cmd`` in a session of its own with stdout/stderr to files; after ``timeout``
    seconds kills its whole process group. When it ends, kills what is left of its group
    (before reaping the leader, so the group id cannot have been reused) and reaps it.
    Returns (exit status or None on timeout, stdout, stderr)."""
    out_path, err_path = os.path.join(cwd, "stdout"), os.path.join(cwd, "stderr")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                cwd=cwd, start_new_session=True)
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            # Wait without reaping: the leader stays a zombie, its pid (= the group id) taken.
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None and info.si_pid == proc.pid:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        status = proc.wait()
    with open(out_path, "rb") as f:
        stdout = f.read().decode(errors="replace")
    with open(err_path, "rb") as f:
        stderr = f.read().decode(errors="replace")
    return (None if timed_out else status), stdout, stderr


def render(report: Path, png: Path, height: int, timeout: float, chromium: str
           ) -> Tuple[List[str], str]:
    """Screenshot and DOM dump of ``report``; (problems, the dumped DOM)."""
    problems: List[str] = []
    url = report.resolve().as_uri()
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    dom = ""
    for mode in ("screenshot", "dump-dom"):
        with tempfile.TemporaryDirectory(prefix="hg-report-check-") as tmp:
            env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME=os.path.join(tmp, "config"),
                       XDG_CACHE_HOME=os.path.join(tmp, "cache"))
            cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={os.path.join(tmp, 'profile')}",
                   "--enable-logging=stderr", "--v=0", f"--window-size={WIDTH},{height}"]
            cmd += [f"--screenshot={png.resolve()}"] if mode == "screenshot" else ["--dump-dom"]
            started = time.monotonic()
            status, out, err = run_bounded(cmd + [url], timeout, env, tmp)
            took = time.monotonic() - started
        if status is None:
            problems.append(f"chromium {mode}: no exit within {timeout:g} s (killed)")
            continue
        if status != 0:
            tail = "\n".join(err.splitlines()[-15:])
            problems.append(f"chromium {mode}: exit status {status}\n{tail}")
        console = [line for line in err.splitlines() if CONSOLE.search(line)]
        for line in console:
            problems.append(f"chromium {mode}: console output from the page: {line.strip()}")
        print(f"report-check: chromium --{mode}: {took:.1f} s, exit {status}, "
              f"{len(console)} console lines", flush=True)
        if mode == "dump-dom":
            dom = out
    return problems, dom


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", type=Path, help="the HTML report")
    p.add_argument("--png", type=Path, help="the screenshot (default: the report's .png)")
    p.add_argument("--expect-section", action="append", default=[], metavar="TEXT",
                   help="a section whose <h2> contains TEXT must exist (repeatable)")
    p.add_argument("--strict-series", action="store_true",
                   help="every series must have points (a synthetic report's)")
    p.add_argument("--no-render", action="store_true", help="the structure check only")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per Chromium run")
    args = p.parse_args(argv)

    text = args.report.read_text(encoding="utf-8")
    s = check_structure(text, args.expect_section, args.strict_series)
    empty = [f"{c.title} / {n}" for c in s.charts for n, k in c.series if k <= 0]
    print(f"report-check: {args.report}: {len(s.sections)} sections, {len(s.charts)} charts, "
          f"{s.tables} tables, {sum(len(c.series) for c in s.charts)} series, {s.points} points"
          + (f"; empty series: {empty}" if empty else ""), flush=True)
    problems = list(s.problems)
    if not args.no_render:
        chromium = find_chromium()
        if chromium is None:
            print("report-check: no chromium on PATH (make setup installs Debian's)",
                  file=sys.stderr)
            return 2
        height = min(MAX_HEIGHT, max(MIN_HEIGHT, s.height or MIN_HEIGHT))
        png = args.png or args.report.with_suffix(".png")
        rendered, dom = render(args.report, png, height, args.timeout, chromium)
        problems += rendered
        if not any("screenshot" in x and "killed" in x for x in rendered):
            problems += check_png(png, WIDTH, height)
        if dom:
            charts = len(re.findall(r'<figure class="chart', dom))
            svgs = len(re.findall(r"<svg[\s>]", dom))
            if (charts, svgs) != (len(s.charts), s.svgs):
                problems.append(f"the browser's DOM has {charts} charts and {svgs} <svg>, the "
                                f"file {len(s.charts)} and {s.svgs}")
        if png.exists():
            print(f"report-check: {png} ({png.stat().st_size // 1024} KB, {WIDTH} x {height})")
    for x in problems:
        print(f"report-check: FAIL: {x}", file=sys.stderr)
    if not problems:
        print("report-check: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
