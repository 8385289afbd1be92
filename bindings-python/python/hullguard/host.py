"""One limit per host (docs/design.md §14; Linux): :class:`HostBulkhead` shared by every process
that opens the same name — gunicorn / uvicorn ``--workers``, celery, several containers on one
``/dev/shm`` or volume — crash-safe: a SIGKILLed holder's permits come back within about one
``probe`` period (default 0.25 s), a stopped or hung one's after ``lease_ttl`` (default 10 s).

::

    import hullguard

    db = hullguard.HostBulkhead("payments-db", max_concurrent=5)   # 5 on this host, in all

    async def handler():
        async with db.acquire(timeout=2.0):        # FIFO across processes
            ...

    with db.acquire_sync():                        # from a thread
        ...

A gunicorn master reaps a dead worker's slot at once (``gunicorn.conf.py``)::

    from hullguard.host import child_exit
    child_exit = child_exit("payments-db")

The ``hullguard`` command (``hullguard host ls | show NAME | reap NAME | rm NAME``) lists,
shows, reaps and removes segments; ``hullguard fleet show POOL`` shows a fleet pool
(:func:`main`).
"""

from __future__ import annotations

import asyncio
import math
import sys
from typing import Any, Callable, Dict, List, Optional

if sys.platform != "linux":  # pragma: no cover - the suite runs on Linux
    raise ImportError("hullguard.host needs Linux (OFD locks, futexes, a shared /dev/shm)")

from ._errors import ForeignLeaseError, HostSegmentError, LeaseError, StaleLeaseError
from ._native import HostAcquireContext, HostBulkhead, HostPermit, _host_cli, _host_reap

__all__ = [
    "HostBulkhead",
    "HostPermit",
    "HostAcquireContext",
    "StaleLeaseError",
    "ForeignLeaseError",
    "LeaseError",
    "HostSegmentError",
    "reap",
    "child_exit",
    "main",
    "DEFAULT_DIR",
]

DEFAULT_DIR = "/dev/shm"
"""Where segments live unless ``dir=`` says otherwise."""


def reap(name: str, *, dir: str = DEFAULT_DIR) -> int:
    """Reclaims every dead process's slot of host bulkhead ``name`` in ``dir`` now, without
    attaching to it (this process takes no slot): the slots reclaimed. For a process manager
    (a gunicorn master, a supervisor) that saw a worker die. ``HostSegmentError`` if there is no
    such segment or it cannot be read."""
    return _host_reap(name, _fspath(dir))


def child_exit(name: str, *, dir: str = DEFAULT_DIR) -> Callable[[Any, Any], int]:
    """A gunicorn ``child_exit(server, worker)`` hook that reaps host bulkhead ``name`` (see
    :func:`reap`) when a worker exits, so a killed worker's permits return at once rather than
    at the next probe of a live worker. ``gunicorn.conf.py``::

        from hullguard.host import child_exit
        child_exit = child_exit("payments-db")

    The hook returns the slots reclaimed. A segment no worker created yet is not an error (0);
    any other failure is logged through ``server.log`` (when there is one) and never raised
    into the master."""
    dir = _fspath(dir)

    def hook(server: Any, worker: Any) -> int:
        try:
            return _host_reap(name, dir)
        except HostSegmentError as e:
            if e.kind == "io" and e.errno == 2:  # ENOENT: nobody opened it yet
                return 0
            log = getattr(server, "log", None)
            if log is not None:
                log.warning("hullguard: reaping host bulkhead %r failed: %s", name, e)
            return 0

    hook.__name__ = "child_exit"
    hook.__qualname__ = "child_exit"
    return hook


def main(argv: Optional[List[str]] = None) -> int:
    """The ``hullguard`` command: ``hullguard host ls | show NAME | reap NAME | rm NAME
    [--dir DIR] [--json] [--force]`` and ``hullguard fleet show POOL [--redis URL] [--json]``
    (the Rust crate's command, shared by every package: the fleet pool is read with redis-py,
    ``$HULLGUARD_REDIS_URL`` by default). Prints what it prints; returns its exit status (0
    done, 1 failed, 2 bad usage)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["fleet"]:
        from .fleet import _cli

        status, out, err = _cli(args)
    else:
        status, out, err = _host_cli(args)
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    return status


async def _drain(bh: HostBulkhead, timeout: Optional[float]) -> Dict[str, Any]:
    """``await bh.drain(timeout)``: polls this process's holds on the running loop (the crate
    has no drain wake-up) every 10 ms until idle or ``timeout`` seconds passed."""
    loop = asyncio.get_running_loop()
    until = None if timeout is None or math.isinf(timeout) else loop.time() + timeout
    while True:
        r = bh.drain_sync(0)
        if r["drained"]:
            return r
        if until is not None:
            left = until - loop.time()
            if left <= 0:
                return r
            await asyncio.sleep(min(0.01, left))
        else:
            await asyncio.sleep(0.01)


def _fspath(p: Any) -> str:
    import os

    s = os.fspath(p)
    if not isinstance(s, str):
        raise TypeError(f"dir must be a str or os.PathLike of str, not {type(s).__name__}")
    return s


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
