"""Servers for the tests: redis-server (or $REDIS_LOCK_SERVER) with the
redis-lock module loaded, on free loopback ports, always stopped."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("REDIS_LOCK_SERVER", "redis-server")
MODULE = os.environ.get("REDIS_LOCK_MODULE", str(ROOT / "target/release/libredis_lock.so"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, below
    the ephemeral range (a cluster node's port must be 55535 or less)."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 30000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster node")


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
    """A server with the module on a free port. ``aof``: an append-only file
    fsynced on every write, so that ``kill9()`` + ``restart()`` keeps what
    was acknowledged. ``args``: more server arguments; ``binary``: another
    server binary (a TLS-capable one)."""

    def __init__(
        self,
        tmp: Path,
        *,
        aof: bool = False,
        args: Sequence[str] = (),
        binary: Optional[str] = None,
        port: Optional[int] = None,
    ) -> None:
        if not Path(MODULE).exists():
            pytest.fail(f"module not built: {MODULE} (cargo build --release -p redis-lock)")
        self.port = port or free_port()
        self.dir = tmp / f"node-{self.port}"
        self.dir.mkdir(exist_ok=True)
        self.log = tmp / f"server-{self.port}.log"
        self.binary = binary or SERVER
        self.args = [
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--loadmodule",
            MODULE,
            "--save",
            "",
            "--dir",
            str(self.dir),
            *(
                ["--appendonly", "yes", "--appendfsync", "always"]
                if aof
                else ["--appendonly", "no"]
            ),
            *args,
        ]
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, *self.args],
            stdout=self.log.open("ab"),
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

    def kill9(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or saved."""
        self.stop()

    def restart(self) -> None:
        """Starts it again on the same port and directory (after kill9)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., List[Server]]]:
    started: List[Server] = []

    def start(n: int, **options: Any) -> List[Server]:
        new = [Server(tmp_path, **options) for _ in range(n)]
        started.extend(new)
        return new

    try:
        yield start
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def server(servers: Callable[..., List[Server]]) -> Server:
    return servers(1)[0]


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
