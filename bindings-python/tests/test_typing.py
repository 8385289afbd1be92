"""The type stubs (python/hullguard/_native.pyi) as a type checker reads user code.

Issue 13 bug 4: `__exit__` / `__aexit__` typed as returning `bool` told mypy that a `with`
block may swallow its exception, so a function returning from inside one was reported
"Missing return statement". They return `None` (they never swallow).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SNIPPET = '''
import hullguard

bh = hullguard.Bulkhead(max_concurrent=2)


def sync_with() -> int:
    with bh.acquire_sync():
        return 1


async def async_with_acquire() -> int:
    async with bh.acquire() as permit:
        reveal_type(permit)
        return 1


async def async_with_bulkhead() -> int:
    async with bh:
        return 1


def try_acquire() -> int:
    permit = bh.try_acquire()
    assert permit is not None
    with permit:
        return 1
'''


def test_mypy_sees_that_with_blocks_never_swallow(tmp_path: Path) -> None:
    src = tmp_path / "user_code.py"
    src.write_text(textwrap.dedent(SNIPPET))
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy_cache"), str(src)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "Missing return statement" not in out, out
    assert 'Revealed type is "hullguard._native.Permit"' in out, out
    # reveal_type is reported as a note; nothing else may be.
    assert proc.returncode == 0, out
    assert out.count("error:") == 0, out
