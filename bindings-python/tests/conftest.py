"""Fixtures of the hullguard Python suite.

Every ``@pytest.mark.asyncio`` test runs on the default asyncio loop *and* on uvloop (the
``pytest_asyncio_loop_factories`` hook below); a test that needs one of them says so with
``@pytest.mark.asyncio(loop_factories=["asyncio"])``.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from typing import Any, Callable, Iterator, List, Mapping

import pytest

import hullguard

# tests/ is on sys.path (pytest's rootdir-based "prepend" import mode)
from _support import LOOP_FACTORIES, FixedClock, VirtualClockLoop
from hullguard import _deadline


# A hung test (a lost wake-up awaits forever) ends the run after this many seconds, with a
# stack dump of every thread, instead of hanging it ("thread" method: the "signal" method
# cannot interrupt uvloop, whose C loop retries its wait after EINTR). Only when
# pytest-timeout is installed (requirements-dev.txt).
DEFAULT_TEST_TIMEOUT_S = 120


def pytest_collection_modifyitems(config: Any, items: List[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S, method="thread"))


def pytest_asyncio_loop_factories(config: Any, item: Any) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return LOOP_FACTORIES


@pytest.fixture
def vloop() -> Iterator[VirtualClockLoop]:
    """A :class:`VirtualClockLoop`, shut down (tasks cancelled, loop closed) afterwards."""
    loop = VirtualClockLoop()
    try:
        yield loop
    finally:
        loop.shutdown()


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (raises KeyboardInterrupt) for the test's duration."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def bh() -> hullguard.Bulkhead:
    """A small bulkhead: 2 permits, 8 queue places, 30 s queue timeout."""
    return hullguard.Bulkhead(max_concurrent=2, max_queue=8)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Finalizers of one test (leaked permits, dropped acquires) never run in the next."""
    yield
    gc.collect()


@pytest.fixture
def fixed() -> Iterator[FixedClock]:
    """A frozen clock (:class:`FixedClock`) that ``hullguard.deadline`` reads too."""
    clock = FixedClock()
    _deadline._set_clock(clock)
    try:
        yield clock
    finally:
        _deadline._set_clock(None)
