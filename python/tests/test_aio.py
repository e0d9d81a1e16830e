from __future__ import annotations

import asyncio

import pytest

from redislock_native import LockNotAcquired, StaleToken
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
