"""Small helpers for admitting LLM calls by tokens (issue 16, item 4). Standard library only.

The bulkhead's budget holds *units* (here: tokens) while a call runs (docs/design.md §4.5): a
call reserves what it may use (``cost=``), reports what it used while it streams
(``permit.report_usage(used, remaining)``) and settles with what it really used
(``permit.release(usage=…)``; the unused rest is refunded). This module computes those numbers
from request and response shapes; it decides nothing (admission is the core's)::

    from hullguard import llm

    request = {"model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": prompt}]}
    permit = await bh.acquire(cost=llm.reservation(request))
    stream = await client.messages.create(**request, stream=True)
    async for event in llm.guarded_stream(permit, stream, max_tokens=512):
        ...   # usage reported as it arrives; settled on end, error or cancellation

* :func:`estimate` / :func:`reservation`: input tokens (characters ÷ ``chars_per_token``, 4.0 by
  default, or a caller's ``tokenizer``) plus the output cap (``max_tokens`` /
  ``max_completion_tokens`` / ``max_output_tokens``, else ``default_max_tokens``).
* :func:`usage_of`: the :class:`Usage` of an OpenAI- (Chat Completions or Responses) or
  Anthropic-shaped response (dicts or SDK objects), ``None`` when it has none.
* :class:`StreamUsage`: follows the usage of a stream of such events (OpenAI chunks and Responses
  events, Anthropic ``message_start`` / ``message_delta`` / ``content_block_delta``).
* :func:`guarded_stream`: wraps a stream, reports usage as it arrives, settles the permit once.

Thread-safety: the functions are pure; a :class:`StreamUsage` belongs to one stream.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from .dedup import _aclose

__all__ = [
    "Usage",
    "Estimate",
    "estimate",
    "estimate_tokens",
    "reservation",
    "usage_of",
    "StreamUsage",
    "guarded_stream",
    "OverrunCancelled",
    "DEFAULT_CHARS_PER_TOKEN",
    "DEFAULT_MAX_TOKENS",
]

DEFAULT_CHARS_PER_TOKEN = 4.0
"""Characters per token of the default estimator (English text with OpenAI/Anthropic models)."""

DEFAULT_MAX_TOKENS = 2048
"""The output reserved for a request that names no output cap."""

Tokenizer = Callable[[str], Union[int, Sequence[Any]]]
"""A caller's tokenizer: ``text -> token count`` or ``text -> tokens`` (a sequence)."""

_MAX_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


@dataclass(frozen=True)
class Usage:
    """Tokens a call used: ``input_tokens`` (prompt, cached parts included) and
    ``output_tokens``; ``total`` is their sum (the ``usage=`` of ``permit.release``)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Estimate:
    """A request's reservation: ``input_tokens`` (estimated) + ``max_output_tokens`` = ``total``
    (the ``cost=`` of the acquire)."""

    input_tokens: int
    max_output_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.max_output_tokens


def _get(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, ``obj.name`` of an object, else ``None``."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int(value: Any) -> int:
    """A token count of a response (``None`` and non-numbers read as 0; never negative)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(0, int(value))


def _check_ratio(chars_per_token: float) -> float:
    if isinstance(chars_per_token, bool) or not isinstance(chars_per_token, (int, float)):
        raise TypeError(f"chars_per_token must be a number, not {type(chars_per_token).__name__}")
    if not (chars_per_token > 0 and math.isfinite(chars_per_token)):
        raise ValueError(f"chars_per_token must be a finite number > 0, got {chars_per_token!r}")
    return float(chars_per_token)


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _texts(content: Any) -> Iterable[str]:
    """The text of a message content: a string, or a list of blocks (``{"type": "text",
    "text": …}``, OpenAI ``input_text`` / ``output_text``; strings in a list count too). Other
    blocks (images, files, tool results without text) count nothing."""
    if content is None:
        return
    if isinstance(content, str):
        yield content
        return
    if isinstance(content, (list, tuple)):
        for block in content:
            if isinstance(block, str):
                yield block
                continue
            text = _get(block, "text")
            if isinstance(text, str):
                yield text
            inner = _get(block, "content")  # tool_result blocks nest content
            if inner is not None and inner is not content:
                yield from _texts(inner)


def estimate_tokens(
    text: str,
    *,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    tokenizer: Optional[Tokenizer] = None,
) -> int:
    """Tokens of ``text``: ``tokenizer(text)`` (a count, or tokens whose ``len`` counts) when
    given, else ``ceil(len(text) / chars_per_token)``.

    Raises:
        TypeError / ValueError: ``text`` is no string, a bad ratio, a tokenizer result that is
            no count.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    if tokenizer is not None:
        n = tokenizer(text)
        if isinstance(n, int) and not isinstance(n, bool):
            return _check_count("tokenizer(text)", n)
        try:
            return len(n)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"tokenizer(text) must return a count or a sequence of tokens, not {type(n).__name__}"
            ) from None
    return math.ceil(len(text) / _check_ratio(chars_per_token))


def estimate(
    request: Any,
    *,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    tokenizer: Optional[Tokenizer] = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    per_message_tokens: int = 3,
    extra_input_tokens: int = 0,
) -> Estimate:
    """The reservation of an OpenAI- or Anthropic-shaped request (a mapping or an object).

    Input: the text of ``system``, ``instructions``, ``prompt`` (a string or list of strings),
    ``input`` (Responses API: a string or a list of items) and every ``messages[].content``
    (strings or text blocks), each counted by :func:`estimate_tokens`, plus
    ``per_message_tokens`` per message (the chat format's framing) and ``extra_input_tokens``
    (tool definitions, images: what the text does not show). Output: the first of
    ``max_tokens``, ``max_completion_tokens``, ``max_output_tokens`` the request sets, else
    ``default_max_tokens``.

    Raises:
        TypeError / ValueError: a bad argument (named), or a request's output cap that is no
            int >= 0.
    """
    _check_count("default_max_tokens", default_max_tokens)
    _check_count("per_message_tokens", per_message_tokens)
    _check_count("extra_input_tokens", extra_input_tokens)
    if tokenizer is None:
        _check_ratio(chars_per_token)
    elif not callable(tokenizer):
        raise TypeError(f"tokenizer must be callable, not {type(tokenizer).__name__}")

    def count(content: Any) -> int:
        return sum(
            estimate_tokens(t, chars_per_token=chars_per_token, tokenizer=tokenizer)
            for t in _texts(content)
        )

    n = extra_input_tokens
    for field in ("system", "instructions", "prompt"):
        n += count(_get(request, field))
    items = _get(request, "input")
    if isinstance(items, str):
        n += count(items)
    elif isinstance(items, (list, tuple)):
        for item in items:
            if isinstance(item, str):
                n += count(item)
            else:
                n += per_message_tokens + count(_get(item, "content"))
    for message in _get(request, "messages") or ():
        n += per_message_tokens + count(_get(message, "content"))
    out = default_max_tokens
    for key in _MAX_KEYS:
        v = _get(request, key)
        if v is not None:
            out = _check_count(f"request[{key!r}]", v)
            break
    return Estimate(input_tokens=n, max_output_tokens=out)


def reservation(request: Any, **options: Any) -> int:
    """``estimate(request, **options).total``: the ``cost=`` to acquire for ``request``."""
    return estimate(request, **options).total


def _usage_block(usage: Any) -> Optional[Usage]:
    if usage is None:
        return None
    prompt = _get(usage, "prompt_tokens")
    if prompt is not None:  # OpenAI Chat Completions
        return Usage(_int(prompt), _int(_get(usage, "completion_tokens")))
    inp, out = _get(usage, "input_tokens"), _get(usage, "output_tokens")
    if inp is None and out is None:
        return None
    # OpenAI Responses (cached input is part of input_tokens) or Anthropic (cache reads and
    # writes are reported beside input_tokens: every one of them was consumed).
    cached = _int(_get(usage, "cache_creation_input_tokens")) + _int(_get(usage, "cache_read_input_tokens"))
    return Usage(_int(inp) + cached, _int(out))


def usage_of(response: Any) -> Optional[Usage]:
    """The :class:`Usage` of a response: OpenAI Chat Completions (``usage.prompt_tokens`` /
    ``completion_tokens``), OpenAI Responses (``usage.input_tokens`` / ``output_tokens``; also a
    ``response.completed`` event's ``response.usage``) or Anthropic Messages
    (``usage.input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``,
    ``usage.output_tokens``). Mappings and SDK objects alike; ``None`` without usage."""
    u = _usage_block(_get(response, "usage"))
    if u is None:
        inner = _get(response, "response")
        if inner is not None:
            u = _usage_block(_get(inner, "usage"))
    return u


class StreamUsage:
    """Follows the usage of one streamed response, event by event (:meth:`update`).

    * Exact figures: Anthropic ``message_start`` (``message.usage``: input, first output) and
      ``message_delta`` (``usage.output_tokens``, cumulative); OpenAI's final chunk with
      ``usage`` (``stream_options={"include_usage": True}``) and Responses'
      ``response.completed``.
    * Until exact output arrives, output is estimated from the text deltas (Chat ``choices[].
      delta.content``, Responses ``response.output_text.delta``, Anthropic ``text_delta`` /
      ``thinking_delta`` / ``input_json_delta``) at ``chars_per_token``.

    ``input_tokens`` starts at the caller's estimate (``input_estimate``) and becomes exact when
    the stream says (``input_exact``); from then on :attr:`used` never decreases (the core
    refuses a lower cumulative report).
    """

    def __init__(
        self, *, input_estimate: int = 0, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    ) -> None:
        self.input_tokens = _check_count("input_estimate", input_estimate)
        self.input_exact = False
        self.output_tokens = 0
        self.output_exact = False
        self._ratio = _check_ratio(chars_per_token)
        self._chars = 0
        self._used = 0

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.output_tokens)

    @property
    def used(self) -> int:
        """Tokens used so far (input + output). Once the input is exact, never below an
        earlier value (an exact output count below the text estimate does not lower it)."""
        if not self.input_exact:
            return self.input_tokens + self.output_tokens
        return max(self._used, self.input_tokens + self.output_tokens)

    def update(self, event: Any) -> bool:
        """Takes one stream event (a mapping or SDK object); returns whether the usage
        changed."""
        before = (self.input_tokens, self.output_tokens, self.input_exact)
        kind = _get(event, "type")
        if kind == "message_start":
            u = _usage_block(_get(_get(event, "message"), "usage"))
            if u is not None:
                self.input_tokens, self.input_exact = u.input_tokens, True
                if u.output_tokens > self.output_tokens:
                    self.output_tokens = u.output_tokens
        elif kind == "message_delta":
            usage = _get(event, "usage")
            out = _get(usage, "output_tokens")
            if out is not None:
                self.output_tokens, self.output_exact = _int(out), True
            if _get(usage, "input_tokens") is not None:
                u = _usage_block(usage)
                if u is not None:
                    self.input_tokens, self.input_exact = u.input_tokens, True
        elif kind == "content_block_delta":
            d = _get(event, "delta")
            for field in ("text", "thinking", "partial_json"):
                t = _get(d, field)
                if isinstance(t, str):
                    self._text(t)
        elif kind == "response.output_text.delta":
            t = _get(event, "delta")
            if isinstance(t, str):
                self._text(t)
        elif kind in ("response.completed", "response.incomplete"):
            u = usage_of(event)
            if u is not None:
                self.input_tokens, self.input_exact = u.input_tokens, True
                self.output_tokens, self.output_exact = u.output_tokens, True
        else:
            for choice in _get(event, "choices") or ():
                t = _get(_get(choice, "delta"), "content")
                if isinstance(t, str):
                    self._text(t)
            u = _usage_block(_get(event, "usage"))
            if u is not None:
                self.input_tokens, self.input_exact = u.input_tokens, True
                self.output_tokens, self.output_exact = u.output_tokens, True
        if self.input_exact:
            self._used = max(self._used, self.input_tokens + self.output_tokens)
        return (self.input_tokens, self.output_tokens, self.input_exact) != before

    def _text(self, t: str) -> None:
        self._chars += len(t)
        if not self.output_exact:
            self.output_tokens = max(self.output_tokens, math.ceil(self._chars / self._ratio))


class OverrunCancelled(RuntimeError):
    """:func:`guarded_stream` stopped a stream because the bulkhead asked to cancel it (a
    usage report overran the budget with ``cancel_on_overrun``). ``.usage``: what it had used."""

    def __init__(self, usage: Usage) -> None:
        super().__init__(f"stream cancelled: it overran the budget (used {usage.total} tokens)")
        self.usage = usage


async def guarded_stream(
    permit: Any,
    stream: Any,
    *,
    max_tokens: int,
    input_estimate: int = 0,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    tracker: Optional[StreamUsage] = None,
) -> AsyncIterator[Any]:
    """Yields the events of ``stream`` (an async iterable) while ``permit`` holds its tokens.

    * As usage arrives (see :class:`StreamUsage`) and once the input is known exactly, it calls
      ``permit.report_usage(used, remaining)`` with ``used`` = input + output so far and
      ``remaining`` = ``max_tokens`` − output (≥ 0): the hold follows the real input at once, and
      output beyond ``max_tokens`` goes through admission (``grew``) or is flagged ``overran``.
      A report answering ``cancel`` (``cancel_on_overrun``) stops the stream:
      :class:`OverrunCancelled` is raised after settling.
    * It settles the permit exactly once, with ``usage=`` the tokens used (the unused rest of the
      reservation refunded): the stream ended → outcome ``"success"``; it raised → ``"failure"``
      (the error propagates); the consumer stopped early (``break``, ``aclose()``, cancellation)
      → ``"ignored"``. The upstream is closed when it did not end (the iterator's ``aclose()``,
      then the stream's own ``aclose()`` or ``close()``: the SDK streams' way to drop the
      connection).

    Args:
        permit: the acquired permit (``bh.acquire(cost=…)``); a permit without ``report_usage``
            (an older binding) is only settled.
        stream: the provider's stream (OpenAI or Anthropic events; mappings or SDK objects).
        max_tokens: the request's output cap (the output part of the reservation).
        input_estimate: the estimated input (used until the stream reports it exactly).
        tracker: a :class:`StreamUsage` to follow the usage with (read it afterwards); a new one
            by default.
    """
    _check_count("max_tokens", max_tokens)
    if tracker is None:
        tracker = StreamUsage(input_estimate=input_estimate, chars_per_token=chars_per_token)
    elif not isinstance(tracker, StreamUsage):
        raise TypeError(f"tracker must be a StreamUsage, not {type(tracker).__name__}")
    aiter_ = getattr(stream, "__aiter__", None)
    if aiter_ is None:
        raise TypeError(f"stream must be an async iterable, not {type(stream).__name__}")
    report = getattr(permit, "report_usage", None)
    it = aiter_()
    outcome = "ignored"
    reported = -1
    try:
        while True:
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                outcome = "success"
                break
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except BaseException:
                outcome = "failure"
                raise
            if tracker.update(event) and tracker.input_exact and report is not None:
                used = tracker.used
                if used != reported:
                    reported = used
                    r = report(used, max(0, max_tokens - tracker.output_tokens))
                    if getattr(r, "cancel", False):
                        raise OverrunCancelled(tracker.usage)
            yield event
    finally:
        try:
            if outcome != "success":
                await _aclose(it, stream)  # the iterator, then the SDK stream object itself
        finally:
            permit.release(outcome, usage=tracker.used)
