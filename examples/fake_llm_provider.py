#!/usr/bin/env python3
"""A fake LLM provider on loopback for the LLM-gateway phase of ``make demo``
(``examples/llm_gateway_demo.py``, docs/design.md §13). Standard library only; it runs in a
process of its own (its own asyncio loop), so the client's loop measures only the client.

**The API** (HTTP/1.1, keep-alive), shaped like a streaming messages API:

``POST /v1/messages`` with a JSON body ``{"prompt": str, "max_tokens": int}``. The provider's
tokenizer counts ``input_tokens = ceil(len(prompt as UTF-8) / 4)``. The "model" answers
``min(max_tokens, N)`` tokens, where ``N`` comes from the prompt's ``(answer in about N
tokens)`` hint (``max_tokens`` without one). The answer streams as server-sent events
(``text/event-stream``, chunked), at a fixed rate per stream:

* ``message_start`` ``{"usage": {"input_tokens": I, "output_tokens": 0}}`` after the prefill
  (``--ttft-ms`` plus ``I / --prefill-tps`` seconds);
* ``content_block_delta`` ``{"text": ..., "tokens": k}`` every ``--chunk-ms``, ``k`` tokens
  each, ``--tokens-per-second`` tokens per second in all;
* ``message_delta`` ``{"usage": {"input_tokens": I, "output_tokens": O}, "stop_reason":
  "end_turn"}`` (the bill), then ``message_stop``.

**The concurrent-token ceiling** (``--ceiling``). A request *occupies* ``input_tokens +
max_tokens`` from its arrival until its stream has ended: the worst case the provider must be
able to serve. A request that would take the occupancy past the ceiling is answered at once
``429 Too Many Requests`` (``{"error": {"type": "rate_limit_error", ...}}``, nothing billed).
The occupancy is given back *before* the final ``message_delta`` is written, so a client that
settles on that event never holds less than the provider counts.

**Billing and control.** ``GET /__stats`` answers a JSON ledger since the last ``GET
/__reset``: requests served, 429s, billed input and output tokens, the peak occupancy and
its time-weighted mean (``occupancy_mean``, tokens), and the ceiling.

Run: ``python fake_llm_provider.py [--ceiling N ...]``: it prints ``PORT <port>`` and serves
until its stdin is closed (or the parent dies), so a parent that exits never leaves it behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

_HINT = re.compile(rb"\(answer in about (\d+) tokens\)")
_WORDS = (b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
          b"incididunt ut labore et dolore magna aliqua").split()


def input_tokens(prompt: bytes) -> int:
    """The provider's tokenizer: one token per 4 bytes of UTF-8, rounded up."""
    return (len(prompt) + 3) // 4


class Ledger:
    """Occupancy, 429s and the bill, since the last reset."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.reset()

    def reset(self) -> None:
        self.occupancy = 0
        self.served = 0
        self.refused_429 = 0
        self.billed_input = 0
        self.billed_output = 0
        self.peak = self.occupancy
        self.area = 0.0  # ∫ occupancy dt, for the time-weighted mean
        self.since = self.last = time.perf_counter()

    def _advance(self) -> None:
        now = time.perf_counter()
        self.area += self.occupancy * (now - self.last)
        self.last = now

    def take(self, n: int) -> bool:
        """Occupies ``n`` tokens if the ceiling allows it (the whole admission rule)."""
        if self.occupancy + n > self.ceiling:
            self.refused_429 += 1
            return False
        self._advance()
        self.occupancy += n
        self.peak = max(self.peak, self.occupancy)
        return True

    def give_back(self, n: int) -> None:
        self._advance()
        self.occupancy -= n

    def stats(self) -> Dict[str, Any]:
        self._advance()
        span = self.last - self.since
        return {
            "ceiling": self.ceiling,
            "served": self.served,
            "refused_429": self.refused_429,
            "billed_input": self.billed_input,
            "billed_output": self.billed_output,
            "occupancy": self.occupancy,
            "occupancy_peak": self.peak,
            "occupancy_mean": self.area / span if span > 0 else 0.0,
            "seconds": span,
        }


def _head(status: str, ctype: str, length: Optional[int]) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{framing}\r\n"
            f"Connection: keep-alive\r\n\r\n").encode()


def _json_reply(status: str, body: Any) -> bytes:
    data = json.dumps(body).encode()
    return _head(status, "application/json", len(data)) + data


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(name: str, body: Any) -> bytes:
    return _chunk(f"event: {name}\ndata: {json.dumps(body)}\n\n".encode())


class Provider:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = Ledger(args.ceiling)
        self.per_chunk = max(1, round(args.tokens_per_second * args.chunk_ms / 1000.0))
        # The open connections: closed at shutdown, so that no handler is left to cancel.
        self.connections: Dict["asyncio.Task[None]", asyncio.StreamWriter] = {}

    async def shutdown(self) -> None:
        for writer in self.connections.values():
            writer.close()
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=2.0)

    def plan(self, body: Dict[str, Any]) -> Tuple[int, int, int]:
        """(input tokens, max_tokens, output tokens) of a request body; ValueError if bad."""
        prompt = body.get("prompt")
        max_tokens = body.get("max_tokens")
        if not isinstance(prompt, str) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError("need {'prompt': str, 'max_tokens': int >= 1}")
        raw = prompt.encode()
        hint = _HINT.search(raw)
        answer = int(hint.group(1)) if hint else max_tokens
        return input_tokens(raw), max_tokens, max(1, min(max_tokens, answer))

    async def stream(self, writer: asyncio.StreamWriter, inp: int, out: int) -> None:
        """The SSE answer of an admitted request (its occupancy is the caller's)."""
        a = self.args
        writer.write(_head("200 OK", "text/event-stream", None))
        await asyncio.sleep(a.ttft_ms / 1000.0 + inp / a.prefill_tps)
        writer.write(_event("message_start", {"usage": {"input_tokens": inp, "output_tokens": 0}}))
        await writer.drain()
        start, sent, n = time.perf_counter(), 0, 0
        while sent < out:
            n += 1
            await asyncio.sleep(max(0.0, start + n * a.chunk_ms / 1000.0 - time.perf_counter()))
            k = min(self.per_chunk, out - sent)
            text = b" ".join(_WORDS[(sent + i) % len(_WORDS)] for i in range(k)).decode()
            sent += k
            writer.write(_event("content_block_delta", {"text": text, "tokens": k}))
            await writer.drain()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        me = asyncio.current_task()
        assert me is not None
        self.connections[me] = writer
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                first = head.split(b"\r\n", 1)[0].split(b" ")
                path = first[1] if len(first) >= 2 else b"/"
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                raw = await reader.readexactly(length) if length else b""
                if path == b"/__stats":
                    writer.write(_json_reply("200 OK", self.ledger.stats()))
                elif path == b"/__reset":
                    self.ledger.reset()
                    writer.write(_json_reply("200 OK", {"ok": True}))
                elif path == b"/v1/messages":
                    await self.message(writer, raw)
                else:
                    writer.write(_json_reply("404 Not Found", {"error": {"type": "not_found"}}))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client went away (or the provider shuts down): this connection ends
        finally:
            del self.connections[me]
            writer.close()

    async def message(self, writer: asyncio.StreamWriter, raw: bytes) -> None:
        try:
            inp, max_tokens, out = self.plan(json.loads(raw))
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            err = {"error": {"type": "invalid_request_error", "message": str(e)}}
            writer.write(_json_reply("400 Bad Request", err))
            return
        occupy = inp + max_tokens
        ledger = self.ledger
        if not ledger.take(occupy):
            err = {"error": {"type": "rate_limit_error", "message":
                             f"concurrent-token ceiling: {ledger.occupancy} in flight + "
                             f"{occupy} requested > {ledger.ceiling}"}}
            writer.write(_json_reply("429 Too Many Requests", err))
            return
        given_back = False
        try:
            await self.stream(writer, inp, out)
            # Give the occupancy back before the bill goes out: whoever settles on it never
            # holds less than this provider counts.
            ledger.give_back(occupy)
            given_back = True
            ledger.served += 1
            ledger.billed_input += inp
            ledger.billed_output += out
            usage = {"input_tokens": inp, "output_tokens": out}
            writer.write(_event("message_delta", {"usage": usage, "stop_reason": "end_turn"}))
            writer.write(_event("message_stop", {}))
            writer.write(_chunk(b""))
        finally:
            if not given_back:
                ledger.give_back(occupy)  # the client went away mid-stream


async def serve(args: argparse.Namespace) -> None:
    provider = Provider(args)
    server = await asyncio.start_server(provider.handle, "127.0.0.1", 0, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(finish)

    threading.Thread(target=watch_stdin, daemon=True).start()
    await stop
    server.close()
    await provider.shutdown()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ceiling", type=int, default=40000,
                   help="concurrent-token ceiling (input + max_tokens of the requests in flight)")
    p.add_argument("--tokens-per-second", type=float, default=500.0, help="per stream")
    p.add_argument("--chunk-ms", type=float, default=50.0, help="one SSE chunk every ... ms")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="fixed part of the prefill")
    p.add_argument("--prefill-tps", type=float, default=40000.0,
                   help="prefill speed (input tokens per second)")
    args = p.parse_args(argv)
    if args.ceiling < 1 or args.tokens_per_second <= 0 or args.chunk_ms <= 0:
        p.error("need --ceiling >= 1, --tokens-per-second > 0 and --chunk-ms > 0")
    if args.ttft_ms < 0 or args.prefill_tps <= 0 or not math.isfinite(args.prefill_tps):
        p.error("need --ttft-ms >= 0 and a finite --prefill-tps > 0")
    return args


if __name__ == "__main__":
    asyncio.run(serve(parse_args()))
