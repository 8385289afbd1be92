"""A real uvicorn server for the edge tests (test_edge.py, test_metrics.py): an ASGI app served on
127.0.0.1 on a free port, in a thread of its own with its own event loop, started and stopped by
the test (every wait bounded).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Any, Callable, Literal, Optional, Type

import uvicorn

# A bound on every wait of these helpers (10x anything the tests expect, on a busy machine).
WAIT_S = 10.0


class UvicornServer:
    """``with UvicornServer(app) as s:`` serves ``app`` at ``s.url`` until the block ends.

    ``lifespan``: uvicorn's ``"on"`` / ``"off"`` / ``"auto"``; ``before_stop`` is called first
    when stopping. Stopping asks uvicorn to exit (as a signal
    would), which runs the lifespan's shutdown, and joins the thread.
    """

    def __init__(self, app: Any, *, lifespan: Literal["auto", "on", "off"] = "on", loop: str = "asyncio",
                 before_stop: Optional[Callable[[], None]] = None) -> None:
        self.before_stop = before_stop
        # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only then (no 40 ms delayed-ACK stalls).
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, lifespan=lifespan, loop=loop, log_level="warning", access_log=False,
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name=f"uvicorn:{self.port}", daemon=True)

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        except BaseException as e:  # SystemExit from a failed startup, too
            self.error = e

    def start(self) -> "UvicornServer":
        self.thread.start()
        deadline = time.monotonic() + WAIT_S
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start within 10 s")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self.before_stop is not None:
            self.before_stop()  # e.g. open a gate handlers wait at (a failed test left it shut)
        self.server.should_exit = True
        self.thread.join(WAIT_S)
        alive = self.thread.is_alive()
        if alive:
            self.server.force_exit = True
            self.thread.join(WAIT_S)
        self.sock.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"
        if self.error is not None and not isinstance(self.error, SystemExit):
            raise self.error

    def __enter__(self) -> "UvicornServer":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()


def wait_until(pred: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Polls ``pred`` (every 5 ms) until it holds; ``AssertionError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


async def await_until(pred: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """:func:`wait_until` for async tests (yields to the loop between polls)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Gate:
    """A gate a handler on the server's loop waits at, opened by the test's thread: threading
    state, polled every 2 ms by the handler (bounded by ``WAIT_S``)."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self.waiting = 0
        self._lock = threading.Lock()

    def open(self) -> None:
        self._open.set()

    async def wait(self) -> None:
        with self._lock:
            self.waiting += 1
        try:
            deadline = time.monotonic() + WAIT_S
            while not self._open.is_set():
                if time.monotonic() > deadline:
                    raise AssertionError("gate never opened")
                await asyncio.sleep(0.002)
        finally:
            with self._lock:
                self.waiting -= 1
