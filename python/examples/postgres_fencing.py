"""Fencing at a real resource: a PostgreSQL row that only accepts a write
whose fencing token is above the last one it accepted (the storage-side
check of the fencing pattern). A holder whose lock passed on to someone else
(a pause past its lease, a failover) still believes it holds the lock, but
its older token makes the UPDATE match no row, so its stale write is
rejected instead of overwriting the newer holder's.

    python postgres_fencing.py "redis://127.0.0.1:6379" "host=127.0.0.1 port=5432 user=postgres"

Needs ``psycopg`` (3.x) and a server with the redis-lock module.
"""

from __future__ import annotations

import sys

import psycopg

from redislock_native import Lock, Redlock, StaleToken

SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    id          text PRIMARY KEY,
    balance     bigint NOT NULL,
    last_token  bigint NOT NULL DEFAULT 0
)
"""


def fenced_update(conn: psycopg.Connection, lock: Lock, account: str, balance: int) -> None:
    """Sets the balance of `account` under `lock`: only if no write with a
    newer fencing token came first. Raises StaleToken when one did (stop the
    work done under this lock)."""
    token = lock.token
    with conn.transaction():
        cur = conn.execute(
            "UPDATE accounts SET balance = %s, last_token = %s WHERE id = %s AND last_token < %s",
            (balance, token, account, token),
        )
        if cur.rowcount == 0:
            raise StaleToken(
                f"account {account}: a write with a fencing token newer than {token} "
                "was accepted first; another holder has the lock"
            )


def main(redis_url: str, dsn: str) -> None:
    rl = Redlock(redis_url, ttl=10.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO accounts (id, balance) VALUES ('alice', 100) ON CONFLICT DO NOTHING"
        )
        with rl.lock("account:alice", wait=5.0) as lock:
            fenced_update(conn, lock, "alice", 150)
            print("wrote with token", lock.token)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
