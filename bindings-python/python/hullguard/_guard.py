"""The ``guard`` decorator's wrappers (called by ``Bulkhead.guard`` / ``Registry.guard``).

Each call of the wrapped function is one guarded call (docs/design.md §6.3): the breaker's check
and the admission happen in ``acquire`` / ``acquire_sync``; the outcome is recorded before the
permit is released: returned → ``success``, ``asyncio.CancelledError`` → ``ignored``, any other
exception → ``failure``.

``call_timeout``: each call's own, asked of its permit when it is granted
(``permit._call_timeout()``, seconds or ``None``): the bulkhead's ``resilience["call_timeout"]``
capped by the time left until the request's deadline (``deadline=`` / ``hullguard.deadline``,
docs/design.md §5.9; ``Bulkhead::call_timeout_within`` in the core):

* coroutine functions run as their own task (``asyncio.ensure_future``: they see a copy of the
  caller's ``contextvars`` context). At the deadline the caller gets :class:`CallTimeoutError`
  at once (``permit._call_timed_out()``, the core's rule: ``call_timeout`` is counted and the call
  ends as a ``failure``); the coroutine is
  cancelled, and the permit is released only once it has unwound. If the caller is cancelled
  while waiting, the coroutine is cancelled too and its permit released (``ignored``) when it
  has unwound.
* plain callables are not interrupted, only classified: a call that overran ``call_timeout``
  (measured with ``time.monotonic``) is reported the same way (``call_timeout`` counted, the call
  a ``failure``), but its own result is returned (or its own exception raised) unchanged.

Thread-safe as the permits are: the sync wrapper may run on any thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, Callable, Set, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# Timed-out calls still unwinding (asyncio keeps only weak references to tasks).
_unwinding: Set["asyncio.Future[Any]"] = set()


def _release_when_done(task: "asyncio.Future[Any]", permit: Any, outcome: str) -> None:
    """Releases ``permit`` (recording ``outcome`` unless the call already ended) once ``task``
    has finished unwinding; its result or exception is consumed."""
    _unwinding.add(task)

    def done(t: "asyncio.Future[Any]") -> None:
        _unwinding.discard(t)
        if not t.cancelled():
            t.exception()  # retrieved: no "exception was never retrieved" report
        permit._finish(outcome)

    task.add_done_callback(done)


def wrap(
    acquire: Callable[[], Any],
    acquire_sync: Callable[[], Any],
    fn: F,
) -> F:
    """Each call of ``fn`` holds a permit: ``acquire()`` for coroutine functions,
    ``acquire_sync()`` (blocking this thread) for plain callables; see the module docs."""
    if not callable(fn):
        raise TypeError(f"guard() needs a callable, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    ):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            permit = await acquire()
            call_timeout = permit._call_timeout()
            if call_timeout is None:
                with permit:  # classifies the exception leaving the block
                    return await fn(*args, **kwargs)
            try:
                task = asyncio.ensure_future(fn(*args, **kwargs))
            except BaseException:
                permit._finish("failure")
                raise
            try:
                done, _ = await asyncio.wait((task,), timeout=call_timeout)
            except BaseException:
                # The caller was cancelled: so is the call; released once it has unwound.
                task.cancel()
                _release_when_done(task, permit, "ignored")
                raise
            if not done:
                err = permit._call_timed_out()  # counts call_timeout; outcome failure
                task.cancel()
                _release_when_done(task, permit, "failure")
                raise err
            with permit:  # the task's own outcome: result, CancelledError or exception
                return task.result()

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        with acquire_sync() as permit:
            call_timeout = permit._call_timeout()
            if call_timeout is None:
                return fn(*args, **kwargs)
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                if time.monotonic() - start > call_timeout:
                    permit._call_timed_out()  # classified only: counted, failure

    return sync_wrapper  # type: ignore[return-value]
