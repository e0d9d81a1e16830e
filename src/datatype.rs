//! The `redislock` data type: how a lock is saved to and loaded from RDB
//! (and `DUMP`/`RESTORE`, `MIGRATE`), rewritten into the AOF, digested,
//! measured, copied and freed, plus the node's token counter as RDB aux data.
//!
//! On disk a lease is its absolute wall-clock end, so a restart subtracts the
//! time the node was down; in memory it is a monotonic deadline.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use redis_lock_core::record::{self, Bounds, FieldReader};
use redis_lock_core::{lease, Holder, Lock, Mode};
use redis_module::{native_types::RedisType, raw};

use crate::config::MAX_OWNER_LIMIT;
use crate::ffi::{self, rm, RString};
use crate::guard;
use crate::state::{with_state, KeyId, CLOCK};
use crate::stats::LIVE_LOCKS;
use crate::timer;

/// The RDB layout written (`record::VERSION`); loading reads it and every
/// earlier one (`record::decode`).
const ENCODING_VERSION: c_int = record::VERSION as c_int;

/// The most holders a saved shared lock may have.
const MAX_SAVED_HOLDERS: u32 = 1 << 20;

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

/// Our value behind a pointer Redis hands back. Redis only ever passes
/// values it got from us as `Box<Lock>`.
fn lock_ref<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: see above; null is handled by as_ref.
    unsafe { value.cast::<Lock>().as_ref() }
}

fn null_ctx() -> ffi::Ctx {
    std::ptr::null_mut()
}

/// A lock value's fields, read through Redis's module IO; a failed read
/// (truncated or corrupt input, reported with `HANDLE_IO_ERRORS`) is `None`.
struct IoFields(*mut raw::RedisModuleIO);

impl FieldReader for IoFields {
    fn string(&mut self) -> Option<Vec<u8>> {
        let mut len: usize = 0;
        let buffer = rm!(RedisModule_LoadStringBuffer(self.0, &mut len))?;
        if buffer.is_null() || io_error(self.0) {
            return None;
        }
        // SAFETY: Redis returned `len` bytes it allocated for us; we copy
        // and free.
        let owner = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) }.to_vec();
        rm!(RedisModule_Free(buffer.cast::<c_void>()));
        Some(owner)
    }

    fn unsigned(&mut self) -> Option<u64> {
        let value = rm!(RedisModule_LoadUnsigned(self.0))?;
        (!io_error(self.0)).then_some(value)
    }
}

/// Reads a lock, bounded like command arguments (`record::decode`): a
/// hostile or corrupt payload is refused whole, never stored.
fn load_lock(rdb: *mut raw::RedisModuleIO, encver: c_int) -> Option<Lock> {
    let bounds = Bounds {
        max_owner: usize::try_from(MAX_OWNER_LIMIT).unwrap_or(usize::MAX),
        max_holders: MAX_SAVED_HOLDERS,
    };
    let version = u32::try_from(encver).ok()?;
    let record = record::decode(&mut IoFields(rdb), version, &CLOCK, bounds).ok()?;
    // No command makes a shared lock yet, nor can its holders be
    // replicated: one is refused until the shared family lands.
    if record.mode != Mode::Exclusive {
        return None;
    }
    // The node's counter is raised when the lock is really in the keyspace
    // (the `loaded` and `restore` events): a RESTORE whose ABSTTL is past
    // loads a value that Redis then throws away.
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

/// A read from the stream failed (truncated or corrupt): with
/// `HANDLE_IO_ERRORS` Redis reports it here instead of aborting.
fn io_error(rdb: *mut raw::RedisModuleIO) -> bool {
    rm!(RedisModule_IsIOError(rdb)).unwrap_or(1) != 0
}

extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(
        null_ctx(),
        "rdb_load",
        std::ptr::null_mut(),
        || match load_lock(rdb, encver) {
            Some(lock) => {
                LIVE_LOCKS.fetch_add(1, Ordering::Relaxed);
                // RESTORE and MIGRATE add it without an event we hear of.
                crate::hints::hint();
                Box::into_raw(Box::new(lock)).cast::<c_void>()
            }
            None => std::ptr::null_mut(),
        },
    )
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard::callback(null_ctx(), "rdb_save", (), || {
        let Some(lock) = lock_ref(value) else { return };
        let mode = match lock.mode() {
            Mode::Exclusive => 0,
            Mode::Shared => 1,
        };
        let limit = lock.limit().map_or(0, |n| u64::from(n.get()));
        let count = lock.holders().len() as u64;
        for n in [mode, limit, count] {
            rm!(RedisModule_SaveUnsigned(rdb, n));
        }
        for holder in lock.holders() {
            let owner = holder.owner();
            rm!(RedisModule_SaveStringBuffer(
                rdb,
                owner.as_ptr().cast::<c_char>(),
                owner.len()
            ));
            rm!(RedisModule_SaveUnsigned(rdb, u64::from(holder.holds())));
            rm!(RedisModule_SaveSigned(rdb, holder.token()));
            rm!(RedisModule_SaveSigned(
                rdb,
                lease::to_wall_ms(&CLOCK, holder.deadline())
            ));
        }
    });
}

extern "C" fn aof_rewrite(aof: *mut raw::RedisModuleIO, key: RString, value: *mut c_void) {
    guard::callback(null_ctx(), "aof_rewrite", (), || {
        let Some(lock) = lock_ref(value) else { return };
        // An exclusive lock: its one holder (shared locks are not loaded
        // or made yet, see `load_lock`).
        for holder in lock.holders() {
            let effect = ffi::ApplyEffect {
                owner: holder.owner(),
                holds: holder.holds(),
                token: holder.token(),
                wall_end_ms: lease::to_wall_ms(&CLOCK, holder.deadline()),
            };
            ffi::emit_aof_apply(aof, key, &effect);
        }
    });
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard::callback(null_ctx(), "mem_usage", 0, || {
        lock_ref(value).map_or(0, Lock::heap_bytes)
    })
}

/// Each holder's owner, holds and token, in grant order (and the mode and
/// limit of a shared lock): what a replica or a reload must reproduce
/// exactly. Leases are left out: they live on each process's own monotonic
/// clock, so they cannot be equal to the millisecond across them.
extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard::callback(null_ctx(), "digest", (), || {
        let Some(lock) = lock_ref(value) else { return };
        if lock.mode() == Mode::Shared {
            let limit = lock.limit().map_or(0, |n| i64::from(n.get()));
            rm!(RedisModule_DigestAddLongLong(md, -1 - limit));
        }
        for holder in lock.holders() {
            let owner = holder.owner();
            rm!(RedisModule_DigestAddStringBuffer(
                md,
                owner.as_ptr().cast::<c_char>(),
                owner.len()
            ));
            rm!(RedisModule_DigestAddLongLong(md, i64::from(holder.holds())));
            rm!(RedisModule_DigestAddLongLong(md, holder.token()));
        }
        rm!(RedisModule_DigestEndSequence(md));
    });
}

/// May run on Redis's lazy-free thread: touches only the value and an atomic.
extern "C" fn free(value: *mut c_void) {
    guard::callback(null_ctx(), "free", (), || {
        if !value.is_null() {
            // SAFETY: Redis frees each of our values exactly once.
            drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
            LIVE_LOCKS.fetch_sub(1, Ordering::Relaxed);
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
            rm!(RedisModule_SaveSigned(rdb, last));
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
            let Some(last) = rm!(RedisModule_LoadSigned(rdb)) else {
                return raw::REDISMODULE_ERR as c_int;
            };
            if io_error(rdb) {
                return raw::REDISMODULE_ERR as c_int;
            }
            with_state(|state| state.node.tokens.raise(last));
            raw::REDISMODULE_OK as c_int
        },
    )
}

/// The key's name and database from a key-operation context.
fn key_of(ctx: *mut raw::RedisModuleKeyOptCtx) -> Option<KeyId> {
    let name = rm!(RedisModule_GetKeyNameFromOptCtx(ctx))?;
    let db = rm!(RedisModule_GetDbIdFromOptCtx(ctx))?;
    Some(KeyId::new(db, ffi::bytes(name)))
}

/// A lock key leaves the keyspace (`DEL`, `UNLINK`, overwrite, our own
/// release or expiry): drop its expiry entry and let its waiters in.
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guard::callback(null_ctx(), "unlink", (), || {
        let Some(lock) = lock_ref(value) else {
            return;
        };
        crate::eviction::lock_unlinked(|| key_of(ctx));
        // Deleted, or leaving for another name (RENAME, MOVE): the sweep
        // finds it there.
        crate::hints::hint();
        with_state(|state| {
            for holder in lock.holders() {
                state.deadlines.remove(holder.expiry_id());
            }
            // The key's name is copied only when someone waits at all.
            if state.waiters.is_empty() {
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
