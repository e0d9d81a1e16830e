//! Keeps the caller of `DEBUG RELOAD` in its own database on Valkey.
//!
//! Valkey 8.1 runs a module's keyspace-event callback on the client whose
//! command raised the event, after selecting the event's database on it.
//! `DEBUG RELOAD` (and `DEBUG LOADAOF`) raise a `loaded` event for every key,
//! in each key's database, so once the module has handled them the caller
//! is left in the database of the last key loaded, and its next command runs
//! there. (The same happened to `MOVE` and `COPY … DB` while the module
//! listened to generic events; it no longer does.) Redis runs the callback
//! on a client of its own and is not affected.
//!
//! The command filter notes the caller's database when such a command
//! arrives (inside MULTI: the database the transaction will have selected
//! by then, following its queued SELECTs), and the database is put back
//! after each `loaded` event of that client. On Redis, whose filter cannot
//! name the client, nothing is noted.
//!
//! A command filter sees every command of the server, and on Redis 8 its
//! mere presence makes the server extract each command's keys twice: it is
//! registered only where it is needed ([`needed`]): on Valkey before 9.1.1
//! (which restores the client's database itself, valkey-io/valkey#4024), and
//! only when `DEBUG` can run (`enable-debug-command` is not `no`, its
//! default; the setting cannot change while the server runs).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_lock_core::args::parse_i64;
use redis_module::raw;

use crate::ffi::{self, Ctx};

/// One client's note: the database a transaction it is queueing will have
/// selected, and the database to leave it in after a reload.
#[derive(Default)]
struct Client {
    queued_select: Option<i32>,
    reload_db: Option<i32>,
}

/// Clients noted at once, at most: the map is dropped past this (a client
/// that disconnects in the middle of a transaction leaves its entry).
const MAX_CLIENTS: usize = 10_000;

/// Some client has a note (the map below is not empty): a cheap first test.
static NOTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static CLIENTS: RefCell<HashMap<u64, Client>> = RefCell::new(HashMap::new());
}

/// From the command filter, for every command: notes what a later `loaded`
/// event of this client needs.
pub fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx, name: &[u8]) {
    // Every command of the server comes here: leave at once unless it may
    // be one of those below (4 to 7 letters) or some client has a note.
    if !(4..=7).contains(&name.len()) && !NOTED.load(Ordering::Relaxed) {
        return;
    }
    let is = |command: &str| name.eq_ignore_ascii_case(command.as_bytes());
    let watched = is("debug") || is("select") || is("multi") || is("discard") || is("reset");
    if !watched && !NOTED.load(Ordering::Relaxed) {
        return;
    }
    let Some(id) = ffi::filter_client_id(fctx) else {
        return;
    };
    if is("multi") || is("discard") || is("reset") {
        forget(id);
        return;
    }
    if is("exec") {
        return;
    }
    let Some((db, in_multi)) = ffi::client_db(id) else {
        return;
    };
    if !in_multi {
        // A new command outside a transaction: an earlier note is done.
        forget(id);
    }
    ffi::with_filter_args(fctx, |args| {
        if is("select") {
            if in_multi {
                let selected = args.get(1).and_then(|n| parse_i64(n));
                if let Some(selected) = selected.and_then(|n| i32::try_from(n).ok()) {
                    with_client(id, |client| client.queued_select = Some(selected));
                }
            }
            return;
        }
        if is("debug") && args.get(1).is_some_and(|sub| reloads(sub)) {
            with_client(id, |client| {
                let caller_db = if in_multi {
                    client.queued_select.unwrap_or(db)
                } else {
                    db
                };
                client.reload_db = Some(caller_db);
            });
        }
    });
}

/// Whether the command filter must be registered on this server: Valkey
/// before 9.1.1 with `DEBUG` enabled. When the setting cannot be read, the
/// filter is registered (the safe side).
pub fn needed(ctx: Ctx) -> bool {
    let Some(version) = ffi::server_info_field(ctx, c"server", c"valkey_version") else {
        // Redis: its keyspace callbacks run on a client of its own.
        return false;
    };
    if restores_db_itself(&version) {
        return false;
    }
    debug_allowed(ffi::call::config_value(ctx, c"enable-debug-command").as_deref())
}

/// `enable-debug-command`'s value allows `DEBUG` (or could not be read).
fn debug_allowed(setting: Option<&[u8]>) -> bool {
    setting.map_or(true, |value| !value.eq_ignore_ascii_case(b"no"))
}

/// Valkey 9.1.1 and later put the executing client back in its database
/// after a keyspace notification.
fn restores_db_itself(version: &[u8]) -> bool {
    let mut parts = version.split(|b| *b == b'.').map(|part| {
        std::str::from_utf8(part)
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
    });
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    (major, minor, patch) >= (9, 1, 1)
}

/// `DEBUG` subcommands that load the dataset again.
fn reloads(sub: &[u8]) -> bool {
    sub.eq_ignore_ascii_case(b"reload") || sub.eq_ignore_ascii_case(b"loadaof")
}

fn with_client(id: u64, f: impl FnOnce(&mut Client)) {
    CLIENTS.with(|clients| {
        let mut clients = clients.borrow_mut();
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&id) {
            clients.clear();
        }
        f(clients.entry(id).or_default());
        NOTED.store(true, Ordering::Relaxed);
    });
}

fn forget(id: u64) {
    CLIENTS.with(|clients| {
        let mut clients = clients.borrow_mut();
        if !clients.is_empty() {
            clients.remove(&id);
            NOTED.store(!clients.is_empty(), Ordering::Relaxed);
        }
    });
}

/// From the keyspace-event callback, after the module handled a `loaded`
/// event: puts the caller back in its own database where the server moved it.
pub fn after_loaded(ctx: Ctx) {
    if !NOTED.load(Ordering::Relaxed) {
        return;
    }
    let id = ffi::client_id(ctx);
    let reload_db = CLIENTS.with(|clients| clients.borrow().get(&id).and_then(|c| c.reload_db));
    if let Some(db) = reload_db.filter(|db| *db != ffi::selected_db(ctx)) {
        ffi::select_db(ctx, db);
    }
}

#[cfg(test)]
mod tests {
    use super::{debug_allowed, reloads, restores_db_itself};

    #[test]
    fn reload_subcommands() {
        for sub in ["RELOAD", "reload", "LoadAof"] {
            assert!(reloads(sub.as_bytes()), "{sub}");
        }
        for sub in ["SLEEP", "OBJECT", ""] {
            assert!(!reloads(sub.as_bytes()), "{sub}");
        }
    }

    #[test]
    fn valkey_restores_the_database_from_9_1_1() {
        for version in ["9.1.1", "9.1.2", "9.2.0", "10.0.0", "9.1.10"] {
            assert!(restores_db_itself(version.as_bytes()), "{version}");
        }
        for version in [
            "8.1.4",
            "9.0.3",
            "9.1.0",
            "8.0.1",
            "",
            "9.1",
            "x.y.z",
            "9.1.0-rc1",
        ] {
            assert!(!restores_db_itself(version.as_bytes()), "{version}");
        }
    }

    #[test]
    fn debug_setting() {
        assert!(debug_allowed(None));
        assert!(debug_allowed(Some(b"yes")));
        assert!(debug_allowed(Some(b"local")));
        assert!(!debug_allowed(Some(b"no")));
        assert!(!debug_allowed(Some(b"NO")));
    }
}
