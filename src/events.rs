//! Keeping the expiry index and the waiter queues true when keys move
//! without our commands: loaded from RDB, restored, renamed, moved between
//! databases, flushed, or databases swapped.

use std::ffi::{c_char, c_int, c_void, CStr};

use redis_lock_core::Slot;
use redis_module::raw;

use crate::async_load;
use crate::caller_db;
use crate::eviction;
use crate::expiry;
use crate::ffi::{self, rm, Ctx, RString};
use crate::guard;
use crate::key::LockKey;
use crate::state::{with_state, KeyId};

/// Keyspace events that put a lock under a (new) name.
const ARRIVALS: [&CStr; 4] = [c"loaded", c"restore", c"rename_to", c"move_to"];
/// Keyspace events that take a value away from a name: whoever waits for
/// that name may now get it. (A lock that leaves also calls `unlink2`; a
/// `del` matters for a value of another type that had replaced a lock
/// someone waits for.)
const DEPARTURES: [&CStr; 3] = [c"rename_from", c"move_from", c"del"];

pub fn subscribe(ctx: Ctx) -> bool {
    let classes =
        raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_LOADED | eviction::EVENT_CLASS;
    let keyspace = rm!(RedisModule_SubscribeToKeyspaceEvents(
        ctx,
        classes,
        Some(on_keyspace_event)
    ));
    let flush = ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_FLUSHDB, on_flush);
    let swap = ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_SWAPDB, on_swapdb);
    keyspace == Some(raw::REDISMODULE_OK as c_int) && flush && swap
}

extern "C" fn on_keyspace_event(
    ctx: Ctx,
    _class: c_int,
    event: *const c_char,
    key: RString,
) -> c_int {
    guard::callback(ctx, "keyspace event", raw::REDISMODULE_OK as c_int, || {
        if event.is_null() {
            return raw::REDISMODULE_OK as c_int;
        }
        // SAFETY: Redis passes a NUL-terminated event name.
        let event = unsafe { CStr::from_ptr(event) };
        if ARRIVALS.contains(&event) {
            // Keys loaded in the background are indexed when the load ends.
            if !(event == c"loaded" && async_load::in_progress(ctx)) {
                index_arrival(ctx, key);
            }
        } else if DEPARTURES.contains(&event) {
            schedule_grants(ctx, key);
        } else if event == c"evicted" {
            eviction::evicted(ffi::selected_db(ctx), ffi::bytes(key));
        }
        caller_db::after_event(ctx, event.to_bytes(), ffi::bytes(key));
        raw::REDISMODULE_OK as c_int
    })
}

/// Indexes the lease of a lock that arrived under `key` in the context's
/// database. (Notification callbacks may read keys, not write them.) The
/// key is opened without touching its LRU/LFU: most arrivals are not locks.
fn index_arrival(ctx: Ctx, key: RString) {
    // The name of a `loaded` key lives on Redis's stack and must not be
    // retained, which opening it would do: open a copy.
    let Some(name) = ffi::OwnedString::new(ctx, ffi::bytes(key)) else {
        return;
    };
    let Ok(mut lock_key) = LockKey::open_untouched(ctx, name.as_ptr(), false) else {
        return;
    };
    let Some(lock) = lock_key.lock() else {
        return;
    };
    let key_id = KeyId::new(ffi::selected_db(ctx), ffi::bytes(key));
    // A renamed or moved lock keeps its entry under the new name; a loaded
    // or restored one (id 0) gets a new entry.
    let current = lock.expiry_id();
    let token = lock.token();
    let id = with_state(|state| {
        // Every later token here exceeds the one that arrived.
        state.node.tokens.raise(token);
        let id = if current != 0 && state.deadlines.rekey(current, key_id.clone()) {
            current
        } else {
            state.deadlines.insert(lock.deadline(), key_id)
        };
        expiry::arm(state);
        id
    });
    if let Some(id) = id {
        lock.set_expiry_id(id);
    }
}

/// Lets the waiters of `key` (in the context's database) in, from the timer:
/// a notification callback may not write.
fn schedule_grants(ctx: Ctx, key: RString) {
    with_state(|state| {
        // Every DEL on the server comes here: nothing to do (and no name to
        // copy) unless someone waits at all.
        if state.waiters.is_empty() {
            return;
        }
        let id = KeyId::new(ffi::selected_db(ctx), ffi::bytes(key));
        if state.waiters.has_waiters(&id) {
            state.pending_grants.insert(id);
            expiry::arm(state);
        }
    });
}

/// `FLUSHDB`/`FLUSHALL` (and the flush before a full sync or `DEBUG RELOAD`):
/// the flushed database's expiry entries go, and its waiters are served
/// (their locks were deleted).
extern "C" fn on_flush(ctx: Ctx, _event: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    guard::callback(ctx, "flush event", (), || {
        if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
            return;
        }
        // SAFETY: for this event Redis passes a RedisModuleFlushInfo.
        let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
            return;
        };
        let flushed = info.dbnum;
        let hit = move |db: i32| flushed == -1 || db == flushed;
        with_state(|state| {
            state
                .deadlines
                .remap(|id| (!hit(id.db())).then(|| id.clone()));
            let keys = state.waiters.keys_where(|id| hit(id.db()));
            state.pending_grants.extend(keys);
            expiry::arm(state);
        });
    });
}

/// What Redis passes with the SWAPDB event (not in the generated bindings).
#[repr(C)]
struct SwapDbInfo {
    version: u64,
    first: i32,
    second: i32,
}

extern "C" fn on_swapdb(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    guard::callback(ctx, "swapdb event", (), || {
        // SAFETY: for this event Redis passes a RedisModuleSwapDbInfo.
        let Some(info) = (unsafe { data.cast::<SwapDbInfo>().as_ref() }) else {
            return;
        };
        let (first, second) = (info.first, info.second);
        let swap = move |db: i32| match db {
            db if db == first => second,
            db if db == second => first,
            db => db,
        };
        with_state(|state| {
            // The locks move with their data; the waiters stay: a client
            // waits for a name in the database it selected, which now holds
            // the other database's data (as a client's plain commands do).
            state.deadlines.remap(|id| Some(id.in_db(swap(id.db()))));
            // Either database may now hold a free lock its waiters want.
            let keys = state
                .waiters
                .keys_where(|id| id.db() == first || id.db() == second);
            state.pending_grants.extend(keys);
            expiry::arm(state);
        });
    });
}
