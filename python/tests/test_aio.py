from __future__ import annotations

import asyncio
import os

import pytest

from redislock_native import LockNotAcquired, RedisLockError, StaleToken
from redislock_native.aio import AsyncRedlock


def test_async_lock_and_release(server):
    async def main():
        rl = AsyncRedlock(server.url, ttl=10.0)
        async with rl.lock("a", wait=5.0) as lock:
            assert lock.is_held
            first = await lock.token()
            assert await rl.try_lock("a") is None
            assert 9.0 < await lock.extend() <= 10.0
        assert not lock.is_held
        again = await rl.acquire("a")
        assert await again.token() > first
        await again.release()

        # The loop runs while an acquisition waits on the server.
        held = await rl.acquire("b")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.ensure_future(ticker())
        with pytest.raises(LockNotAcquired):
            await rl.acquire("b", wait=1.0)
        t.cancel()
        assert ticks > 50
        await held.release()

        sem = rl.semaphore("s", permits=1)
        p = await sem.acquire()
        assert await sem.try_acquire() is None
        await p.release()

    asyncio.run(main())


def test_async_fenced_write(server):
    import redis.asyncio

    async def main():
        store = redis.asyncio.Redis(port=server.port)
        rl = AsyncRedlock(server.url, ttl=10.0)
        first = await rl.acquire("lock:job")
        assert await first.fenced(store, "fence:job", "SET", "job", "one") == b"OK"
        # The lock passes on behind the first holder's back.
        assert await store.delete("lock:job") == 1
        second = await rl.acquire("lock:job")
        assert await second.fenced(store, "fence:job", "SET", "job", "two") == b"OK"
        with pytest.raises(StaleToken):
            await first.fenced(store, "fence:job", "SET", "job", "zombie")
        assert await store.get("job") == b"two"
        await second.release()
        await store.aclose()

    asyncio.run(main())


def test_async_calls_take_no_thread_each(server):
    # Native awaitables: 40 tasks waiting on the server at once run no
    # Python thread (the executor front end ran one per call in flight).
    import threading

    async def main():
        rl = AsyncRedlock(server.url, ttl=10.0)
        held = await rl.acquire("queue")
        before = threading.active_count()
        order = []

        async def waiter(i):
            lock = await rl.acquire("queue", wait=60.0)
            order.append(i)
            await lock.release()

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(40)]
        await asyncio.sleep(0.5)
        assert threading.active_count() == before
        await held.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert sorted(order) == list(range(40))

    asyncio.run(main())


def test_async_watchdog_lost_awaitable(servers):
    from redislock_native import LockLost

    nodes = servers(3)

    async def main():
        rl = AsyncRedlock([n.url for n in nodes], ttl=3.0)
        with pytest.raises(LockLost):
            async with rl.lock("async-majority", watchdog=True) as lock:
                assert lock.watched and lock.is_held
                nodes[0].kill9()
                nodes[1].kill9()
                assert await asyncio.wait_for(lock.lost(), 60) is True
                assert lock.is_lost and not lock.is_held
                with pytest.raises(LockLost):
                    lock.check()
        assert not lock.is_held

    asyncio.run(main())


def test_async_watchdog_renews_and_stops(server):
    async def main():
        rl = AsyncRedlock(server.url, ttl=3.0)
        lock = await rl.acquire("async-renewed")
        await lock.start_watchdog()
        lost = asyncio.ensure_future(lock.lost())
        started = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - started < 4.0:
            await asyncio.sleep(0.1)
        assert lock.is_held and not lost.done()
        assert await rl.try_lock("async-renewed") is None
        await lock.stop_watchdog()
        assert await asyncio.wait_for(lost, 10) is False
        assert lock.is_held and not lock.watched
        await lock.release()
        assert await rl.try_lock("async-renewed") is not None

    asyncio.run(main())


def test_async_distinct_waits_share_one_client(server):
    from test_locks import connected_clients

    async def main():
        rl = AsyncRedlock(server.url, ttl=10.0)
        held = await rl.acquire("busy")
        baseline = connected_clients(server)
        for i in range(20):
            lock = await rl.acquire(f"free-{i}", wait=5.0 + i / 10)
            await lock.release()
        assert connected_clients(server) <= baseline + 2
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(LockNotAcquired):
            await rl.acquire("busy", wait=1.5)
        assert loop.time() - started >= 1.0, "gave up long before its wait"
        await held.release()

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_async_client_made_in_a_forked_child_works(server):
    """ForkedProcessError tells a forked child to "create a new Redlock in
    the child". The sync client does that fine (a runtime per client); the
    asyncio one runs on pyo3-async-runtimes' process-wide runtime, made in
    the parent, whose threads do not exist in the child: an AsyncRedlock
    made in the child must still work (or refuse at once), never hang."""

    async def use(name):
        rl = AsyncRedlock(server.url, ttl=10.0)
        lock = await rl.acquire(name)
        await lock.release()

    asyncio.run(use("parent"))  # the parent's runtime now exists
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened, never return into pytest
        code = 1
        try:
            asyncio.run(asyncio.wait_for(use("child"), 10.0))
            code = 0
        except asyncio.TimeoutError:
            code = 3
        except RedisLockError:
            code = 0  # a clear refusal is acceptable too
        except BaseException:
            code = 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert result != b"\x03", "an AsyncRedlock made in a forked child hung (10 s)"
    assert result == b"\x00"
