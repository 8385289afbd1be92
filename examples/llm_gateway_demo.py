#!/usr/bin/env python3
"""The LLM-gateway phase of ``make demo`` (docs/design.md §13): gateway admission on a real
streaming LLM API, in Python (httpx).

A fake provider (``fake_llm_provider.py``, a process of its own on loopback) streams tokens as
server-sent events at a fixed rate per stream, bills usage, and enforces a **concurrent-token
ceiling**: a request occupies ``input_tokens + max_tokens`` from its arrival until its stream
ends, and one that would pass the ceiling is answered ``429``. One ``httpx.AsyncClient`` (a
gateway) sends two classes of traffic to it on an open-loop schedule:

* **interactive**: short prompts (~60 tokens), short answers, latency-sensitive, 20 a second;
* **batch**: long prompts (~2,000 tokens), long answers, a flood (40 a second, far more than
  the provider can take).

The same schedule runs four times, each time with a fresh client:

1. **no bulkhead**: every request goes out; the batch flood fills the provider's ceiling and
   the provider answers 429 to interactive and batch alike;
2. **count-only**: ``Bulkhead(max_concurrent=16)`` (the ceiling over a typical request; what
   the hand-rolled ``asyncio.Semaphore(16)`` of many gateways does, with a bounded queue): calls
   are capped but tokens are not (16 batch calls are more than the ceiling, so 429s remain),
   and interactive calls queue FIFO behind the batch flood;
3. **calls + tokens** (the gateway admission of issue 14): one ``Bulkhead`` with a token
   ``budget`` equal to the provider's ceiling and two classes (interactive: priority 10, a
   floor of permits and tokens, and a priority reserve; batch: priority 0, the shared rest;
   shedding on). Each call asks ``cost`` = an upper bound of what the provider will count — the
   prompt's UTF-8 length (a byte-level tokenizer never emits more tokens than bytes) +
   ``max_tokens`` — and
   **refunds**: at the provider's ``message_start`` it reports the real input count
   (``permit.report_usage(used, remaining)``: the hold drops to what the provider counts),
   reports while streaming, and settles with ``permit.release(usage=...)`` (the unused rest of
   ``max_tokens`` refunded);
4. **calls + tokens, no refunds** (for the refund check): run 3's bulkhead and costs, but every
   call holds its whole reservation until it ends.

Runs 2–4 acquire around ``client.stream(...)`` themselves (``hullguard.httpx.BulkheadTransport``
takes no per-request cost or class, and a stream's usage is the caller's to report).

Why run 3 never sees a provider 429, by construction: the budget equals the ceiling; a call's
hold is never below what the provider counts for it (its cost is an upper bound, it shrinks
only to the provider's own count announced in ``message_start``, and the provider gives a
request's occupancy back before it writes the bill the call settles on); so the provider's
occupancy is at most the sum of the holds, which the budget bounds. (A transport failure
mid-stream would release early; none happens on loopback.)

It prints per class p50/p99 latency (successful calls, from sending to the last token),
success rate, provider 429s, bulkhead refusals by reason and tokens/s delivered, then the
provider's bill and ceiling utilisation and the bulkhead's budget utilisation, and checks
(PASS/FAIL): run 3 keeps the interactive p99 low with zero provider 429s while batch still
completes calls, and refunds raise the tokens/s delivered over run 4.

Standalone: ``python examples/llm_gateway_demo.py [--seconds 3] [--json PATH]
[--report-only]``; ``make demo`` runs it after the isolation demo's phases
(``isolation_demo.py`` calls :func:`gateway_phase`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import httpx

import hullguard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_phases import percentile, stop_child  # noqa: E402

PROVIDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_llm_provider.py")
# The provider's prefill: a fixed 20 ms, then 40,000 input tokens a second.
TTFT_MS, PREFILL_TPS = 20.0, 40000.0
CLASSES = ("interactive", "batch")
MODES = ("none", "count", "tokens", "tokens_no_refund")
TITLES = {
    "none": "no bulkhead",
    "count": "count-only bulkhead",
    "tokens": "calls+tokens, refunds",
    "tokens_no_refund": "calls+tokens, no refund",
}

# ---------------------------------------------------------------------------------------------
# The workload (the same schedule for every run).

# Words of a prompt (5 bytes each with the space): ~240 bytes interactive, ~8,000 batch.
_FILLER = ("alpha", "bravo", "delta", "gamma", "kappa", "omega", "sigma", "theta")


@dataclass(frozen=True)
class Shape:
    """One class's requests: prompt size in bytes, ``max_tokens``, the answer's length range
    (spread deterministically over the requests) and how often one is sent."""

    prompt_bytes: int
    max_tokens: int
    answer_lo: int
    answer_hi: int
    every_ms: float


def shapes(args: argparse.Namespace) -> Dict[str, Shape]:
    return {
        "interactive": Shape(240, 200, 30, 90, args.interactive_every_ms),
        "batch": Shape(8000, 800, 300, 700, args.batch_every_ms),
    }


def prompt_for(cls: str, n: int, shape: Shape) -> str:
    """A deterministic prompt of about ``shape.prompt_bytes`` bytes whose hint asks the fake
    model for an answer length in ``[answer_lo, answer_hi]``."""
    answer = shape.answer_lo + (n * 379) % (shape.answer_hi - shape.answer_lo + 1)
    head = f"[{cls} #{n}] (answer in about {answer} tokens) "
    words = (shape.prompt_bytes - len(head)) // 6
    return head + " ".join(_FILLER[(n + i) % len(_FILLER)] for i in range(words))


def schedule(args: argparse.Namespace) -> List[Tuple[float, str, int]]:
    """(offset in seconds, class, index) of every request, in time order."""
    at: List[Tuple[float, str, int]] = []
    for cls, shape in shapes(args).items():
        n = 0
        while n * shape.every_ms < args.seconds * 1000:
            at.append((n * shape.every_ms / 1000.0, cls, n))
            n += 1
    at.sort()
    return at


# ---------------------------------------------------------------------------------------------
# The provider process.


class Provider:
    """``fake_llm_provider.py`` in a child process, and its control endpoints."""

    def __init__(self, args: argparse.Namespace) -> None:
        cmd = [
            sys.executable, PROVIDER,
            f"--ceiling={args.ceiling}",
            f"--tokens-per-second={args.tokens_per_second}",
            f"--chunk-ms={args.chunk_ms}",
            f"--ttft-ms={TTFT_MS}",
            f"--prefill-tps={PREFILL_TPS}",
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.close()
            raise RuntimeError(f"the fake provider failed to start: {line!r}")
        self.base = f"http://127.0.0.1:{int(line[1])}"
        self.url = self.base + "/v1/messages"

    async def control(self, what: str) -> Dict[str, Any]:
        async with httpx.AsyncClient() as c:
            r = await c.get(f"{self.base}/__{what}")
            r.raise_for_status()
            out: Dict[str, Any] = r.json()
            return out

    def close(self) -> None:
        stop_child(self.proc)


# ---------------------------------------------------------------------------------------------
# The client (the gateway).


class ProviderOverloaded(Exception):
    """The provider answered 429 (its concurrent-token ceiling)."""


@dataclass
class Result:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class Live:
    """Counters of one run, read by the progress line and the summary."""

    window_end: float = 0.0
    sent: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    ok: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    provider_429: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    # Output tokens that arrived inside the load window, per class.
    window_tokens: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    latencies: Dict[str, List[float]] = field(default_factory=lambda: {c: [] for c in CLASSES})
    refused: Dict[str, Dict[str, int]] = field(default_factory=lambda: {c: {} for c in CLASSES})
    errors: Dict[str, int] = field(default_factory=dict)


async def stream_call(
    client: httpx.AsyncClient,
    url: str,
    cls: str,
    prompt: str,
    max_tokens: int,
    live: Live,
    permit: Optional[Any],
) -> Result:
    """One streaming request; with ``permit`` (a refunding run) its usage is reported as it
    streams: at ``message_start`` the hold drops to what the provider counts (``used`` = the
    real input count, ``remaining`` = ``max_tokens``), then each chunk moves tokens from
    ``remaining`` to ``used`` (the hold stays). Raises :class:`ProviderOverloaded` on 429."""
    res = Result()
    body = {"prompt": prompt, "max_tokens": max_tokens}
    async with client.stream("POST", url, json=body) as r:
        if r.status_code == 429:
            await r.aread()
            raise ProviderOverloaded()
        r.raise_for_status()
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                continue
            if not line.startswith("data: "):
                continue
            data = json.loads(line[6:])
            if event == "message_start":
                res.input_tokens = data["usage"]["input_tokens"]
                if permit is not None:
                    permit.report_usage(res.input_tokens, max_tokens)
            elif event == "content_block_delta":
                k = data["tokens"]
                res.output_tokens += k
                if time.perf_counter() <= live.window_end:
                    live.window_tokens[cls] += k
                if permit is not None:
                    permit.report_usage(res.input_tokens + res.output_tokens,
                                        max_tokens - res.output_tokens)
            elif event == "message_delta":
                res.output_tokens = data["usage"]["output_tokens"]
    return res


def make_bulkhead(mode: str, args: argparse.Namespace) -> Optional[Any]:
    """The bulkhead of a run (None for the run without one)."""
    if mode == "none":
        return None
    if mode == "count":
        return hullguard.Bulkhead(max_concurrent=args.count_limit, max_queue=args.max_queue,
                                  queue_timeout=args.batch_timeout)
    return hullguard.Bulkhead(**gateway_config(args))


def gateway_config(args: argparse.Namespace) -> Dict[str, Any]:
    """Run 3's bulkhead: calls and tokens in one decision, two classes, a priority reserve."""
    return {
        "max_concurrent": args.max_concurrent,
        "max_queue": args.max_queue,
        "queue_timeout": args.batch_timeout,
        "budget": args.ceiling,
        "classes": [
            {"name": "interactive", "priority": 10, "floor": 6, "budget_floor": 3000},
            {"name": "batch", "priority": 0},
        ],
        "reserve": {"permits": 4, "budget": 2000, "min_priority": 10},
        "shed": True,
    }


@dataclass
class Summary:
    mode: str
    requests: Dict[str, int]
    ok: Dict[str, int]
    pct: Dict[str, List[float]]  # p50, p99 in seconds over the successful calls
    provider_429: Dict[str, int]
    refused: Dict[str, Dict[str, int]]
    errors: Dict[str, int]
    tokens_per_s: Dict[str, float]  # output tokens delivered per second in the load window
    provider_window: Dict[str, Any]  # the provider's ledger at the end of the load window
    provider_total: Dict[str, Any]  # ... and once every call has settled
    budget_util: Optional[float]  # mean in_use / limit in the load window (None: no budget)
    stats: Optional[Dict[str, Any]]  # the bulkhead's stats after the run
    wall: float


async def run_once(mode: str, args: argparse.Namespace, provider: Provider,
                   trace: Optional[Dict[str, List[Any]]] = None) -> Summary:
    """One run of the schedule. ``trace`` (optional, for the report) receives under
    ``"requests"`` every request as ``(sent_at_s, class, outcome, latency_s)`` (outcome ``ok``,
    ``429``, ``refused: <reason>`` or ``error``) and under ``"budget"`` the token budget in use
    ``(t_s, tokens)`` every 20 ms of the load window (the runs with a budget)."""
    live = Live()
    bh = make_bulkhead(mode, args)
    refunds = mode == "tokens"
    shape = shapes(args)
    timeout = {"interactive": args.interactive_timeout, "batch": args.batch_timeout}
    budget_samples: List[float] = []

    async def request(client: httpx.AsyncClient, cls: str, n: int, sent_at: float) -> None:
        s = shape[cls]
        prompt = prompt_for(cls, n, s)
        outcome = "error"
        try:
            if bh is None:
                await stream_call(client, provider.url, cls, prompt, s.max_tokens, live, None)
            elif mode == "count":
                async with bh.acquire(timeout=timeout[cls]):
                    await stream_call(client, provider.url, cls, prompt, s.max_tokens, live, None)
            else:
                # An upper bound of what the provider will count (its tokenizer, like any
                # byte-level one, never emits more tokens than the prompt has bytes).
                cost = len(prompt.encode()) + s.max_tokens
                async with bh.acquire(cost=cost, admission_class=cls,
                                      timeout=timeout[cls]) as permit:
                    res = await stream_call(client, provider.url, cls, prompt, s.max_tokens,
                                            live, permit if refunds else None)
                    if refunds:
                        permit.release(usage=res.input_tokens + res.output_tokens)
            live.ok[cls] += 1
            live.latencies[cls].append(time.perf_counter() - sent_at)
            outcome = "ok"
        except hullguard.BulkheadError as e:
            live.refused[cls][e.reason] = live.refused[cls].get(e.reason, 0) + 1
            outcome = f"refused: {e.reason}"
        except ProviderOverloaded:
            live.provider_429[cls] += 1
            outcome = "429"
        except httpx.HTTPError as e:
            name = type(e).__name__
            live.errors[name] = live.errors.get(name, 0) + 1
        finally:
            if trace is not None:
                trace.setdefault("requests", []).append(
                    (sent_at - started, cls, outcome, time.perf_counter() - sent_at))

    async def progress(start: float) -> None:
        second = 1
        while True:
            await asyncio.sleep(max(0.0, start + second - time.perf_counter()))
            phase = "sending " if second <= args.seconds else "settling"
            budget = ""
            if bh is not None and mode != "count":
                b = bh.stats()["budget"]
                budget = f" | budget {b['in_use']:>5}/{b['limit']} in use"
            parts = " | ".join(
                f"{c} {live.sent[c]:>3} sent {live.ok[c]:>3} ok {live.provider_429[c]:>3} 429 "
                f"{sum(live.refused[c].values()):>3} refused" for c in CLASSES)
            print(f"  [{TITLES[mode]:<23}] {second:>2}s {phase} | {parts}{budget}", flush=True)
            second += 1

    async def sample_budget() -> None:
        # The client budget's utilisation over the load window, every 20 ms.
        assert bh is not None
        while (now := time.perf_counter()) < live.window_end:
            b = bh.stats()["budget"]
            budget_samples.append(b["in_use"] / b["limit"])
            if trace is not None:
                trace.setdefault("budget", []).append((now - started, b["in_use"]))
            await asyncio.sleep(0.02)

    print(f"\n== LLM gateway: {TITLES[mode]} ==", flush=True)
    await provider.control("reset")
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0)) as client:
        started = time.perf_counter()
        live.window_end = started + args.seconds
        ticker = asyncio.create_task(progress(started))
        sampler = None
        if bh is not None and mode != "count":
            sampler = asyncio.create_task(sample_budget())
        tasks = []
        for offset, cls, n in schedule(args):
            at = started + offset
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            live.sent[cls] += 1
            tasks.append(asyncio.create_task(request(client, cls, n, at)))
        await asyncio.sleep(max(0.0, live.window_end - time.perf_counter()))
        provider_window = await provider.control("stats")
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
        provider_total = await provider.control("stats")
        for t in (ticker, sampler):
            if t is not None:
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass

    stats = bh.stats() if bh is not None else None
    return Summary(
        mode=mode,
        requests=dict(live.sent),
        ok=dict(live.ok),
        pct={c: [percentile(sorted(live.latencies[c]), p) for p in (50.0, 99.0)]
             for c in CLASSES},
        provider_429=dict(live.provider_429),
        refused=live.refused,
        errors=live.errors,
        tokens_per_s={c: live.window_tokens[c] / args.seconds for c in CLASSES},
        provider_window=provider_window,
        provider_total=provider_total,
        budget_util=sum(budget_samples) / len(budget_samples) if budget_samples else None,
        stats=stats,
        wall=wall,
    )


# ---------------------------------------------------------------------------------------------
# Output and checks.


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _rate(ok: int, total: int) -> str:
    return "-" if total == 0 else f"{ok * 100.0 / total:.0f} % ({ok}/{total})"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 100.0:.0f} %"


def _row(label: str, values: List[object]) -> None:
    print(f"  {label:<40}" + "".join(f"{str(v):>24}" for v in values))


def print_table(runs: List[Summary], args: argparse.Namespace) -> None:
    print("\n== LLM gateway: side by side ==")
    _row("", [TITLES[r.mode] for r in runs])
    for c in CLASSES:
        s = shapes(args)[c]
        print(f"  {c} (prompt ~{s.prompt_bytes // 4} tokens, answer {s.answer_lo}-"
              f"{s.answer_hi} of max_tokens {s.max_tokens}, one every {s.every_ms:g} ms)")
        _row("  requests", [r.requests[c] for r in runs])
        _row("  success rate", [_rate(r.ok[c], r.requests[c]) for r in runs])
        _row("  p50 latency (ok, to last token)", [_ms(r.pct[c][0]) for r in runs])
        _row("  p99 latency (ok, to last token)", [_ms(r.pct[c][1]) for r in runs])
        _row("  429s from the provider", [r.provider_429[c] for r in runs])
        reasons = sorted({k for r in runs for k in r.refused[c]})
        if not reasons:
            _row("  refused by the bulkhead", [0 for _ in runs])
        for reason in reasons:
            _row(f"  refused by the bulkhead: {reason}", [r.refused[c].get(reason, 0) for r in runs])
        _row("  tokens/s delivered (output)", [f"{r.tokens_per_s[c]:.0f}" for r in runs])
    print("  all classes")
    _row("  tokens/s delivered (output)", [f"{sum(r.tokens_per_s.values()):.0f}" for r in runs])
    _row("  billed by the provider (in+out)",
         [r.provider_total["billed_input"] + r.provider_total["billed_output"] for r in runs])
    _row("  provider ceiling use, mean / peak",
         [f"{_pct(r.provider_window['occupancy_mean'] / args.ceiling)} / "
          f"{_pct(r.provider_window['occupancy_peak'] / args.ceiling)}" for r in runs])
    _row("  client budget utilisation (mean)", [_pct(r.budget_util) for r in runs])
    _row("  budget refunded / consumed",
         [f"{r.stats['budget']['refunded_total']} / {r.stats['budget']['consumed_total']}"
          if r.stats is not None and r.stats.get("budget") else "-" for r in runs])
    errors = sorted({k for r in runs for k in r.errors})
    for e in errors:
        _row(f"  transport errors: {e}", [r.errors.get(e, 0) for r in runs])
    _row("run time (sending + settling)", [f"{r.wall:.1f} s" for r in runs])


def idle_latency(args: argparse.Namespace) -> float:
    """The slowest interactive call on an idle provider: prefill, then its longest answer at
    the stream rate (whole chunks)."""
    s = shapes(args)["interactive"]
    chunk_ms: float = args.chunk_ms
    tps: float = args.tokens_per_second
    chunk = max(1, round(tps * chunk_ms / 1000.0))
    chunks = -(-s.answer_hi // chunk)
    return TTFT_MS / 1000.0 + (s.prompt_bytes / 4) / PREFILL_TPS + chunks * chunk_ms / 1000.0


def checks(runs: Dict[str, Summary], args: argparse.Namespace) -> List[Tuple[str, str, bool]]:
    """(key, label, passed) of each check of the phase."""
    gw, no_refund = runs["tokens"], runs["tokens_no_refund"]
    bound = 2.0 * idle_latency(args)
    p99 = gw.pct["interactive"][1]
    i_ok, i_total = gw.ok["interactive"], gw.requests["interactive"]
    gained = sum(gw.tokens_per_s.values())
    base = sum(no_refund.tokens_per_s.values())
    return [
        ("interactive_p99", f"calls+tokens: interactive p99 {_ms(p99)} ≤ {_ms(bound)} (twice the slowest idle "
         f"answer) with {i_ok}/{i_total} succeeded",
         p99 <= bound and i_ok >= 0.99 * i_total),
        ("zero_429", f"calls+tokens: zero 429s from the provider (saw "
         f"{gw.provider_total['refused_429']})", gw.provider_total["refused_429"] == 0),
        ("batch_progresses", f"calls+tokens: batch still progresses ({gw.ok['batch']} calls completed, want ≥ "
         f"{args.seconds:g}: one a second)", gw.ok["batch"] >= args.seconds),
        ("refunds_raise_throughput", f"refunds raise tokens/s delivered: {gained:.0f} with refunds ≥ 1.25 × {base:.0f} "
         f"reserving prompt + max_tokens without", gained >= 1.25 * base),
    ]


def have_gateway_api() -> Optional[str]:
    """None when the binding has what run 3 needs, else what is missing."""
    try:
        bh = hullguard.Bulkhead(max_concurrent=2, budget=10,
                                classes=[{"name": "a", "priority": 1}, {"name": "b"}])
    except TypeError as e:
        return f"Bulkhead(classes=...): {e}"
    for attr in ("report_usage",):
        p = bh.try_acquire()
        if p is None or not hasattr(p, attr):
            return f"Permit.{attr}"
        p.release()
    try:
        bh.acquire(cost=1, admission_class="a").close()
    except TypeError as e:
        return f"acquire(cost=..., admission_class=...): {e}"
    return None


async def gateway_phase(args: argparse.Namespace, record: Optional[Dict[str, Any]] = None
                        ) -> Tuple[bool, Dict[str, Any]]:
    """The whole phase: the provider, four runs, the table and the checks. Returns whether
    every check passed and a JSON-ready summary. ``record`` (optional, for the HTML report)
    receives ``classes``, ``modes`` ``[[mode, title]]``, ``ceiling``, ``runs`` (per mode:
    ``requests``, ``ok``, ``provider_429``, ``refused``, ``pct``, ``tokens_per_s``), ``traces``
    and ``budget`` (per mode: :func:`run_once`'s trace) and ``checks`` ``[(label, passed)]``."""
    missing = have_gateway_api()
    print("\n== phase 4: LLM gateway (calls and tokens in one decision) ==")
    modes = MODES if missing is None else MODES[:2]
    if missing is not None:
        print(f"  the Python binding lacks the gateway admission API ({missing}): "
              f"only the runs without it")
    provider = Provider(args)
    try:
        print(f"  fake provider {provider.url} (pid {provider.proc.pid}): concurrent-token "
              f"ceiling {args.ceiling} (input + max_tokens in flight, else 429), "
              f"{args.tokens_per_second:g} tokens/s per stream")
        print(f"  count-only: Bulkhead(max_concurrent={args.count_limit}, "
              f"max_queue={args.max_queue}, queue_timeout={args.batch_timeout:g})")
        print(f"  calls+tokens: Bulkhead(**{gateway_config(args)})")
        print(f"  cost = UTF-8 bytes of the prompt + max_tokens; per-call timeout interactive "
              f"{args.interactive_timeout:g} s, batch {args.batch_timeout:g} s")
        # Warm-up, untimed (httpx's lazy imports, the first connection).
        await provider.control("stats")
        traces: Dict[str, Dict[str, List[Any]]] = {m: {} for m in modes}
        runs = {m: await run_once(m, args, provider, traces[m] if record is not None else None)
                for m in modes}
    finally:
        provider.close()
    print_table([runs[m] for m in modes], args)
    if missing is None:
        gw = runs["tokens"].stats
        assert gw is not None
        b = gw["budget"]
        print(f"  calls+tokens bulkhead after the run: budget reserved_total {b['reserved_total']}"
              f" = consumed_total {b['consumed_total']} + refunded_total {b['refunded_total']}; "
              f"in_use {b['in_use']}, overrun_total {b['overrun_total']}, leaked_total "
              f"{gw['leaked_total']}")
        results = checks(runs, args)
    else:
        results = [("api", f"the gateway admission API is there (missing: {missing})", False)]
    ok = True
    for _, label, passed in results:
        print(f"check: {label}: {'PASS' if passed else 'FAIL'}")
        ok &= passed
    summary: Dict[str, Any] = {m: dict(runs[m].__dict__) for m in modes}
    summary["checks"] = {key: passed for key, _, passed in results}
    if record is not None:
        keep = ("requests", "ok", "provider_429", "refused", "pct", "tokens_per_s")
        record.update(
            classes=list(CLASSES), modes=[[m, TITLES[m]] for m in modes], ceiling=args.ceiling,
            runs={m: {k: getattr(runs[m], k) for k in keep} for m in modes},
            traces={m: traces[m].get("requests", []) for m in modes},
            budget={m: traces[m]["budget"] for m in modes if traces[m].get("budget")},
            checks=[(label, bool(passed)) for _, label, passed in results],
        )
    return ok, summary


def add_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The phase's options (``prefix`` = ``"llm-"`` when another demo embeds them)."""
    def opt(name: str, **kw: Any) -> None:
        p.add_argument(f"--{prefix}{name}", dest=f"llm_{name.replace('-', '_')}", **kw)

    opt("seconds", type=float, default=3.0, help="how long each run sends")
    opt("ceiling", type=int, default=40000, help="the provider's concurrent-token ceiling")
    opt("tokens-per-second", type=float, default=500.0, help="provider stream rate")
    opt("chunk-ms", type=float, default=50.0, help="provider SSE chunk interval")
    opt("interactive-every-ms", type=float, default=50.0)
    opt("batch-every-ms", type=float, default=25.0)
    opt("interactive-timeout", type=float, default=1.0, help="queue timeout, interactive (s)")
    opt("batch-timeout", type=float, default=2.0, help="queue timeout, batch (s)")
    opt("count-limit", type=int, default=16, help="the count-only bulkhead's max_concurrent")
    opt("max-concurrent", type=int, default=32, help="the calls+tokens bulkhead's")
    opt("max-queue", type=int, default=64)


def phase_args(ns: argparse.Namespace) -> argparse.Namespace:
    """The phase's own namespace from one built by :func:`add_arguments`."""
    return argparse.Namespace(**{k[4:]: v for k, v in vars(ns).items() if k.startswith("llm_")})


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--json", metavar="PATH", help="also write the summaries as JSON")
    p.add_argument("--report-only", action="store_true",
                   help="print every check but exit 0 whatever they say")
    ns = p.parse_args(argv)
    args = phase_args(ns)
    ok, summary = asyncio.run(gateway_phase(args))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(summary, f, indent=2, default=str)
    return 0 if ok or ns.report_only else 1


if __name__ == "__main__":
    sys.exit(main())
