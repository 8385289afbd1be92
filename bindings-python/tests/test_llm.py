"""hullguard.llm (issue 16, item 4): the reservation estimator, the usage extractors and the
guarded streaming helper (against a real bulkhead with a token budget, on the virtual clock)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import pytest

import hullguard
from hullguard import llm

from _support import VirtualClockLoop, assert_idle

# ----- the estimator ------------------------------------------------------------------------


def test_estimate_tokens_rounds_characters_up() -> None:
    assert llm.estimate_tokens("") == 0
    assert llm.estimate_tokens("abcd") == 1
    assert llm.estimate_tokens("abcde") == 2
    assert llm.estimate_tokens("abcdef", chars_per_token=3) == 2


def test_a_callers_tokenizer_replaces_the_ratio() -> None:
    words = lambda text: text.split()  # noqa: E731 - returns tokens: their len counts
    assert llm.estimate_tokens("one two three", tokenizer=words) == 3
    assert llm.estimate_tokens("one two three", tokenizer=lambda t: 7) == 7
    with pytest.raises(TypeError, match="tokenizer"):
        llm.estimate_tokens("x", tokenizer=lambda t: 1.5)
    with pytest.raises(ValueError, match="tokenizer"):
        llm.estimate_tokens("x", tokenizer=lambda t: -1)


@pytest.mark.parametrize("ratio, exc", [(0, ValueError), (-1.0, ValueError), (float("nan"), ValueError),
                                        (float("inf"), ValueError), ("4", TypeError), (True, TypeError)])
def test_a_bad_ratio_is_named(ratio: Any, exc: type) -> None:
    with pytest.raises(exc, match="chars_per_token"):
        llm.estimate_tokens("abc", chars_per_token=ratio)


def test_openai_chat_request() -> None:
    req = {
        "model": "gpt-x",
        "max_completion_tokens": 100,
        "messages": [
            {"role": "system", "content": "a" * 8},  # 2
            {"role": "user", "content": [{"type": "text", "text": "b" * 12}, {"type": "image_url"}]},  # 3
        ],
    }
    e = llm.estimate(req)
    assert e == llm.Estimate(input_tokens=2 + 3 + 2 * 3, max_output_tokens=100)
    assert llm.reservation(req) == e.total == 111
    assert llm.reservation(req, per_message_tokens=0, extra_input_tokens=5) == 2 + 3 + 5 + 100


def test_anthropic_request_with_system_and_blocks() -> None:
    req = SimpleNamespace(
        system=[{"type": "text", "text": "s" * 4}],
        messages=[{"role": "user", "content": [{"type": "tool_result", "content": [{"type": "text", "text": "t" * 8}]}]}],
        max_tokens=50,
    )
    assert llm.estimate(req, per_message_tokens=0) == llm.Estimate(1 + 2, 50)


def test_responses_request_and_the_default_output_cap() -> None:
    req = {"instructions": "i" * 4, "input": [{"role": "user", "content": "u" * 4}, "v" * 4]}
    assert llm.estimate(req, per_message_tokens=1) == llm.Estimate(1 + 1 + 1 + 1, llm.DEFAULT_MAX_TOKENS)
    assert llm.estimate({"prompt": "p" * 4, "max_output_tokens": 0}).total == 1
    assert llm.estimate({"input": "x" * 8}, default_max_tokens=10).total == 12


@pytest.mark.parametrize("kw, name", [({"default_max_tokens": -1}, "default_max_tokens"),
                                      ({"per_message_tokens": 1.0}, "per_message_tokens"),
                                      ({"extra_input_tokens": -2}, "extra_input_tokens"),
                                      ({"tokenizer": 3}, "tokenizer")])
def test_bad_estimate_options_are_named(kw: Dict[str, Any], name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        llm.estimate({}, **kw)


def test_a_bad_output_cap_in_the_request_is_named() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        llm.estimate({"max_tokens": -5})


# ----- usage extractors ---------------------------------------------------------------------


def test_usage_of_openai_chat() -> None:
    r = {"usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
    assert llm.usage_of(r) == llm.Usage(11, 7)
    assert llm.usage_of(r).total == 18  # type: ignore[union-attr]


def test_usage_of_openai_responses_object_and_event() -> None:
    r = SimpleNamespace(usage=SimpleNamespace(input_tokens=5, output_tokens=3, total_tokens=8))
    assert llm.usage_of(r) == llm.Usage(5, 3)
    ev = {"type": "response.completed", "response": {"usage": {"input_tokens": 2, "output_tokens": 1}}}
    assert llm.usage_of(ev) == llm.Usage(2, 1)


def test_usage_of_anthropic_counts_cache_reads_and_writes() -> None:
    r = {"usage": {"input_tokens": 10, "cache_creation_input_tokens": 4, "cache_read_input_tokens": 6,
                   "output_tokens": 9}}
    assert llm.usage_of(r) == llm.Usage(20, 9)


def test_usage_of_nothing() -> None:
    assert llm.usage_of({}) is None
    assert llm.usage_of({"usage": None}) is None
    assert llm.usage_of(SimpleNamespace()) is None


ANTHROPIC_STREAM = [
    {"type": "message_start", "message": {"usage": {"input_tokens": 30, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0},
    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x" * 20}},
    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "y" * 20}},
    {"type": "message_delta", "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]

OPENAI_STREAM = [
    {"choices": [{"delta": {"content": "a" * 8}}], "usage": None},
    {"choices": [{"delta": {"content": "b" * 8}}], "usage": None},
    {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 5}},
]


def test_stream_usage_anthropic() -> None:
    t = llm.StreamUsage(input_estimate=100)
    seen = []
    for ev in ANTHROPIC_STREAM:
        t.update(ev)
        seen.append((t.input_tokens, t.output_tokens, t.input_exact))
    assert seen == [(30, 1, True), (30, 1, True), (30, 5, True), (30, 10, True), (30, 9, True), (30, 9, True)]
    assert t.usage == llm.Usage(30, 9)
    assert t.used == 40  # never below an earlier value (30 + 10)


def test_stream_usage_openai_chunks_and_responses_events() -> None:
    t = llm.StreamUsage(input_estimate=50)
    changed = [t.update(ev) for ev in OPENAI_STREAM]
    assert changed == [True, True, True]
    assert (t.usage, t.input_exact, t.output_exact) == (llm.Usage(40, 5), True, True)
    r = llm.StreamUsage()
    r.update({"type": "response.output_text.delta", "delta": "z" * 9})
    assert (r.output_tokens, r.input_exact) == (3, False)
    r.update({"type": "response.completed", "response": {"usage": {"input_tokens": 4, "output_tokens": 2}}})
    assert r.usage == llm.Usage(4, 2)


# ----- guarded_stream ---------------------------------------------------------------------


class Upstream:
    """An async iterator over ``events``, failing at index ``fail_at``; records closing."""

    def __init__(self, events: List[Any], fail_at: int = -1) -> None:
        self.events = list(events)
        self.i = 0
        self.fail_at = fail_at
        self.closed = False
        self.gate: Optional[asyncio.Event] = None

    def __aiter__(self) -> "Upstream":
        return self

    async def __anext__(self) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        if self.i == self.fail_at:
            raise ConnectionError("upstream reset")
        if self.closed or self.i >= len(self.events):
            raise StopAsyncIteration
        self.i += 1
        return self.events[self.i - 1]

    async def aclose(self) -> None:
        self.closed = True


class FakePermit:
    def __init__(self) -> None:
        self.reports: List[Tuple[int, int]] = []
        self.released: List[Tuple[str, Optional[int]]] = []
        self.cancel_after: Optional[int] = None

    def report_usage(self, used: int, remaining: int = 0) -> Any:
        self.reports.append((used, remaining))
        cancel = self.cancel_after is not None and len(self.reports) > self.cancel_after
        return SimpleNamespace(change="unchanged", by=0, cancel=cancel)

    def release(self, outcome: Optional[str] = None, usage: Optional[int] = None) -> bool:
        self.released.append((outcome or "success", usage))
        return True


def _drain(vloop: VirtualClockLoop, agen: AsyncIterator[Any]) -> "asyncio.Task[List[Any]]":
    async def main() -> List[Any]:
        return [ev async for ev in agen]

    t = vloop.create_task(main())
    vloop.run_until_quiet()
    return t


def test_guarded_stream_reports_as_usage_arrives_and_settles_once(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    t = _drain(vloop, llm.guarded_stream(p, Upstream(ANTHROPIC_STREAM), max_tokens=50, input_estimate=80))
    assert len(t.result()) == len(ANTHROPIC_STREAM)
    # Reported only once the input was exact; `used` never decreases; remaining = 50 − output.
    assert p.reports == [(31, 49), (35, 45), (40, 40)]
    assert p.released == [("success", 40)]


def test_guarded_stream_on_openai_chunks_reports_at_the_end(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    t = _drain(vloop, llm.guarded_stream(p, Upstream(OPENAI_STREAM), max_tokens=20, input_estimate=60))
    assert len(t.result()) == 3
    assert p.reports == [(45, 15)]
    assert p.released == [("success", 45)]


def test_guarded_stream_error_settles_failure_and_propagates(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    up = Upstream(ANTHROPIC_STREAM, fail_at=3)
    t = _drain(vloop, llm.guarded_stream(p, up, max_tokens=50))
    assert isinstance(t.exception(), ConnectionError)
    assert p.released == [("failure", 35)]


def test_guarded_stream_consumer_break_closes_upstream_and_settles_ignored(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    up = Upstream(ANTHROPIC_STREAM)

    async def main() -> None:
        agen = llm.guarded_stream(p, up, max_tokens=50)
        async for ev in agen:
            if ev["type"] == "content_block_start":
                break
        await agen.aclose()  # type: ignore[attr-defined]

    vloop.create_task(main())
    vloop.run_until_quiet()
    assert up.closed
    assert p.released == [("ignored", 31)]


def test_guarded_stream_cancellation_settles_ignored(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    up = Upstream(ANTHROPIC_STREAM)
    up.gate = asyncio.Event()
    t = vloop.create_task(_collect(llm.guarded_stream(p, up, max_tokens=50, input_estimate=70)))
    vloop.run_until_quiet()
    t.cancel()
    vloop.run_until_quiet()
    assert t.cancelled() and up.closed
    assert p.released == [("ignored", 70)]  # nothing known: the estimate


async def _collect(agen: AsyncIterator[Any]) -> List[Any]:
    return [ev async for ev in agen]


def test_guarded_stream_stops_when_the_bulkhead_asks_to_cancel(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    p.cancel_after = 1
    up = Upstream(ANTHROPIC_STREAM)
    t = _drain(vloop, llm.guarded_stream(p, up, max_tokens=50))
    exc = t.exception()
    assert isinstance(exc, llm.OverrunCancelled) and exc.usage == llm.Usage(30, 5)
    assert up.closed and p.released == [("ignored", 35)]


def test_guarded_stream_bad_arguments(vloop: VirtualClockLoop) -> None:
    for kw, exc, name in [
        ({"max_tokens": -1}, ValueError, "max_tokens"),
        ({"max_tokens": 1, "tracker": object()}, TypeError, "tracker"),
    ]:
        t = _drain(vloop, llm.guarded_stream(FakePermit(), Upstream([]), **kw))
        assert isinstance(t.exception(), exc) and name in str(t.exception())
    t = _drain(vloop, llm.guarded_stream(FakePermit(), [1, 2], max_tokens=1))
    assert isinstance(t.exception(), TypeError) and "stream" in str(t.exception())


# ----- against a real bulkhead with a token budget --------------------------------------------


def _settled(b: Dict[str, Any]) -> bool:
    """The budget's settlement identity (docs/design.md §4.5, C30)."""
    return b["reserved_total"] + b["overrun_total"] == (
        b["consumed_total"] + b["refunded_total"] + b["in_use"] + b["granted_unclaimed"] + b["overrun_held"]
    )


def test_a_real_budget_follows_the_stream_and_refunds_the_rest(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, budget=1000, _clock=vloop.clock)
    req = {"max_tokens": 50, "messages": [{"role": "user", "content": "q" * 400}]}
    est = llm.estimate(req)
    seen: List[int] = []

    async def main() -> None:
        async with bh.acquire(cost=est.total) as permit:
            seen.append(bh.stats()["budget"]["in_use"])
            async for ev in llm.guarded_stream(permit, Upstream(ANTHROPIC_STREAM), max_tokens=50,
                                               input_estimate=est.input_tokens):
                seen.append(bh.stats()["budget"]["in_use"])

    t = vloop.create_task(main())
    vloop.run_until_quiet()
    t.result()
    # Reserved 103 + 50; the exact input (30) shrank the hold to 30 + 50 at message_start.
    assert seen[0] == est.total == 153
    assert seen[1] == 80
    b = bh.stats()["budget"]
    assert (b["in_use"], b["consumed_total"], b["reserved_total"]) == (0, 40, 153)
    assert b["refunded_total"] == 113 and _settled(b)
    assert_idle(bh)


def test_a_real_budget_is_freed_when_the_stream_fails(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, budget=1000, _clock=vloop.clock)

    async def main() -> None:
        permit = await bh.acquire(cost=200)
        async for _ in llm.guarded_stream(permit, Upstream(ANTHROPIC_STREAM, fail_at=2), max_tokens=50):
            pass

    t = vloop.create_task(main())
    vloop.run_until_quiet()
    assert isinstance(t.exception(), ConnectionError)
    b = bh.stats()["budget"]
    assert (b["in_use"], b["consumed_total"]) == (0, 31) and _settled(b)
    assert_idle(bh)


def test_a_real_overrun_with_cancel_on_overrun_stops_the_stream(vloop: VirtualClockLoop) -> None:
    bh = hullguard.Bulkhead(max_concurrent=4, budget=40, cancel_on_overrun=True, _clock=vloop.clock)
    big = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 30, "output_tokens": 1}}},
        {"type": "message_delta", "usage": {"output_tokens": 25}},  # 55 > the budget of 40
        {"type": "message_stop"},
    ]
    up = Upstream(big)

    async def main() -> None:
        permit = await bh.acquire(cost=40)
        async for _ in llm.guarded_stream(permit, up, max_tokens=10):
            pass

    t = vloop.create_task(main())
    vloop.run_until_quiet()
    assert isinstance(t.exception(), llm.OverrunCancelled)
    assert up.closed
    b = bh.stats()["budget"]
    assert b["overrun_total"] > 0 and b["in_use"] == 0 and _settled(b)
    assert_idle(bh)


class SdkStream:
    """Shaped like the OpenAI / Anthropic SDK streams: ``__aiter__`` is an async generator
    method, and the connection is dropped by the stream's own async ``close()``."""

    def __init__(self, events: List[Any]) -> None:
        self.events = events
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[Any]:
        for ev in self.events:
            await asyncio.sleep(0)
            yield ev

    async def close(self) -> None:
        self.closed = True


def test_an_sdk_streams_own_close_drops_the_connection_on_break(vloop: VirtualClockLoop) -> None:
    p = FakePermit()
    sdk = SdkStream(ANTHROPIC_STREAM)

    async def main() -> None:
        agen = llm.guarded_stream(p, sdk, max_tokens=50)
        async for _ in agen:
            break
        await agen.aclose()  # type: ignore[attr-defined]

    vloop.create_task(main())
    vloop.run_until_quiet()
    assert sdk.closed
    assert p.released == [("ignored", 31)]


def test_a_stream_dropped_without_aclose_is_settled_by_the_loop(vloop: VirtualClockLoop) -> None:
    import gc

    bh = hullguard.Bulkhead(max_concurrent=4, budget=1000, _clock=vloop.clock)
    up = Upstream(ANTHROPIC_STREAM)

    async def main() -> None:
        permit = await bh.acquire(cost=100)
        async for _ in llm.guarded_stream(permit, up, max_tokens=50):
            break  # no aclose(): asyncio's async-generator finalizer closes it

    vloop.create_task(main())
    vloop.run_until_quiet()
    gc.collect()
    vloop.run_until_quiet()
    assert up.closed
    b = bh.stats()["budget"]
    assert (b["in_use"], b["consumed_total"]) == (0, 31) and _settled(b)
    assert_idle(bh)


@pytest.mark.asyncio
async def test_guarded_stream_on_every_loop() -> None:
    # On the default loop and on uvloop (conftest.py): a real budget, no timing.
    bh = hullguard.Bulkhead(max_concurrent=2, budget=1000)
    permit = await bh.acquire(cost=200)
    events = [ev async for ev in llm.guarded_stream(permit, Upstream(ANTHROPIC_STREAM), max_tokens=50)]
    assert len(events) == len(ANTHROPIC_STREAM)
    b = bh.stats()["budget"]
    assert (b["in_use"], b["consumed_total"], b["refunded_total"]) == (0, 40, 160) and _settled(b)
