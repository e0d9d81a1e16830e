//! Diskless replica loading with `repl-diskless-load swapdb`: the server
//! loads the primary's data into databases of its own while it goes on
//! serving the old ones, then swaps them in. The keys loaded that way are
//! announced (`loaded`) before they are in the live databases, so the
//! module cannot index them then: when the load completes, the lease index
//! is rebuilt from the new data, and the node's token counter raised above
//! every token in it. (A load that is aborted leaves the old data, and the
//! index that goes with it.)

use std::ffi::c_void;

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

extern "C" fn on_async_load(ctx: Ctx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    guard::callback(ctx, "async load event", (), || {
        if sub == raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED {
            reindex(ctx);
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

pub fn init(ctx: Ctx) -> bool {
    ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_REPL_ASYNC_LOAD, on_async_load)
}
