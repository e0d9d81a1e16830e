"""Fencing at a real PostgreSQL: the example's conditional UPDATE rejects a
stale holder's write. The test starts its own PostgreSQL cluster (initdb +
pg_ctl, Debian's `postgresql` package) on a free port in a temporary
directory, as a non-root user when run as root (postgres refuses root), and
always stops it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

import pytest
from conftest import command, free_port

from redislock_native import Redlock, StaleToken

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

psycopg = pytest.importorskip(
    "psycopg", reason="psycopg is not installed (scripts/python-test.sh installs it)"
)
import postgres_fencing  # noqa: E402


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    pytest.skip(
        "PostgreSQL is not installed (apt-get install -y postgresql; make test installs it)"
    )


def _as_user(args: List[str]) -> List[str]:
    if os.geteuid() != 0:
        return args
    return ["runuser", "-u", "nobody", "--", *args]


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[str]:
    pg = _pg_bin()
    # Not under pytest's tmp_path: as root its parents are closed to the
    # user the cluster runs as.
    base = Path(tempfile.mkdtemp(prefix="redis-lock-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        # The cluster's files belong to the user it runs as.
        os.chmod(base, 0o755)
        shutil.chown(base, "nobody")
        shutil.chown(sock, "nobody")
    port = free_port()
    log = base / "server.log"
    pg_ctl = [str(pg / "pg_ctl"), "-D", str(data)]
    try:
        subprocess.run(
            _as_user(
                [str(pg / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]
            ),
            check=True,
            capture_output=True,
        )
        options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_user([*pg_ctl, "-l", str(log), "-o", options, "-w", "start"]),
            check=True,
            capture_output=True,
        )
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(dsn).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield dsn
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                _as_user([*pg_ctl, "-m", "immediate", "-w", "stop"]), capture_output=True
            )
        shutil.rmtree(base, ignore_errors=True)


def test_postgres_rejects_a_stale_writer(server, postgres):
    rl = Redlock(server.url, ttl=10.0)
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(postgres_fencing.SCHEMA)
        conn.execute("INSERT INTO accounts (id, balance) VALUES ('alice', 100)")
        first = rl.acquire("account:alice")
        postgres_fencing.fenced_update(conn, first, "alice", 110)
        # The first holder's lock passes on (its key deleted, as by a lease
        # end or a failover); the next holder writes with a newer token.
        assert command(server.port, "DEL", "account:alice") == b":1\r\n"
        second = rl.acquire("account:alice")
        assert second.token > first.token
        postgres_fencing.fenced_update(conn, second, "alice", 200)
        # The stale holder still believes it holds the lock: rejected.
        with pytest.raises(StaleToken):
            postgres_fencing.fenced_update(conn, first, "alice", 50)
        row = conn.execute("SELECT balance, last_token FROM accounts WHERE id = 'alice'").fetchone()
        assert row == (200, second.token)
        second.release()
