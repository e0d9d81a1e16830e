"""Servers for the tests: redis-server (or $REDIS_LOCK_SERVER) with the
redis-lock module loaded, on free loopback ports, always stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("REDIS_LOCK_SERVER", "redis-server")
MODULE = os.environ.get("REDIS_LOCK_MODULE", str(ROOT / "target/release/libredis_lock.so"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port: int, *args: str) -> bytes:
    """One RESP command to 127.0.0.1:port; the raw reply."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        data = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"".join(parts))
        return s.recv(65536)


class Server:
    def __init__(self, tmp: Path) -> None:
        if not Path(MODULE).exists():
            pytest.fail(f"module not built: {MODULE} (cargo build --release -p redis-lock)")
        self.port = free_port()
        self.log = tmp / f"server-{self.port}.log"
        self.proc = subprocess.Popen(
            [
                SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--loadmodule",
                MODULE,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(tmp),
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if command(self.port, "PING").startswith(b"+PONG"):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[[int], List[Server]]]:
    started: List[Server] = []

    def start(n: int) -> List[Server]:
        new = [Server(tmp_path) for _ in range(n)]
        started.extend(new)
        return new

    try:
        yield start
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def server(servers: Callable[[int], List[Server]]) -> Server:
    return servers(1)[0]


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
