//! Diskless replica loading with `repl-diskless-load swapdb`: the server
//! loads the primary's data into databases of its own while it goes on
//! serving the old ones, then swaps them in. The keys loaded that way are
//! announced (`loaded`) before they are in the live databases, so the
//! module cannot index them then: when the load completes, the lease index
//! is rebuilt from the new data, and the node's token counter raised above
//! every token in it. (A load that is aborted leaves the old data, and the
//! index that goes with it.)

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_lock_core::deadlines::DeadlineIndex;
use redis_lock_core::filing::{self, Arrival};
use redis_module::raw;

use crate::ffi::key::LockKey;
use crate::ffi::{self, Ctx};
use crate::guard;
use crate::state::{with_state, KeyId};
use crate::timer;

/// Whether the server is loading a replica's data in the background now:
/// `loaded` events then name keys that are not in the live databases.
pub fn in_progress(ctx: Ctx) -> bool {
    ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING)
}

/// Lock values read from a payload (`rdb_load`) since the current load
/// began: a load that read none has nothing to index, and its end costs
/// no pass over the keyspace (which, on a large keyspace, would stall the
/// server about as long as the load itself).
static LOADED_LOCKS: AtomicU64 = AtomicU64::new(0);

/// Set when a background load's data was indexed as it was swapped in:
/// the `LOADING_ENDED` that follows it has nothing left to do.
static INDEXED_AT_SWAP: AtomicBool = AtomicBool::new(false);

/// `rdb_load` read a lock value.
pub fn lock_loaded() {
    LOADED_LOCKS.fetch_add(1, Ordering::Relaxed);
}

/// A load begins (at startup, a full sync, `DEBUG RELOAD`, a background
/// load): nothing of it is read yet.
pub fn load_started() {
    LOADED_LOCKS.store(0, Ordering::Relaxed);
    INDEXED_AT_SWAP.store(false, Ordering::Relaxed);
}

/// A load ended: the lease index is rebuilt from the loaded locks, unless
/// the load read none (a load empties what it replaces, and its flush
/// dropped that data's entries) or a background load's were indexed when
/// they were swapped in.
pub fn load_ended(ctx: Ctx) {
    if INDEXED_AT_SWAP.swap(false, Ordering::Relaxed) {
        return;
    }
    if LOADED_LOCKS.swap(0, Ordering::Relaxed) > 0 {
        reindex(ctx);
    }
}

extern "C" fn on_async_load(ctx: Ctx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    guard::callback(ctx, "async load event", (), || {
        if sub == raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED {
            load_started();
        } else if sub == raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED {
            // The swapped-in data replaces the old, whose entries go even
            // when the new data holds no lock.
            reindex(ctx);
            INDEXED_AT_SWAP.store(true, Ordering::Relaxed);
        }
    });
}

/// Rebuilds the lease index from every lock in every database.
pub fn reindex(ctx: Ctx) {
    let selected = ffi::selected_db(ctx);
    with_state(|state| state.deadlines = DeadlineIndex::default());
    let mut db = 0;
    while ffi::select_db(ctx, db) {
        ffi::scan_keys(ctx, |name, key| {
            LockKey::scanned(key, |lock| {
                with_state(|state| {
                    let key = KeyId::new(db, name);
                    let (tokens, index) = (&mut state.node.tokens, &mut state.deadlines);
                    filing::on_arrival(tokens, index, lock, &key, Arrival::All);
                });
            });
        });
        db += 1;
    }
    ffi::select_db(ctx, selected);
    with_state(timer::arm);
}

/// Made when the server first has a lock (`activation`): a background load
/// that reads one activates it before the load completes, and one that
/// reads none, on a server that had none, has nothing to index.
pub fn init(ctx: Ctx) -> bool {
    crate::activation::defer(ctx, raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD, on_async_load)
}
