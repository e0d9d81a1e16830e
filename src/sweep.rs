//! The lease sweep. The module does not listen to generic keyspace events:
//! the server builds a module context for every event of a class a module
//! listens to, so every `DEL`, `EXPIRE` and `RENAME` on the server would pay
//! for it. A lock that arrives under a name without the module hearing of
//! it (`RENAME`, `MOVE`, `RESTORE`, `MIGRATE`) so carries no live entry in
//! the lease index. After a hint that this may have happened (a lock key
//! left a name other than by our own hand, a lock was restored, or
//! databases were swapped, which can move an unfiled lock behind a pass),
//! and while there are more lock values than indexed leases, the timer
//! scans the keyspace in slices of at most a few milliseconds and files
//! every lock it finds without a live entry. The scan stops as soon as the
//! counts agree again. (The token counter does not wait for the sweep: a
//! restored lock raises it as it is read, in `datatype::rdb_load`.)

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis_lock_core::filing::{self, Arrival};

use crate::ffi::key::LockKey;
use crate::ffi::{self, Ctx, ScanCursor};
use crate::hints;
use crate::state::{with_state, KeyId, ModuleState};
use crate::stats::LIVE_HOLDERS;

/// Where the current pass is, and the hint count it started at.
struct Pass {
    db: i32,
    cursor: ScanCursor,
    hints: u64,
}

thread_local! {
    static PASS: RefCell<Option<Pass>> = const { RefCell::new(None) };
    /// The hint count the last completed pass covered.
    static COVERED: RefCell<u64> = const { RefCell::new(0) };
}

/// Whether the timer should sweep: a hint since the last full pass, and more
/// lock values than indexed leases.
pub fn wanted(state: &ModuleState) -> bool {
    // Called whenever the timer is armed: the counts first, which agree
    // almost always.
    unindexed(state)
        && (hints::count() != COVERED.with(|c| *c.borrow()) || PASS.with(|p| p.borrow().is_some()))
}

fn unindexed(state: &ModuleState) -> bool {
    let holders = usize::try_from(LIVE_HOLDERS.load(Ordering::Relaxed)).unwrap_or(0);
    holders > state.deadlines.len()
}

/// Scans for at most `budget`, filing every unindexed lock it finds.
pub fn step(ctx: Ctx, budget: Duration) {
    let started = Instant::now();
    let selected = ffi::selected_db(ctx);
    // At least one step, however little of the firing's budget is left.
    loop {
        if !with_state(|state| unindexed(state)).unwrap_or(false) {
            // Everything is indexed: every hint so far is covered.
            PASS.with(|p| p.borrow_mut().take());
            finish(Some(hints::count()));
            break;
        }
        let pass = PASS.with(|p| p.borrow_mut().take());
        let Some(pass) = pass.or_else(|| {
            Some(Pass {
                db: 0,
                cursor: ScanCursor::new()?,
                hints: hints::count(),
            })
        }) else {
            break;
        };
        if !ffi::select_db(ctx, pass.db) {
            // Past the last database: the pass covered everything.
            finish(Some(pass.hints));
            break;
        }
        let db = pass.db;
        let more = pass
            .cursor
            .step(ctx, |name, key| file_if_unindexed(db, name, key));
        let next = if more {
            Some(pass)
        } else {
            ScanCursor::new().map(|cursor| Pass {
                db: db + 1,
                cursor,
                hints: pass.hints,
            })
        };
        PASS.with(|p| *p.borrow_mut() = next);
        if started.elapsed() >= budget {
            break;
        }
    }
    ffi::select_db(ctx, selected);
}

fn finish(hints: Option<u64>) {
    if let Some(hints) = hints {
        COVERED.with(|c| *c.borrow_mut() = hints);
    }
}

fn file_if_unindexed(db: i32, name: &[u8], key: *mut redis_module::raw::RedisModuleKey) {
    LockKey::scanned(key, |lock| {
        with_state(|state| {
            let key = KeyId::new(db, name);
            let (tokens, index) = (&mut state.node.tokens, &mut state.deadlines);
            filing::on_arrival(tokens, index, lock, &key, Arrival::Unfiled);
        });
    });
}
