"""make bench, Python section: lock+unlock cycles per second and client CPU
per cycle of redislock_native against redis-py's Lock (one node) and
pottery's Redlock (five masters), on the same module-loaded servers in the
same run, at 1, 16 and 64 threads, and
with asyncio at 1, 16 and 64 tasks against redis.asyncio's Lock and pottery's
AIORedlock. Each thread locks and unlocks a resource
of its own in a loop (no contention: the client's own cost is measured).
Client CPU is this process's CPU time (every thread, the Rust client's
runtime threads included) per cycle; the servers are other processes.

    python bench_python.py --server redis-server --module target/release/libredis_lock.so \
        [--seconds 3] [--out BENCHMARKS.md] [--cases asyncio-one] [--counts 16,64]

`--cases` picks some of the four cases (threads-one, threads-five,
asyncio-one, asyncio-five; all by default) and `--counts` the numbers of
threads/tasks, for a quick look at one row (`make bench` runs them all).

Prints a Markdown section and, with --out, appends it to that file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from typing import Awaitable, Callable, List, Tuple

import pottery
import redis
import redis.asyncio

from redislock_native import Config, Redlock
from redislock_native.aio import AsyncRedlock

THREADS = (1, 16, 64)
CASES = ("threads-one", "threads-five", "asyncio-one", "asyncio-five")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: str, module: str, tmp: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--loadmodule",
                module,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis(port=self.port).ping():
                    return
            except redis.ConnectionError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{binary} did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run(
    cycle_factory: Callable[[int], Callable[[], None]], threads: int, seconds: float
) -> Tuple[float, float]:
    """cycles/s and client CPU microseconds per cycle of `threads` threads
    each running its own cycle for `seconds`."""
    cycles = [0] * threads
    stop = threading.Event()
    start = threading.Barrier(threads + 1)
    errors: List[BaseException] = []

    def worker(i: int) -> None:
        cycle = cycle_factory(i)
        cycle()  # connections up before the clock starts
        start.wait()
        n = 0
        try:
            while not stop.is_set():
                cycle()
                n += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        cycles[i] = n

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    cpu0, t0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    if errors:
        raise RuntimeError(f"a benchmark thread failed: {errors[0]!r}")
    total = sum(cycles)
    return total / wall, cpu / max(total, 1) * 1e6


def run_async(
    make: Callable[[], Callable[[int], Callable[[], Awaitable[None]]]], tasks: int, seconds: float
) -> Tuple[float, float]:
    """As run(), with `tasks` asyncio tasks on one event loop; `make` builds
    the clients inside the loop."""

    async def main() -> Tuple[float, float]:
        factory = make()
        cycles = [0] * tasks
        stop = asyncio.Event()

        async def worker(i: int) -> None:
            cycle = factory(i)
            await cycle()
            await ready.wait()
            n = 0
            while not stop.is_set():
                await cycle()
                n += 1
            cycles[i] = n

        ready = asyncio.Event()
        workers = [asyncio.ensure_future(worker(i)) for i in range(tasks)]
        await asyncio.sleep(0.2)
        ready.set()
        cpu0, t0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*workers)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        total = sum(cycles)
        return total / wall, cpu / max(total, 1) * 1e6

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="redis-server")
    ap.add_argument("--module", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--counts", default=",".join(map(str, THREADS)))
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if not cases <= set(CASES):
        ap.error(f"--cases: one or more of {', '.join(CASES)}")
    counts = [int(n) for n in args.counts.split(",")]

    tmp = tempfile.mkdtemp(prefix="redis-lock-pybench-")
    servers = [Server(args.server, args.module, tmp) for _ in range(5)]
    try:
        one = servers[:1]
        five = servers
        # node_timeout as in the defaults; the locks are never contended.
        config = Config()

        def ours(nodes: List[Server]) -> Callable[[int], Callable[[], None]]:
            rl = Redlock([s.url for s in nodes], ttl=10.0, config=config)

            def factory(i: int) -> Callable[[], None]:
                name = f"bench:ours:{len(nodes)}:{i}"

                def cycle() -> None:
                    lock = rl.acquire(name)
                    lock.release()

                return cycle

            return factory

        def redis_py(i: int) -> Callable[[], None]:
            client = redis_py.client  # type: ignore[attr-defined]
            name = f"bench:redis-py:{i}"

            def cycle() -> None:
                lock = client.lock(name, timeout=10.0)
                if not lock.acquire(blocking=False):
                    raise RuntimeError("redis-py lock not acquired")
                lock.release()

            return cycle

        redis_py.client = redis.Redis(port=one[0].port, max_connections=128)  # type: ignore[attr-defined]

        pottery_masters = {redis.Redis(port=s.port, max_connections=128) for s in five}

        def pottery_redlock(i: int) -> Callable[[], None]:
            name = f"bench:pottery:{i}"

            def cycle() -> None:
                lock = pottery.Redlock(key=name, masters=pottery_masters, auto_release_time=10.0)
                if not lock.acquire(blocking=False):
                    raise RuntimeError("pottery lock not acquired")
                lock.release()

            return cycle

        rows = []
        for case, label, ours_factory, theirs_label, theirs in (
            ("threads-one", "one node", ours(one), "redis-py Lock", redis_py),
            ("threads-five", "five masters", ours(five), "pottery Redlock", pottery_redlock),
        ):
            if case not in cases:
                continue
            for threads in counts:
                load = os.getloadavg()[0]
                o_rate, o_cpu = run(ours_factory, threads, args.seconds)
                t_rate, t_cpu = run(theirs, threads, args.seconds)
                rows.append((label, threads, o_rate, o_cpu, theirs_label, t_rate, t_cpu, load))
                print(
                    f"{label} x{threads}: ours {o_rate:.0f}/s {o_cpu:.0f} us/cycle; "
                    f"{theirs_label} {t_rate:.0f}/s {t_cpu:.0f} us/cycle (load {load:.1f})",
                    flush=True,
                )

        # asyncio: tasks on one event loop (clients made inside it).
        def ours_async(nodes: List[Server]):
            def make():
                rl = AsyncRedlock([s.url for s in nodes], ttl=10.0, config=config)

                def factory(i: int):
                    name = f"bench:ours-aio:{len(nodes)}:{i}"

                    async def cycle() -> None:
                        lock = await rl.acquire(name)
                        await lock.release()

                    return cycle

                return factory

            return make

        def redis_py_async():
            client = redis.asyncio.Redis(port=one[0].port, max_connections=128)

            def factory(i: int):
                name = f"bench:redis-py-aio:{i}"

                async def cycle() -> None:
                    lock = client.lock(name, timeout=10.0)
                    if not await lock.acquire(blocking=False):
                        raise RuntimeError("redis-py lock not acquired")
                    await lock.release()

                return cycle

            return factory

        def pottery_async():
            masters = {redis.asyncio.Redis(port=s.port, max_connections=128) for s in five}

            def factory(i: int):
                name = f"bench:pottery-aio:{i}"

                async def cycle() -> None:
                    lock = pottery.AIORedlock(key=name, masters=masters, auto_release_time=10.0)
                    if not await lock.acquire(blocking=False):
                        raise RuntimeError("pottery lock not acquired")
                    await lock.release()

                return cycle

            return factory

        for case, label, ours_make, theirs_label, theirs_make in (
            (
                "asyncio-one",
                "one node, asyncio",
                ours_async(one),
                "redis.asyncio Lock",
                redis_py_async,
            ),
            (
                "asyncio-five",
                "five masters, asyncio",
                ours_async(five),
                "pottery AIORedlock",
                pottery_async,
            ),
        ):
            if case not in cases:
                continue
            for tasks in counts:
                load = os.getloadavg()[0]
                o_rate, o_cpu = run_async(ours_make, tasks, args.seconds)
                t_rate, t_cpu = run_async(theirs_make, tasks, args.seconds)
                rows.append((label, tasks, o_rate, o_cpu, theirs_label, t_rate, t_cpu, load))
                print(
                    f"{label} x{tasks}: ours {o_rate:.0f}/s {o_cpu:.0f} us/cycle; "
                    f"{theirs_label} {t_rate:.0f}/s {t_cpu:.0f} us/cycle (load {load:.1f})",
                    flush=True,
                )
    finally:
        for s in servers:
            s.stop()

    server_version = subprocess.run(
        [args.server, "--version"], capture_output=True, text=True
    ).stdout.strip()
    python = ".".join(map(str, sys.version_info[:3]))
    header = (
        "| nodes | threads/tasks | redislock_native cycles/s | CPU µs/cycle | compared with "
        "| its cycles/s | its CPU µs/cycle | cycles/s ratio | CPU ratio | load |"
    )
    lines = [
        "",
        "## Python client: redislock_native against redis-py's Lock and pottery's Redlock",
        "",
        f"Run by `make bench` (`bench/python/bench_python.py`), {args.seconds:g} s per "
        f"figure, on {server_version.split(' sha=')[0]}, CPython {python}, "
        f"redis-py {version('redis')}, pottery {version('pottery')}. Each thread (or task) "
        "locks and unlocks a resource of its own (uncontended); client CPU is the benchmark "
        "process's CPU time per cycle (all its threads), the servers being other "
        "processes. Targets: at 16 and 64 threads/tasks at least 2x their cycles/s and at most "
        "0.5x their CPU per cycle.",
        "",
        header,
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for label, threads, o_rate, o_cpu, theirs_label, t_rate, t_cpu, load in rows:
        lines.append(
            f"| {label} | {threads} | {o_rate:,.0f} | {o_cpu:,.0f} | {theirs_label} "
            f"| {t_rate:,.0f} | {t_cpu:,.0f} | {o_rate / t_rate:.2f}x "
            f"| {o_cpu / t_cpu:.2f}x | {load:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
