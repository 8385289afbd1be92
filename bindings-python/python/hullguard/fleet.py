"""One limit across processes and hosts (docs/design.md §16): :class:`FleetBulkhead` shares a
limit among every process that opens the same pool on one Redis — through the redis-py client
you already have (its connection, TLS, auth and retry settings stay yours).

Each process leases a *block* of permits from Redis under a TTL and admits on it locally, at a
local bulkhead's speed (an admission never touches the network); a driver — a daemon thread for
a sync ``redis.Redis``, an asyncio task for a ``redis.asyncio.Redis`` — renews the block every
beat and grows or shrinks it to the process's fair share of the fleet limit::

    import redis, hullguard

    r = redis.Redis(host="redis", socket_timeout=1.0)
    with hullguard.FleetBulkhead(r, "llm-provider", max_concurrent=50) as llm:  # 50 fleet-wide
        with llm.acquire_sync(timeout=2.0):
            ...

    import redis.asyncio

    async def main():
        r = redis.asyncio.Redis(host="redis", socket_timeout=1.0)
        async with hullguard.FleetBulkhead(r, "llm-provider", max_concurrent=50) as llm:
            async with llm.acquire():
                ...

Admission is the local :class:`hullguard.Bulkhead`'s (``acquire``, ``acquire_sync``,
``try_acquire``, ``admit``, ``guard``, ``drain``… — the same errors and stats), over the leased
block: a request the block cannot take now queues (FIFO in this process, or by class priority)
and wakes the driver to ask for more. Without a valid lease (before the first block, Redis
unreachable past the lease's deadline) a try is refused ``concurrency_limit`` with
``detail["bound"] == "fleet_lease"`` (``try_acquire`` answers ``None``,
``acquire(timeout=0)`` raises ``BulkheadFullError``).

A fleet *budget* (``budget=``: units in flight — tokens, bytes — fleet-wide) is leased the same
way, in a second lease table of the pool: this process admits ``acquire(cost=…)`` on its budget
block, its fair share of the fleet budget. A cost above the block but within the fleet budget
waits for the block to grow; a cost above the fleet budget is refused ``budget_limit`` at once;
a try while the budget block is empty is refused ``budget_limit`` with the bound
``fleet_lease``::

    with hullguard.FleetBulkhead(r, "llm-provider", max_concurrent=50, budget=200_000,
                                 classes=[{"name": "interactive", "priority": 1},
                                          {"name": "batch", "priority": 0}],
                                 events=True) as llm:
        with llm.acquire_sync(cost=1_200, admission_class="interactive", timeout=2.0) as p:
            ...
            p.release(usage=900)

Admission classes (``classes=``, with ``reserve``, ``lending``, ``shed``) and events
(``events=True``: ``on`` / ``off`` / ``events()``) stay local, as on a
:class:`hullguard.Bulkhead`: the classes partition this process's block (floors, ceilings and
priorities apply inside it, not fleet-wide), the events are this process's admissions.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import hashlib
import inspect
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from . import _native
from ._native import _FleetBulkhead, _FleetCore

__all__ = ["FleetBulkhead", "FLEET_OPTIONS"]

FLEET_OPTIONS: List[str] = list(_native.FLEET_OPTIONS)
"""The option names ``FleetBulkhead(...)`` takes (the fleet crate's table; ``pool`` is the
second positional argument). Besides them it takes what stays local, read as
:class:`hullguard.Bulkhead` reads it: ``classes``, ``reserve``, ``lending``, ``shed`` and
``events``."""

_LIBRARY: str = _native._FLEET_LIBRARY
_LIB_VERSION: int = _native._FLEET_LIB_VERSION
_EVAL_SOURCE: str = _native._FLEET_EVAL_SOURCE
_EVAL_SHA: str = hashlib.sha1(_EVAL_SOURCE.encode()).hexdigest()

# The asyncio drivers running now (a task only weakly referenced by its loop could be collected).
_TASKS: "set[asyncio.Task[None]]" = set()
# Every open fleet bulkhead: closed at interpreter exit (the sync ones release their leases) and
# in a forked child (its copy's block is the parent's lease).
_OPEN: "weakref.WeakSet[FleetBulkhead]" = weakref.WeakSet()


def _describe(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _missing_function(e: BaseException) -> bool:
    return "function not found" in str(e).lower()


def _eval_args(args: List[str], *, by_sha: bool) -> List[str]:
    """``FCALL[_RO] fn 6 keys… argv…`` as the library's one-script form (for an ACL that forbids
    ``FUNCTION`` / ``FCALL``): ``EVALSHA sha 6 keys… fn argv…`` (or ``EVAL <source> …``)."""
    fn, numkeys = args[1], int(args[2])
    keys, argv = args[3 : 3 + numkeys], args[3 + numkeys :]
    head = ["EVALSHA", _EVAL_SHA] if by_sha else ["EVAL", _EVAL_SOURCE]
    return [*head, str(numkeys), *keys, fn, *argv]


class _Link:
    """How the library's commands reach Redis through the user's client: the library loaded
    first (``FCALL_RO hg_version`` → ``FUNCTION LOAD REPLACE`` when it differs), loaded again
    once when a call finds it missing (Redis restarted empty, ``FUNCTION FLUSH``), and run as
    one ``EVALSHA`` script where an ACL forbids ``FUNCTION`` (``NOPERM``)."""

    def __init__(self, client: Any, core: "_FleetCore | _LibraryCheck") -> None:
        import redis.exceptions as rex  # the client is redis-py's: redis is installed

        self.client = client
        self.core = core
        self.ready = False
        self.eval = False
        self.response_error = rex.ResponseError
        self.no_permission = rex.NoPermissionError
        self.no_script = rex.NoScriptError

    def _noperm(self, e: BaseException) -> bool:
        return isinstance(e, self.no_permission) or str(e).startswith("NOPERM")


class _SyncLink(_Link):
    def ensure_library(self) -> None:
        if self.ready:
            return
        if not self.eval:
            try:
                version = self.client.execute_command(*self.core.version_command())
            except self.response_error:  # not loaded (or FCALL_RO not allowed)
                version = None
            if version != _LIB_VERSION:
                try:
                    self.client.execute_command("FUNCTION", "LOAD", "REPLACE", _LIBRARY)
                except self.response_error as e:
                    if not self._noperm(e):
                        raise
                    self.eval = True
        self.ready = True

    def _raw(self, args: List[str]) -> Any:
        if not self.eval:
            return self.client.execute_command(*args)
        try:
            return self.client.execute_command(*_eval_args(args, by_sha=True))
        except self.no_script:
            return self.client.execute_command(*_eval_args(args, by_sha=False))

    def call(self, args: List[str]) -> Any:
        self.ensure_library()
        try:
            return self._raw(args)
        except self.response_error as e:
            if self.eval or not _missing_function(e):
                raise
        self.ready = False
        self.ensure_library()
        return self._raw(args)


class _AsyncLink(_Link):
    async def ensure_library(self) -> None:
        if self.ready:
            return
        if not self.eval:
            try:
                version = await self.client.execute_command(*self.core.version_command())
            except self.response_error:
                version = None
            if version != _LIB_VERSION:
                try:
                    await self.client.execute_command("FUNCTION", "LOAD", "REPLACE", _LIBRARY)
                except self.response_error as e:
                    if not self._noperm(e):
                        raise
                    self.eval = True
        self.ready = True

    async def _raw(self, args: List[str]) -> Any:
        if not self.eval:
            return await self.client.execute_command(*args)
        try:
            return await self.client.execute_command(*_eval_args(args, by_sha=True))
        except self.no_script:
            return await self.client.execute_command(*_eval_args(args, by_sha=False))

    async def call(self, args: List[str]) -> Any:
        await self.ensure_library()
        try:
            return await self._raw(args)
        except self.response_error as e:
            if self.eval or not _missing_function(e):
                raise
        self.ready = False
        await self.ensure_library()
        return await self._raw(args)


# ----- `hullguard fleet show` --------------------------------------------------------------------


class _LibraryCheck:
    """What a link asks of its core, for a read without a lease (the command below): the
    library's version check."""

    def __init__(self, check: List[str]) -> None:
        self._check = list(check)

    def version_command(self) -> List[str]:
        return list(self._check)


def _cli(args: List[str]) -> Tuple[int, str, str]:
    """``hullguard fleet show POOL [--redis URL] [--json]`` (``args`` without the program name):
    ``(status, stdout, stderr)`` as the Rust command's — 0 shown, 1 failed (Redis unreachable,
    redis-py missing), 2 bad usage. The fleet crate parses the arguments and renders the
    report (``_native._fleet_cli``); this reads ``FCALL_RO hg_stats`` with redis-py, the library
    loaded first when it is missing (as a fleet bulkhead's driver does: ``_SyncLink``)."""
    default = os.environ.get("HULLGUARD_REDIS_URL")
    status, out, err, plan = _native._fleet_cli(args, default)
    if plan is None:
        return status, out, err
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        return 1, "", "hullguard: fleet show needs redis-py: pip install 'hullguard[fleet]'\n"
    try:
        # One attempt of at most 5 s per command (as the Rust command's connection).
        client = redis.Redis.from_url(
            plan["redis"],
            socket_timeout=5.0,
            socket_connect_timeout=5.0,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as e:
        return 1, "", f"hullguard: {plan['redis']}: {e}\n"
    try:
        reply = _SyncLink(client, _LibraryCheck(plan["check"])).call(plan["command"])
    except Exception as e:  # Redis unreachable, an error reply (NOPERM, ...)
        return 1, "", f"hullguard: {_describe(e)}\n"
    finally:
        client.close()
    status, out, err, _ = _native._fleet_cli(args, default, reply)
    return status, out, err


# ----- the drivers ------------------------------------------------------------------------------


def _drive_sync(core: _FleetCore, link: _SyncLink) -> None:
    """The sync driver (a daemon thread): the fleet crate's driver loop, parked in the core's
    native wait with the interpreter released; after close, the lease's release."""
    try:
        while True:
            kind, value = core.step()
            if kind == "send":
                try:
                    reply = link.call(value)
                except Exception as e:  # Redis unreachable or an error reply: the lease's error
                    core.fail(_describe(e))
                    continue
                core.complete(reply)
            elif kind == "wait":
                core.wait(value)
            else:
                break
    finally:
        core.close()
        _release_sync(core, link)


# At most this many releases at close: one per lease (the permits', the budget's), with room.
_MAX_RELEASES = 4


def _release_sync(core: _FleetCore, link: _SyncLink) -> None:
    """The releases at close: the fleet crate's loop — each lease's release (or last sync) in
    turn, until ``release_command`` has none left (a fleet bulkhead with a budget has two)."""
    for _ in range(_MAX_RELEASES):
        release = core.release_command()
        if release is None:
            return
        try:
            core.released(link.call(release))
        except Exception as e:
            core.fail(_describe(e))


async def _park(core: _FleetCore, timeout: float, quiet_until: float) -> float:
    """Parks the asyncio driver for at most ``timeout`` seconds, or until an admission finds the
    block short, or close — the core's ``wait`` on the event loop. Returns until when the next
    park ignores the bell: a bell-woken driver steps at most once per ``min_sync_interval``,
    however fast refusals come.

    Woken by the native demand waker through ``loop.call_soon_threadsafe`` rather than by the
    core's blocking wait run in the loop's executor: that would pin one executor thread per
    fleet bulkhead for whole beats (the default executor is shared with ``to_thread`` and DNS
    lookups, and ``asyncio.run`` waits for its threads at exit), and leave a thread parked in
    native code when the interpreter exits. Here a park costs one future and one timer."""
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    quiet = now < quiet_until
    if quiet:
        timeout = min(timeout, quiet_until - now)
    fut: "asyncio.Future[str]" = loop.create_future()

    def wake(why: str) -> None:
        if not fut.done():
            fut.set_result(why)

    if core.arm(loop, functools.partial(wake, "bell"), not quiet):
        return time.monotonic() + core.min_sync_interval
    timer = loop.call_later(timeout, wake, "timer")
    try:
        why = await fut
    finally:
        timer.cancel()
    if why == "bell" and not quiet:
        return time.monotonic() + core.min_sync_interval
    return quiet_until


async def _release_async(core: _FleetCore, link: _AsyncLink) -> None:
    """``_release_sync`` on the event loop."""
    for _ in range(_MAX_RELEASES):
        release = core.release_command()
        if release is None:
            return
        try:
            core.released(await link.call(release))
        except Exception as e:
            core.fail(_describe(e))


async def _drive_async(core: _FleetCore, link: _AsyncLink) -> None:
    """The asyncio driver (a task on the loop the fleet bulkhead was made on): the fleet
    crate's driver loop; after close, the lease's release. Cancelled (``asyncio.run``'s
    teardown of a fleet bulkhead never closed), it closes and still tries the release, for at
    most a second."""
    quiet_until = 0.0
    try:
        while True:
            kind, value = core.step()
            if kind == "send":
                try:
                    reply = await link.call(value)
                except Exception as e:
                    core.fail(_describe(e))
                    continue
                core.complete(reply)
            elif kind == "wait":
                quiet_until = await _park(core, value, quiet_until)
            else:
                break
    except asyncio.CancelledError:
        core.close()
        try:
            await asyncio.wait_for(_release_async(core, link), 1.0)
        except (Exception, asyncio.CancelledError):
            pass
        raise
    await _release_async(core, link)


def _is_async_client(client: Any) -> bool:
    execute = getattr(client, "execute_command", None)
    if execute is None or not callable(execute):
        raise TypeError(
            "FleetBulkhead(): redis_client must be a redis-py client (redis.Redis or "
            f"redis.asyncio.Redis), not {type(client).__name__}"
        )
    return inspect.iscoroutinefunction(execute)


class FleetBulkhead(_FleetBulkhead):
    """A bulkhead whose limit is shared by every process that opens the same ``pool`` on one
    Redis (docs/design.md §16; see the module docs).

    ``FleetBulkhead(redis_client, pool, *, max_concurrent=10, budget=None, max_queue=100,
    queue_timeout=30.0, lease_ttl=10.0, beat=lease_ttl/3, local_share=0,
    clock_drift_ppm=10_000, lease_margin=0.002, min_sync_interval=0.005, max_holders=10_000,
    wait_replicas=0, wait_timeout=0.1, holder=None, classes=None, reserve=None, lending=False,
    shed=False, events=False)`` — durations in float seconds:

    * ``redis_client``: a redis-py client — ``redis.Redis`` (the driver is a daemon thread;
      the library is loaded here, so an unreachable Redis raises the client's error now) or
      ``redis.asyncio.Redis`` (made inside a running event loop; the driver is a task on it,
      which loads the library; ``async with`` loads it on entry and raises its error there).
      Give it a ``socket_timeout`` well under ``lease_ttl``: a sync that hangs past the
      deadline admits nothing, and the client's retries delay the next one.
    * ``pool``: 1–64 characters of ``[A-Za-z0-9_.:-]``; every process opening it shares one
      limit.
    * ``max_concurrent``: the fleet limit a *new* pool starts with (then it lives in Redis:
      ``apply_limits`` changes it). ``max_queue`` / ``queue_timeout``: this process's waiters.
    * ``budget`` (``1 .. 2**32`` units, default none): the fleet budget a *new* pool's budget
      table starts with (then ``apply_limits(budget=…)`` changes it), leased like the permits:
      ``acquire(cost=…)`` admits on this process's budget block (``stats()["budget"]``; its
      lease in ``stats()["budget_lease"]``), settled as on a local bulkhead
      (``permit.release(usage=…)``). While Redis is unreachable, ``local_share`` of the
      permits comes with the same fraction of the budget.
    * ``classes`` (``[{"name", "priority", "floor", "ceiling", "budget_floor",
      "budget_ceiling", "observe"}, …]``), ``reserve``, ``lending``, ``shed``: a class table,
      read as :class:`hullguard.Bulkhead` reads it, that partitions *this process's* block
      (requests name a class with ``admission_class=``; ``class_stats(...)``, ``classes``). A
      block below the floors is allowed.
    * ``events=True``: this process's admission events reach ``on`` / ``off`` / ``events()``
      listeners (as on a local bulkhead; without it the core builds none).
    * ``lease_ttl`` (0.1 – 3600 s): a crashed process's block returns within it; keep the
      longest call under it (a call outliving its lease is counted in
      ``stats()["lease"]["unleased_in_flight"]``). ``beat``: the renewal period (at most
      ``lease_ttl / 2``).
    * ``local_share``: permits admitted on local authority while Redis is unreachable past the
      deadline (0, the default: fail closed — the fleet limit is never exceeded by this
      process; ``k``: the fleet may run up to ``processes × k`` over it).
    * ``clock_drift_ppm``, ``lease_margin``: taken off every lease so the client stops first;
      ``min_sync_interval``: the shortest time between two syncs; ``max_holders``: the most
      processes the pool admits; ``wait_replicas`` / ``wait_timeout``: ``WAIT`` for that many
      replicas (at most that long) before admitting on a growth; ``holder``: this process's id
      (default ``<hostname>:<pid>:<random hex>``).

    An unknown option, or a local bulkhead's option that cannot be fleet-wide (``rates``,
    ``resilience``, ``on_state_change`` — there is no breaker —, ``observe``,
    ``max_queued_cost``…), raises ``TypeError`` naming it (and why); a bad value ``TypeError``
    / ``ValueError`` naming the option and its range (``budget=0``: ``ValueError`` naming
    ``budget``; a class table the core refuses: ``ValueError`` naming the class option); a
    client that is not redis-py's ``TypeError``.

    The methods that talk to Redis — ``apply_limits``, ``pool_stats`` — are as synchronous as
    the client: with a ``redis.asyncio.Redis`` they return awaitables. ``close()`` stops the
    driver and gives the leases back (the permits', then the budget's; waiting for them with a
    sync client); ``await aclose()``
    does it on the event loop; ``with`` / ``async with`` close on exit. An
    unclosed fleet bulkhead is closed when collected, at interpreter exit (sync clients: the
    release is sent) and in a forked child (its block is the parent's lease: create fleet
    bulkheads after forking). Thread-safe.
    """

    _async: bool = False
    _thread: Optional[threading.Thread] = None
    _task: Optional["asyncio.Task[None]"] = None
    _loop: Optional[asyncio.AbstractEventLoop] = None
    _link: Any = None
    _pid: int = 0

    if TYPE_CHECKING:

        def __init__(
            self,
            redis_client: Any,
            pool: str,
            *,
            max_concurrent: Optional[int] = None,
            budget: Optional[int] = None,
            max_queue: Optional[int] = None,
            queue_timeout: Optional[float] = None,
            lease_ttl: Optional[float] = None,
            beat: Optional[float] = None,
            local_share: Optional[int] = None,
            clock_drift_ppm: Optional[int] = None,
            lease_margin: Optional[float] = None,
            min_sync_interval: Optional[float] = None,
            max_holders: Optional[int] = None,
            wait_replicas: Optional[int] = None,
            wait_timeout: Optional[float] = None,
            holder: Optional[str] = None,
            classes: Optional[Sequence[Mapping[str, Any]]] = None,
            reserve: Optional[Mapping[str, int]] = None,
            lending: Optional[bool] = None,
            shed: Optional[bool] = None,
            events: Optional[bool] = None,
        ) -> None: ...

    else:
        # At run time the options go to the fleet crate's table as given, so an option a fleet
        # bulkhead refuses is named with the reason (`rates`: "class rates are not fleet-wide").

        def __new__(cls, redis_client, pool, **options):
            return super().__new__(cls, pool, **options)

        def __init__(self, redis_client, pool, **options):
            self._start(redis_client)

    def _start(self, redis_client: Any) -> None:
        core = self._core
        self._pid = os.getpid()
        try:
            self._async = _is_async_client(redis_client)
            if self._async:
                try:
                    self._loop = asyncio.get_running_loop()
                except RuntimeError:
                    raise RuntimeError(
                        "FleetBulkhead(): a redis.asyncio client needs a running event loop: "
                        "create the fleet bulkhead inside a coroutine"
                    ) from None
                self._link = _AsyncLink(redis_client, core)
                task = self._loop.create_task(_drive_async(core, self._link))
                _TASKS.add(task)
                task.add_done_callback(_TASKS.discard)
                self._task = task
            else:
                link = _SyncLink(redis_client, core)
                link.ensure_library()
                self._link = link
                thread = threading.Thread(
                    target=_drive_sync,
                    args=(core, link),
                    name=f"hullguard-fleet:{self.pool}",
                    daemon=True,
                )
                thread.start()
                self._thread = thread
        except BaseException:
            core.close()
            raise
        _OPEN.add(self)

    # ----- the fleet limit and the pool -------------------------------------------------------

    def apply_limits(
        self,
        revision: int,
        *,
        limit: Optional[int] = None,
        budget: Optional[int] = None,
        max_queue: Optional[int] = None,
        queue_timeout: Optional[float] = None,
    ) -> Any:
        """Sets the fleet limit and / or the fleet budget in Redis under ``revision``
        (``1 .. 2**53 - 1``; ``limit`` ``0 .. 2**32``; ``budget`` ``1 .. 2**32``, only on a
        fleet bulkhead opened with ``budget=``; at least one of the two): ``{"applied",
        "revision", "limit", "budget"}`` — ``revision`` and ``limit`` those in force of the
        fleet limit (``limit`` ``None`` and ``revision`` the budget's when only ``budget`` is
        given), ``budget`` the fleet budget in force (``None`` when not given). Each lease
        table keeps its own revision: ``applied`` is ``True`` when every one given was
        installed, ``False`` (not an error) when Redis has this revision or a newer one for
        either, as when every process of a fleet applies the same control-plane update.
        Lowering never revokes: holders shrink to their shares at their next syncs. Only the
        limit and the budget are fleet-wide: ``max_queue`` and ``queue_timeout`` raise
        ``ValueError`` naming them, as do neither ``limit`` nor ``budget`` given, a budget on a
        fleet bulkhead without one, a bad revision, limit or budget (raised here, before
        anything is sent). One command per value, the limit's first. With a ``redis.asyncio``
        client this returns an awaitable. The client's errors (Redis unreachable) propagate; a
        value set before the error is in force and kept (set again if Redis loses its state).
        Repeating a revision already in force with the same values answers ``applied``."""
        core = self._core
        commands = core.apply_limits_commands(revision, limit, budget, max_queue, queue_timeout)
        if self._async:
            return self._apply_limits_async(commands, revision, limit, budget)
        replies: List[Any] = []
        try:
            for args in commands:
                replies.append(self._link.call(args))
        except BaseException:
            # What was set before the error is in force: record it (it is set again if Redis
            # loses its state), then let the error propagate.
            if replies:
                core.limits_applied(revision, limit, budget, replies)
            raise
        return core.limits_applied(revision, limit, budget, replies)

    async def _apply_limits_async(
        self,
        commands: List[List[str]],
        revision: int,
        limit: Optional[int],
        budget: Optional[int],
    ) -> Dict[str, Any]:
        replies: List[Any] = []
        try:
            for args in commands:
                replies.append(await self._link.call(args))
        except BaseException:
            if replies:
                self._core.limits_applied(revision, limit, budget, replies)
            raise
        return self._core.limits_applied(revision, limit, budget, replies)

    def pool_stats(self, dimension: Literal["permits", "budget"] = "permits") -> Any:
        """The pool as Redis holds it, in one read-only call: ``{"now_ms", "limit" (None when
        the pool does not exist), "used", "epoch", "fence", "rev", "learn_until_ms",
        "want_sum", "holders": [{"holder", "generation", "held", "want", "expires_ms"}]}``
        (times are Redis server milliseconds). ``dimension="budget"``: the fleet budget's lease
        table (the same keys in units: ``limit`` is the fleet budget; ``ValueError`` naming
        ``dimension`` on a fleet bulkhead without a budget). With a ``redis.asyncio`` client
        this returns an awaitable. The client's errors propagate; an unexpected reply raises
        ``RuntimeError``."""
        args = self._core.pool_stats_command(dimension)
        if self._async:
            return self._pool_stats_async(args)
        return _FleetCore.decode_pool_stats(self._link.call(args))

    async def _pool_stats_async(self, args: List[str]) -> Dict[str, Any]:
        return _FleetCore.decode_pool_stats(await self._link.call(args))

    # ----- closing ----------------------------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """Closes: new requests and queued waiters are refused ``shutdown``
        (``BulkheadClosedError``), calls in flight finish; the driver stops and sends the fleet
        crate's last command — the release of the block (fenced: a lease that already expired
        frees nothing), or, with calls still in flight, a last sync that keeps just those
        counted until the lease runs out. With a sync client this waits for it at most
        ``timeout`` seconds (default: ``lease_ttl``, at most 10 s; the driver thread still sends
        it afterwards); with a ``redis.asyncio`` client the driver sends it on its loop
        (``await aclose()`` waits for it). Idempotent."""
        if self._pid != os.getpid():
            self._core._abandon()  # a forked child's copy: the lease is the parent's
            return
        self._core.close()
        _OPEN.discard(self)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(min(self.lease_ttl, 10.0) if timeout is None else timeout)

    async def aclose(self, timeout: Optional[float] = None) -> None:
        """``close`` on the event loop: waits (at most ``timeout`` seconds, default
        ``lease_ttl``, at most 10 s) until the driver has sent its last command — the driver
        task with a ``redis.asyncio`` client, the driver thread (joined in the loop's executor)
        with a sync one."""
        self._core.close()
        _OPEN.discard(self)
        limit = min(self.lease_ttl, 10.0) if timeout is None else timeout
        task = self._task
        if task is not None:
            # Another loop's driver releases on its loop; asyncio.wait neither raises the
            # task's end nor cancels it at the timeout.
            if not task.done() and task.get_loop() is asyncio.get_running_loop():
                await asyncio.wait({task}, timeout=limit)
        elif self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.close, limit)

    def __enter__(self) -> "FleetBulkhead":
        return self

    def __exit__(self, exc_type: object = None, exc: object = None, tb: object = None) -> None:
        self.close()

    async def __aenter__(self) -> "FleetBulkhead":
        """Makes sure the library is loaded (an unreachable Redis raises the client's error
        here, and the fleet bulkhead is closed)."""
        if self._async:
            try:
                await self._link.ensure_library()
            except BaseException:
                await self.aclose()
                raise
        return self

    async def __aexit__(self, exc_type: object = None, exc: object = None, tb: object = None) -> None:
        await self.aclose()

    def __del__(self) -> None:
        core = getattr(self, "_core", None)
        if core is not None:
            core.close()


def _close_at_exit() -> None:
    """Interpreter exit: every open fleet bulkhead closes; the sync drivers send their releases
    (waiting two seconds at most in all), so the fleet gets the blocks back at once rather than
    after a TTL."""
    fleets = list(_OPEN)
    for f in fleets:
        f._core.close()
    until = time.monotonic() + 2.0
    for f in fleets:
        if f._thread is not None:
            f._thread.join(max(0.0, until - time.monotonic()))


def _after_fork_in_child() -> None:
    """A forked child's copies would admit on the parent's lease, with no driver: closed."""
    for f in list(_OPEN):
        f._core._abandon()
    _OPEN.clear()
    _TASKS.clear()


atexit.register(_close_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
