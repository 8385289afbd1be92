#!/usr/bin/env python3
"""How much of each binding decides rather than marshals (issue 12's measure).

A *decision line* is a code line with a branch: Rust `if` / `else` / `match` / a match arm
(`=>`); Python `if` / `elif` / `else` / `while` / a conditional expression; JS `if` / `else` /
`switch` / `case` / `while` / a `? :` conditional. Blank and comment lines are not counted.
Argument validation is a branch too: the measure is deliberately crude and the same for every
revision, so before / after compare.

    ci/binding-logic.py            this work tree
    ci/binding-logic.py REV        a git revision (e.g. the commit before a refactor)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINDINGS = {
    "python": ["bindings-python/src", "bindings-python/python/hullguard"],
    "node": ["bindings-node/src", "bindings-node/index.js", "bindings-node/http.js",
             "bindings-node/outcome.js", "bindings-node/index.mjs"],
    "c": ["ffi/src"],
}
EXT = {".rs", ".py", ".js", ".mjs"}

RUST = re.compile(r"(^|[^\w])(if|else|match|while)\b|=>")
PY = re.compile(r"^\s*(if|elif|else|while|except)\b|\sif\s.+\selse\s")
JS = re.compile(r"(^|[^\w.])(if|else|switch|case|while)\b|\?[^.?:]*:")


def files(rev: str | None, path: str) -> list[tuple[str, str]]:
    if rev is None:
        p = ROOT / path
        paths = [p] if p.is_file() else sorted(p.rglob("*"))
        return [(str(f), f.read_text()) for f in paths if f.suffix in EXT and f.is_file()]
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, path], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in listed:
        if Path(name).suffix in EXT:
            text = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout
            out.append((name, text))
    return out


def count(name: str, text: str) -> tuple[int, int]:
    rust, py = name.endswith(".rs"), name.endswith(".py")
    pat = RUST if rust else PY if py else JS
    code = decisions = 0
    in_block = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if py and (line.startswith("#") or line.startswith('"""') or line.startswith("'''")):
            if line.count('"""') == 1 or line.count("'''") == 1:
                in_block = not in_block
            continue
        if in_block:
            if '"""' in line or "'''" in line:
                in_block = False
            continue
        if not py and (line.startswith("//") or line.startswith("*") or line.startswith("/*")):
            continue
        code += 1
        if pat.search(line):
            decisions += 1
    return code, decisions


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    print(f"{'binding':<8} {'code lines':>10} {'decision lines':>15} {'share':>6}   ({rev or 'work tree'})")
    for b, paths in BINDINGS.items():
        code = dec = 0
        for p in paths:
            for name, text in files(rev, p):
                c, d = count(name, text)
                code += c
                dec += d
        print(f"{b:<8} {code:>10} {dec:>15} {dec / max(code, 1):>6.0%}")


if __name__ == "__main__":
    main()
