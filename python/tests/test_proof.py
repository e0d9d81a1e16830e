"""The proof items of the Python client on real servers: FIFO waiting,
fencing tokens across a quorum and crash-restarts, the lost-lock signal when
a majority dies, asyncio cancellation, TLS, a Redis Cluster, read-write and
semaphore rules across handles."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import redis
from conftest import SERVER, Server, free_cluster_port, free_port, wait_until

from redislock_native import LockLost, LockNotAcquired, NodeError, Redlock
from redislock_native.aio import AsyncRedlock


def lock_info(port: int, key: str) -> Optional[Dict[str, object]]:
    """LOCK.INFO of `key` as a dict (None: no lock there)."""
    with redis.Redis(port=port, socket_timeout=5) as r:
        reply = r.execute_command("LOCK.INFO", key)
    if reply is None:
        return None
    fields = list(reply)
    return {
        (k.decode() if isinstance(k, bytes) else k): v for k, v in zip(fields[::2], fields[1::2])
    }


def waiters(port: int, key: str) -> int:
    info = lock_info(port, key)
    return 0 if info is None else int(info.get("waiters", 0))


def is_free(port: int, key: str) -> bool:
    with redis.Redis(port=port, socket_timeout=5) as r:
        return r.exists(key) == 0


def test_fifo_waiting_grants_in_arrival_order(server):
    rl = Redlock(server.url, ttl=30.0)
    held = rl.acquire("fifo")
    order: List[int] = []
    errors: List[BaseException] = []

    def waiter(i: int) -> None:
        try:
            lock = rl.acquire("fifo", wait=60.0)
            order.append(i)
            lock.release()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = []
    for i in range(4):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        # Queued on the server before the next one arrives.
        wait_until(lambda n=i + 1: waiters(server.port, "fifo") == n)
    assert order == []
    held.release()
    for t in threads:
        t.join(60)
    assert errors == []
    assert order == [0, 1, 2, 3]
    assert is_free(server.port, "fifo")


def test_fencing_tokens_increase_across_a_quorum_and_crash_restarts(servers):
    nodes = servers(3, aof=True)
    rl = Redlock([n.url for n in nodes], ttl=10.0)
    tokens: List[int] = []

    def take(count: int) -> None:
        for _ in range(count):
            with rl.lock("fenced", wait=30.0) as lock:
                tokens.append(lock.token)

    take(3)
    # A minority crashes and comes back, then every node does.
    nodes[0].kill9()
    take(2)
    nodes[0].restart()
    take(2)
    for n in nodes:
        n.kill9()
    for n in nodes:
        n.restart()
    take(3)
    assert len(tokens) == 10
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens


def test_a_majority_killed_is_signalled_as_a_lost_lock(servers):
    nodes = servers(3)
    rl = Redlock([n.url for n in nodes], ttl=3.0)
    with pytest.raises(LockLost):
        with rl.lock("majority", watchdog=True) as lock:
            assert lock.is_held
            nodes[0].kill9()
            nodes[1].kill9()
            wait_until(lambda: lock.is_lost)
            assert not lock.is_held
            with pytest.raises(LockLost):
                lock.check()
    assert not lock.is_held


def test_cancelling_a_waiting_task_leaves_no_hold(server):
    async def main() -> None:
        rl = AsyncRedlock(server.url, ttl=60.0)
        held = await rl.acquire("cancel-wait")
        task = asyncio.create_task(rl.acquire("cancel-wait", wait=60.0))
        while waiters(server.port, "cancel-wait") != 1:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await held.release()

    asyncio.run(main())
    # Free long before the 60 s lease would end: the cancelled acquisition
    # released what it won (or never won it).
    wait_until(lambda: is_free(server.port, "cancel-wait"), timeout=10.0)
    assert waiters(server.port, "cancel-wait") == 0


def test_cancelling_a_task_inside_async_with_releases(server):
    async def main() -> None:
        rl = AsyncRedlock(server.url, ttl=60.0)
        inside = asyncio.Event()

        async def body() -> None:
            async with rl.lock("cancel-body", watchdog=True):
                inside.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(body())
        await inside.wait()
        assert not is_free(server.port, "cancel-body")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Released by __aexit__, not left to the lease.
        assert is_free(server.port, "cancel-body")

    asyncio.run(main())


def test_read_write_and_semaphore_rules_across_handles(servers):
    nodes = servers(3)
    urls = [n.url for n in nodes]
    a, b = Redlock(urls, ttl=10.0), Redlock(urls, ttl=10.0)
    # Readers share; a writer waits for every reader.
    r1 = a.read_lock("doc", wait=0)
    r2 = b.read_lock("doc", wait=0)
    r1.acquire()
    r2.acquire()
    assert b.try_lock("doc") is None
    r1.release()
    assert a.try_lock("doc") is None
    r2.release()
    w = b.try_lock("doc")
    assert w is not None
    # A writer excludes readers and other writers.
    with pytest.raises(LockNotAcquired):
        a.read_lock("doc", wait=0).acquire()
    assert a.try_lock("doc") is None
    w.release()
    assert a.read_lock("doc", wait=0).acquire() is None

    # Permits are counted across handles; a released one is taken again.
    sa, sb = a.semaphore("pool", permits=2), b.semaphore("pool", permits=2)
    p1 = sa.try_acquire()
    p2 = sb.try_acquire()
    assert p1 is not None and p2 is not None
    assert sa.try_acquire() is None and sb.try_acquire() is None
    t1, t2 = p1.token, p2.token
    p1.release()
    p3 = sb.try_acquire()
    assert p3 is not None
    assert p3.token > max(t1, t2)
    p2.release()
    p3.release()


# ---------------------------------------------------------------------------
# TLS


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(tmp: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    pki = tmp / "pki"
    pki.mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=redis-lock test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=pki,
    )
    (pki / "server.ext").write_text(
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    (pki / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        ext = ["-extfile", f"{name}.ext"]
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=pki,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{name}.crt",
            *ext,
            cwd=pki,
        )
    return pki


def test_tls_with_a_private_ca_and_a_client_certificate(tmp_path):
    if subprocess.run(["which", "openssl"], capture_output=True).returncode != 0:
        pytest.fail("the TLS test needs the openssl command (apt-get install openssl)")
    pki = _pki(tmp_path)
    tls_port = free_port()
    binary = os.environ.get("REDIS_LOCK_TLS_SERVER") or SERVER
    server = Server(
        tmp_path,
        binary=binary,
        args=[
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            str(pki / "server.crt"),
            "--tls-key-file",
            str(pki / "server.key"),
            "--tls-ca-cert-file",
            str(pki / "ca.crt"),
            "--tls-auth-clients",
            "yes",
        ],
    )
    try:
        url = f"rediss://127.0.0.1:{tls_port}"
        rl = Redlock(
            url,
            ttl=10.0,
            tls_ca=pki / "ca.crt",
            tls_cert=pki / "client.crt",
            tls_key=pki / "client.key",
        )
        with rl.lock("over-tls", watchdog=True) as lock:
            assert lock.token > 0
            assert not is_free(server.port, "over-tls")
        assert is_free(server.port, "over-tls")
        # Without the client certificate the server refuses the handshake.
        plain = Redlock(url, ttl=10.0, tls_ca=pki / "ca.crt")
        with pytest.raises(NodeError):
            plain.acquire("over-tls")
        # A server certificate from an unknown CA is refused.
        (tmp_path / "other").mkdir()
        other = _pki(tmp_path / "other")
        stranger = Redlock(
            url,
            ttl=10.0,
            tls_ca=other / "ca.crt",
            tls_cert=pki / "client.crt",
            tls_key=pki / "client.key",
        )
        with pytest.raises(NodeError):
            stranger.acquire("over-tls")
        assert is_free(server.port, "over-tls")
    finally:
        server.stop()


# ---------------------------------------------------------------------------
# Redis Cluster


def _cluster(servers, count: int = 3) -> List[Server]:
    """`count` masters with cluster mode on, the 16384 slots split between
    them, joined by CLUSTER MEET; returns once every node says ok."""
    nodes = [
        servers(
            1,
            args=["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"],
            port=free_cluster_port(),
        )[0]
        for _ in range(count)
    ]
    per = 16384 // count
    for i, node in enumerate(nodes):
        first, last = i * per, (16383 if i == count - 1 else (i + 1) * per - 1)
        with redis.Redis(port=node.port) as r:
            r.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
    with redis.Redis(port=nodes[0].port) as r:
        for node in nodes[1:]:
            r.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)

    def ok() -> bool:
        for node in nodes:
            with redis.Redis(port=node.port) as r:
                info = r.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text or f"cluster_known_nodes:{count}" not in text:
                    return False
        return True

    wait_until(ok, timeout=60.0)
    return nodes


def test_redis_cluster_locks(servers):
    nodes = _cluster(servers)
    rl = Redlock([n.url for n in nodes[:1]], ttl=10.0, cluster=True)
    other = Redlock([n.url for n in nodes[1:2]], ttl=10.0, cluster=True)
    # Resources on different slots, so on different masters.
    names = [f"cluster:{i}" for i in range(12)]
    tokens = {}
    for name in names:
        with rl.lock(name, wait=10.0) as lock:
            tokens[name] = lock.token
            assert other.try_lock(name) is None
        with other.lock(name, wait=10.0) as lock:
            assert lock.token > tokens[name]
    with rl.read_lock("cluster:report", wait=0), other.read_lock("cluster:report", wait=0):
        assert rl.try_lock("cluster:report") is None
    sem = rl.semaphore("cluster:pool", permits=1)
    with sem.permit(wait=0):
        assert other.semaphore("cluster:pool", permits=1).try_acquire() is None
    # The names spread over every master's slots.
    per = 16384 // len(nodes)
    with redis.Redis(port=nodes[0].port) as r:
        owners = {
            min(int(r.execute_command("CLUSTER", "KEYSLOT", name)) // per, len(nodes) - 1)
            for name in names
        }
    assert owners == {0, 1, 2}
