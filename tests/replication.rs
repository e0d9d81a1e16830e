//! A replica holds exactly the primary's locks; lease ends are decided by the
//! primary; a promoted replica keeps issuing greater tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;

const LONG: u64 = 600_000;
/// Rounding of a lease carried as a wall-clock end between two processes.
const SLACK_MS: i64 = 10;

fn pair() -> (RedisServer, RedisServer) {
    (RedisServer::start(), RedisServer::start())
}

#[test]
fn a_replica_holds_the_primary_locks_from_full_sync_and_stream() {
    let (primary, replica) = pair();
    let mut p = primary.conn();
    // Before the replica attaches: carried by the full sync.
    let (synced, synced_grant) = timed(|| {
        let t = acquire(&mut p, "synced", "alice", LONG).unwrap();
        acquire(&mut p, "synced", "alice", LONG).unwrap();
        t
    });
    replica.replicate_from(&primary);
    let mut r = replica.conn();
    // After: carried by the replication stream.
    let (streamed, streamed_grant) = timed(|| acquire(&mut p, "streamed", "bob", 30_000).unwrap());
    wait_replicated(&primary, &replica);

    let (info, query) = timed(|| held(&mut r, "synced"));
    assert_eq!(info.identity(), (b"alice".to_vec(), 2, synced));
    assert_pttl(
        info.pttl,
        LONG,
        synced_grant,
        query,
        SLACK_MS,
        "replica lease of a synced lock",
    );
    let (info, query) = timed(|| held(&mut r, "streamed"));
    assert_eq!(info.identity(), (b"bob".to_vec(), 1, streamed));
    assert_pttl(
        info.pttl,
        30_000,
        streamed_grant,
        query,
        SLACK_MS,
        "replica lease of a streamed lock",
    );
    assert_eq!(
        digest(&mut r),
        digest(&mut p),
        "primary and replica datasets differ"
    );

    // Every kind of change reaches the replica.
    assert_eq!(acquire(&mut p, "streamed", "bob", LONG), Some(streamed));
    let raised = streamed + 1_000_000_000;
    assert_eq!(fence(&mut p, "streamed", "bob", Some(raised)), Some(raised));
    let (reply, extend_grant) = timed(|| extend(&mut p, "streamed", "bob", 45_000));
    assert_eq!(reply, 1);
    assert_eq!(release(&mut p, "synced", "alice"), Some(1));
    assert_eq!(release(&mut p, "synced", "alice"), Some(0));
    wait_replicated(&primary, &replica);
    let (info, query) = timed(|| held(&mut r, "streamed"));
    assert_eq!(info.identity(), (b"bob".to_vec(), 2, raised));
    assert_pttl(
        info.pttl,
        45_000,
        extend_grant,
        query,
        SLACK_MS,
        "replica lease after extend",
    );
    assert!(
        !exists(&mut r, "synced"),
        "a release to zero removes the key on the replica"
    );
    assert_eq!(digest(&mut r), digest(&mut p));
}

#[test]
fn a_replica_refuses_lock_writes_but_answers_info() {
    let (primary, replica) = pair();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let token = acquire(&mut p, "k", "alice", LONG).unwrap();
    wait_replicated(&primary, &replica);
    let mut r = replica.conn();
    for args in [
        vec!["LOCK.ACQUIRE", "k", "alice", "1000"],
        vec!["LOCK.ACQUIRE", "free", "alice", "1000"],
        vec!["LOCK.RELEASE", "k", "alice"],
        vec!["LOCK.EXTEND", "k", "alice", "1000"],
        vec!["LOCK.FENCE", "k", "alice", "ATLEAST", "5"],
    ] {
        let err = error_of(&mut r, &args);
        assert!(err.starts_with("READONLY"), "{args:?} on a replica: {err}");
    }
    assert_eq!(held(&mut r, "k").identity(), (b"alice".to_vec(), 1, token));
    assert!(!exists(&mut r, "free"));
}

#[test]
fn lease_end_is_decided_by_the_primary_and_replicated_as_a_delete() {
    let (primary, replica) = pair();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let mut r = replica.conn();
    // A long lease first, so that the (possibly slow) first sync after
    // attaching cannot outlast it; then the short lease, replicated fast.
    acquire(&mut p, "k", "alice", LONG).unwrap();
    wait_replicated(&primary, &replica);
    let ttl = 1_000;
    let (reply, grant) = timed(|| extend(&mut p, "k", "alice", ttl));
    assert_eq!(reply, 1);
    wait_replicated(&primary, &replica);
    assert!(exists(&mut r, "k"));

    // With the primary frozen before the lease ends, the replica reports the
    // ended lease as free but does not delete the key itself.
    primary.pause();
    let paused_in_time = grant.answered.elapsed() < Duration::from_millis(ttl);
    let ended = wait_until(Duration::from_millis(ttl) + SOON, || {
        lock_info(&mut r, "k").is_none()
    });
    assert!(
        ended,
        "the replica still reports the lease long after its end"
    );
    assert!(
        grant.sent.elapsed() >= Duration::from_millis(ttl - 5),
        "the replica ended the lease early"
    );
    if paused_in_time {
        assert!(
            exists(&mut r, "k"),
            "a replica must not delete an ended lock on its own"
        );
    }
    primary.resume();

    // The primary's delete arrives.
    wait_gone(&mut r, "k", Duration::ZERO);
    assert!(!exists(&mut p, "k"));
    assert_eq!(lock_stat(&mut p, "lock_expired"), 1);
}

#[test]
fn a_promoted_replica_continues_above_streamed_tokens_and_runs_leases() {
    let (primary, replica) = pair();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let mut last = 0;
    for i in 0..20 {
        last = acquire(&mut p, &format!("k{i}"), "alice", LONG).unwrap();
    }
    // Raise the counter far above the clock through a lock then released.
    let raised = last + 1_000_000_000_000;
    acquire(&mut p, "raise", "alice", LONG).unwrap();
    assert_eq!(fence(&mut p, "raise", "alice", Some(raised)), Some(raised));
    assert_eq!(release(&mut p, "raise", "alice"), Some(0));
    let (_, grant) = timed(|| acquire(&mut p, "soon", "alice", 1_500).unwrap());
    wait_replicated(&primary, &replica);
    drop(primary);

    let mut r = replica.conn();
    replica.promote();
    let fresh = acquire(&mut r, "fresh", "bob", LONG).unwrap();
    assert!(
        fresh > raised,
        "promoted replica issued {fresh}, not above the primary's {raised}"
    );
    assert!(acquire(&mut r, "fresh2", "bob", LONG).unwrap() > fresh);
    // Leases replicated from the old primary now end on the promoted node.
    let gone = wait_gone(&mut r, "soon", Duration::from_millis(1_500));
    assert!(
        gone - grant.sent >= Duration::from_millis(1_500 - 5),
        "ended early on the promoted node"
    );
    // And leases it grants itself end too.
    acquire(&mut r, "own", "bob", 200).unwrap();
    wait_gone(&mut r, "own", Duration::from_millis(200));
    assert_eq!(held(&mut r, "k0").owner, b"alice");
}

#[test]
fn a_promoted_replica_continues_above_a_counter_from_full_sync() {
    let (primary, replica) = pair();
    let mut p = primary.conn();
    let token = acquire(&mut p, "raise", "alice", LONG).unwrap();
    let raised = token + 1_000_000_000_000;
    assert_eq!(fence(&mut p, "raise", "alice", Some(raised)), Some(raised));
    assert_eq!(release(&mut p, "raise", "alice"), Some(0));
    // Only the counter remembers `raised` now; the replica gets it by full sync.
    replica.replicate_from(&primary);
    wait_replicated(&primary, &replica);
    drop(primary);
    let mut r = replica.conn();
    replica.promote();
    let fresh = acquire(&mut r, "fresh", "bob", LONG).unwrap();
    assert!(
        fresh > raised,
        "promoted replica issued {fresh}, not above the primary's counter {raised}"
    );
}

/// A lock renamed on the primary arrives at the replica under its new name
/// through the stream, with no event the module hears: the lease sweep
/// files it there, so the promoted replica ends it on time by itself.
#[test]
fn a_lock_renamed_on_the_primary_ends_on_the_promoted_replica() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    // Long enough to outlast the promotion on a loaded machine.
    acquire(&mut p, "k", "alice", 3_000).unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("k")
        .arg("k2")
        .query(&mut p)
        .unwrap();
    wait_replicated(&primary, &replica);
    drop(primary);
    replica.promote();
    let mut r = replica.conn();
    assert_eq!(held(&mut r, "k2").owner, b"alice");
    wait_gone(&mut r, "k2", Duration::from_millis(3_000));
    assert_eq!(lock_stat(&mut r, "lock_expired"), 1);
}
