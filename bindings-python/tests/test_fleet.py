"""hullguard.FleetBulkhead (docs/design.md §16) against real ``redis-server`` processes, through
redis-py clients, sync (``redis.Redis``: the driver is a daemon thread) and asyncio
(``redis.asyncio.Redis``: the driver is a task; every async test runs on asyncio and uvloop).

Covered: the first block, then local acquires; demand waking the driver before its beat; two
processes converging to fair shares with an in-flight oracle; Redis killed (refused with the
bound ``fleet_lease`` within the TTL) and restarted (a lease again); a local share while Redis is
unreachable; ``FLUSHALL`` (learning, holders keep their blocks); C42 (a client whose replies
come after the TTL: the grant is never used and is given back); ``apply_limits`` under
revisions; bad options named; close releasing the block; the ``EVALSHA`` fallback under an ACL
that forbids ``FUNCTION``; the ``hullguard fleet show`` command (the holder and the limit, JSON,
bad usage exits 2, Redis unreachable 1).

The ``redis_server`` fixture starts ``redis-server`` on a free loopback port (no persistence, its
own directory) and kills and reaps it afterwards. Without ``redis-server`` the tests fail with a
message saying so, unless ``HG_SKIP_REDIS=1``. Time bounds are lower bounds, or upper bounds of
at least 10x the stated target: nothing here asserts speed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import hullguard
from _support import STATS_KEYS

redis = pytest.importorskip("redis")
import redis.asyncio  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
CHILD = str(Path(__file__).with_name("_fleet_child.py"))

# ----- a real redis-server ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` on a loopback port: no persistence, its own directory."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.dir = directory
        self.extra = list(extra)
        self.port = _free_port()
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.start()

    def start(self) -> None:
        for attempt in range(5):
            self.proc = subprocess.Popen(
                [
                    REDIS_SERVER,
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(self.dir),
                    "--loglevel", "warning",
                    *self.extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            until = time.monotonic() + 10
            while time.monotonic() < until and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(16).startswith(b"+PONG"):
                            return
                except OSError:
                    time.sleep(0.01)
            self.kill()
            if attempt < 4 and self.proc.returncode != 0:
                # The port was taken meanwhile (another test's server): pick another.
                self.port = _free_port()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def restart(self) -> None:
        """Killed and started again on the same port, empty (no persistence)."""
        self.kill()
        self.start()

    def client(self, **kw: Any) -> "redis.Redis":
        """A sync client that fails fast while the server is down (one retry, no backoff)."""
        opts: Dict[str, Any] = dict(
            port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 1),
        )
        opts.update(kw)
        return redis.Redis(**opts)

    def aclient(self, **kw: Any) -> "redis.asyncio.Redis":
        opts: Dict[str, Any] = dict(
            port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0,
            retry=redis.asyncio.retry.Retry(NoBackoff(), 1),
        )
        opts.update(kw)
        return redis.asyncio.Redis(**opts)


def _need_redis() -> None:
    if not os.path.exists(REDIS_SERVER):
        if os.environ.get("HG_SKIP_REDIS") == "1":
            pytest.skip("redis-server is not installed (HG_SKIP_REDIS=1)")
        pytest.fail(
            "redis-server is not installed: the fleet tests need it (`make redis` installs "
            "Debian's; HG_SKIP_REDIS=1 skips them)",
            pytrace=False,
        )


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    _need_redis()
    srv = RedisServer(tmp_path)
    try:
        yield srv
    finally:
        srv.kill()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[List[RedisServer]]:
    """Three ``redis-server`` primaries in one cluster (slots split evenly, joined with
    ``CLUSTER MEET``), killed and reaped afterwards."""
    _need_redis()
    nodes: List[RedisServer] = []
    try:
        for i in range(3):
            d = tmp_path / f"node{i}"
            d.mkdir()
            nodes.append(RedisServer(d, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
        clients = [n.client() for n in nodes]
        per = 16384 // len(nodes)
        for i, c in enumerate(clients):
            last = 16383 if i == len(nodes) - 1 else (i + 1) * per - 1
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for n in nodes[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", n.port)

        def ready() -> bool:
            infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
            return all(b"cluster_state:ok" in (i if isinstance(i, bytes) else str(i).encode()) for i in infos)

        eventually(30, "the cluster's state is ok", ready)
        for c in clients:
            c.close()
        yield nodes
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator["redis.Redis"]:
    """A plain client for the test's own reads of the pool's keys."""
    c = redis_server.client()
    try:
        yield c
    finally:
        c.close()


# ----- helpers ----------------------------------------------------------------------------------


def eventually(within: float, what: str, f: Callable[[], Any]) -> None:
    """Polls ``f`` every 5 ms until it is true, for at most ``within`` seconds."""
    end = time.monotonic() + within
    while not f():
        assert time.monotonic() < end, f"not within {within} s: {what}"
        time.sleep(0.005)


async def aeventually(within: float, what: str, f: Callable[[], Any]) -> None:
    end = time.monotonic() + within
    while True:
        v = f()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return
        assert time.monotonic() < end, f"not within {within} s: {what}"
        await asyncio.sleep(0.005)


def lease(fleet: hullguard.FleetBulkhead) -> Dict[str, Any]:
    return fleet.stats()["lease"]


def held_in_redis(admin: "redis.Redis", pool: str) -> Dict[str, int]:
    raw = admin.hgetall(f"{{hg:{pool}}}:held")
    return {k.decode(): int(v) for k, v in raw.items()}


def fleet_refusal_bound(fleet: hullguard.FleetBulkhead) -> str:
    """The bound a do-not-queue acquire is refused with now (it must be refused)."""
    assert fleet.try_acquire() is None
    with pytest.raises(hullguard.BulkheadFullError) as e:
        fleet.acquire_sync(timeout=0)
    assert e.value.reason == "concurrency_limit"
    return str(e.value.detail["bound"])


class SlowSync:
    """A redis-py client whose ``hg_sync`` replies arrive ``delay`` seconds after Redis sent them
    (a proxy adding latency)."""

    def __init__(self, inner: "redis.Redis", delay: float) -> None:
        self.inner, self.delay = inner, delay

    def execute_command(self, *args: Any, **kw: Any) -> Any:
        reply = self.inner.execute_command(*args, **kw)
        if args[:2] == ("FCALL", "hg_sync"):
            time.sleep(self.delay)
        return reply


class SlowAsync:
    def __init__(self, inner: "redis.asyncio.Redis", delay: float) -> None:
        self.inner, self.delay = inner, delay

    async def execute_command(self, *args: Any, **kw: Any) -> Any:
        reply = await self.inner.execute_command(*args, **kw)
        if args[:2] == ("FCALL", "hg_sync"):
            await asyncio.sleep(self.delay)
        return reply


# ----- sync: redis.Redis ------------------------------------------------------------------------


def test_the_first_block_then_local_acquires(redis_server: RedisServer, admin: Any) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "first", max_concurrent=4, lease_ttl=3.0)
    try:
        assert isinstance(fleet.bulkhead, hullguard.Bulkhead)
        assert fleet.pool == "first" and fleet.lease_ttl == 3.0
        # The block arrives in one round trip (target: well under a millisecond); allowed 10 s.
        p = fleet.acquire_sync(timeout=10)
        s = fleet.stats()
        assert tuple(s) == STATS_KEYS + ("lease", "budget_lease")
        assert s["active"] == 1 and s["budget_lease"] is None and s["budget"] is None
        le = s["lease"]
        assert le["state"] == "leased" and le["fleet_limit"] == 4 and le["held"] >= 1, le
        assert le["holder"] == fleet.holder and le["pool"] == "first"
        assert 0 < le["lease_left"] <= 3.0 and le["last_error"] is None
        # Demand grows the block; then acquires stay local: no sync per acquire.
        def grown() -> bool:
            q = fleet.try_acquire()  # refused while the block is short: demand
            if q is not None:
                q.release()
            return bool(lease(fleet)["held"] >= 2)

        eventually(10, "a block of 2 or more", grown)
        syncs = lease(fleet)["syncs_total"]
        for _ in range(1000):
            q = fleet.try_acquire()
            assert q is not None
            q.release()
        assert lease(fleet)["syncs_total"] <= syncs + 2, "acquires went to Redis"
        p.release()
        pool = fleet.pool_stats()
        assert pool["limit"] == 4
        assert [h["holder"] for h in pool["holders"]] == [fleet.holder]
        assert held_in_redis(admin, "first") == {fleet.holder: pool["holders"][0]["held"]}
        assert "pool=\"first\"" in repr(fleet) and "state=leased" in repr(fleet)
        # The exporters sample it as a bulkhead (this process's block and counts).
        from hullguard._metrics import Sources

        [(key, samples)] = list(Sources({"llm": fleet}, None).samples())
        assert key == "llm" and ("hullguard_limit", "", "calls", "", float(fleet.limit)) in samples
    finally:
        fleet.close()
        r.close()


def test_demand_wakes_the_driver_before_its_beat(redis_server: RedisServer) -> None:
    """A 60 s lease renews every 20 s; more demand than the block covers wakes the driver at
    once (the core's demand bell): every waiter is admitted within its 10 s queue timeout, half
    the beat — without the bell none of them could be (no wall-clock assertion needed)."""
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "bell", max_concurrent=8, lease_ttl=60.0)
    try:
        first = fleet.acquire_sync(timeout=10)
        start = lease(fleet)["held"]
        permits = [fleet.acquire_sync(timeout=10) for _ in range(7)]
        assert lease(fleet)["held"] == 8 > start
        for p in permits + [first]:
            p.release()
    finally:
        fleet.close()
        r.close()


def test_two_processes_converge_to_fair_shares_and_the_oracle_never_sees_more(
    redis_server: RedisServer, admin: Any
) -> None:
    cfg = {"port": redis_server.port, "pool": "fair", "limit": 10, "ttl": 0.9, "threads": 8,
           "hold": 0.003}
    procs = [
        subprocess.Popen([sys.executable, CHILD, json.dumps(cfg)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        holders = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().split()
            assert line[:1] == ["ready"], line
            holders.append(line[1])
        # Both want more than half: each converges to 5 (target: a few beats of 0.3 s).
        eventually(30, "shares of 5 and 5", lambda: sorted(held_in_redis(admin, "fair").values()) == [5, 5])
        assert set(held_in_redis(admin, "fair")) == set(holders)
        assert int(admin.hget("{hg:fair}:cfg", "used")) <= 10
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("stop\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().split()
            assert line == ["stopped", "0"], line
            assert p.wait(20) == 0
        peak = int(admin.get("oracle:max") or 0)
        assert 0 < peak <= 10, f"{peak} calls in flight at once across the processes, limit 10"
        assert int(admin.hget("{hg:fair}:cfg", "used")) == 0, "every block given back"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
            for f in (p.stdin, p.stdout):
                if f is not None:
                    f.close()


def test_redis_killed_refuses_fleet_lease_within_the_ttl_then_the_lease_comes_back(
    redis_server: RedisServer,
) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "killed", max_concurrent=4, lease_ttl=0.4)
    try:
        fleet.acquire_sync(timeout=10).release()
        redis_server.kill()
        # At most one TTL (0.4 s) later nothing is admitted; allowed 10 s.
        eventually(10, "fail closed", lambda: fleet.try_acquire() is None and lease(fleet)["state"] == "expired")
        assert fleet_refusal_bound(fleet) == "fleet_lease"
        le = lease(fleet)
        assert le["unreachable"] and le["last_error"], le
        assert le["local_limit"] == 0 and le["expiries_total"] >= 1, le
        redis_server.restart()  # empty: no pool, no library (loaded again by the driver)

        def admitted() -> bool:
            p = fleet.try_acquire()
            if p is None:
                return False
            p.release()
            return True

        eventually(20, "a new lease after the restart", admitted)
        le = lease(fleet)
        assert le["state"] == "leased" and le["epoch_changes_total"] >= 1, le
        assert not le["unreachable"] and le["last_error"] is None
    finally:
        fleet.close()
        r.close()


def test_a_local_share_admits_while_redis_is_unreachable(redis_server: RedisServer) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "share", max_concurrent=4, lease_ttl=0.4, local_share=2)
    try:
        fleet.acquire_sync(timeout=10).release()
        redis_server.kill()
        # Both the lease manager's view and the block installed in the local bulkhead (the
        # driver's next step installs it; see the report on FleetCore::apply's order).
        eventually(10, "the local share", lambda: lease(fleet)["local_limit"] == 2 and fleet.limit == 2)
        x, y = fleet.try_acquire(), fleet.try_acquire()
        assert x is not None and y is not None
        assert fleet.try_acquire() is None, "no more than the share"
        x.release()
        y.release()
    finally:
        fleet.close(timeout=2)
        r.close()


def test_flushall_puts_the_pool_in_learning_and_holders_keep_their_blocks(
    redis_server: RedisServer, admin: Any
) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "learn", max_concurrent=6, lease_ttl=0.6)
    try:
        held = [fleet.acquire_sync(timeout=10) for _ in range(3)]
        before = lease(fleet)
        admin.flushall()
        seen_learning = []

        def relearned() -> bool:
            le = lease(fleet)
            if le["learning"]:
                seen_learning.append(le)
            return bool(le["epoch"] != before["epoch"] and le["state"] == "leased" and seen_learning)

        # The holder's next sync re-admits what it has, in a new epoch, learning.
        eventually(10, "re-admitted in a new epoch, learning", relearned)
        assert seen_learning[0]["held"] >= 3, seen_learning[0]
        assert lease(fleet)["held"] >= 3
        pool = fleet.pool_stats()
        assert 3 <= pool["used"] <= 6, pool
        for p in held:
            p.release()
    finally:
        fleet.close()
        r.close()


def test_c42_a_grant_whose_reply_comes_after_the_ttl_is_never_used_and_given_back(
    redis_server: RedisServer, admin: Any
) -> None:
    ttl = 0.3
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(SlowSync(r, ttl + 0.02), "c42", max_concurrent=4, lease_ttl=ttl)
    try:
        eventually(10, "a late grant", lambda: lease(fleet)["late_grants_total"] >= 1)
        # Nothing was ever admitted on it.
        assert fleet_refusal_bound(fleet) == "fleet_lease"
        assert fleet.stats()["admitted_total"] == 0
        # The block went back (a fenced release): Redis counts nothing for this holder.
        eventually(10, "the block given back", lambda: held_in_redis(admin, "c42").get(fleet.holder, 0) == 0)
    finally:
        fleet.close(timeout=5)
        r.close()


def test_apply_limits_sets_the_fleet_limit_under_a_revision(redis_server: RedisServer) -> None:
    ra, rb = redis_server.client(), redis_server.client(decode_responses=True)
    a = hullguard.FleetBulkhead(ra, "limit", max_concurrent=4, lease_ttl=0.6)
    b = hullguard.FleetBulkhead(rb, "limit", max_concurrent=4, lease_ttl=0.6)
    try:
        assert a.apply_limits(2, limit=7) == {"applied": True, "revision": 2, "limit": 7, "budget": None}
        # A stale revision is not an error: the limit in force is returned.
        assert b.apply_limits(1, limit=1) == {"applied": False, "revision": 2, "limit": 7, "budget": None}
        assert b.apply_limits(2, limit=1) == {"applied": False, "revision": 2, "limit": 7, "budget": None}
        eventually(10, "b sees the new limit", lambda: lease(b)["fleet_limit"] == 7 and lease(b)["rev"] == 2)
        for kwargs, name in [
            (dict(limit=3, max_queue=1), "limits"),
            (dict(limit=3, queue_timeout=1.0), "limits"),
            (dict(limit=3, budget=5), "budget"),
            (dict(), "limit"),
            (dict(limit=2**32 + 1), "limit"),
        ]:
            with pytest.raises(ValueError, match=f"^{name}: "):
                a.apply_limits(3, **kwargs)
        with pytest.raises(ValueError, match="^revision: "):
            a.apply_limits(0, limit=1)
        with pytest.raises(TypeError):
            a.apply_limits("3", limit=1)  # type: ignore[arg-type]
        assert a.pool_stats()["rev"] == 2
        assert {h["holder"] for h in b.pool_stats()["holders"]} <= {a.holder, b.holder}
    finally:
        a.close()
        b.close()
        ra.close()
        rb.close()


def test_bad_options_are_refused_by_name(redis_server: RedisServer) -> None:
    r = redis_server.client()
    F: Any = hullguard.FleetBulkhead
    try:
        cases: List[Any] = [
            (dict(lease_tt=1), TypeError, r"unknown option \"lease_tt\"; the options are \[\"pool\", \"max_concurrent\""),
            (dict(rates={"requests": {"amount": 1, "per": 1.0}}), TypeError,
             "rates: not supported by a fleet bulkhead: class rates are not fleet-wide"),
            (dict(on_state_change=print), TypeError, "on_state_change: not supported by a fleet bulkhead"),
            (dict(max_queued_cost=5), TypeError, "max_queued_cost: not supported by a fleet bulkhead"),
            (dict(budget=0), ValueError, r"budget must be an integer in 1 ..= 4294967296, got 0"),
            (dict(budget=2**32 + 1), ValueError, "budget must be an integer"),
            (dict(budget=1.5), TypeError, "budget must be an integer"),
            (dict(events="yes"), TypeError, "events must be a bool"),
            (dict(classes="x"), TypeError, "classes must be a list of dicts"),
            (dict(classes=[{"nope": 1}]), ValueError, r"classes\[0\]: unknown option \"nope\""),
            (dict(resilience={}), TypeError, "resilience: not supported"),
            (dict(leaseTtlMs=900), TypeError, "`leaseTtlMs` is spelled `lease_ttl` in Python"),
            (dict(lease_ttl=0.001), ValueError, r"lease_ttl must be a number of seconds in 0.1 ..= 3600, got 0.001"),
            (dict(lease_ttl=float("nan")), ValueError, "lease_ttl must be"),
            (dict(lease_ttl="1s"), TypeError, "lease_ttl must be a number of seconds"),
            (dict(max_concurrent=0), ValueError, r"max_concurrent must be an integer in 1 ..= 4294967296, got 0"),
            (dict(max_concurrent=-1), ValueError, "max_concurrent must be an integer"),
            (dict(max_concurrent=True), TypeError, "max_concurrent must be an integer"),
            (dict(lease_ttl=0.6, beat=0.4), ValueError, "beat: .*at most half of lease_ttl"),
            (dict(holder="a b"), ValueError, "holder must be"),
        ]
        for kwargs, exc, match in cases:
            with pytest.raises(exc, match=match):
                F(r, "bad", **kwargs)
        with pytest.raises(ValueError, match="pool must be 1..=64 characters"):
            F(r, "a b")
        with pytest.raises(TypeError, match="pool must be a str"):
            F(r, 5)
        with pytest.raises(TypeError, match="redis_client must be a redis-py client"):
            F(object(), "bad")
        with pytest.raises(RuntimeError, match="needs a running event loop"):
            F(redis.asyncio.Redis(port=redis_server.port), "bad")
        assert hullguard.fleet.FLEET_OPTIONS[:2] == ["pool", "max_concurrent"]
        # A request's own observe mode would pass the leased block: refused by name.
        fleet = F(r, "bad")
        try:
            with pytest.raises(ValueError, match="^observe: not supported by a fleet bulkhead"):
                fleet.try_acquire(observe="all")
            with pytest.raises(ValueError, match="^observe: "):
                fleet.acquire(observe="concurrency")
        finally:
            fleet.close()
    finally:
        r.close()


def test_close_refuses_waiters_and_gives_the_block_back(redis_server: RedisServer) -> None:
    r = redis_server.client()
    try:
        with hullguard.FleetBulkhead(r, "close", max_concurrent=2, lease_ttl=3.0) as fleet:
            held = [fleet.acquire_sync(timeout=10) for _ in range(2)]
            refused: List[BaseException] = []

            def wait() -> None:
                try:
                    fleet.acquire_sync(timeout=10)
                except BaseException as e:
                    refused.append(e)

            t = threading.Thread(target=wait)
            t.start()
            eventually(10, "a queued waiter", lambda: fleet.stats()["queued"] == 1)
            assert [h["holder"] for h in fleet.pool_stats()["holders"]] == [fleet.holder]
            fleet.close()
            t.join(10)
            assert len(refused) == 1 and isinstance(refused[0], hullguard.BulkheadClosedError)
            assert fleet.closed and lease(fleet)["state"] == "idle"
            with pytest.raises(hullguard.BulkheadClosedError):
                fleet.try_acquire()
            for p in held:
                p.release()  # calls in flight finish normally after close
            # Redis never counts fewer permits for this holder than were in flight at close.
            assert fleet.pool_stats()["used"] <= 2
        fleet.close()  # idempotent
        # With nothing in flight, leaving `with` gives the block back at once.
        with hullguard.FleetBulkhead(r, "close2", max_concurrent=2, lease_ttl=3.0) as f2:
            f2.acquire_sync(timeout=10).release()
            assert [h["holder"] for h in f2.pool_stats()["holders"]] == [f2.holder]
        assert f2.pool_stats()["holders"] == [] and f2.pool_stats()["used"] == 0
    finally:
        r.close()


def test_an_acl_that_forbids_functions_runs_the_library_through_evalsha(
    redis_server: RedisServer, admin: Any
) -> None:
    admin.execute_command("ACL", "SETUSER", "hg", "on", ">pw", "~*", "&*", "+@all",
                          "-function", "-fcall", "-fcall_ro")
    r = redis_server.client(username="hg", password="pw")
    fleet = hullguard.FleetBulkhead(r, "acl", max_concurrent=3, lease_ttl=3.0)
    try:
        fleet.acquire_sync(timeout=10).release()
        assert lease(fleet)["state"] == "leased"
        assert fleet.pool_stats()["limit"] == 3
        assert fleet.apply_limits(1, limit=5)["applied"]
        assert admin.execute_command("FUNCTION", "LIST") == []
    finally:
        fleet.close()
        r.close()
    assert admin.hlen("{hg:acl}:held") == 0


def test_a_forked_child_s_copy_is_closed_and_the_parent_keeps_its_lease(
    redis_server: RedisServer,
) -> None:
    """The child's copy would admit on the parent's block with no driver of its own: it is
    closed in the child (create fleet bulkheads after forking); the parent is unaffected."""
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "fork", max_concurrent=4, lease_ttl=3.0)
    try:
        p = fleet.acquire_sync(timeout=10)
        rfd, wfd = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
            pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(rfd)
                out: Dict[str, Any] = {"closed": fleet.closed}
                try:
                    out["try"] = "admitted" if fleet.try_acquire() is not None else "none"
                except hullguard.BulkheadClosedError:
                    out["try"] = "closed"
                fleet.close()  # lock-free in the child, sends nothing
                os.write(wfd, json.dumps(out).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(wfd)
        data = b""
        with os.fdopen(rfd, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        assert status == 0 and json.loads(data) == {"closed": True, "try": "closed"}, data
        assert not fleet.closed
        q = fleet.try_acquire()
        assert q is not None
        q.release()
        p.release()
        assert [h["holder"] for h in fleet.pool_stats()["holders"]] == [fleet.holder]
    finally:
        fleet.close()
        r.close()


def test_a_redis_cluster_holds_each_pool_in_one_slot(redis_cluster: List[RedisServer]) -> None:
    """Through redis-py's ``RedisCluster``: ``FUNCTION LOAD`` goes to every primary, each pool's
    six keys share one hash tag, so every call lands on the pool's node."""
    from redis.cluster import RedisCluster

    rc = RedisCluster(host="127.0.0.1", port=redis_cluster[0].port, socket_timeout=2.0)
    try:
        for pool in ["alpha", "bravo", "charlie"]:
            with hullguard.FleetBulkhead(rc, pool, max_concurrent=3, lease_ttl=1.0) as fleet:
                fleet.acquire_sync(timeout=10).release()
                assert fleet.pool_stats()["limit"] == 3
            assert fleet.pool_stats()["holders"] == []
        slots = {rc.keyslot(f"{{hg:{p}}}:cfg") for p in ["alpha", "bravo", "charlie"]}
        assert len(slots) == 3
    finally:
        rc.close()


# ----- asyncio: redis.asyncio.Redis -------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_first_block_local_acquires_demand_and_aclose(redis_server: RedisServer) -> None:
    r = redis_server.aclient()
    try:
        async with hullguard.FleetBulkhead(r, "afirst", max_concurrent=8, lease_ttl=60.0) as fleet:
            async with fleet.acquire(timeout=10) as p:
                assert isinstance(p, hullguard.Permit)
                le = lease(fleet)
                assert le["state"] == "leased" and le["fleet_limit"] == 8, le
            # More demand than the block — on the loop and from other threads — wakes the
            # driver at once: the beat is 20 s away, so being admitted within the 10 s queue
            # timeouts is the proof (no wall-clock assertion).
            permits = await asyncio.gather(
                *(fleet.acquire(timeout=10) for _ in range(4)),
                *(asyncio.to_thread(fleet.acquire_sync, timeout=10) for _ in range(4)),
            )
            assert lease(fleet)["held"] == 8
            syncs = lease(fleet)["syncs_total"]
            for q in permits:
                q.release()
            for _ in range(200):
                async with fleet.acquire():
                    pass
            assert lease(fleet)["syncs_total"] <= syncs + 2, "acquires went to Redis"
            pool = await fleet.pool_stats()
            assert [h["holder"] for h in pool["holders"]] == [fleet.holder]
            assert await fleet.apply_limits(5, limit=9) == {
                "applied": True, "revision": 5, "limit": 9, "budget": None,
            }
            assert lease(fleet)["fleet_limit"] == 9 and lease(fleet)["rev"] == 5
        # `async with` closed it and waited for the release.
        assert fleet.closed
        assert (await fleet.pool_stats())["holders"] == []
    finally:
        await r.aclose()


@pytest.mark.asyncio
async def test_async_redis_killed_refuses_fleet_lease_then_the_lease_comes_back(
    redis_server: RedisServer,
) -> None:
    r = redis_server.aclient()
    fleet = hullguard.FleetBulkhead(r, "akilled", max_concurrent=4, lease_ttl=0.4)
    try:
        (await fleet.acquire(timeout=10)).release()
        redis_server.kill()
        await aeventually(10, "fail closed", lambda: fleet.try_acquire() is None and lease(fleet)["state"] == "expired")
        assert fleet_refusal_bound(fleet) == "fleet_lease"
        le = lease(fleet)
        assert le["unreachable"] and le["last_error"] and le["local_limit"] == 0, le
        redis_server.restart()

        def admitted() -> bool:
            p = fleet.try_acquire()
            if p is None:
                return False
            p.release()
            return True

        await aeventually(20, "a new lease after the restart", admitted)
        assert lease(fleet)["epoch_changes_total"] >= 1
    finally:
        await fleet.aclose(timeout=5)
        await r.aclose()


@pytest.mark.asyncio
async def test_async_c42_a_late_grant_is_never_used_and_given_back(
    redis_server: RedisServer, admin: Any
) -> None:
    ttl = 0.3
    r = redis_server.aclient()
    fleet = hullguard.FleetBulkhead(SlowAsync(r, ttl + 0.02), "ac42", max_concurrent=4, lease_ttl=ttl)
    try:
        await aeventually(10, "a late grant", lambda: lease(fleet)["late_grants_total"] >= 1)
        assert fleet_refusal_bound(fleet) == "fleet_lease"
        assert fleet.stats()["admitted_total"] == 0
        await aeventually(10, "the block given back", lambda: held_in_redis(admin, "ac42").get(fleet.holder, 0) == 0)
    finally:
        await fleet.aclose(timeout=5)
        await r.aclose()


@pytest.mark.asyncio
async def test_async_close_without_await_refuses_waiters_and_the_driver_stops(
    redis_server: RedisServer, admin: Any
) -> None:
    r = redis_server.aclient()
    fleet = hullguard.FleetBulkhead(r, "aclose", max_concurrent=2, lease_ttl=3.0)
    try:
        held = [await fleet.acquire(timeout=10) for _ in range(2)]
        waiter = asyncio.ensure_future(fleet.acquire(timeout=10))
        await aeventually(10, "a queued waiter", lambda: fleet.stats()["queued"] == 1)
        fleet.close()  # not awaited: the driver task finishes on this loop
        with pytest.raises(hullguard.BulkheadClosedError):
            await waiter
        for p in held:
            p.release()
        await fleet.aclose()  # idempotent; waits for the driver task
        assert fleet._task is not None and fleet._task.done()
        assert sum(held_in_redis(admin, "aclose").values()) <= 2
        # With nothing in flight, a close that is not awaited still gives the block back.
        f2 = hullguard.FleetBulkhead(r, "aclose2", max_concurrent=2, lease_ttl=3.0)
        (await f2.acquire(timeout=10)).release()
        f2.close()
        await aeventually(10, "the block given back", lambda: held_in_redis(admin, "aclose2") == {})
    finally:
        await r.aclose()


@pytest.mark.asyncio
async def test_async_an_unreachable_redis_raises_on_entry(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    r = redis.asyncio.Redis(port=port, socket_connect_timeout=0.5, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))
    try:
        fleet = hullguard.FleetBulkhead(r, "nowhere", lease_ttl=1.0)
        with pytest.raises(redis.exceptions.ConnectionError):
            async with fleet:
                pass
        assert fleet.closed
        with pytest.raises(hullguard.BulkheadClosedError):
            fleet.acquire_sync(timeout=0)
    finally:
        await r.aclose()


def test_sync_an_unreachable_redis_raises_at_construction() -> None:
    r = redis.Redis(port=_free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            hullguard.FleetBulkhead(r, "nowhere", lease_ttl=1.0)
    finally:
        r.close()


# ----- the `hullguard fleet show` command -------------------------------------------------------


def _hullguard(*args: str, _prelude: str = "", **env: str) -> "subprocess.CompletedProcess[str]":
    """``hullguard <args>`` (the console script's ``main``) in a child interpreter."""
    code = f"import sys; {_prelude}from hullguard.host import main; sys.exit(main())"
    e = {k: v for k, v in os.environ.items() if k != "HULLGUARD_REDIS_URL"}
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=30, env=e
    )


def test_fleet_show_names_the_holder_and_the_limit(redis_server: RedisServer, admin: Any) -> None:
    r = redis_server.client()
    fleet = hullguard.FleetBulkhead(r, "cli", max_concurrent=7, lease_ttl=5.0)
    url = f"redis://127.0.0.1:{redis_server.port}/"
    try:
        p = fleet.acquire_sync(timeout=10)
        eventually(10, "a block", lambda: lease(fleet)["held"] >= 1)
        out = _hullguard("fleet", "show", "cli", "--redis", url)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("pool cli: limit 7 (rev "), out.stdout
        assert lines[0].endswith(", 1 holder"), out.stdout
        [row] = [ln for ln in lines if fleet.holder in ln]
        assert row.split()[0] == fleet.holder and 1 <= int(row.split()[1]) <= 7, row
        # JSON, the URL from $HULLGUARD_REDIS_URL.
        out = _hullguard("fleet", "show", "cli", "--json", HULLGUARD_REDIS_URL=url)
        assert out.returncode == 0, out.stderr
        j = json.loads(out.stdout)
        assert (j["pool"], j["exists"], j["limit"]) == ("cli", True, 7)
        [h] = j["holders"]
        assert h["holder"] == fleet.holder and 1 <= h["held"] <= 7
        assert 0 < h["expires_in_ms"] <= 5000
        p.release()
    finally:
        fleet.close()
        r.close()
    # A pool nobody opened; a server without the library (it is loaded, as a driver does).
    admin.execute_command("FUNCTION", "FLUSH")
    out = _hullguard("fleet", "show", "nobody", "--json", "--redis", url)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    assert (j["exists"], j["limit"], j["holders"]) == (False, None, [])
    assert admin.execute_command("FUNCTION", "LIST") != []
    # An ACL that forbids FUNCTION: the same read as one script (EVALSHA), as a driver does.
    admin.execute_command("FUNCTION", "FLUSH")
    admin.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "~*", "&*", "+@all",
                          "-function", "-fcall", "-fcall_ro")
    out = _hullguard("fleet", "show", "nobody", "--redis",
                     f"redis://ro:pw@127.0.0.1:{redis_server.port}/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pool nobody: no such pool in this Redis"), out.stdout
    assert admin.execute_command("FUNCTION", "LIST") == []


def test_fleet_show_bad_usage_exits_2_an_unreachable_redis_or_no_redis_py_1() -> None:
    for args in (["fleet"], ["fleet", "show"], ["fleet", "show", "a{b}"],
                 ["fleet", "show", "x", "--nope"], ["fleet", "ls"]):
        out = _hullguard(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stdout == ""
        assert out.stderr.startswith("hullguard: "), out.stderr
        assert "\nusage: hullguard fleet show POOL" in out.stderr, out.stderr
    out = _hullguard("fleet", "show", "x", "--redis", f"redis://127.0.0.1:{_free_port()}/")
    assert out.returncode == 1
    assert out.stderr.startswith("hullguard: ConnectionError"), out.stderr
    # Without redis-py (an optional dependency: hullguard[fleet]).
    out = _hullguard("fleet", "show", "x", _prelude="sys.modules['redis'] = None; ")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == "hullguard: fleet show needs redis-py: pip install 'hullguard[fleet]'\n"
