"""The policy phases of the Python demo (``make demo``, docs/design.md §13): a circuit breaker
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
2. **Adaptive limit.** 48 callers call a *capacity* upstream (``C`` workers; requests beyond
   ``C`` queue in the upstream, so its latency grows with the load beyond ``C``) in a closed
   loop while ``C`` steps 16 → 4 → 16, once with Gradient2 and once with AIMD. The printed
   limit follows ``C`` and the upstream's own queueing delay stays near zero: the queue waits
   in the bulkhead. The same scenario runs on virtual time in ``make test``
   (``tests/tests/adaptive_capacity.rs``), with the same band.

Each phase checks what it exists to show and returns whether it passed; given a ``record``
dict, it also fills it with its time series and checks for the HTML report
(``examples/report.py`` documents the shapes).
"""

from __future__ import annotations

import asyncio
import subprocess
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


def stop_child(proc: "subprocess.Popen[bytes]") -> None:
    """Stops a demo's server process (an upstream, the fake provider): closes its stdin (it
    serves until then), waits 5 s, then kills it; always reaped. Shared by every demo phase."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def percentile(sorted_values: List[float], p: float) -> float:
    """Nearest-rank percentile of a sorted list (0 for an empty one). Shared with the isolation
    phase (isolation_demo.py)."""
    if not sorted_values:
        return 0.0
    rank = -(-p * len(sorted_values) // 100)  # ceil(p/100 × n)
    rank = int(min(max(rank, 1), len(sorted_values)))
    return sorted_values[rank - 1]


async def breaker_phase(healthy_url: str, scripted_url: str,
                        record: Optional[Dict[str, Any]] = None) -> bool:
    """Phase 1: the breaker opens, fails fast, probes and closes; the healthy origin is
    unaffected. Returns whether every check passed. ``record`` (optional) receives ``step``,
    ``seconds``, ``fail_at``, ``heal_at`` (s), ``events`` ``[(t_s, old, new)]``, ``buckets``
    (per ``step`` s: ``ok``, ``failed``, ``fast_failed``, ``healthy_ok``, ``healthy_total``,
    ``healthy_p99_s``) and ``checks`` ``[(label, passed)]``."""
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
    if record is not None:
        n = int(seconds / step + 1e-9)
        record.update(
            step=step, seconds=seconds, fail_at=fail_at, heal_at=heal_at, events=list(events),
            buckets=[{"ok": b.ok, "failed": b.failed, "fast_failed": b.fast_failed,
                      "healthy_ok": b.healthy_ok, "healthy_total": b.healthy_total,
                      "healthy_p99_s": percentile(sorted(b.healthy_latency), 99.0)}
                     for b in buckets[:n]],
            checks=[(label, bool(passed)) for label, passed in checks],
        )
    return ok


CALLERS, CEILING = 48, 64
CAPACITIES = (16, 4, 16)


def band(c: int) -> Tuple[int, int]:
    """The band the limit must stay in against ``c`` workers, as in the closed-loop simulation
    ``tests/tests/adaptive_capacity.rs``: ``[c / 3, 3 c]`` (a no-load probe halves the limit for a round), with its mean in ``[c, 2 c]``."""
    return c // 3, 3 * c


async def _pool_stats(client: httpx.AsyncClient, url: str) -> Tuple[int, int]:
    served, wait_ns = (await client.get(url + "__pool/stats")).text.split()
    return int(served), int(wait_ns)


async def adaptive_phase(pool_url: str, algorithm: str, service: float,
                         phase_seconds: float, record: Optional[Dict[str, Any]] = None) -> bool:
    """The adaptive limit against an upstream with a real capacity: ``C`` workers of
    ``service`` seconds each (requests beyond ``C`` queue *in the upstream*), ``C`` stepped
    16 → 4 → 16 for ``phase_seconds`` each, ``CALLERS`` workers in a closed loop through one
    bulkhead with an adaptive limit (ceiling ``CEILING``). After the first 40 % of each step
    the limit must stay in :func:`band` with its mean in ``[C, 2 C]``, and the upstream's own
    queueing delay must average at most one service time (the queue waits in the bulkhead).
    Returns whether every check passed. ``record`` (optional) receives ``service_s``,
    ``phase_seconds``, ``ticks`` ``[(t_s, C, limit, in_flight, queued,
    upstream_wait_in_service_times)]`` (one per printed row) and ``checks``."""
    key = hullguard.origin_key(pool_url)
    adaptive = {"algorithm": algorithm, "initial_limit": CEILING,
                "target_latency": 2 * service}  # AIMD: slower than 2 S is congestion
    registry = hullguard.Registry(
        max_concurrent=CEILING,
        max_queue=CALLERS,
        queue_timeout=30.0,
        overrides={key: {"resilience": {"adaptive": adaptive}}},
    )
    print(f"\n== phase 3: adaptive limit ({algorithm}) against an upstream of C workers, "
          f"C = {' → '.join(map(str, CAPACITIES))} ==")
    print(f"  {key}: {CALLERS} callers in a closed loop, max_concurrent={CEILING}, "
          f"resilience={{'adaptive': {adaptive}}}; service {service * 1000:g} ms per request "
          f"per worker; {phase_seconds:g} s per step")
    print(f"  {'t (s)':>6} {'C':>3} {'limit':>6} {'in flight':>10} {'queued':>7} "
          f"{'upstream wait (S)':>18} {'done':>7}")
    done = 0
    stop = False

    async def caller(client: httpx.AsyncClient) -> None:
        nonlocal done
        while not stop:
            try:
                (await client.get(pool_url)).raise_for_status()
                done += 1
            except (httpx.HTTPError, hullguard.BulkheadError):
                await asyncio.sleep(0.01)

    results = []
    ticks: List[Tuple[float, int, int, int, int, float]] = []
    async with httpx.AsyncClient() as control, httpx.AsyncClient(
        transport=BulkheadTransport(
            httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=CALLERS + 16)),
            registry=registry,
        ),
        timeout=httpx.Timeout(30.0),
    ) as client:
        (await control.get(pool_url + f"__pool/{CAPACITIES[0]}")).raise_for_status()
        tasks = [asyncio.create_task(caller(client)) for _ in range(CALLERS)]
        t0 = time.perf_counter()
        tick = 0.5
        t = 0.0
        for c in CAPACITIES:
            (await control.get(pool_url + f"__pool/{c}")).raise_for_status()
            start, settle, end = t, t + 0.4 * phase_seconds, t + phase_seconds
            limits: List[int] = []
            last = mark = await _pool_stats(control, pool_url)
            while t < end - 1e-9:
                t = min(t + tick, end)
                await asyncio.sleep(max(0.0, t0 + t - time.perf_counter()))
                s: Dict[str, Any] = registry.stats()[key]
                now = await _pool_stats(control, pool_url)
                served, waited = now[0] - last[0], now[1] - last[1]
                wait = waited / served / 1e9 / service if served else 0.0
                last = now
                if t > settle + 1e-9:
                    limits.append(s["adaptive"]["limit"])
                else:
                    mark = now  # the upstream's totals when the settled part begins
                print(f"  {t:>6.1f} {c:>3} {s['adaptive']['limit']:>6} {s['active']:>10} "
                      f"{s['queued']:>7} {wait:>18.2f} {done:>7}", flush=True)
                ticks.append((t, c, s["adaptive"]["limit"], s["active"], s["queued"], wait))
            # Upstream wait over the settled part: from the last tick before it to the end.
            served = last[0] - mark[0]
            wait = (last[1] - mark[1]) / served / 1e9 / service if served else float("inf")
            results.append((c, start, min(limits), max(limits), sum(limits) / len(limits), wait,
                            served))
        stop = True
        await asyncio.gather(*tasks)
    s = registry.stats()[key]
    print(f"  adaptive state at the end: {s['adaptive']}")
    ok = True
    recorded: List[Tuple[str, bool]] = []
    for c, start, lo, hi, mean, wait, served in results:
        b_lo, b_hi = band(c)
        passed = b_lo <= lo and hi <= b_hi and c <= mean <= 2 * c and wait <= 1.0
        ok &= passed
        label = (f"{algorithm}, C = {c} from t = {start:g} s, after {0.4 * phase_seconds:g} s "
                 f"to settle ({served} requests after it): limit {lo}..{hi} in [{b_lo}, {b_hi}], "
                 f"mean {mean:.1f} in [{c}, {2 * c}], upstream wait {wait:.2f} S ≤ 1")
        print(f"check: {label}: {'PASS' if passed else 'FAIL'}")
        recorded.append((label, bool(passed)))
    if record is not None:
        record.update(service_s=service, phase_seconds=phase_seconds, ticks=ticks,
                      checks=recorded)
    return ok
