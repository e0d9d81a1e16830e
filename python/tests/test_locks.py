from __future__ import annotations

import math
import multiprocessing
import os
import sys
import threading
import time

import pytest
from conftest import command, wait_until

from redislock_native import (
    Config,
    ConfigError,
    ForkedProcessError,
    Lock,
    LockLost,
    LockNotAcquired,
    NodeError,
    NotHeld,
    RedisLockError,
    Redlock,
    StaleToken,
)


def test_acquire_and_release(server):
    rl = Redlock([server.url], ttl=10.0)
    lock = rl.acquire("orders:1")
    assert lock.is_held and lock.holds == 1
    assert 9.0 < lock.validity <= 10.0
    assert lock.token >= 1
    assert lock.resource == "orders:1"
    release = lock.release()
    assert release.holds_left == 0 and not release.lapsed and release.released == 1
    assert not lock.is_held and lock.validity == 0.0
    with pytest.raises(NotHeld):
        lock.release()
    # Free again: another handle gets it at once.
    assert rl.try_lock("orders:1") is not None


def test_context_manager_and_try_lock(server):
    rl = Redlock(server.url, ttl=10.0)
    with rl.lock("job", wait=5.0) as lock:
        assert isinstance(lock, Lock) and lock.is_held
        assert rl.try_lock("job") is None
        with pytest.raises(LockNotAcquired) as info:
            rl.lock("job", wait=0).acquire()
        assert "wait=" in str(info.value)
    assert not lock.is_held
    other = rl.try_lock("job")
    assert other is not None and other.is_held
    other.release()


def test_with_releases_on_exception(server):
    rl = Redlock(server.url, ttl=10.0)
    with pytest.raises(RuntimeError):
        with rl.lock("boom") as lock:
            assert lock.is_held
            raise RuntimeError("work failed")
    assert not lock.is_held
    assert rl.try_lock("boom") is not None


def test_waiting_acquire_gets_the_lock_when_freed(server):
    rl = Redlock(server.url, ttl=10.0)
    first = rl.acquire("queue")
    got = []

    def waiter():
        with rl.lock("queue", wait=30.0) as lock:
            got.append(lock.token)

    t = threading.Thread(target=waiter)
    t.start()
    # The waiter is blocked in Rust without the GIL: this thread runs.
    time.sleep(0.2)
    assert not got
    first_token = first.token
    first.release()
    t.join(30)
    assert not t.is_alive() and got and got[0] > first_token


def test_wait_runs_out(server):
    rl = Redlock(server.url, ttl=10.0)
    held = rl.acquire("busy")
    started = time.monotonic()
    with pytest.raises(LockNotAcquired):
        rl.acquire("busy", wait=0.3)
    # The acquisition returns by the deadline; the server-side WAIT is the
    # deadline less one reply allowance (node_timeout), so it waited some.
    assert 0.1 <= time.monotonic() - started < 5.0
    held.release()


def test_fencing_tokens_increase_across_holders(server):
    rl = Redlock(server.url, ttl=10.0)
    tokens = []
    for _ in range(5):
        with rl.lock("fenced") as lock:
            tokens.append(lock.token)
            assert lock.token == tokens[-1]  # stable within a hold
    assert tokens == sorted(tokens) and len(set(tokens)) == 5


def test_fenced_write_refused_for_a_stale_holder(server):
    import redis

    store = redis.Redis(port=server.port)
    rl = Redlock(server.url, ttl=10.0)
    first = rl.acquire("lock:order:7")
    assert first.fenced(store, "fence:order:7", "HSET", "order:7", "status", "paid") == 1
    # The first holder's lock passes on (its key deleted, as by a lease end
    # or a failover), the next holder writes with its newer token.
    assert command(server.port, "DEL", "lock:order:7") == b":1\r\n"
    second = rl.acquire("lock:order:7")
    assert second.token > first.token
    assert second.fenced(store, "fence:order:7", "HSET", "order:7", "status", "shipped") == 0
    # The first holder still believes it holds the lock: the store refuses.
    with pytest.raises(StaleToken) as info:
        first.fenced(store, "fence:order:7", "HSET", "order:7", "status", "refunded")
    assert isinstance(info.value, LockLost)
    assert isinstance(info.value.__cause__, redis.exceptions.ResponseError)
    assert str(first.token) in str(info.value) and str(second.token) in str(info.value)
    assert store.hget("order:7", "status") == b"shipped"
    assert int(store.execute_command("LOCK.FENCEGET", "fence:order:7")) == second.token
    # Other errors pass through as the store client raised them.
    with pytest.raises(redis.exceptions.ResponseError) as other:
        second.fenced(store, "fence:order:7", "GET", "order:7")
    assert not isinstance(other.value, StaleToken)
    with pytest.raises(ValueError):
        second.fenced(store, "fence:order:7")
    # Without a hold nothing is sent.
    second.release()
    with pytest.raises(NotHeld):
        second.fenced(store, "fence:order:7", "HSET", "order:7", "status", "lost")
    assert store.hget("order:7", "status") == b"shipped"


def test_reentry_adds_holds(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("nested")
    lock.acquire()
    assert lock.holds == 2
    r = lock.release()
    assert r.holds_left == 1 and lock.is_held
    assert rl.try_lock("nested") is None  # inner release stays local
    assert lock.release().holds_left == 0
    assert rl.try_lock("nested") is not None


def test_context_manager_on_a_held_handle_releases_all(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("held")
    with lock:
        assert lock.holds == 1
    assert lock.holds == 0


def test_extend_and_validity(server):
    rl = Redlock(server.url, ttl=5.0)
    lock = rl.acquire("lease")
    assert 4.0 < lock.validity <= 5.0
    validity = lock.extend(ttl=20.0)
    assert 19.0 < validity <= 20.0 and lock.validity > 15.0
    assert 4.0 < lock.extend() <= 5.0
    lock.release()
    with pytest.raises(NotHeld):
        lock.extend()


def test_lost_lock_when_key_deleted(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("lost")
    assert command(server.port, "DEL", "lost") == b":1\r\n"
    with pytest.raises(LockLost) as info:
        lock.extend()
    assert info.value.quorum == 1 and info.value.confirmed == 0
    assert isinstance(info.value, RedisLockError)


def test_node_error_when_server_killed(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("gone")
    server.stop()
    with pytest.raises(RedisLockError) as info:
        lock.extend()
    err = info.value
    assert isinstance(err, (NodeError, LockLost)), err
    if isinstance(err, NodeError):
        assert err.node and err.detail


def test_redlock_over_three_masters(servers):
    nodes = servers(3)
    rl = Redlock([s.url for s in nodes], ttl=10.0)
    assert rl.quorum == 2 and len(rl.nodes) == 3
    lock = rl.acquire("multi")
    assert rl.try_lock("multi") is None
    first = lock.token
    # One node down: a majority is left.
    nodes[0].stop()
    lock.release()
    again = rl.acquire("multi")
    assert again.token > first
    again.release()


def test_read_locks_and_semaphore(server):
    rl = Redlock(server.url, ttl=10.0)
    r1 = rl.read_lock("report")
    r2 = rl.read_lock("report")
    with r1, r2:
        assert r1.is_held and r2.is_held
        assert rl.try_lock("report") is None
    assert rl.try_lock("report") is not None

    sem = rl.semaphore("api", permits=2)
    assert sem.permits == 2
    a = sem.acquire()
    b = sem.try_acquire()
    assert b is not None
    assert sem.try_acquire() is None
    a.release()
    c = sem.try_acquire()
    assert c is not None
    b.release()
    c.release()


def test_bad_config_and_arguments(server):
    with pytest.raises(ConfigError):
        Config(node_timeout=0.0)
    with pytest.raises(ConfigError):
        Config(drift_factor=1.5)
    with pytest.raises(ValueError):
        Config(retry_delay=-1.0)
    with pytest.raises(ValueError):
        Config(node_timeout=math.nan)
    with pytest.raises(ValueError):
        Redlock(server.url, ttl=math.inf)
    with pytest.raises(ConfigError) as info:
        Redlock(server.url, ttl=0.05, config=Config(node_timeout=0.1))
    assert "node_timeout" in str(info.value)
    with pytest.raises(ConfigError):
        Redlock([], ttl=10.0)
    with pytest.raises(ConfigError):
        Redlock("not a url", ttl=10.0)
    rl = Redlock(server.url, ttl=10.0)
    with pytest.raises(ValueError):
        rl.lock("x", wait=-1.0)
    with pytest.raises(ValueError):
        rl.lock("x", ttl=math.nan)
    config = Config(node_timeout=0.05, retry_count=7, acquire_timeout=2.0)
    assert config.retry_count == 7 and config.acquire_timeout == 2.0
    assert Redlock(server.url, config=config).config.node_timeout == 0.05


def _contender(url, resource, rounds, inside, violations, total, out):
    from redislock_native import Redlock as R

    rl = R(url, ttl=10.0)
    tokens = []
    for _ in range(rounds):
        with rl.lock(resource, wait=30.0) as lock:
            # Shared memory without a lock of its own: only the distributed
            # lock keeps these read-modify-writes apart.
            if inside.value != 0:
                violations.value += 1
            inside.value += 1
            tokens.append(lock.token)
            count = total.value
            time.sleep(0.002)
            total.value = count + 1
            inside.value -= 1
    out.put(tokens)


def test_mutual_exclusion_across_processes(server):
    ctx = multiprocessing.get_context("spawn")
    inside = ctx.Value("i", 0, lock=False)
    violations = ctx.Value("i", 0, lock=False)
    total = ctx.Value("i", 0, lock=False)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_contender, args=(server.url, "shared", 10, inside, violations, total, out)
        )
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    tokens = [t for _ in procs for t in out.get(timeout=120)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert violations.value == 0
    assert total.value == 30  # no lost update
    assert len(set(tokens)) == 30  # every holder a token of its own


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# Forking a process with threads (the client's runtime) is the point here.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_handles_refuse_after_fork(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("forked")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened, never return into pytest
        code = 1
        try:
            try:
                lock.extend()
            except ForkedProcessError:
                try:
                    rl.try_lock("other")
                except ForkedProcessError as e:
                    code = 0 if "fork" in str(e) else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert result == b"\x00"
    # The parent's handle is untouched.
    assert lock.is_held
    lock.release()


def test_gil_released_while_waiting(server):
    rl = Redlock(server.url, ttl=10.0)
    held = rl.acquire("gil")
    done = threading.Event()
    errors = []

    def blocked():
        try:
            rl.acquire("gil", wait=1.0)
        except LockNotAcquired:
            pass
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
        finally:
            # Always: an unexpected error must fail the test, not leave the
            # loop below spinning forever (seen once on Valkey 9.1 in make
            # test: the thread was gone and the test never ended).
            done.set()

    t = threading.Thread(target=blocked)
    t.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert errors == []
    assert ticks > 50
    held.release()
    wait_until(lambda: rl.try_lock("gil") is not None)


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("the servers are started as Linux processes")


def test_watchdog_keeps_the_lock_past_its_ttl(server):
    rl = Redlock(server.url, ttl=3.0)
    with rl.lock("renewed", watchdog=True) as lock:
        assert lock.watched and lock.is_held and not lock.is_lost
        token = lock.token
        started = time.monotonic()
        # Past the TTL: held only because the watchdog renewed it.
        wait_until(lambda: time.monotonic() - started > 4.0)
        assert lock.is_held and not lock.is_lost
        lock.check()
        assert rl.try_lock("renewed") is None
        assert lock.token == token
        with pytest.raises(RedisLockError, match="stop_watchdog"):
            lock.extend()
    assert not lock.watched and not lock.is_held
    assert rl.try_lock("renewed") is not None


def test_watchdog_reports_a_lost_lock(server):
    rl = Redlock(server.url, ttl=3.0)
    with pytest.raises(LockLost):
        with rl.lock("wd-lost", watchdog=True) as lock:
            command(server.port, "DEL", "wd-lost")
            wait_until(lambda: lock.is_lost)
            assert not lock.is_held
            with pytest.raises(LockLost):
                lock.check()
    assert not lock.is_held


def test_watchdog_started_and_stopped_by_hand(server):
    rl = Redlock(server.url, ttl=10.0)
    lock = rl.acquire("by-hand")
    lock.start_watchdog()
    assert lock.watched and lock.holds == 1
    lock.stop_watchdog()
    assert not lock.watched and lock.is_held
    assert 9.0 < lock.extend() <= 10.0
    lock.release()
    with pytest.raises(NotHeld):
        lock.start_watchdog()


def test_a_wait_answered_after_its_deadline_is_not_acquired(server):
    # The flaky error of test_gil_released_while_waiting on a loaded CI
    # machine: the server's reply to a wait that ran out came after the
    # client's deadline, and acquire(wait=...) raised NodeError ("no reply
    # within ... ms; check that the node is up") instead of LockNotAcquired.
    # Here the server is paused across the deadline.
    import signal

    from test_proof import waiters

    rl = Redlock(server.url, ttl=10.0)
    held = rl.acquire("late")
    result = []

    def wait() -> None:
        try:
            rl.acquire("late", wait=1.0)
            result.append("acquired")
        except Exception as e:  # noqa: BLE001 - checked below
            result.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: waiters(server.port, "late") == 1)
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        t.join(30)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert len(result) == 1 and isinstance(result[0], LockNotAcquired), result
    assert any("no reply" in detail for _, detail in result[0].outcomes), result[0].outcomes
    held.release()
    wait_until(lambda: rl.try_lock("late") is not None)


def connected_clients(server) -> int:
    reply = command(server.port, "INFO", "clients").decode()
    for line in reply.splitlines():
        if line.startswith("connected_clients:"):
            return int(line.split(":", 1)[1])
    raise AssertionError(reply)


def test_distinct_waits_share_one_client(server):
    """Every `wait` goes to the one client of a Redlock (each acquisition's
    own deadline), not to a client (and its connections) per distinct value;
    the waits are still honoured."""
    rl = Redlock(server.url, ttl=10.0)
    held = rl.acquire("busy")
    baseline = connected_clients(server)
    for i in range(20):
        lock = rl.acquire(f"free-{i}", wait=5.0 + i / 10)
        lock.release()
    # Waiting connections come and go; a client per wait kept 20 more.
    assert connected_clients(server) <= baseline + 2
    started = time.monotonic()
    with pytest.raises(LockNotAcquired):
        rl.acquire("busy", wait=1.5)
    assert time.monotonic() - started >= 1.0, "gave up long before its wait"
    held.release()
    with rl.lock("busy", wait=5.0):
        pass


def test_waiting_connection_cut_short_by_the_deadline_is_not_acquired(server):
    """client/src/single.rs (f1ad0ea) and the crate docs: a waiting
    connection that does not open before the acquisition's deadline is
    NotAcquired (the node said busy), not a node failure. Here the node
    answers on its first connection and stalls every later one (a TCP
    relay in front of the real server); the acquisition's deadline, not
    the node timeout, bounds the connect, so the outcome is LockNotAcquired.
    (A connect bounded by the node timeout may well be a NodeError.)"""
    import asyncio as aio

    relay_port = free_port_local()
    opened = []
    stop = threading.Event()

    async def handle(reader, writer):
        try:
            await relayed(reader, writer)
        except (aio.CancelledError, OSError):
            pass  # the relay shutting down

    async def relayed(reader, writer):
        opened.append(time.monotonic())
        if len(opened) > 1:  # stalled: accepted, never answered
            while not stop.is_set():
                await aio.sleep(0.05)
            writer.close()
            return
        up_r, up_w = await aio.open_connection("127.0.0.1", server.port)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except Exception:
                pass
            dst.close()

        await aio.gather(pipe(reader, up_w), pipe(up_r, writer))

    ready = threading.Event()

    def relay():
        async def main():
            srv = await aio.start_server(handle, "127.0.0.1", relay_port)
            ready.set()
            while not stop.is_set():
                await aio.sleep(0.05)
            srv.close()

        aio.run(main())

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        command(server.port, "LOCK.ACQUIRE", "stalled", "other", "60000")
        rl = Redlock(f"redis://127.0.0.1:{relay_port}", ttl=10.0, config=Config(node_timeout=1.0))
        with pytest.raises(LockNotAcquired):
            # 1.5 s: the waiting connection gets what is left after one
            # round's allowance (1 s), well under the node timeout.
            rl.acquire("stalled", wait=1.5)
        assert len(opened) >= 2, "no waiting connection was tried"
    finally:
        stop.set()
        thread.join(10)


def free_port_local() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
