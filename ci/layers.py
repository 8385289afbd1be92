#!/usr/bin/env python3
"""The core's layer map, checked (docs/design.md § Layers).

Reads every file of `core/src` (not `lib.rs`, which only declares and re-exports, nor the
tests), finds the crate paths it uses (`use crate::…`, `crate::…` in code, `super::…`), and
checks two rules:

1. **Layers point down.** Each top-level module has a layer (LAYERS below, the table in
   `lib.rs`); a file may use modules of its own layer or lower ones only.
2. **No import cycles** between top-level modules, nor between the files of one module (a file
   is a node; an edge is "uses an item defined in"). Doc comments and comments are ignored.

Prints the module graph and exits 1 with the offending edge or cycle. Stdlib only.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "core" / "src"

# The table in core/src/lib.rs.
LAYERS = {
    "sync": 0, "run_flag": 0, "limits": 0, "clock": 0, "deadline": 0, "outcome": 0, "circuit": 0, "observe": 0, "load": 0,
    "policy": 2,
    "config": 3, "reason": 3,
    "engine": 4, "stats": 4, "metrics": 4,
    "front": 5, "event": 5,
    "registry": 6,
}

# The table in host/src/lib.rs (the host bulkhead, docs/design.md §14); `bin` and the loom
# models are not library modules.
HOST_LAYERS = {
    "sync": 0, "layout": 0, "crash": 0, "error": 0,
    "segment": 1,
    "os": 2, "file": 2,
    "options": 3,
    "attachment": 4, "queue": 4, "permit": 4,
    "stats": 5, "bulkhead": 5, "acquire": 5,
    "inspect": 6, "cli": 6,
}
# The table in fleet/src/lib.rs (the fleet bulkhead, docs/design.md §16).
FLEET_LAYERS = {
    "pool": 0, "protocol": 0, "script": 0,
    "lease": 1, "cli": 1,
    "transport": 2, "redis_transport": 2,
    "options": 3, "error": 3, "stats": 3,
    "fleet_core": 4,
    "bulkhead": 5,
}
CRATES = [(ROOT, LAYERS), (REPO / "host" / "src", HOST_LAYERS), (REPO / "fleet" / "src", FLEET_LAYERS)]


def module_path(f: Path) -> list[str]:
    """`core/src/engine/ring.rs` → ["engine", "ring"]; `engine/mod.rs` → ["engine"]."""
    parts = list(f.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts


def strip(text: str) -> str:
    """Drops comments, string literals and inline test modules (`#[cfg(test)] mod … { … }`)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    while m := re.search(r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod\s+\w+\s*\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        text = text[: m.start()] + text[i:]
    return text


def use_targets(code: str, here: list[str]) -> set[tuple[str, ...]]:
    """Absolute module paths (as tuples) this code refers to."""
    out: set[tuple[str, ...]] = set()
    # Expand `use crate::{a::{b, c}, d}` groups into flat paths first.
    # A module's `pub use` of its own children only re-exports them: not a dependency.
    def reexport(m: re.Match, p: tuple[str, ...]) -> bool:
        return m.group(1) is not None and p[: len(here)] == tuple(here) and len(p) > len(here)

    for m in re.finditer(r"(\bpub(?:\([^)]*\))?\s+)?\buse\s+((?:crate|super|self)\b[^;]*);", code, flags=re.S):
        for p in expand(re.sub(r"\s+", "", m.group(2))):
            t = resolve(p, here)
            if not reexport(m, t):
                out.add(t)
    code = re.sub(r"\buse\s+[^;]*;", "", code, flags=re.S)
    for m in re.finditer(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
        out.add(resolve(m.group(1).split("::"), here))
    return out


def expand(tree: str) -> list[list[str]]:
    """`crate::{a::{b,c},d}` → [[crate,a,b],[crate,a,c],[crate,d]] (one level of prefix per brace)."""
    depth, i = 0, tree.find("{")
    if i < 0:
        return [tree.split("::")]
    prefix = tree[:i].rstrip(":").split("::")
    body, items, cur = tree[i + 1 : tree.rindex("}")], [], ""
    for ch in body:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for it in filter(None, items):
        it = it.split(" as ")[0]
        for sub in expand(it):
            out.append(prefix + [s for s in sub if s])
    return out


def resolve(path: list[str], here: list[str]) -> tuple[str, ...]:
    if path[0] == "crate":
        return tuple(path[1:])
    base = list(here)
    while path and path[0] in ("super", "self"):
        if path.pop(0) == "super":
            base = base[:-1]
    return tuple(base + path)


def main() -> int:
    rc = 0
    for root, layers in CRATES:
        global ROOT, LAYERS
        ROOT, LAYERS = root, layers
        rc |= check()
    return rc


def check() -> int:
    files = {}
    for f in sorted(ROOT.rglob("*.rs")):
        rel = f.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bin") or rel == Path("lib.rs") or rel.stem == "loom_models":
            continue
        files[tuple(module_path(f))] = strip(f.read_text())
    nodes = set(files)

    def owner(target: tuple[str, ...]) -> tuple[str, ...] | None:
        """The longest file-module prefix of a referenced path."""
        for n in range(len(target), 0, -1):
            if target[:n] in nodes:
                return target[:n]
        return None

    problems = []
    top_edges: dict[str, set[str]] = {}
    file_edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {n: set() for n in nodes}
    for here, code in files.items():
        top = here[0]
        if top not in LAYERS:
            problems.append(f"{ROOT.relative_to(REPO)}/{'/'.join(here)}: module `{top}` has no layer in ci/layers.py")
            continue
        for t in use_targets(code, list(here)):
            o = owner(t)
            if o is None or o == here:
                continue
            # A parent module file (`mod.rs`) declaring its children is not a dependency.
            if o[: len(here)] == here and len(o) > len(here) and not t[len(here) + 1 :]:
                continue
            file_edges[here].add(o)
            if o[0] != top:
                top_edges.setdefault(top, set()).add(o[0])
                if LAYERS.get(o[0], 99) > LAYERS[top]:
                    problems.append(
                        f"{ROOT.relative_to(REPO)}/{'/'.join(here)} (L{LAYERS[top]} {top}) uses "
                        f"{'::'.join(t)} (L{LAYERS[o[0]]} {o[0]}): layers point down"
                    )

    def cycles(graph: dict) -> list[list]:
        found, state, stack = [], {}, []

        def visit(n):
            state[n] = 1
            stack.append(n)
            for m in sorted(graph.get(n, ())):
                if state.get(m) == 1:
                    found.append(stack[stack.index(m):] + [m])
                elif m not in state:
                    visit(m)
            stack.pop()
            state[n] = 2

        for n in sorted(graph):
            if n not in state:
                visit(n)
        return found

    for c in cycles(top_edges):
        problems.append("module cycle: " + " → ".join(c))
    for c in cycles({k: v for k, v in file_edges.items()}):
        problems.append("file cycle: " + " → ".join("/".join(x) or "lib" for x in c))
    if "-v" in sys.argv:
        for k in sorted(file_edges):
            print("  ", "/".join(k), "→", ", ".join(sorted("/".join(x) for x in file_edges[k])))

    print(f"{ROOT.parent.name} layers (ci/layers.py): module → modules it uses")
    for top in sorted(LAYERS, key=lambda t: (LAYERS[t], t)):
        deps = sorted(top_edges.get(top, ()), key=lambda t: (LAYERS.get(t, 99), t))
        print(f"  L{LAYERS[top]} {top:9} → {', '.join(deps) or '-'}")
    if problems:
        print("\n".join(["", *problems]), file=sys.stderr)
        return 1
    print(f"  {len(nodes)} files, no upward edge, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
