//! Locks and the token counter across DEBUG RELOAD, RDB restarts, AOF
//! restarts (RDB preamble off), AOF rewrites and a crash that loses the AOF
//! tail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const LONG: u64 = 600_000;

/// Locks of several shapes, and a counter raised far above the clock by a
/// lock that was then released, so that only the saved counter (not a lock
/// nor the clock) can keep later tokens above it.
struct Fixture {
    locks: Vec<(&'static str, LockInfo)>,
    grant: Stamp,
    /// The counter was raised to this by a lock that no longer exists.
    raised_released: i64,
    /// The greatest token any lock still carries.
    highest_held: i64,
}

fn populate(c: &mut redis::Connection) -> Fixture {
    let (raised_released, grant) = timed(|| {
        acquire(c, "plain", "alice", LONG).unwrap();
        for _ in 0..3 {
            acquire(c, "reentered", "bob", LONG).unwrap();
        }
        assert_eq!(release(c, "reentered", "bob"), Some(2));
        let binary: &[u8] = b"\0own\xffer\n";
        run_raw(
            c,
            &[
                b"LOCK.ACQUIRE",
                b"binary",
                binary,
                LONG.to_string().as_bytes(),
            ],
        )
        .unwrap();
        let fenced = acquire(c, "fenced", "carol", LONG).unwrap();
        let raised_held = fenced + 1_000_000_000_000;
        assert_eq!(
            fence(c, "fenced", "carol", Some(raised_held)),
            Some(raised_held)
        );
        acquire(c, "gone", "dave", LONG).unwrap();
        let raised_released = raised_held + 1_000_000_000_000;
        assert_eq!(
            fence(c, "gone", "dave", Some(raised_released)),
            Some(raised_released)
        );
        assert_eq!(release_all(c, "gone", "dave"), Some(0));
        assert_eq!(extend(c, "plain", "alice", LONG), 1);
        raised_released
    });
    let locks: Vec<(&'static str, LockInfo)> = ["plain", "reentered", "binary", "fenced"]
        .into_iter()
        .map(|k| (k, held(c, k)))
        .collect();
    let highest_held = locks.iter().map(|(_, l)| l.token).max().unwrap();
    assert_eq!(locks[1].1.holds, 2);
    Fixture {
        locks,
        grant,
        raised_released,
        highest_held,
    }
}

/// The fixture's locks are back exactly (owner, holds, token) with a lease
/// that ran down by the real time elapsed, downtime included.
fn check_locks(c: &mut redis::Connection, fixture: &Fixture, what: &str) {
    for (key, before) in &fixture.locks {
        let (info, query) = timed(|| lock_info(c, key));
        let info = info.unwrap_or_else(|| panic!("{what}: lock {key} was lost"));
        assert_eq!(info.identity(), before.identity(), "{what}: lock {key}");
        // Every lease in the fixture was set to LONG within `grant`.
        assert_pttl(
            info.pttl,
            LONG,
            fixture.grant,
            query,
            5,
            &format!("{what}: lease of {key}"),
        );
    }
}

fn digests(c: &mut redis::Connection, fixture: &Fixture) -> Vec<String> {
    fixture
        .locks
        .iter()
        .map(|(key, _)| digest_value(c, key))
        .collect()
}

#[test]
fn debug_reload_keeps_locks_digest_counter_and_leases() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let fixture = populate(&mut c);
    let (soon, soon_grant) = timed(|| acquire(&mut c, "soon", "erin", 1_000));
    soon.unwrap();
    let before = digest(&mut c);
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    // The digest covers owner, holds and token, not the lease.
    assert_eq!(
        digest(&mut c),
        before,
        "DEBUG DIGEST changed across DEBUG RELOAD"
    );
    check_locks(&mut c, &fixture, "after DEBUG RELOAD");
    let fresh = acquire(&mut c, "fresh", "frank", LONG).unwrap();
    assert!(
        fresh > fixture.raised_released,
        "token {fresh} after DEBUG RELOAD is not above the counter raised to {}",
        fixture.raised_released
    );
    // A loaded lease still ends by itself.
    let gone = wait_gone(&mut c, "soon", Duration::from_millis(1_000));
    // (the lease went through a wall-clock round trip: allow rounding)
    assert!(
        gone - soon_grant.sent >= Duration::from_millis(1_000 - 5),
        "ended early after reload"
    );
}

#[test]
fn loaded_leases_are_indexed_when_the_load_ends() {
    // The module indexes a load's locks when the load ends (not one
    // `loaded` keyspace event at a time, which made every keyspace event of
    // the server pay for the module). Inside MULTI no timer runs between
    // the reload and INFO: only the indexing at the load's end can have
    // filed the leases by then (the sweep comes later, on the timer).
    let server = RedisServer::start();
    let mut c = server.conn();
    for i in 0..20 {
        acquire(&mut c, &format!("loaded:{i}"), "owner", LONG).unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("value")
        .query(&mut c)
        .unwrap();
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 20);
    let (reload, info): (String, String) = redis::pipe()
        .atomic()
        .cmd("DEBUG")
        .arg("RELOAD")
        .cmd("INFO")
        .arg("lock")
        .query(&mut c)
        .unwrap();
    assert_eq!(reload, "OK");
    let index = info
        .lines()
        .find_map(|line| line.strip_prefix("lock_lease_index:"))
        .map(|v| v.trim().to_string());
    assert_eq!(
        index.as_deref(),
        Some("20"),
        "the leases of the loaded locks were not indexed when DEBUG RELOAD ended"
    );
}

/// Issue #35: the module subscribes to its server events only once the
/// server has a lock (`src/activation.rs`). A server that starts from an
/// RDB with locks and runs no lock command must still hear its load's end
/// (the first lock read subscribes it) and a flush after it.
#[test]
fn a_restart_with_locks_and_no_lock_command_since_indexes_them_and_hears_a_flush() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    for i in 0..20 {
        acquire(&mut c, &format!("loaded:{i}"), "owner", LONG).unwrap();
    }
    server.shutdown("SAVE");
    server.restart();
    let mut c = server.conn();
    // INFO is not a lock command: only the load itself can have
    // subscribed the module, before the load ended.
    assert_eq!(
        lock_stat(&mut c, "lock_lease_index"),
        20,
        "the leases loaded at startup were not indexed when the load ended"
    );
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(&mut c).unwrap();
    assert_eq!(
        lock_stat(&mut c, "lock_lease_index"),
        0,
        "FLUSHALL after a load with no lock command left the loaded leases indexed"
    );
}

/// A store that holds only fences (no lock) restarts from its RDB and runs
/// no `LOCK.*` command: an evicting policy set then must still be reported
/// (`lock_evictable`, the log's warning, which names fences), since the
/// fence's load starts the module's server events too (review of #35: it
/// was reported only at the first `LOCK.*` command).
#[test]
fn a_fence_only_store_restarted_from_its_rdb_reports_an_evicting_policy() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    let reply: String = redis::cmd("LOCK.FENCED")
        .arg("fk")
        .arg(5)
        .arg("SET")
        .arg("data")
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert_eq!(reply, "OK");
    server.shutdown("SAVE");
    server.restart();
    let mut c = server.conn();
    assert_eq!(lock_stat(&mut c, "lock_evictable"), 0);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        lock_stat(&mut c, "lock_evictable"),
        1,
        "an evicting policy on a store with fences was not reported before a LOCK.* command"
    );
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log()
            .contains("can evict locks")),
        "no warning in the log"
    );
}

/// The same for the counter's record in an AOF rewrite: a server that
/// loads an RDB holding a counter and no lock, turns the AOF on (a rewrite,
/// without the RDB preamble) and restarts from it, runs no lock command in
/// between: the counter still reaches the AOF (the fork event is heard).
#[test]
fn a_counter_loaded_without_locks_reaches_an_aof_rewrite_with_no_lock_command_since() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    // A counter far above the clock, kept by no lock.
    let raised = acquire(&mut c, "gone", "owner", LONG).unwrap() + 1_000_000_000_000;
    assert_eq!(fence(&mut c, "gone", "owner", Some(raised)), Some(raised));
    assert_eq!(release_all(&mut c, "gone", "owner"), Some(0));
    server.shutdown("SAVE");
    server.restart();
    let mut c = server.conn();
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 0);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("aof-use-rdb-preamble")
        .arg("no")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    let done = wait_until(Duration::from_secs(60), || {
        let info = info_section(&mut c, "persistence");
        info.get("aof_rewrites").and_then(|n| n.parse::<i64>().ok()) >= Some(1)
            && info.get("aof_rewrite_in_progress").map(String::as_str) == Some("0")
            && info.get("aof_rewrite_scheduled").map(String::as_str) == Some("0")
            && info.get("aof_last_bgrewrite_status").map(String::as_str) == Some("ok")
            && info.get("aof_enabled").map(String::as_str) == Some("1")
    });
    assert!(done, "the AOF rewrite did not finish");
    // Restart from the AOF alone (no RDB to read the counter from).
    server.shutdown("NOSAVE");
    for entry in std::fs::read_dir(server.dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rdb") {
            std::fs::remove_file(path).unwrap();
        }
    }
    server.restart_with(aof_options("no"));
    let mut c = server.conn();
    let fresh = acquire(&mut c, "fresh", "frank", LONG).unwrap();
    assert!(
        fresh > raised,
        "token {fresh} after an AOF restart is not above the counter {raised} loaded from the RDB"
    );
}

#[test]
fn an_rdb_restart_keeps_locks_counter_and_remaining_leases() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    let fixture = populate(&mut c);
    let (soon, soon_grant) = timed(|| acquire(&mut c, "soon", "erin", 3_000));
    soon.unwrap();
    let before = digests(&mut c, &fixture);
    server.shutdown("SAVE");
    server.restart();
    let mut c = server.conn();
    check_locks(&mut c, &fixture, "after an RDB restart");
    assert_eq!(
        digests(&mut c, &fixture),
        before,
        "DEBUG DIGEST-VALUE changed across an RDB restart"
    );
    let fresh = acquire(&mut c, "fresh", "frank", LONG).unwrap();
    assert!(
        fresh > fixture.raised_released,
        "token {fresh} after an RDB restart is not above the counter raised to {}",
        fixture.raised_released
    );
    let gone = wait_gone(&mut c, "soon", Duration::from_millis(3_000));
    assert!(
        gone - soon_grant.sent >= Duration::from_millis(3_000 - 5),
        "ended early after restart"
    );
}

#[test]
fn downtime_counts_against_a_saved_lease() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    let ttl = 1_500;
    let (short, grant) = timed(|| acquire(&mut c, "short", "alice", ttl));
    let short = short.unwrap();
    assert!(lock_info(&mut c, "short").is_some());
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    server.kill9();
    // Stay down until the lease has surely ended.
    let end = grant.answered + Duration::from_millis(ttl + 50);
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    server.restart();
    let mut c = server.conn();
    assert_eq!(
        lock_info(&mut c, "short"),
        None,
        "a lease that ended while the node was down is over"
    );
    let next = acquire(&mut c, "short", "bob", LONG).unwrap();
    assert!(next > short);
}

fn aof_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("appendonlydir"))
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

fn aof_text(dir: &Path) -> String {
    aof_files(dir)
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "aof"))
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_aof_restart_without_preamble_replays_effects_exactly() {
    let mut server = RedisServer::start_with(aof_options("no"));
    let mut c = server.conn();
    let fixture = populate(&mut c);
    let (soon, soon_grant) = timed(|| acquire(&mut c, "soon", "erin", 3_000));
    soon.unwrap();
    let before = digests(&mut c, &fixture);

    let text = aof_text(server.dir()).to_ascii_uppercase();
    assert!(
        text.contains("LOCK.APPLY"),
        "the AOF must carry LOCK.APPLY effects"
    );
    for command in ["LOCK.ACQUIRE", "LOCK.RELEASE", "LOCK.EXTEND", "LOCK.FENCE"] {
        assert!(
            !text.contains(command),
            "the AOF holds the command {command}, not only its effect"
        );
    }

    server.kill9();
    server.restart();
    let mut c = server.conn();
    check_locks(&mut c, &fixture, "after an AOF restart");
    assert_eq!(digests(&mut c, &fixture), before);
    assert!(!exists(&mut c, "gone"), "a released lock stays released");
    let fresh = acquire(&mut c, "fresh", "frank", LONG).unwrap();
    assert!(
        fresh > fixture.raised_released,
        "token {fresh} after an AOF restart is not above the counter raised to {}",
        fixture.raised_released
    );
    let gone = wait_gone(&mut c, "soon", Duration::from_millis(3_000));
    assert!(
        gone - soon_grant.sent >= Duration::from_millis(3_000 - 5),
        "ended early after AOF restart"
    );
}

fn aof_rewrite_restart(preamble: &str) {
    let mut server = RedisServer::start_with(aof_options(preamble));
    let mut c = server.conn();
    let fixture = populate(&mut c);
    rewrite_aof(&mut c);
    // Writes after the rewrite land in the new incremental file.
    let (after, after_grant) = timed(|| acquire(&mut c, "after", "gina", LONG));
    let after = after.unwrap();
    let before = digests(&mut c, &fixture);
    server.kill9();
    server.restart();
    let mut c = server.conn();
    let what = format!("after an AOF rewrite (preamble {preamble}) and restart");
    check_locks(&mut c, &fixture, &what);
    assert_eq!(digests(&mut c, &fixture), before, "{what}");
    let (info, query) = timed(|| lock_info(&mut c, "after"));
    let info = info.unwrap_or_else(|| panic!("{what}: the lock taken after the rewrite was lost"));
    assert_eq!(info.identity(), (b"gina".to_vec(), 1, after));
    assert_pttl(info.pttl, LONG, after_grant, query, 5, &what);
    let fresh = acquire(&mut c, "fresh", "frank", LONG).unwrap();
    assert!(
        fresh > fixture.highest_held && fresh > after,
        "{what}: token {fresh} not above the held tokens"
    );
    assert!(
        fresh > fixture.raised_released,
        "{what}: token {fresh} is not above the counter raised to {} by a lock released before the rewrite",
        fixture.raised_released
    );
}

#[test]
fn an_aof_rewrite_without_preamble_keeps_locks_and_counter() {
    aof_rewrite_restart("no");
}

#[test]
fn an_aof_rewrite_with_preamble_keeps_locks_and_counter() {
    aof_rewrite_restart("yes");
}

#[test]
fn a_crash_that_loses_the_aof_tail_still_issues_greater_tokens() {
    let mut server = RedisServer::start_with(aof_options("no"));
    let mut c = server.conn();
    let kept = acquire(&mut c, "kept", "alice", LONG).unwrap();
    let incr = aof_files(server.dir())
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file");
    let size = std::fs::metadata(&incr).unwrap().len();
    let lost = acquire(&mut c, "lost", "bob", LONG).unwrap();
    assert!(
        std::fs::metadata(&incr).unwrap().len() > size,
        "the second grant reached the AOF"
    );
    server.kill9();
    // The tail (the second grant) never reached the disk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&incr)
        .unwrap()
        .set_len(size)
        .unwrap();
    server.restart();
    let mut c = server.conn();
    assert_eq!(held(&mut c, "kept").token, kept);
    assert!(!exists(&mut c, "lost"), "the truncated tail should be gone");
    let fresh = acquire(&mut c, "fresh", "carol", LONG).unwrap();
    assert!(
        fresh > lost,
        "token {fresh} after losing the AOF tail is not above the lost token {lost}"
    );
}
