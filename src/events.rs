//! Keeping the expiry index and the waiter queues true when keys change
//! without our commands: loaded from RDB, flushed, databases swapped,
//! evicted. The module listens to no generic keyspace event (every `DEL`,
//! `EXPIRE` and `RENAME` on the server would pay for it): a lock that
//! leaves a name calls `unlink2`, and one that arrives under a new name
//! (`RENAME`, `MOVE`, `RESTORE`, or `SWAPDB` in the middle of a sweep
//! pass) is found by the lease sweep (`sweep`).

use std::ffi::{c_char, c_int, c_void};

use redis_lock_core::slot::SlotRanges;
use redis_module::raw;

use crate::activation;
use crate::async_load;
use crate::ffi::{self, Ctx, RString};
use crate::guard;
use crate::state::{with_state, KeyId};
use crate::timer;

pub fn subscribe(ctx: Ctx) -> bool {
    // Redis 8.4+ (`CLUSTER MIGRATION IMPORT`) frees the keys of a slot that
    // left (or of an import that failed) on a background thread, unseen by
    // `unlink2`: their lease entries would stay and their waiters would wait
    // for their timeouts. Its trim event names those slots first
    // (`on_slot_trim`), and the module settles its books for them. (Listening
    // to `key_trimmed` instead would make Redis delete every departed key,
    // locks or not, on its main thread: only where the trim event is
    // missing.) Its snapshot's locks arrive through `rdb_load` (the counter
    // raised as each is read) and are filed by the sweep once the import
    // completes (`on_slot_migration`).
    //
    // A keyspace subscription of any class makes every keyspace event of
    // the server (two per `SET` of a new key) pass through the module
    // machinery (~50 instructions each on Redis 8.6): `key_trimmed`, where
    // it is needed at all, is listened to only in cluster mode, the only
    // place slots migrate, and no other class is (loaded keys are indexed
    // when the load ends, `on_loading`; evictions are counted where a policy
    // can evict locks, `eviction.rs`).
    let redis_migration = ffi::has_redis_slot_migration();
    let trim = if redis_migration {
        ffi::trim_by_notification()
    } else {
        None
    };
    let keyspace = if trim == Some(true) && ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_CLUSTER) {
        ffi::subscribe_keyspace_events(ctx, ffi::NOTIFY_KEY_TRIMMED, on_keyspace_event)
    } else {
        true
    };
    // All of them are made when the server first has a lock (`activation`):
    // before that, the lease index and the waiter queues are empty, and a
    // load has read no lock (the first one read activates them, before
    // the load's end).
    let loading = activation::defer(ctx, raw::REDISMODULE_EVENT_LOADING, on_loading);
    let flush = activation::defer(ctx, raw::REDISMODULE_EVENT_FLUSHDB, on_flush);
    let swap = activation::defer(ctx, raw::REDISMODULE_EVENT_SWAPDB, on_swapdb);
    // Each slot migration event only where the server has it (Valkey 9's,
    // Redis 8.4's): elsewhere its number names another event, or none.
    let migration = if ffi::has_atomic_slot_migration() {
        activation::defer(ctx, ffi::EVENT_ATOMIC_SLOT_MIGRATION, on_slot_migration)
    } else if redis_migration {
        activation::defer(ctx, ffi::EVENT_CLUSTER_SLOT_MIGRATION, on_slot_migration)
    } else {
        true
    };
    let trim = if trim == Some(false) {
        activation::defer(ctx, ffi::EVENT_CLUSTER_SLOT_MIGRATION_TRIM, on_slot_trim)
    } else {
        true
    };
    keyspace && loading && flush && swap && migration && trim
}

/// `key_trimmed` (Redis 8.4+ in cluster mode): nothing to do here, the
/// deletion goes through `unlink2`.
extern "C" fn on_keyspace_event(
    ctx: Ctx,
    _class: c_int,
    _event: *const c_char,
    _key: RString,
) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    guard::callback(ctx, "keyspace event", ok, || ok)
}

/// A load ended (at startup, a replica's full sync, `DEBUG RELOAD`,
/// `DEBUG LOADAOF`): the lease index is rebuilt from the loaded locks, and
/// the token counter raised above them, in one pass over the keyspace. (A
/// `loaded` keyspace subscription did it key by key, but made every
/// keyspace event of the server pay for the module, and on Valkey before
/// 9.1.1 it left the caller of `DEBUG RELOAD` in the last key's database.)
/// A background load (`repl-diskless-load swapdb`) is indexed when its data
/// is swapped in (`async_load`).
extern "C" fn on_loading(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard::callback(ctx, "loading event", (), || match subevent {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
        | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
        | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => async_load::load_started(),
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED if !async_load::in_progress(ctx) => {
            async_load::load_ended(ctx);
        }
        _ => {}
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
        let Some(flushed) = ffi::flushed_db(data) else {
            return;
        };
        let hit = move |db: i32| flushed == -1 || db == flushed;
        with_state(|state| {
            state
                .deadlines
                .remap(|id| (!hit(id.db())).then(|| id.clone()));
            let keys = state.waiters.keys_where(|id| hit(id.db()));
            state.pending_grants.extend(keys);
            timer::arm(state);
        });
    });
}

extern "C" fn on_swapdb(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    guard::callback(ctx, "swapdb event", (), || {
        let Some((first, second)) = ffi::swapped_dbs(data) else {
            return;
        };
        // A lock the sweep has not filed yet may move into a database the
        // current pass has already scanned (or the pass's cursor into
        // another database's keys): the pass no longer covers it, and a
        // new one must follow (the timer, armed below, starts it).
        crate::hints::hint();
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
            timer::arm(state);
        });
    });
}

/// Valkey's atomic slot migration (`CLUSTER MIGRATESLOTS`). The locks of a
/// slot being imported arrive as the `LOCK.APPLY` effects of the source's
/// snapshot and stream (filed, and the token counter raised, as each is
/// applied), but the slot is not this node's until the import completes:
/// a lease that ends before then is not ended here (the cluster would
/// redirect the key), and its index entry is dropped. The source ends it
/// and streams the `DEL`, except while its writes are paused for the
/// handover: then the lock arrives with its lease over and no entry. So
/// when an import completes, the sweep files every lock without a live
/// entry, and the timer ends those whose lease is over and serves their
/// queues.
///
/// On Valkey nothing else needs the event: the keys of a slot that left, or
/// of an import that was aborted, are deleted by the server through
/// `unlink2`, which drops their entries and leaves their waiters to the
/// timer, which tells them to retry where the slot is served
/// (`waiting::settle_by_name`).
///
/// Redis 8.4+'s `CLUSTER MIGRATION IMPORT` needs the same: its snapshot's
/// locks are read by `rdb_load` (the counter raised) and filed by the
/// sweep, whose pass may run while the importing slot's keys are not yet
/// visible to it, and cover their hint. On its source, a completed
/// migration sends the slots' waiters to the timer, which tells them to
/// retry (the slot is not served here any more): at once, not when the
/// keys are trimmed, which waits for the end of the write pause.
extern "C" fn on_slot_migration(
    ctx: Ctx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard::callback(ctx, "slot migration event", (), || {
        // Subscribed only to the server's own event (Valkey's or Redis's).
        let (completed, migrated) = match event.id {
            ffi::EVENT_ATOMIC_SLOT_MIGRATION => {
                (subevent == ffi::SUBEVENT_SLOT_IMPORT_COMPLETED, false)
            }
            ffi::EVENT_CLUSTER_SLOT_MIGRATION => (
                subevent == ffi::SUBEVENT_CLUSTER_SLOT_IMPORT_COMPLETED,
                subevent == ffi::SUBEVENT_CLUSTER_SLOT_MIGRATE_COMPLETED,
            ),
            _ => (false, false),
        };
        if completed {
            crate::hints::hint();
            with_state(timer::arm);
        }
        if migrated {
            slots_left(&ffi::migration_slots(data), false);
        }
    });
}

/// Redis 8.4+ trims the keys of slots this node does not own: on the source
/// once a migration completed, on the target once an import failed (or was
/// cancelled, or its data flushed). By default it takes the slots' keys
/// out of the keyspace in one call and frees them on a background thread
/// (`TRIM_BACKGROUND`, fired just before), with no `unlink2`: the module
/// drops the lease entries of those slots' locks and sends their waiters to
/// the timer, which tells them to retry where the slot is served. (Redis's
/// other way, chosen while clients track keys, deletes key by key as `DEL`
/// does, through `unlink2`, between `TRIM_STARTED` and `TRIM_COMPLETED`:
/// nothing to do here, and dropping entries at its start would be wrong
/// for keys a cancelled trim leaves in place.)
extern "C" fn on_slot_trim(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    guard::callback(ctx, "slot trim event", (), || {
        if subevent == ffi::SUBEVENT_CLUSTER_SLOT_TRIM_BACKGROUND {
            slots_left(&ffi::trimmed_slots(data), true);
        }
    });
}

/// The keys of `slots` are no longer this node's: their waiters go to the
/// timer (which answers them `TRYAGAIN` where the slot is not served), and,
/// when the keys themselves are gone (`keys_gone`), so do their lease
/// entries. Only database 0 exists in a cluster.
fn slots_left(slots: &SlotRanges, keys_gone: bool) {
    if slots.is_empty() {
        return;
    }
    let hit = |id: &KeyId| id.db() == 0 && slots.has_key(id.name());
    with_state(|state| {
        if keys_gone && !state.deadlines.is_empty() {
            state.deadlines.remap(|id| (!hit(id)).then(|| id.clone()));
        }
        let keys = state.waiters.keys_where(hit);
        if !keys.is_empty() {
            state.pending_grants.extend(keys);
            timer::arm(state);
        }
    });
}
