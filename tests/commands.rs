//! Replies and errors of every LOCK.* command on a real server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use redis::Value;

#[test]
fn a_fresh_acquire_grants_one_hold_a_clock_based_token_and_the_lease() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let before = now_us();
    let (token, grant) = timed(|| acquire(&mut c, "k", "alice", 10_000));
    let after = now_us();
    let token = token.expect("a free lock is granted");
    assert!(
        before <= token && token <= after,
        "the first token on a node is its wall clock in µs: {token} not in [{before}, {after}]"
    );
    assert!(exists(&mut c, "k"));
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_eq!(
        (info.owner.as_slice(), info.holds, info.token, info.waiters),
        (&b"alice"[..], 1, token, 0)
    );
    assert_pttl(info.pttl, 10_000, grant, query, 1, "fresh lock");
}

#[test]
fn reentry_keeps_the_token_adds_a_hold_and_renews_the_lease_to_the_new_ttl() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "alice", 1_000).unwrap();

    let (again, grant) = timed(|| acquire(&mut c, "k", "alice", 60_000));
    assert_eq!(again, Some(token), "re-entry returns the same token");
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_eq!((info.holds, info.token), (2, token));
    assert_pttl(info.pttl, 60_000, grant, query, 1, "lease renewed upwards");

    let (third, grant) = timed(|| acquire(&mut c, "k", "alice", 5_000));
    assert_eq!(third, Some(token));
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_eq!((info.holds, info.token), (3, token));
    assert_pttl(
        info.pttl,
        5_000,
        grant,
        query,
        1,
        "lease renewed to the shorter ttl",
    );
}

#[test]
fn another_owner_is_refused_everywhere_and_nothing_changes() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    let digest_before = digest(&mut c);
    let before = held(&mut c, "k");

    assert_eq!(acquire(&mut c, "k", "bob", 60_000), None);
    assert_eq!(release(&mut c, "k", "bob"), None);
    assert_eq!(release_all(&mut c, "k", "bob"), None);
    assert_eq!(extend(&mut c, "k", "bob", MAX_TTL), 0);
    assert_eq!(fence(&mut c, "k", "bob", None), None);
    assert_eq!(fence(&mut c, "k", "bob", Some(MAX_ATLEAST)), None);
    // Owners are compared exactly: case and length matter.
    assert_eq!(acquire(&mut c, "k", "Alice", 60_000), None);
    assert_eq!(acquire(&mut c, "k", "alice ", 60_000), None);

    let after = held(&mut c, "k");
    assert_eq!(after.identity(), before.identity());
    assert!(
        after.pttl <= before.pttl,
        "a refused command must not renew the lease"
    );
    assert_eq!(digest(&mut c), digest_before);
    // The refused FENCE ATLEAST did not raise the node's counter.
    let next = acquire(&mut c, "k2", "carol", 60_000).unwrap();
    assert!(
        next > token && next < MAX_ATLEAST,
        "token {next} after a refused raise"
    );
}

#[test]
fn release_counts_holds_down_and_removes_the_key_at_zero() {
    let server = RedisServer::start();
    let mut c = server.conn();
    for _ in 0..3 {
        acquire(&mut c, "k", "alice", 60_000).unwrap();
    }
    assert_eq!(release(&mut c, "k", "alice"), Some(2));
    assert_eq!(held(&mut c, "k").holds, 2);
    assert_eq!(release(&mut c, "k", "alice"), Some(1));
    assert_eq!(release(&mut c, "k", "alice"), Some(0));
    assert!(
        !exists(&mut c, "k"),
        "a lock released to zero holds is gone"
    );
    assert_eq!(lock_info(&mut c, "k"), None);
    assert_eq!(release(&mut c, "k", "alice"), None, "no lock, no holder");
    assert_eq!(release(&mut c, "never", "alice"), None);
    assert_eq!(dbsize(&mut c), 0, "releasing a free lock creates nothing");
}

#[test]
fn release_all_drops_every_hold() {
    let server = RedisServer::start();
    let mut c = server.conn();
    for _ in 0..4 {
        acquire(&mut c, "k", "alice", 60_000).unwrap();
    }
    assert_eq!(release_all(&mut c, "k", "alice"), Some(0));
    assert!(!exists(&mut c, "k"));
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let lower = run(&mut c, &["LOCK.RELEASE", "k", "alice", "all"]).unwrap();
    assert_eq!(lower, Value::Int(0), "the ALL option is case-insensitive");
    assert!(!exists(&mut c, "k"));
    assert_eq!(release_all(&mut c, "k", "alice"), None);
}

#[test]
fn a_released_lock_is_free_for_anyone_with_a_greater_token() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let first = acquire(&mut c, "k", "alice", 60_000).unwrap();
    assert_eq!(release(&mut c, "k", "alice"), Some(0));
    let second = acquire(&mut c, "k", "bob", 60_000).unwrap();
    assert!(second > first, "{second} after {first}");
    assert_eq!(held(&mut c, "k").owner, b"bob");
}

#[test]
fn extend_sets_the_lease_to_ttl_from_now_for_the_holder_only() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "alice", 1_000).unwrap();

    let (reply, grant) = timed(|| extend(&mut c, "k", "alice", 60_000));
    assert_eq!(reply, 1);
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_eq!(
        (info.holds, info.token),
        (1, token),
        "extend changes only the lease"
    );
    assert_pttl(info.pttl, 60_000, grant, query, 1, "extended");

    let (reply, grant) = timed(|| extend(&mut c, "k", "alice", 2_000));
    assert_eq!(reply, 1);
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_pttl(info.pttl, 2_000, grant, query, 1, "extend can shorten");

    assert_eq!(extend(&mut c, "k", "bob", 60_000), 0);
    assert_eq!(extend(&mut c, "missing", "alice", 60_000), 0);
    assert!(!exists(&mut c, "missing"), "extend never creates a lock");
}

#[test]
fn fence_returns_the_token_and_atleast_raises_lock_and_node() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    assert_eq!(fence(&mut c, "k", "alice", None), Some(token));
    assert_eq!(fence(&mut c, "k", "alice", Some(0)), Some(token));
    assert_eq!(
        fence(&mut c, "k", "alice", Some(token - 1)),
        Some(token),
        "a lower floor changes nothing"
    );
    assert_eq!(fence(&mut c, "k", "alice", Some(token)), Some(token));

    let raised = token + 1_000_000_000_000; // ~11 days of microseconds ahead of the clock
    assert_eq!(fence(&mut c, "k", "alice", Some(raised)), Some(raised));
    let info = held(&mut c, "k");
    assert_eq!(
        (info.owner.as_slice(), info.holds, info.token),
        (&b"alice"[..], 1, raised)
    );
    assert_eq!(fence(&mut c, "k", "alice", None), Some(raised));
    let lower = run(&mut c, &["LOCK.FENCE", "k", "alice", "atleast", "5"]).unwrap();
    assert_eq!(
        lower,
        Value::Int(raised),
        "ATLEAST is case-insensitive and never lowers"
    );

    // The node's counter went up with it: every later fresh acquisition is above.
    let other = acquire(&mut c, "other", "bob", 60_000).unwrap();
    assert!(other > raised, "{other} must exceed the raised {raised}");
    assert_eq!(release_all(&mut c, "k", "alice"), Some(0));
    let again = acquire(&mut c, "k", "carol", 60_000).unwrap();
    assert!(again > other, "{again} after {other}");
    // Re-entry after a raise returns the raised token.
    assert_eq!(acquire(&mut c, "other", "bob", 60_000), Some(other));
}

#[test]
fn fence_atleast_accepts_the_whole_range() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    assert_eq!(
        fence(&mut c, "k", "alice", Some(MAX_ATLEAST)),
        Some(MAX_ATLEAST)
    );
    assert_eq!(held(&mut c, "k").token, MAX_ATLEAST);
    // No token above 2^53 - 1: the node's tokens are used up.
    assert_eq!(
        error_of(&mut c, &["LOCK.ACQUIRE", "next", "bob", "60000"]),
        "ERR fencing tokens exhausted on this node"
    );
}

#[test]
fn tokens_stop_at_2_pow_53_minus_1_so_javascript_keeps_them_exact() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    assert_eq!(
        fence(&mut c, "k", "alice", Some(MAX_ATLEAST - 1)),
        Some(MAX_ATLEAST - 1)
    );
    release(&mut c, "k", "alice").unwrap();
    // The last token this node can issue is exactly 2^53 - 1.
    assert_eq!(acquire(&mut c, "k", "bob", 60_000), Some(MAX_ATLEAST));
    assert_eq!(MAX_ATLEAST as f64 as i64, MAX_ATLEAST);
    assert_eq!(
        error_of(
            &mut c,
            &["LOCK.FENCE", "k", "bob", "ATLEAST", "9007199254740992"]
        ),
        atleast_error()
    );
    assert_eq!(
        error_of(&mut c, &["LOCK.ACQUIRE", "k2", "carol", "60000"]),
        "ERR fencing tokens exhausted on this node"
    );
}

#[test]
fn info_is_nil_without_a_lock_and_a_flat_array_in_order_under_resp2() {
    let server = RedisServer::start();
    let mut c = server.conn();
    assert_eq!(run(&mut c, &["LOCK.INFO", "k"]).unwrap(), Value::Nil);
    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    let reply = run(&mut c, &["LOCK.INFO", "k"]).unwrap();
    assert!(
        matches!(reply, Value::Array(_)),
        "RESP2 reply is a flat array: {reply:?}"
    );
    let pairs = info_pairs(reply).unwrap();
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["owner", "holds", "token", "pttl", "waiters", "mode"]
    );
    assert_eq!(pairs[0].1, Value::BulkString(b"alice".to_vec()));
    assert_eq!(pairs[1].1, Value::Int(1));
    assert_eq!(pairs[2].1, Value::Int(token));
    assert_eq!(pairs[4].1, Value::Int(0));
    assert_eq!(pairs[5].1, Value::BulkString(b"exclusive".to_vec()));
}

#[test]
fn info_is_a_map_under_resp3() {
    let server = RedisServer::start();
    let mut c = resp3_conn(&server);
    assert_eq!(run(&mut c, &["LOCK.INFO", "k"]).unwrap(), Value::Nil);
    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let reply = run(&mut c, &["LOCK.INFO", "k"]).unwrap();
    assert!(
        matches!(reply, Value::Map(_)),
        "RESP3 reply is a map: {reply:?}"
    );
    let info = parse_info(reply).unwrap();
    assert_eq!(
        (info.owner.as_slice(), info.holds, info.token, info.waiters),
        (&b"alice"[..], 2, token, 0)
    );
    assert!(info.pttl > 0 && info.pttl <= 60_000);
    // The other replies are the same under RESP3.
    assert_eq!(acquire(&mut c, "k", "bob", 60_000), None);
    assert_eq!(release(&mut c, "k", "alice"), Some(1));
    assert_eq!(fence(&mut c, "k", "alice", None), Some(token));
    assert_eq!(extend(&mut c, "k", "alice", 60_000), 1);
}

#[test]
fn owners_are_binary_safe_up_to_the_limit() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let owner: &[u8] = b"a\0b\xff\r\n c";
    let token = int_or_nil(
        run_raw(&mut c, &[b"LOCK.ACQUIRE", b"k", owner, b"60000"]).unwrap(),
        "acquire",
    )
    .unwrap();
    assert_eq!(held(&mut c, "k").owner, owner);
    assert_eq!(
        run_raw(&mut c, &[b"LOCK.ACQUIRE", b"k", b"a\0b", b"60000"]).unwrap(),
        Value::Nil
    );
    assert_eq!(
        run_raw(&mut c, &[b"LOCK.FENCE", b"k", owner]).unwrap(),
        Value::Int(token)
    );
    assert_eq!(
        run_raw(&mut c, &[b"LOCK.RELEASE", b"k", owner]).unwrap(),
        Value::Int(0)
    );

    let longest = "x".repeat(256);
    acquire(&mut c, "long", &longest, 60_000).expect("256 bytes is allowed");
    assert_eq!(held(&mut c, "long").owner, longest.as_bytes());
}

#[test]
fn too_few_arguments_is_the_standard_arity_error() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let cases: &[(&[&str], &str)] = &[
        (&["LOCK.ACQUIRE"], "lock.acquire"),
        (&["LOCK.ACQUIRE", "k"], "lock.acquire"),
        (&["LOCK.ACQUIRE", "k", "alice"], "lock.acquire"),
        (&["LOCK.RELEASE", "k"], "lock.release"),
        (&["LOCK.EXTEND", "k", "alice"], "lock.extend"),
        (&["LOCK.FENCE", "k"], "lock.fence"),
        (&["LOCK.INFO"], "lock.info"),
    ];
    for (args, name) in cases {
        assert_eq!(error_of(&mut c, args), arity_error(name), "{args:?}");
    }
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn unknown_trailing_arguments_are_a_syntax_error() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let cases: &[&[&str]] = &[
        &["LOCK.ACQUIRE", "k", "alice", "1000", "extra"],
        &["LOCK.ACQUIRE", "new", "alice", "1000", "NX"],
        &["LOCK.RELEASE", "k", "alice", "NOTALL"],
        &["LOCK.RELEASE", "k", "alice", "ALL", "ALL"],
        &["LOCK.EXTEND", "k", "alice", "1000", "x"],
        &["LOCK.FENCE", "k", "alice", "BOGUS"],
        &["LOCK.FENCE", "k", "alice", "ATLEAST"],
        &["LOCK.FENCE", "k", "alice", "ATLEAST", "5", "x"],
        &["LOCK.INFO", "k", "x"],
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|args| (args, error_of(&mut c, args)))
        .filter(|(_, err)| err != SYNTAX)
        .map(|(args, err)| format!("{args:?} -> {err}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected `{SYNTAX}` for:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        held(&mut c, "k").holds,
        1,
        "no rejected command added or dropped a hold"
    );
    assert!(!exists(&mut c, "new"));
}

#[test]
fn ttl_must_be_a_strict_integer_in_range() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "held", "alice", 60_000).unwrap();
    let bad = [
        "0",
        "-1",
        "86400001",
        "+1",
        "01",
        " 1",
        "1 ",
        "1.5",
        "1e3",
        "abc",
        "",
        "-0",
        "0x10",
        "9223372036854775808",
        "18446744073709551617",
    ];
    for ttl in bad {
        assert_eq!(
            error_of(&mut c, &["LOCK.ACQUIRE", "k", "alice", ttl]),
            ttl_error(MAX_TTL),
            "acquire ttl {ttl:?}"
        );
        assert_eq!(
            error_of(&mut c, &["LOCK.EXTEND", "held", "alice", ttl]),
            ttl_error(MAX_TTL),
            "extend ttl {ttl:?}"
        );
    }
    assert!(!exists(&mut c, "k"));
    // Both ends of the range are accepted.
    assert!(acquire(&mut c, "max", "alice", MAX_TTL).is_some());
    assert_eq!(extend(&mut c, "max", "alice", MAX_TTL), 1);
    assert!(acquire(&mut c, "min", "alice", 1).is_some());
    assert_eq!(extend(&mut c, "held", "alice", 1), 1);
}

#[test]
fn owner_must_be_non_empty_and_within_the_limit() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let long = "x".repeat(257);
    for owner in ["", long.as_str()] {
        let expected = if owner.is_empty() {
            EMPTY_OWNER.to_string()
        } else {
            owner_error(256)
        };
        for args in [
            vec!["LOCK.ACQUIRE", "k", owner, "1000"],
            vec!["LOCK.ACQUIRE", "new", owner, "1000"],
            vec!["LOCK.RELEASE", "k", owner],
            vec!["LOCK.RELEASE", "k", owner, "ALL"],
            vec!["LOCK.EXTEND", "k", owner, "1000"],
            vec!["LOCK.FENCE", "k", owner],
            vec!["LOCK.FENCE", "k", owner, "ATLEAST", "1"],
        ] {
            assert_eq!(
                error_of(&mut c, &args),
                expected,
                "{:?} with a {}-byte owner",
                args[0],
                owner.len()
            );
        }
    }
    assert!(!exists(&mut c, "new"));
    assert_eq!(held(&mut c, "k").owner, b"alice");
}

#[test]
fn atleast_must_be_a_strict_integer_in_range() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    for n in [
        "-1",
        "4611686018427387905",
        "9223372036854775807",
        "abc",
        "+5",
        "05",
        "",
        "1.0",
        " 5",
    ] {
        assert_eq!(
            error_of(&mut c, &["LOCK.FENCE", "k", "alice", "ATLEAST", n]),
            atleast_error(),
            "ATLEAST {n:?}"
        );
    }
    assert_eq!(
        held(&mut c, "k").token,
        token,
        "rejected raises left the token alone"
    );
    let next = acquire(&mut c, "k2", "bob", 60_000).unwrap();
    assert!(next < MAX_ATLEAST, "rejected raises left the counter alone");
}

#[test]
fn a_key_of_another_type_is_wrongtype_and_untouched() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("value")
        .arg("PX")
        .arg(600_000)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("l")
        .arg("a")
        .arg("b")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let before = digest(&mut c);
    for key in ["s", "l", "h"] {
        for args in [
            vec!["LOCK.ACQUIRE", key, "alice", "1000"],
            vec!["LOCK.RELEASE", key, "alice"],
            vec!["LOCK.RELEASE", key, "alice", "ALL"],
            vec!["LOCK.EXTEND", key, "alice", "1000"],
            vec!["LOCK.FENCE", key, "alice"],
            vec!["LOCK.FENCE", key, "alice", "ATLEAST", "99"],
            vec!["LOCK.INFO", key],
        ] {
            assert_eq!(error_of(&mut c, &args), WRONGTYPE, "{args:?}");
        }
    }
    assert_eq!(digest(&mut c), before, "a non-lock key is never touched");
    let value: String = redis::cmd("GET").arg("s").query(&mut c).unwrap();
    assert_eq!(value, "value");
    let pttl: i64 = redis::cmd("PTTL").arg("s").query(&mut c).unwrap();
    assert!(pttl > 0, "the string kept its own expiry: {pttl}");
    // And a lock key is WRONGTYPE for the other types' commands.
    acquire(&mut c, "lock", "alice", 60_000).unwrap();
    let err = redis::cmd("GET")
        .arg("lock")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(error_line(&err), WRONGTYPE);
}

#[test]
fn a_rejected_command_changes_nothing() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("s")
        .arg("value")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    let digest_before = digest(&mut c);
    let info_before = held(&mut c, "k");
    let stats = [
        "lock_acquired",
        "lock_reentered",
        "lock_released",
        "lock_extended",
        "lock_fenced",
        "lock_last_token",
    ];
    let stats_before: Vec<i64> = stats.iter().map(|s| lock_stat(&mut c, s)).collect();
    let rejected: &[&[&str]] = &[
        &["LOCK.ACQUIRE", "k", "alice", "0"],
        &["LOCK.ACQUIRE", "k", "alice", "1000", "extra"],
        &["LOCK.ACQUIRE", "k", "alice"],
        &["LOCK.ACQUIRE", "new", "alice", "86400001"],
        &["LOCK.ACQUIRE", "new", "", "1000"],
        &["LOCK.ACQUIRE", "s", "alice", "1000"],
        &["LOCK.RELEASE", "k", "alice", "ALL", "extra"],
        &["LOCK.RELEASE", "k", "alice", "NOTALL"],
        &["LOCK.RELEASE", "k", ""],
        &["LOCK.EXTEND", "k", "alice", "99999999999"],
        &["LOCK.EXTEND", "k", "alice", "1000", "x"],
        &["LOCK.FENCE", "k", "alice", "ATLEAST", "-1"],
        &[
            "LOCK.FENCE",
            "k",
            "alice",
            "ATLEAST",
            "99999999999999999",
            "x",
        ],
        &["LOCK.FENCE", "k", "alice", "ATLEAST", "4611686018427387905"],
    ];
    for args in rejected {
        error_of(&mut c, args);
    }
    let info_after = held(&mut c, "k");
    assert_eq!(info_after.identity(), info_before.identity());
    assert!(
        info_after.pttl <= info_before.pttl,
        "no rejected command renewed the lease"
    );
    assert_eq!(digest(&mut c), digest_before);
    assert!(!exists(&mut c, "new"));
    let stats_after: Vec<i64> = stats.iter().map(|s| lock_stat(&mut c, s)).collect();
    assert_eq!(
        stats_after, stats_before,
        "rejected commands are not counted ({stats:?})"
    );
}

#[test]
fn tokens_strictly_increase_across_keys_and_releases() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("k{i}"))
            .arg("alice")
            .arg(60_000);
    }
    let tokens: Vec<i64> = pipe.query(&mut c).unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens of one burst must strictly increase"
    );
    let mut last = *tokens.last().unwrap();
    for _ in 0..50 {
        assert_eq!(release(&mut c, "k0", "alice"), Some(0));
        let token = acquire(&mut c, "k0", "bob", 60_000).unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_eq!(release(&mut c, "k0", "bob"), Some(0));
        acquire(&mut c, "k0", "alice", 60_000).unwrap();
    }
    assert_eq!(
        lock_stat(&mut c, "lock_last_token"),
        held(&mut c, "k0").token
    );
}

#[test]
fn lock_apply_is_refused_from_a_normal_client() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let end = (now_us() / 1000 + 60_000).to_string();
    let err = error_of(&mut c, &["LOCK.APPLY", "k", "alice", "1", "42", &end]);
    assert!(err.starts_with("ERR LOCK.APPLY is internal"), "{err}");
    assert!(!exists(&mut c, "k"));
    // Nor can it overwrite a held lock.
    let token = acquire(&mut c, "held", "alice", 60_000).unwrap();
    let err = error_of(&mut c, &["LOCK.APPLY", "held", "mallory", "1", "42", &end]);
    assert!(err.starts_with("ERR LOCK.APPLY is internal"), "{err}");
    assert_eq!(
        held(&mut c, "held").identity(),
        (b"alice".to_vec(), 1, token)
    );
}

#[test]
fn lock_counter_is_refused_from_a_normal_client() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let before = acquire(&mut c, "k", "alice", 60_000).unwrap();
    assert_eq!(release(&mut c, "k", "alice"), Some(0));
    let err = error_of(&mut c, &["LOCK.COUNTER", "8000000000000000"]);
    assert!(err.starts_with("ERR LOCK.COUNTER is internal"), "{err}");
    // The counter was not raised: the next token follows the last one.
    let next = acquire(&mut c, "k", "bob", 60_000).unwrap();
    assert!(next > before && next < 8_000_000_000_000_000, "{next}");
}

#[test]
fn memory_usage_counts_the_owner() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "a", "x", 60_000).unwrap();
    acquire(&mut c, "b", &"y".repeat(256), 60_000).unwrap();
    let small: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("a")
        .query(&mut c)
        .unwrap();
    let large: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert!(small > 0, "MEMORY USAGE of a lock: {small}");
    assert!(
        large >= small + 200,
        "a 256-byte owner must show in MEMORY USAGE: {large} vs {small}"
    );
}
