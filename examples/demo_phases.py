"""The policy phases of the Python demo (``make demo``, DESIGN.md §4 and §9): a circuit breaker
and an adaptive limit on real HTTP traffic, through the same ``BulkheadTransport``.

Both phases talk to a *scripted* upstream (served by the demo's upstream process; the client
switches its mode with ``GET /__mode/<ok|fail|slow:MS>``) beside the healthy upstream of the
isolation phase, each origin with its own bulkhead of one ``hullguard.Registry``.

1. **Breaker.** The scripted upstream works, then fails outright (HTTP 503 at once), then heals.
   Its bulkhead has ``resilience={"breaker": {"failure_threshold": 5, "open_duration": 1.5}}``.
   The printed timeline shows the breaker opening after 5 failures, failing calls fast
   (``CircuitOpenError``, no request sent), letting one probe through every ``open_duration``
   (``half_open``), re-opening while the probe fails and closing once the upstream heals — and
   the healthy origin's success rate untouched throughout. State changes arrive through
   ``Registry(on_state_change=...)``.
2. **Adaptive limit.** 32 workers call the scripted upstream in a closed loop while its latency
   steps from 10 ms to 60 ms and back. Its bulkhead has ``resilience={"adaptive": {...}}``
   (Gradient2, the default algorithm): the printed limit falls while the upstream is slow and
   climbs back once it is fast again.

Each phase checks what it exists to show and returns whether it passed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import httpx

import hullguard
from hullguard.httpx import BulkheadTransport


async def _set_mode(url: str, mode: str) -> None:
    async with httpx.AsyncClient() as c:
        (await c.get(url + "__mode/" + mode)).raise_for_status()


@dataclass
class _Bucket:
    ok: int = 0
    failed: int = 0
    fast_failed: int = 0
    healthy_ok: int = 0
    healthy_total: int = 0
    healthy_latency: List[float] = field(default_factory=list)


def percentile(sorted_values: List[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list (0 for an empty one). Shared with the isolation
    phase (isolation_demo.py)."""
    if not sorted_values:
        return 0.0
    rank = -(-p * len(sorted_values) // 100)  # ceil(p/100 × n)
    rank = int(min(max(rank, 1), len(sorted_values)))
    return sorted_values[rank - 1]


async def breaker_phase(healthy_url: str, scripted_url: str) -> bool:
    """Phase 1: the breaker opens, fails fast, probes and closes; the healthy origin is
    unaffected. Returns whether every check passed."""
    await _set_mode(scripted_url, "ok")
    key = hullguard.origin_key(scripted_url)
    t0 = time.perf_counter()
    events: List[Tuple[float, str, str]] = []

    def on_state_change(k: Optional[str], old: str, new: str) -> None:
        if k == key:
            events.append((time.perf_counter() - t0, old, new))

    breaker = {"failure_threshold": 5, "open_duration": 1.5, "half_open_max_calls": 1}
    registry = hullguard.Registry(
        max_concurrent=8,
        max_queue=100,
        queue_timeout=1.0,
        overrides={key: {"max_concurrent": 8, "resilience": {"breaker": breaker}}},
        on_state_change=on_state_change,
    )
    step, seconds, fail_at, heal_at = 0.5, 8.0, 2.0, 5.6
    buckets = [_Bucket() for _ in range(int(seconds / step) + 1)]
    print("\n== phase 2: circuit breaker (the scripted upstream fails outright, then heals) ==")
    print(f"  {key}: resilience={{'breaker': {breaker}}}")
    print(f"  load: a request to each origin every 20 ms for {seconds:g} s; the scripted "
          f"upstream answers 503 from t={fail_at:g} s and heals at t={heal_at:g} s")

    async def call(client: httpx.AsyncClient, url: str, healthy: bool) -> None:
        start = time.perf_counter()
        b = buckets[min(len(buckets) - 1, int((start - t0) / step))]
        try:
            r = await client.get(url)
            good = r.status_code == 200
        except hullguard.CircuitOpenError:
            b.fast_failed += 1
            return
        except (httpx.HTTPError, hullguard.BulkheadError):
            good = False
        if healthy:
            b.healthy_total += 1
            b.healthy_ok += good
            b.healthy_latency.append(time.perf_counter() - start)
        elif good:
            b.ok += 1
        else:
            b.failed += 1

    async with httpx.AsyncClient(
        transport=BulkheadTransport(registry=registry), timeout=httpx.Timeout(5.0)
    ) as client:
        tasks = []
        failing = healed = False
        n = 0
        while (now := time.perf_counter() - t0) < seconds:
            if not failing and now >= fail_at:
                failing = True
                await _set_mode(scripted_url, "fail")
            if not healed and now >= heal_at:
                healed = True
                await _set_mode(scripted_url, "ok")
            tasks.append(asyncio.create_task(call(client, healthy_url, True)))
            tasks.append(asyncio.create_task(call(client, scripted_url, False)))
            n += 1
            await asyncio.sleep(max(0.0, t0 + n * 0.02 - time.perf_counter()))
        await asyncio.gather(*tasks)
        # The breaker is lazy: a state read commits a due open → half_open. One last probe
        # after the healing shows it closed for good.
        state = registry.stats()[key]["circuit"]["state"]

    print(f"  {'t (s)':>7} {'scripted: 200':>14} {'5xx/err':>8} {'circuit_open':>13} "
          f"{'healthy ok':>11} {'healthy p99':>12}   breaker events")
    ev = list(events)
    for i, b in enumerate(buckets):
        lo, hi = i * step, (i + 1) * step
        if lo >= seconds:
            break
        here = ", ".join(f"{old}→{new} @{t:.2f}s" for t, old, new in ev if lo <= t < hi)
        print(f"  {lo:>4.1f}–{hi:<3.1f}{b.ok:>13} {b.failed:>8} {b.fast_failed:>13} "
              f"{b.healthy_ok:>5}/{b.healthy_total:<5} {percentile(sorted(b.healthy_latency), 99.0) * 1e3:>9.1f} ms   "
              f"{here}")
    stats = registry.stats()
    circuit = stats[key]["circuit"]
    healthy = stats[hullguard.origin_key(healthy_url)]
    print(f"  breaker at the end: {circuit}")
    print(f"  scripted bulkhead: rejected_by_reason.circuit_open = "
          f"{stats[key]['rejected_by_reason']['circuit_open']}")

    transitions = [(old, new) for _, old, new in events]
    healthy_total = sum(b.healthy_total for b in buckets)
    healthy_ok = sum(b.healthy_ok for b in buckets)
    fast = sum(b.fast_failed for b in buckets)
    checks = [
        ("the breaker opened after the failures began",
         ("closed", "open") in transitions),
        ("calls failed fast (circuit_open) while it was open", fast > 0),
        ("it probed (open → half_open) and a failed probe re-opened it",
         ("open", "half_open") in transitions and ("half_open", "open") in transitions),
        ("it closed again once the upstream healed",
         transitions[-1:] == [("half_open", "closed")] and state == "closed"),
        (f"healthy origin unaffected ({healthy_ok}/{healthy_total} ok, no circuit on it)",
         healthy_ok == healthy_total and healthy["circuit"] is None),
    ]
    ok = True
    for label, passed in checks:
        print(f"check: {label}: {'PASS' if passed else 'FAIL'}")
        ok &= passed
    return ok


async def adaptive_phase(scripted_url: str) -> bool:
    """Phase 2: the adaptive limit falls while the upstream is slow and recovers after.
    Returns whether the check passed."""
    await _set_mode(scripted_url, "slow:10")
    key = hullguard.origin_key(scripted_url)
    adaptive = {"algorithm": "gradient2", "min_limit": 2}
    registry = hullguard.Registry(
        max_concurrent=32,
        max_queue=64,
        queue_timeout=2.0,
        overrides={key: {"resilience": {"adaptive": adaptive}}},
    )
    workers, step = 32, 0.5
    plan = [(0.0, "slow:10"), (3.0, "slow:60"), (6.0, "slow:10"), (10.0, None)]
    print("\n== phase 3: adaptive limit (the scripted upstream's latency steps 10 → 60 → 10 ms) ==")
    print(f"  {key}: max_concurrent=32, resilience={{'adaptive': {adaptive}}}; "
          f"{workers} workers in a closed loop")
    print(f"  {'t (s)':>7} {'latency':>8} {'limit':>6} {'in flight':>10} {'done':>6}")
    done = 0
    stop = False

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal done
        while not stop:
            try:
                await client.get(scripted_url)
                done += 1
            except (httpx.HTTPError, hullguard.BulkheadError):
                await asyncio.sleep(0.01)

    limits: Dict[str, List[int]] = {"before": [], "slow": [], "after": []}
    async with httpx.AsyncClient(
        transport=BulkheadTransport(
            httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=64)),
            registry=registry,
        ),
        timeout=httpx.Timeout(5.0),
    ) as client:
        tasks = [asyncio.create_task(worker(client)) for _ in range(workers)]
        t0 = time.perf_counter()
        phase = 0
        mode = plan[0][1]
        t = 0.0
        while True:
            t += step
            await asyncio.sleep(max(0.0, t0 + t - time.perf_counter()))
            s: Dict[str, Any] = registry.stats()[key]
            limit = s["adaptive"]["limit"]
            label = "before" if t <= plan[1][0] else "slow" if t <= plan[2][0] else "after"
            limits[label].append(limit)
            print(f"  {t:>7.1f} {mode[5:] + ' ms':>8} {limit:>6} {s['active']:>10} {done:>6}",
                  flush=True)
            if t >= plan[phase + 1][0]:
                phase += 1
                mode = plan[phase][1]
                if mode is None:
                    break
                await _set_mode(scripted_url, mode)
        stop = True
        await asyncio.gather(*tasks)
    s = registry.stats()[key]
    print(f"  adaptive state at the end: {s['adaptive']}")
    before, slow, after = max(limits["before"]), min(limits["slow"]), max(limits["after"][-2:])
    passed = slow * 2 <= before and after >= 2 * slow
    print(f"check: the limit fell while the upstream was slow (max before {before}, min while "
          f"slow {slow}) and climbed back after (end {after}): {'PASS' if passed else 'FAIL'}")
    return passed
