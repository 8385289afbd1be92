"""The ``guard`` decorator's wrappers (called by ``Bulkhead.guard`` / ``Registry.guard``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def wrap(acquire: Callable[[], Any], acquire_sync: Callable[[], Any], fn: F) -> F:
    """Each call of ``fn`` holds a permit: ``async with acquire()`` for coroutine functions,
    ``with acquire_sync()`` (blocking this thread) for plain callables."""
    if not callable(fn):
        raise TypeError(f"guard() needs a callable, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    ):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            async with acquire():
                return await fn(*args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        with acquire_sync():
            return fn(*args, **kwargs)

    return sync_wrapper  # type: ignore[return-value]
