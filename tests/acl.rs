//! Access control: the LOCK.* commands declare their key (position 1), so
//! ACL key patterns apply to them, and a user who may not run them gets
//! `NOPERM` without any change to the dataset; where the server allows it,
//! the commands are in `@write`/`@read`/`@fast` and the module's own `@lock`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use redis::{Connection, RedisResult, Value};
use testkit::RedisServer;

fn cmd(conn: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(conn)
}

/// Runs a command that must be refused by ACL; returns the error's detail.
fn noperm(conn: &mut Connection, args: &[&str]) -> String {
    match cmd(conn, args) {
        Ok(value) => panic!("{args:?} should be refused with NOPERM, replied {value:?}"),
        Err(err) => {
            assert_eq!(err.code(), Some("NOPERM"), "{args:?}: {err}");
            err.detail().unwrap_or_default().to_string()
        }
    }
}

fn acl_setuser(server: &RedisServer, rules: &[&str]) {
    let mut admin = server.conn();
    let mut args = vec!["ACL", "SETUSER"];
    args.extend_from_slice(rules);
    assert_eq!(cmd(&mut admin, &args).unwrap(), Value::Okay);
}

/// A connection authenticated as `user` with password `pw`.
fn conn_as(server: &RedisServer, user: &str) -> Connection {
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn token(value: Value) -> i64 {
    match value {
        Value::Int(token) if token > 0 => token,
        other => panic!("expected a fencing token, got {other:?}"),
    }
}

fn exists(server: &RedisServer, key: &str) -> bool {
    let mut admin = server.conn();
    cmd(&mut admin, &["EXISTS", key]).unwrap() == Value::Int(1)
}

#[test]
fn key_patterns_confine_a_user_to_its_locks() {
    let server = RedisServer::start();
    acl_setuser(&server, &["app", "on", ">pw", "~app:*", "+@all"]);
    let mut app = conn_as(&server, "app");

    let granted = token(cmd(&mut app, &["LOCK.ACQUIRE", "app:x", "me", "60000"]).unwrap());
    assert_eq!(
        cmd(&mut app, &["LOCK.FENCE", "app:x", "me"]).unwrap(),
        Value::Int(granted)
    );
    assert_eq!(
        cmd(&mut app, &["LOCK.EXTEND", "app:x", "me", "60000"]).unwrap(),
        Value::Int(1)
    );
    assert!(matches!(
        cmd(&mut app, &["LOCK.INFO", "app:x"]).unwrap(),
        Value::Array(_)
    ));

    // Outside its key pattern, every LOCK.* command is refused.
    let detail = noperm(&mut app, &["LOCK.ACQUIRE", "other:x", "me", "60000"]);
    // Redis: "No permissions to access one of the keys"; Valkey: "... a key".
    assert!(detail.contains("key"), "{detail}");
    noperm(&mut app, &["LOCK.RELEASE", "other:x", "me"]);
    noperm(&mut app, &["LOCK.EXTEND", "other:x", "me", "60000"]);
    noperm(&mut app, &["LOCK.FENCE", "other:x", "me"]);
    noperm(&mut app, &["LOCK.INFO", "other:x"]);
    assert!(!exists(&server, "other:x"), "a refused acquire made a lock");

    // Someone else's lock outside the pattern cannot be touched either.
    let mut admin = server.conn();
    let theirs = token(cmd(&mut admin, &["LOCK.ACQUIRE", "other:y", "me", "60000"]).unwrap());
    noperm(&mut app, &["LOCK.RELEASE", "other:y", "me", "ALL"]);
    assert_eq!(
        cmd(&mut admin, &["LOCK.FENCE", "other:y", "me"]).unwrap(),
        Value::Int(theirs)
    );

    assert_eq!(
        cmd(&mut app, &["LOCK.RELEASE", "app:x", "me"]).unwrap(),
        Value::Int(0)
    );
    assert!(!exists(&server, "app:x"));
}

/// A user allowed only reads (plus LOCK.INFO by name) cannot take or change a
/// lock, but can inspect one. The LOCK.* commands are named explicitly: on
/// Redis 7.0 module commands belong to no ACL category but `@all`, so
/// `+@read` alone allows no LOCK.* command at all (see the ignored test).
#[test]
fn a_user_without_write_commands_cannot_acquire_but_can_inspect() {
    let server = RedisServer::start();
    acl_setuser(
        &server,
        &[
            "reader",
            "on",
            ">pw",
            "~*",
            "-@all",
            "+@read",
            "+lock.info",
            "+lock.holders",
        ],
    );
    let mut admin = server.conn();
    let held = token(cmd(&mut admin, &["LOCK.ACQUIRE", "job", "worker", "60000"]).unwrap());

    let mut reader = conn_as(&server, "reader");
    let detail = noperm(&mut reader, &["LOCK.ACQUIRE", "fresh", "me", "60000"]);
    assert!(detail.contains("lock.acquire"), "{detail}");
    noperm(&mut reader, &["LOCK.ACQUIRE", "job", "worker", "60000"]);
    noperm(&mut reader, &["LOCK.RELEASE", "job", "worker", "ALL"]);
    noperm(&mut reader, &["LOCK.EXTEND", "job", "worker", "1"]);
    noperm(
        &mut reader,
        &["LOCK.FENCE", "job", "worker", "ATLEAST", "1"],
    );
    noperm(&mut reader, &["LOCK.DEBUG", "WALLCLOCK-OFFSET", "0"]);
    noperm(
        &mut reader,
        &["LOCK.ACQUIRE", "fresh", "me", "60000", "SHARED"],
    );
    noperm(&mut reader, &["LOCK.DROP", "job", "worker"]);
    assert!(!exists(&server, "fresh"), "a refused acquire made a lock");
    let Value::Array(holders) = cmd(&mut reader, &["LOCK.HOLDERS", "job"]).unwrap() else {
        panic!("LOCK.HOLDERS of a held lock should be an array");
    };
    assert_eq!(holders.len(), 1);

    let Value::Array(info) = cmd(&mut reader, &["LOCK.INFO", "job"]).unwrap() else {
        panic!("LOCK.INFO of a held lock should be an array");
    };
    assert_eq!(info[1], Value::BulkString(b"worker".to_vec()));
    assert_eq!(info[3], Value::Int(1), "the refused re-entry added a hold");
    assert_eq!(info[5], Value::Int(held));
    assert_eq!(
        cmd(&mut reader, &["LOCK.INFO", "fresh"]).unwrap(),
        Value::Nil
    );
}

/// What the server lets a module do with ACL categories, from `INFO
/// server`: give its commands categories (`RedisModule_SetCommandACLCategories`:
/// Redis 7.2+, Valkey) and add a category of its own
/// (`RedisModule_AddACLCategory`: Redis 7.4+, Valkey).
struct AclSupport {
    server: String,
    categories: bool,
    own_category: bool,
}

fn acl_support(server: &RedisServer) -> AclSupport {
    let mut admin = server.conn();
    let info: String = redis::cmd("INFO").arg("server").query(&mut admin).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(|value| value.trim().to_string())
    };
    if let Some(version) = field("valkey_version") {
        return AclSupport {
            server: format!("Valkey {version}"),
            categories: true,
            own_category: true,
        };
    }
    let version = field("redis_version").expect("INFO server has redis_version");
    let mut parts = version.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    AclSupport {
        server: format!("Redis {version}"),
        categories: (major, minor) >= (7, 2),
        own_category: (major, minor) >= (7, 4),
    }
}

/// `ACL CAT category`, sorted.
fn acl_cat(conn: &mut Connection, category: &str) -> RedisResult<Vec<String>> {
    let mut names: Vec<String> = redis::cmd("ACL").arg("CAT").arg(category).query(conn)?;
    names.sort();
    Ok(names)
}

/// A user with `+@all -@write` must not acquire, and `+@read` must allow
/// LOCK.INFO.
///
/// Needs Redis 7.2 or newer, or Valkey: Redis 7.0 puts module commands in no
/// ACL category except `@all` (`ACL CAT write` lists no LOCK.* command) and
/// has no API to change that, so there a `+@all -@write` user CAN take locks
/// and the commands must be named in ACL rules (the README says so, and the
/// tests above use named rules); this test says so and checks nothing more.
#[test]
fn acl_categories_cover_the_lock_commands() {
    let server = RedisServer::start();
    let support = acl_support(&server);
    let mut admin = server.conn();
    if !support.categories {
        eprintln!(
            "skipped: {} has no RedisModule_SetCommandACLCategories (Redis 7.2+): module commands are only in @all",
            support.server
        );
        assert!(!acl_cat(&mut admin, "write")
            .unwrap()
            .contains(&"lock.acquire".to_string()));
        return;
    }
    let writes = acl_cat(&mut admin, "write").unwrap();
    for name in [
        "lock.acquire",
        "lock.release",
        "lock.extend",
        "lock.fence",
        "lock.floor",
    ] {
        assert!(
            writes.contains(&name.to_string()),
            "@write lacks {name}: {writes:?}"
        );
    }
    let reads = acl_cat(&mut admin, "read").unwrap();
    for name in ["lock.info", "lock.holders"] {
        assert!(
            reads.contains(&name.to_string()),
            "@read lacks {name}: {reads:?}"
        );
    }
    // @fast or @slow as the command flags say, like the server's commands.
    let (fast, slow) = (
        acl_cat(&mut admin, "fast").unwrap(),
        acl_cat(&mut admin, "slow").unwrap(),
    );
    for name in [
        "lock.acquire",
        "lock.release",
        "lock.extend",
        "lock.fence",
        "lock.floor",
        "lock.info",
    ] {
        assert!(
            fast.contains(&name.to_string()),
            "@fast lacks {name}: {fast:?}"
        );
    }
    for name in [
        "lock.holders",
        "lock.apply",
        "lock.drop",
        "lock.counter",
        "lock.debug",
    ] {
        assert!(
            slow.contains(&name.to_string()),
            "@slow lacks {name}: {slow:?}"
        );
    }
    acl_setuser(&server, &["nowrite", "on", ">pw", "~*", "+@all", "-@write"]);
    acl_setuser(&server, &["reader", "on", ">pw", "~*", "+@read"]);
    let mut nowrite = conn_as(&server, "nowrite");
    noperm(&mut nowrite, &["LOCK.ACQUIRE", "job", "me", "60000"]);
    assert!(!exists(&server, "job"));
    let mut reader = conn_as(&server, "reader");
    noperm(&mut reader, &["LOCK.ACQUIRE", "job", "me", "60000"]);
    assert_eq!(cmd(&mut reader, &["LOCK.INFO", "job"]).unwrap(), Value::Nil);
}

/// The module's own category: `ACL CAT lock` lists the commands clients
/// use (not the internal effects nor LOCK.DEBUG); `-@all +@lock` allows
/// exactly those, `+@all -@lock` none of them. Where the server cannot add a
/// module category (Redis before 7.4) there is none, and the module loads
/// as before.
#[test]
fn the_lock_category_names_the_commands_clients_use() {
    let server = RedisServer::start();
    let support = acl_support(&server);
    let mut admin = server.conn();
    let categories: Vec<String> = redis::cmd("ACL").arg("CAT").query(&mut admin).unwrap();
    if !support.own_category {
        eprintln!(
            "skipped: {} has no RedisModule_AddACLCategory (Redis 7.4+): there is no @lock",
            support.server
        );
        assert!(!categories.contains(&"lock".to_string()), "{categories:?}");
        assert!(acl_cat(&mut admin, "lock").is_err());
        return;
    }
    assert!(categories.contains(&"lock".to_string()), "{categories:?}");
    assert_eq!(
        acl_cat(&mut admin, "lock").unwrap(),
        [
            "lock.acquire",
            "lock.extend",
            "lock.fence",
            "lock.fencecheck",
            "lock.fenced",
            "lock.fenceget",
            "lock.floor",
            "lock.holders",
            "lock.info",
            "lock.release"
        ]
    );
    acl_setuser(&server, &["locker", "on", ">pw", "~*", "-@all", "+@lock"]);
    let mut locker = conn_as(&server, "locker");
    let granted = token(cmd(&mut locker, &["LOCK.ACQUIRE", "job", "me", "60000"]).unwrap());
    assert_eq!(
        cmd(&mut locker, &["LOCK.FENCE", "job", "me"]).unwrap(),
        Value::Int(granted)
    );
    assert_eq!(
        cmd(&mut locker, &["LOCK.EXTEND", "job", "me", "60000"]).unwrap(),
        Value::Int(1)
    );
    assert!(matches!(
        cmd(&mut locker, &["LOCK.HOLDERS", "job"]).unwrap(),
        Value::Array(_)
    ));
    // The raise Redlock::cluster sends to every master is in @lock too.
    assert_eq!(
        cmd(&mut locker, &["LOCK.FLOOR", "0"]).unwrap(),
        Value::Int(granted)
    );
    noperm(&mut locker, &["LOCK.DEBUG", "WALLCLOCK-OFFSET", "0"]);
    noperm(&mut locker, &["LOCK.DROP", "job", "me"]);
    noperm(&mut locker, &["LOCK.FENCEAPPLY", "fence", "1"]);
    noperm(&mut locker, &["GET", "job"]);
    // +@lock runs LOCK.FENCED, not the write inside it.
    noperm(
        &mut locker,
        &["LOCK.FENCED", "fence", "1", "SET", "data", "v"],
    );
    assert!(!exists(&server, "fence") && !exists(&server, "data"));
    acl_setuser(&server, &["nolock", "on", ">pw", "~*", "+@all", "-@lock"]);
    let mut nolock = conn_as(&server, "nolock");
    noperm(&mut nolock, &["LOCK.RELEASE", "job", "me", "ALL"]);
    noperm(&mut nolock, &["LOCK.INFO", "job"]);
    noperm(&mut nolock, &["LOCK.FLOOR", "0"]);
    assert_eq!(cmd(&mut nolock, &["EXISTS", "job"]).unwrap(), Value::Int(1));
    assert_eq!(
        cmd(&mut locker, &["LOCK.RELEASE", "job", "me"]).unwrap(),
        Value::Int(0)
    );
    assert!(!exists(&server, "job"));
}
