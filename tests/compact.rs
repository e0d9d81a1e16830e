//! Locks kept in the compact form (an exclusive lock whose owner is a UUID
//! or a hex id in text, or short: 48 bytes instead of 80) behave exactly as
//! every other lock: the owner is compared, replied, saved and restored as
//! the bytes the client sent, case and all; leases end on time; waiters are
//! handed the lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// Owners the compact form keeps, and for each one that differs only in
/// case (`None` when it has no letters).
const OWNERS: &[(&str, Option<&str>)] = &[
    (
        "7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c",
        Some("7F3C1A2E-9B4D-4E8F-A6C5-0D1E2F3A4B5C"),
    ),
    (
        "7F3C1A2E-9B4D-4E8F-A6C5-0D1E2F3A4B5C",
        Some("7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c"),
    ),
    ("01234567-8901-2345-6789-012345678901", None),
    (
        "0123456789abcdef0123456789abcdef",
        Some("0123456789ABCDEF0123456789ABCDEF"),
    ),
    (
        "0123456789ABCDEF0123456789ABCDEF",
        Some("0123456789abcdef0123456789abcdef"),
    ),
    ("owner-1", Some("OWNER-1")),
];

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query(c)
        .unwrap()
}

#[test]
fn compact_owners_are_checked_replied_and_kept_exactly() {
    let server = RedisServer::start();
    let mut c = server.conn();
    for (i, (owner, other_case)) in OWNERS.iter().enumerate() {
        let key = format!("k{i}");
        let token = acquire(&mut c, &key, owner, 60_000).unwrap();
        if let Some(other) = other_case {
            assert_eq!(acquire(&mut c, &key, other, 60_000), None, "{other}");
            assert_eq!(release(&mut c, &key, other), None, "{other}");
            assert_eq!(fence(&mut c, &key, other, None), None, "{other}");
            assert_eq!(extend(&mut c, &key, other, 60_000), 0, "{other}");
        }
        assert_eq!(acquire(&mut c, &key, owner, 60_000), Some(token));
        assert_eq!(fence(&mut c, &key, owner, None), Some(token));
        assert_eq!(extend(&mut c, &key, owner, 90_000), 1);
        let info = held(&mut c, &key);
        assert_eq!(info.identity(), (owner.as_bytes().to_vec(), 2, token));
        assert!(info.pttl > 60_000, "{info:?}");
        // DUMP / RESTORE under another name keeps it whole.
        let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut c).unwrap();
        let copy = format!("copy{i}");
        let _: () = redis::cmd("RESTORE")
            .arg(&copy)
            .arg(0)
            .arg(dump)
            .query(&mut c)
            .unwrap();
        assert_eq!(held(&mut c, &copy).identity(), info.identity());
    }
    let before: Vec<_> = (0..OWNERS.len())
        .map(|i| held(&mut c, &format!("k{i}")).identity())
        .collect();
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    for (i, (owner, _)) in OWNERS.iter().enumerate() {
        let key = format!("k{i}");
        assert_eq!(held(&mut c, &key).identity(), before[i], "{key}");
        assert_eq!(release(&mut c, &key, owner), Some(1));
        assert_eq!(release(&mut c, &key, owner), Some(0));
        assert!(!exists(&mut c, &key), "{key}");
    }
}

#[test]
fn a_uuid_owned_lock_takes_less_memory_than_another_owner_of_its_length() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(
        &mut c,
        "uuid",
        "7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c",
        60_000,
    )
    .unwrap();
    acquire(
        &mut c,
        "text",
        "7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5z",
        60_000,
    )
    .unwrap();
    let (uuid, text) = (memory_usage(&mut c, "uuid"), memory_usage(&mut c, "text"));
    assert!(
        uuid + 32 <= text,
        "MEMORY USAGE: {uuid} B with a UUID owner, {text} B with another 36-byte owner"
    );
}

#[test]
fn compact_locks_expire_on_time_and_are_handed_to_waiters() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let owner = "0123456789abcdef0123456789abcdef";
    // Leases end by themselves (their lease-index entry was written back).
    for i in 0..20 {
        acquire(&mut c, &format!("short{i}"), owner, 50).unwrap();
    }
    for i in 0..20 {
        wait_gone(&mut c, &format!("short{i}"), Duration::from_millis(50));
    }
    assert_eq!(lock_stat(&mut c, "lock_held"), 0);
    // A compact holder's release hands the lock to a compact waiter.
    let waiter = "fedcba98-7654-3210-fedc-ba9876543210";
    acquire(&mut c, "k", owner, 60_000).unwrap();
    let handle = spawn_waiter_or_error(&server, "k", waiter, 60_000);
    assert!(wait_until(SOON, || waiters(&mut c, "k") == 1));
    assert_eq!(release(&mut c, "k", owner), Some(0));
    let token = handle
        .join()
        .unwrap()
        .unwrap()
        .expect("the waiter was granted");
    assert_eq!(
        held(&mut c, "k").identity(),
        (waiter.as_bytes().to_vec(), 1, token)
    );
    // And its lease, filed at the hand-off, ends too.
    assert_eq!(extend(&mut c, "k", waiter, 100), 1);
    wait_gone(&mut c, "k", Duration::from_millis(100));
}
