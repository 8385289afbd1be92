"""A worker process of tests/test_fleet.py (fleet bulkheads are shared by processes).

Run as a script (``python _fleet_child.py '<json config>'``): opens ``FleetBulkhead(redis,
pool, max_concurrent=limit, lease_ttl=ttl)`` on a sync ``redis.Redis`` to ``port``, and runs
``threads`` threads that each acquire (0.2 s timeout), count themselves in at the oracle, hold
``hold`` seconds, count themselves out and release. Prints ``ready <holder>`` after its first
grant. On ``stop`` (a stdin line) it stops the threads, closes the fleet bulkhead (its block
goes back) and prints ``stopped <fenced releases>``; end of input does the same.

The oracle is a Lua step on the same Redis (keys outside the pool's): it adds ``n`` to this
process's field of ``oracle:inflight`` and keeps the largest sum of all fields in
``oracle:max``, so it sees the calls in flight across every process at once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Dict, List

ORACLE = """
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
local s = 0
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do s = s + tonumber(v) end
if s > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], s) end
return s
"""


def _main(cfg: Dict[str, Any]) -> int:
    import redis

    import hullguard

    r = redis.Redis(port=cfg["port"], socket_timeout=2.0)
    fleet = hullguard.FleetBulkhead(
        r, cfg["pool"], max_concurrent=cfg["limit"], lease_ttl=cfg["ttl"], max_queue=64
    )
    oracle = r.register_script(ORACLE)
    me = str(os.getpid())
    stop = threading.Event()
    ready = threading.Event()
    said = threading.Lock()

    def work() -> None:
        while not stop.is_set():
            try:
                p = fleet.acquire_sync(timeout=0.2)
            except hullguard.BulkheadError:
                continue
            try:
                oracle(keys=["oracle:inflight", "oracle:max"], args=[me, 1])
                with said:
                    if not ready.is_set():
                        ready.set()
                        print("ready", fleet.holder, flush=True)
                stop.wait(cfg["hold"])
                oracle(keys=["oracle:inflight", "oracle:max"], args=[me, -1])
            finally:
                p.release()

    threads: List[threading.Thread] = [
        threading.Thread(target=work, daemon=True) for _ in range(cfg["threads"])
    ]
    for t in threads:
        t.start()
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()
    for t in threads:
        t.join()
    fleet.close()
    print("stopped", fleet.stats()["lease"]["releases_fenced_total"], flush=True)
    r.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main(json.loads(sys.argv[1])))
