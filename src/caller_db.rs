//! Keeps the caller of `MOVE` and `COPY … DB` in its own database.
//!
//! Valkey 8.1 runs a module's keyspace-event callback on the client whose
//! command raised the event, after selecting the event's database on it.
//! Two events land in another database than the caller's: `move_to` (MOVE)
//! and `copy_to` (COPY … DB n). Once a module has handled one of them, the
//! caller is left in the target database and its next command runs there
//! (also inside MULTI). Redis runs the callback on a client of its own and
//! is not affected. So after handling either event, the caller's database
//! is put back:
//!
//! - MOVE raises `move_from` in the caller's database just before `move_to`;
//! - COPY raises only `copy_to`, so the command filter notes the caller's
//!   database when a `COPY … DB n` arrives (inside MULTI: the database the
//!   transaction will have selected by then, following its queued SELECTs);
//! - `DEBUG RELOAD` (and `DEBUG LOADAOF`) raise a `loaded` event for every
//!   key, in each key's database: noted the same way.
//!
//! On Redis, whose filter cannot name the client, nothing is noted for COPY;
//! for MOVE the database is put back on Redis's own client, which is a no-op.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_lock_core::args::parse_i64;
use redis_module::raw;

use crate::ffi::{self, Ctx};

/// A command on its way that raises events in other databases, and the
/// database its caller must be left in.
struct Note {
    kind: Kind,
    caller_db: i32,
}

enum Kind {
    /// `COPY … dst DB dst_db`: one `copy_to` for `dst` in `dst_db`.
    Copy { dst_db: i32, dst: Vec<u8> },
    /// `DEBUG RELOAD|LOADAOF`: a `loaded` event per key.
    Reload,
}

/// One client's notes, and the database a transaction it is queueing will
/// have selected by the time they run.
#[derive(Default)]
struct Client {
    queued_select: Option<i32>,
    notes: VecDeque<Note>,
}

/// Clients noted at once, at most: the map is dropped past this (a client
/// that disconnects in the middle of a transaction leaves its entry).
const MAX_CLIENTS: usize = 10_000;

/// Some client has notes (the map below is not empty): a cheap first test.
static NOTED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static MOVED_FROM: Cell<Option<(u64, i32)>> = const { Cell::new(None) };
    static CLIENTS: RefCell<HashMap<u64, Client>> = RefCell::new(HashMap::new());
}

/// From the command filter, for every command: notes what a later `copy_to`
/// of this client needs.
pub fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx, name: &[u8]) {
    // Every command of the server comes here: leave at once unless it may
    // be one of those below (4 to 7 letters) or some client has notes.
    if !(4..=7).contains(&name.len()) && !NOTED.load(Ordering::Relaxed) {
        return;
    }
    let is = |command: &str| name.eq_ignore_ascii_case(command.as_bytes());
    let watched =
        is("copy") || is("debug") || is("select") || is("multi") || is("discard") || is("reset");
    let noted = NOTED.load(Ordering::Relaxed);
    if !watched && !noted {
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
        // A new command outside a transaction: earlier notes are stale (a
        // COPY that failed raised no event).
        forget(id);
    }
    let args = ffi::filter_args(fctx);
    if is("select") {
        if in_multi {
            let selected = args.get(1).and_then(|n| parse_i64(n));
            if let Some(selected) = selected.and_then(|n| i32::try_from(n).ok()) {
                with_client(id, |client| client.queued_select = Some(selected));
            }
        }
        return;
    }
    let kind = if is("copy") {
        let (Some(dst_db), Some(dst)) = (copy_target_db(&args), args.get(2)) else {
            return;
        };
        Kind::Copy {
            dst_db,
            dst: dst.to_vec(),
        }
    } else if is("debug") && args.get(1).is_some_and(|sub| reloads(sub)) {
        Kind::Reload
    } else {
        return;
    };
    with_client(id, |client| {
        let caller_db = if in_multi {
            client.queued_select.unwrap_or(db)
        } else {
            db
        };
        client.notes.push_back(Note { kind, caller_db });
    });
}

/// `DEBUG` subcommands that load the dataset again.
fn reloads(sub: &[u8]) -> bool {
    sub.eq_ignore_ascii_case(b"reload") || sub.eq_ignore_ascii_case(b"loadaof")
}

/// `COPY src dst [DB n] [REPLACE]`: n, when given.
fn copy_target_db(args: &[&[u8]]) -> Option<i32> {
    let options = args.get(3..)?;
    let at = options.iter().position(|o| o.eq_ignore_ascii_case(b"db"))?;
    let n = parse_i64(options.get(at + 1)?)?;
    i32::try_from(n).ok()
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

/// From the keyspace-event callback, after the module handled `event`:
/// puts the caller back in its own database where the server moved it.
pub fn after_event(ctx: Ctx, event: &[u8], key: &[u8]) {
    match event {
        b"move_from" => {
            MOVED_FROM.with(|moved| moved.set(Some((ffi::client_id(ctx), ffi::selected_db(ctx)))));
        }
        b"move_to" => {
            let id = ffi::client_id(ctx);
            if let Some((from_id, db)) = MOVED_FROM.with(Cell::take) {
                if from_id == id && db != ffi::selected_db(ctx) {
                    ffi::select_db(ctx, db);
                }
            }
        }
        b"copy_to" | b"loaded" => {
            let id = ffi::client_id(ctx);
            let here = ffi::selected_db(ctx);
            let caller_db = CLIENTS.with(|clients| {
                let mut clients = clients.borrow_mut();
                let client = clients.get_mut(&id)?;
                if event == b"loaded" {
                    let note = client
                        .notes
                        .iter()
                        .find(|n| matches!(n.kind, Kind::Reload))?;
                    return Some(note.caller_db);
                }
                // Copies that raised no event (they failed) come first.
                while let Some(at) = client
                    .notes
                    .iter()
                    .position(|n| matches!(n.kind, Kind::Copy { .. }))
                {
                    let note = client.notes.remove(at)?;
                    if let Kind::Copy { dst_db, dst } = note.kind {
                        if dst_db == here && dst == key {
                            return Some(note.caller_db);
                        }
                    }
                }
                None
            });
            if let Some(db) = caller_db.filter(|db| *db != here) {
                ffi::select_db(ctx, db);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::copy_target_db;

    #[test]
    fn the_db_option_of_copy() {
        let argv = |line: &'static str| line.split(' ').map(str::as_bytes).collect::<Vec<_>>();
        assert_eq!(copy_target_db(&argv("COPY a b DB 3")), Some(3));
        assert_eq!(copy_target_db(&argv("copy a b replace db 12")), Some(12));
        assert_eq!(copy_target_db(&argv("COPY a b")), None);
        assert_eq!(copy_target_db(&argv("COPY a b DB")), None);
        assert_eq!(copy_target_db(&argv("COPY a b DB x")), None);
        // A key named "db" is not the option.
        assert_eq!(copy_target_db(&argv("COPY db db")), None);
    }
}
