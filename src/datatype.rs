//! The `redislock` data type: how a lock is saved to and loaded from RDB
//! (and `DUMP`/`RESTORE`, `MIGRATE`), rewritten into the AOF, digested,
//! measured, copied and freed, plus the node's token counter as RDB aux data.
//!
//! On disk a lease is its absolute wall-clock end, so a restart subtracts the
//! time the node was down; in memory it is a monotonic deadline.

use std::ffi::{c_int, c_void};

use redis_lock_core::record::{self, Bounds};
use redis_lock_core::{lease, Holder, Lock, Mode};
use redis_module::{native_types::RedisType, raw};

use crate::config::{MAX_HOLDERS_LIMIT, MAX_OWNER_LIMIT};
use crate::ffi::io::{key_of, Digest, LoadIo, SaveIo};
use crate::ffi::{self, value, RString};
use crate::guard;
use crate::state::{with_state, CLOCK};
use crate::stats;
use crate::timer;

/// The RDB layout written (`record::VERSION`); loading reads it and every
/// earlier one (`record::decode`).
const ENCODING_VERSION: c_int = record::VERSION as c_int;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "redislock",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: Some(free_effort),
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        // COPY of a lock is refused ("not supported for this module key"):
        // a copy would be a second lock with the same owner and token, a
        // token not above the target name's earlier ones, made outside the
        // recovery window. Copy what a lock protects, not the lock.
        copy2: None,
        aux_save2: None,
    },
);

fn null_ctx() -> ffi::Ctx {
    std::ptr::null_mut()
}

/// Reads a lock, bounded like command arguments (`record::decode`): a
/// hostile or corrupt payload is refused whole, never stored.
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    let bounds = Bounds {
        max_owner: usize::try_from(MAX_OWNER_LIMIT).unwrap_or(usize::MAX),
        max_holders: u32::try_from(MAX_HOLDERS_LIMIT).unwrap_or(u32::MAX),
    };
    let version = u32::try_from(encver).ok()?;
    let record = record::decode(&mut LoadIo::new(rdb), version, &CLOCK, bounds).ok()?;
    let holders = record
        .holders
        .iter()
        .map(|h| {
            let deadline = lease::from_wall_ms(&CLOCK, h.wall_end_ms);
            Holder::new(&h.owner, h.holds, h.token, deadline)
        })
        .collect();
    Lock::with_holders(record.mode, record.limit, holders)
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(
        null_ctx(),
        "rdb_load",
        std::ptr::null_mut(),
        || match load_lock(rdb, encver) {
            Some(lock) => {
                stats::value_counted(1, lock.holders().len());
                crate::activation::activate();
                crate::async_load::lock_loaded();
                // Every later grant here is above the tokens that arrive,
                // from now on: a RESTORE (or MIGRATE, or a slot migration's
                // payload) followed at once by a release, a lease end or a
                // grant of another name in the same MULTI raises nothing
                // later. A value the server then throws away (a RESTORE
                // whose ABSTTL is past) raises it too: the counter only
                // ever goes up, and no token is lost by it.
                // The lease is filed by the timer's sweep: RESTORE and
                // MIGRATE add the key without an event we hear of.
                let hinted = crate::hints::hint();
                let highest = lock.holders().iter().map(Holder::token).max();
                with_state(|state| {
                    if let Some(token) = highest {
                        state.node.tokens.raise(token);
                    }
                    if hinted {
                        timer::arm(state);
                    }
                });
                value::into_value(lock)
            }
            None => std::ptr::null_mut(),
        },
    )
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, lock: *mut c_void) {
    guard::callback(null_ctx(), "rdb_save", (), || {
        value::with_lock(lock, |lock| {
            let io = SaveIo::new(rdb);
            let mode = match lock.mode() {
                Mode::Exclusive => 0,
                Mode::Shared => 1,
            };
            let limit = lock.limit().map_or(0, |n| u64::from(n.get()));
            let count = lock.holders().len() as u64;
            for n in [mode, limit, count] {
                io.unsigned(n);
            }
            for holder in lock.holders() {
                io.string(holder.owner());
                io.unsigned(u64::from(holder.holds()));
                io.signed(holder.token());
                io.signed(lease::to_wall_ms(&CLOCK, holder.deadline()));
            }
        });
    });
}

extern "C" fn aof_rewrite(aof: *mut raw::RedisModuleIO, key: RString, lock: *mut c_void) {
    guard::callback(null_ctx(), "aof_rewrite", (), || {
        // One effect per holder, in grant order (a shared lock's first
        // effect creates it with its limit, the others join it).
        value::with_lock(lock, |lock| {
            for holder in lock.holders() {
                let effect = ffi::ApplyEffect {
                    owner: holder.owner(),
                    holds: holder.holds(),
                    token: holder.token(),
                    wall_end_ms: lease::to_wall_ms(&CLOCK, holder.deadline()),
                    shared: lock.shared_limit(),
                };
                ffi::emit_aof_apply(aof, key, &effect);
            }
        });
    });
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard::callback(null_ctx(), "mem_usage", 0, || {
        value::heap_bytes(value).unwrap_or(0)
    })
}

/// Each holder's owner, holds and token, in grant order (and the mode and
/// limit of a shared lock): what a replica or a reload must reproduce
/// exactly. Leases are left out: they live on each process's own monotonic
/// clock, so they cannot be equal to the millisecond across them.
extern "C" fn digest(md: *mut raw::RedisModuleDigest, lock: *mut c_void) {
    guard::callback(null_ctx(), "digest", (), || {
        value::with_lock(lock, |lock| {
            let digest = Digest::new(md);
            if lock.mode() == Mode::Shared {
                let limit = lock.limit().map_or(0, |n| i64::from(n.get()));
                digest.integer(-1 - limit);
            }
            for holder in lock.holders() {
                digest.string(holder.owner());
                digest.integer(i64::from(holder.holds()));
                digest.integer(holder.token());
            }
            digest.end_sequence();
        });
    });
}

/// May run on Redis's lazy-free thread: touches only the value and an atomic.
extern "C" fn free(value: *mut c_void) {
    guard::callback(null_ctx(), "free", (), || {
        if let Some(holders) = value::holder_count(value) {
            value::free_value(value);
            stats::value_counted(-1, holders);
        }
    });
}

/// A lock is small: free it synchronously.
extern "C" fn free_effort(_key: RString, _value: *const c_void) -> usize {
    1
}

/// The node's token counter, saved before the keys so that a restart from
/// RDB (or an RDB-preamble AOF, or a full sync) continues above it.
extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    guard::callback(null_ctx(), "aux_save", (), || {
        if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            let last = with_state(|state| state.node.tokens.last()).unwrap_or(0);
            SaveIo::new(rdb).signed(last);
        }
    });
}

extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    guard::callback(
        null_ctx(),
        "aux_load",
        raw::REDISMODULE_ERR as c_int,
        || {
            // The counter's layout is the same in every encoding version.
            if !(1..=ENCODING_VERSION).contains(&encver)
                || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int
            {
                return raw::REDISMODULE_ERR as c_int;
            }
            let Some(last) = LoadIo::new(rdb).signed() else {
                return raw::REDISMODULE_ERR as c_int;
            };
            with_state(|state| state.node.tokens.raise(last));
            if last > 0 {
                crate::activation::activate();
            }
            raw::REDISMODULE_OK as c_int
        },
    )
}

/// A lock key leaves the keyspace (`DEL`, `UNLINK`, overwrite, our own
/// release or expiry): drop its expiry entry and let its waiters in.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, lock: *const c_void) {
    guard::callback(null_ctx(), "unlink", (), || {
        if lock.is_null() {
            return;
        }
        crate::eviction::lock_unlinked(|| key_of(ctx));
        // Deleted, or leaving for another name (RENAME, MOVE): the
        // sweep finds it there.
        let hinted = crate::hints::hint();
        with_state(|state| {
            value::for_each_expiry_id(lock, |entry| {
                timer::remove_lease(state, entry);
            });
            if hinted {
                timer::arm(state);
            }
            // The key's name is copied only when someone waits at all,
            // and nobody serves them next.
            if state.waiters.is_empty() || crate::hints::waiters_served_next() {
                return;
            }
            if let Some(id) = key_of(ctx) {
                if state.waiters.has_waiters(&id) {
                    state.pending_grants.insert(id);
                    timer::arm(state);
                }
            }
        });
    });
}
