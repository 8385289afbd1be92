"""The other processes of tests/test_host.py (a host bulkhead is shared by processes).

* Run as a script (``python _host_child.py '<json config>'``): opens ``HostBulkhead(name,
  **opts)``, prints ``ready <slot> <pid>`` and then obeys one command per stdin line, answering
  one line each: ``acquire <timeout>`` → ``held`` (or ``error <class> <reason>``), ``try`` →
  ``held`` / ``none``, ``release`` → ``released <bool>`` or ``error <class> <code>``,
  ``stats`` → ``stats <json>``, ``exit`` → exits 0 (so does end of input).
* :func:`spawn_worker`: a ``multiprocessing`` (spawn) worker that acquires, releases and
  returns normally.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List


def spawn_worker(name: str, opts: Dict[str, Any], out: Any) -> None:
    import hullguard

    bh = hullguard.HostBulkhead(name, **opts)
    p = bh.acquire_sync(timeout=10)
    ok = p.release()
    out.send({"slot": bh.slot, "released": ok, "admitted": bh.stats()["admitted_total"]})
    out.close()


def _main(cfg: Dict[str, Any]) -> int:
    import hullguard

    bh = hullguard.HostBulkhead(cfg["name"], **cfg["opts"])
    held: List[Any] = []
    import os

    print("ready", bh.slot, os.getpid(), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        try:
            if cmd[0] == "acquire":
                held.append(bh.acquire_sync(timeout=float(cmd[1])))
                print("held", flush=True)
            elif cmd[0] == "try":
                p = bh.try_acquire()
                if p is None:
                    print("none", flush=True)
                else:
                    held.append(p)
                    print("held", flush=True)
            elif cmd[0] == "release":
                print("released", held.pop().release(), flush=True)
            elif cmd[0] == "stats":
                print("stats", json.dumps(bh.stats()), flush=True)
            elif cmd[0] == "exit":
                break
            else:
                print("error", "unknown", cmd[0], flush=True)
        except Exception as e:  # reported to the test, which asserts on it
            tag = getattr(e, "reason", None) or getattr(e, "code", None) or ""
            print("error", type(e).__name__, tag, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(json.loads(sys.argv[1])))
