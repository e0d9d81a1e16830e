//! Fence values (`lockfence`, one `i64` in a box behind Redis's pointer)
//! and the key access of the fence commands. A fence key is never a lock:
//! `LockKey` sees another module type (WRONGTYPE), and the lock machinery
//! (sweep, hints, counters) only runs from the lock type's callbacks.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::ffi::key::WrongType;
use crate::ffi::{rm, Ctx, RString};

/// The fence data type, set once at load.
pub static FENCE_TYPE_PTR: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// A fence handed to Redis, which owns it from now on.
pub fn into_value(token: i64) -> *mut c_void {
    Box::into_raw(Box::new(token)).cast()
}

/// The token behind a value Redis passed to one of the fence type's
/// callbacks; `None` for null.
pub fn value_of(value: *const c_void) -> Option<i64> {
    // SAFETY: Redis passes the fence type's callbacks only values made by
    // `into_value`, alive for the callback.
    unsafe { value.cast::<i64>().as_ref() }.copied()
}

/// Frees a fence value Redis is done with.
pub fn free_value(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: as in `value_of`; Redis frees each value exactly once.
        drop(unsafe { Box::from_raw(value.cast::<i64>()) });
    }
}

/// Heap bytes of one fence (`MEMORY USAGE` adds the key's own).
pub const VALUE_BYTES: usize = std::mem::size_of::<i64>();

/// An open fence key in the selected database.
pub struct FenceKey {
    key: *mut raw::RedisModuleKey,
}

impl FenceKey {
    /// Opens `name` for reading, or for writing too. `Err` if it holds a
    /// value of another type.
    pub fn open(ctx: Ctx, name: RString, write: bool) -> Result<FenceKey, WrongType> {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        let key =
            rm!(RedisModule_OpenKey(ctx, name, mode as c_int)).unwrap_or(std::ptr::null_mut());
        let opened = FenceKey { key };
        if key.is_null() {
            return Ok(opened);
        }
        let key_type =
            rm!(RedisModule_KeyType(key)).unwrap_or(raw::REDISMODULE_KEYTYPE_EMPTY as c_int);
        if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as c_int
            || (key_type == raw::REDISMODULE_KEYTYPE_MODULE as c_int
                && rm!(RedisModule_ModuleTypeGetType(key))
                    == Some(FENCE_TYPE_PTR.load(Ordering::Relaxed)))
        {
            Ok(opened)
        } else {
            Err(WrongType)
        }
    }

    fn value_ptr(&self) -> *mut c_void {
        if self.key.is_null() {
            return std::ptr::null_mut();
        }
        rm!(RedisModule_ModuleTypeGetValue(self.key)).unwrap_or(std::ptr::null_mut())
    }

    /// The fence's value; `None` when the key is empty.
    pub fn value(&self) -> Option<i64> {
        value_of(self.value_ptr())
    }

    /// Sets the fence to `token`: in place when it exists (the key keeps
    /// its TTL), else a new value. False if Redis did not take it.
    pub fn set(&mut self, token: i64) -> bool {
        let value = self.value_ptr();
        // SAFETY: a value of our fence type (checked at open), alive while
        // the key is open; nothing else holds a reference to it now.
        if let Some(current) = unsafe { value.cast::<i64>().as_mut() } {
            *current = token;
            return true;
        }
        if self.key.is_null() {
            return false;
        }
        let new = into_value(token);
        let ty = FENCE_TYPE_PTR.load(Ordering::Relaxed);
        let status = rm!(RedisModule_ModuleTypeSetValue(self.key, ty, new));
        if status == Some(raw::REDISMODULE_OK as c_int) {
            true
        } else {
            free_value(new);
            false
        }
    }
}

impl Drop for FenceKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            rm!(RedisModule_CloseKey(self.key));
        }
    }
}

/// Replicates `LOCK.FENCEAPPLY name token`.
pub fn replicate_apply(ctx: Ctx, name: RString, token: i64) {
    rm!(RedisModule_Replicate(
        ctx,
        c"LOCK.FENCEAPPLY".as_ptr(),
        c"sl".as_ptr(),
        name,
        token
    ));
}

/// Writes `LOCK.FENCEAPPLY key token` into an AOF rewrite.
pub fn emit_aof_apply(aof: *mut raw::RedisModuleIO, key: RString, token: i64) {
    rm!(RedisModule_EmitAOF(
        aof,
        c"LOCK.FENCEAPPLY".as_ptr(),
        c"sl".as_ptr(),
        key,
        token
    ));
}

/// A fence key's event for keyspace notifications (`module` class).
pub fn notify(ctx: Ctx, name: RString) {
    rm!(RedisModule_NotifyKeyspaceEvent(
        ctx,
        raw::REDISMODULE_NOTIFY_MODULE,
        c"lock.fence".as_ptr().cast::<c_char>(),
        name
    ));
}
