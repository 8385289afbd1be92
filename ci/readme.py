#!/usr/bin/env python3
"""Runs the README's Python, Node and C snippets as written (the Rust ones are doc tests of
`examples/src/lib.rs`, which includes the README).

Every fenced block is run:
  ```python   with the project's venv Python (the extension built by `make py-dev`);
  ```js       as CommonJS (`.cjs`) when it calls `require(`, else as an ES module (`.mjs`),
              from a scratch project whose `node_modules/hullguard` is `bindings-node/`;
  ```c        compiled against `ffi/include` and the release static library, then run.
Each block gets a time limit and must exit 0; a language with no block fails the run, so a
README edit cannot turn this check into a no-op. A real `redis-server` runs on a free loopback
port for the whole run, its URL in `HULLGUARD_REDIS_URL` (the fleet snippets read it); a JS
snippet can `require('ioredis')` (the Node package's dev dependency), a C snippet that includes
hiredis is linked with `-lhiredis`.

    ci/readme.py            every block
    ci/readme.py --list     the blocks found, not run
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
TIME_LIMIT = 120  # seconds per block: ~10x what each takes on a busy machine
WANT = ("python", "js", "c")


def blocks() -> list[tuple[str, int, str]]:
    text = (ROOT / "README.md").read_text()
    out = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang in WANT:
            out.append((lang, text[: m.start()].count("\n") + 1, body))
    return out


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {TIME_LIMIT} s"
    return p.returncode, (p.stdout + p.stderr).strip()


def start_redis(work: Path) -> tuple[subprocess.Popen[str], str]:
    """A `redis-server` on a free loopback port (no persistence), and its URL."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port),
                             "--save", "", "--appendonly", "no", "--dir", str(work)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise SystemExit("readme: redis-server did not start (make setup installs it)")


def main() -> int:
    found = blocks()
    if "--list" in sys.argv:
        for lang, line, _ in found:
            print(f"README.md:{line}: {lang}")
        return 0
    missing = [lang for lang in WANT if not any(b[0] == lang for b in found)]
    if missing:
        print(f"readme: no {', '.join(missing)} block in README.md", file=sys.stderr)
        return 1
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not target.is_absolute():
        target = ROOT / target
    lib = target / "release" / "libhullguard.a"
    py = ROOT / ".venv" / "bin" / "python"
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="hg-readme-") as tmp:
        work = Path(tmp)
        (work / "node_modules").mkdir()
        (work / "node_modules" / "hullguard").symlink_to(ROOT / "bindings-node")
        ioredis = ROOT / "bindings-node" / "node_modules" / "ioredis"
        if ioredis.exists():
            (work / "node_modules" / "ioredis").symlink_to(ioredis)
        server, url = start_redis(work)
        os.environ["HULLGUARD_REDIS_URL"] = url
        try:
            failed = run_all(found, work, py, cc, lib)
        finally:
            server.kill()
            server.wait()
    print(f"readme: {len(found) - failed} of {len(found)} snippets ran as written")
    return 1 if failed else 0


def run_all(found: list[tuple[str, int, str]], work: Path, py: Path, cc: str, lib: Path) -> int:
    """Runs every block in `work`; the number that failed."""
    failed = 0
    for i, (lang, line, body) in enumerate(found):
        start = time.monotonic()
        if lang == "python":
            f = work / f"snippet{i}.py"
            f.write_text(body)
            rc, out = run([str(py), str(f)], work)
        elif lang == "js":
            f = work / f"snippet{i}.{'cjs' if 'require(' in body else 'mjs'}"
            f.write_text(body)
            rc, out = run([shutil.which("node") or "node", str(f)], work)
        else:
            f = work / f"snippet{i}.c"
            f.write_text(body)
            exe = work / f"snippet{i}"
            extra = ["-lhiredis"] if "hiredis" in body else []
            rc, out = run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror",
                           f"-I{ROOT / 'ffi' / 'include'}", str(f), str(lib), *extra,
                           "-lpthread", "-ldl", "-lm", "-o", str(exe)], work)
            if rc == 0:
                rc, out = run([str(exe)], work)
        took = time.monotonic() - start
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        first = out.splitlines()[-1] if out else ""
        print(f"readme: README.md:{line:<4} {lang:<6} {status:<16} {took:5.1f} s  {first[:60]}")
        if rc != 0:
            failed += 1
            print(out, file=sys.stderr)
    return failed


if __name__ == "__main__":
    sys.exit(main())
