"""A small chaos workload: threads take one lock over three AOF-backed
masters while nodes are killed with SIGKILL and restarted; the chaos
checker's rules (checker.py) must find no violation. The checker itself is
shown to catch each defect it looks for."""

from __future__ import annotations

import random
import threading
import time
from typing import List

from checker import Holder, violations

from redislock_native import LockNotAcquired, NodeError, RedisLockError, Redlock


def test_the_checker_finds_each_defect():
    ok = [Holder(0, 0.0, 1.0, 2.0, 5), Holder(1, 0.5, 2.5, 3.0, 6)]
    assert violations(ok) == []
    overlap = [Holder(0, 0.0, 1.0, 2.0, 5), Holder(1, 0.5, 1.5, 3.0, 6)]
    assert [v[0] for v in violations(overlap)] == ["overlap"]
    inverted = [Holder(0, 0.0, 1.0, 2.0, 6), Holder(1, 0.5, 2.5, 3.0, 6)]
    assert [v[0] for v in violations(inverted)] == ["token order"]


def test_no_violation_under_kill_9(servers):
    nodes = servers(3, aof=True)
    urls = [n.url for n in nodes]
    clock = time.monotonic
    stop = threading.Event()
    holders: List[Holder] = []
    errors: List[BaseException] = []
    record = threading.Lock()

    def client(i: int) -> None:
        rl = Redlock(urls, ttl=2.0)
        rng = random.Random(i)
        while not stop.is_set():
            started = clock()
            try:
                lock = rl.acquire("chaos", wait=3.0)
            except (LockNotAcquired, NodeError):
                continue
            try:
                window_start = clock()
                end = window_start + lock.validity
                token = lock.token
                time.sleep(rng.uniform(0.0, 0.02))
                end = min(end, clock())
                with record:
                    holders.append(Holder(i, started, window_start, end, token))
            except RedisLockError:
                pass  # lost meanwhile (a majority down): no window recorded
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            finally:
                try:
                    lock.release()
                except RedisLockError:
                    pass

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    kills = 0
    try:
        deadline = clock() + 6.0
        while clock() < deadline:
            node = rng.choice(nodes)
            node.kill9()
            kills += 1
            time.sleep(0.2)
            node.restart()
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert errors == []
    assert kills >= 5
    assert len(holders) >= 20, len(holders)
    found = violations(holders)
    assert found == [], found[:5]
