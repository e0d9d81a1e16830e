//! One open key seen as a lock [`Slot`]. Reads and in-place changes go straight
//! to the value in the keyspace; storing a new lock or deleting the key is
//! kept pending until [`LockKey::commit`], which the adapter calls after it has
//! let go of the module state, because Redis calls back into the module
//! (`unlink2`, `free`) while it replaces or deletes a value.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_core::{Lock, Slot};
use redis_module::raw;

use crate::ffi::{rm, Ctx, RString};

/// Our data type, set once at load.
pub static LOCK_TYPE_PTR: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// The key holds a value of another type.
#[derive(Debug)]
pub struct WrongType;

enum Pending {
    Nothing,
    Store(Box<Lock>),
    Delete,
}

pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    pending: Pending,
}

impl LockKey {
    /// Opens `name` in the selected database for reading, or for writing too,
    /// as a command does (the access counts for LRU/LFU).
    pub fn open(ctx: Ctx, name: RString, write: bool) -> Result<LockKey, WrongType> {
        Self::open_with(ctx, name, write, 0)
    }

    /// Opens `name` from a timer or an event: the key's LRU/LFU is left as it
    /// is, for a key that may not be a lock at all, or that nobody accessed.
    pub fn open_untouched(ctx: Ctx, name: RString, write: bool) -> Result<LockKey, WrongType> {
        Self::open_with(ctx, name, write, raw::REDISMODULE_OPEN_KEY_NOTOUCH)
    }

    fn open_with(ctx: Ctx, name: RString, write: bool, flags: u32) -> Result<LockKey, WrongType> {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE | flags
        } else {
            raw::REDISMODULE_READ | flags
        };
        let key =
            rm!(RedisModule_OpenKey(ctx, name, mode as c_int)).unwrap_or(std::ptr::null_mut());
        let opened = LockKey {
            key,
            pending: Pending::Nothing,
        };
        if key.is_null() {
            return Ok(opened);
        }
        if key_type(key) == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(opened);
        }
        if is_lock(key) {
            Ok(opened)
        } else {
            Err(WrongType)
        }
    }

    /// The lock in a key opened by someone else (a scan), if it holds one.
    pub fn scanned(key: *mut raw::RedisModuleKey, f: impl FnOnce(&mut Lock)) {
        if key.is_null() || !is_lock(key) {
            return;
        }
        let value = rm!(RedisModule_ModuleTypeGetValue(key)).unwrap_or(std::ptr::null_mut());
        // SAFETY: the key holds our type, whose values are Box<Lock>.
        if let Some(lock) = unsafe { value.cast::<Lock>().as_mut() } {
            f(lock);
        }
    }

    /// The lock stored in the keyspace, ignoring anything pending.
    fn stored(&mut self) -> Option<&mut Lock> {
        if self.key.is_null() {
            return None;
        }
        let value = rm!(RedisModule_ModuleTypeGetValue(self.key))?.cast::<Lock>();
        // SAFETY: open() checked the key holds our type, whose values are
        // always Box<Lock> pointers; the key is open for our lifetime.
        unsafe { value.as_mut() }
    }

    /// A new value is pending: it is counted when it is committed, with
    /// every holder it has by then.
    pub fn stores_new_value(&self) -> bool {
        matches!(self.pending, Pending::Store(_))
    }

    /// Carries out a pending store or delete. Call it with no module-state
    /// borrow held: Redis calls our type callbacks from inside.
    pub fn commit(&mut self) {
        match std::mem::replace(&mut self.pending, Pending::Nothing) {
            Pending::Nothing => {}
            Pending::Delete => {
                if self.stored().is_some() {
                    crate::hints::own_change(|| rm!(RedisModule_DeleteKey(self.key)));
                }
            }
            Pending::Store(lock) => {
                let holders = lock.holders().len();
                let value = Box::into_raw(lock).cast::<c_void>();
                let ty = LOCK_TYPE_PTR.load(Ordering::Relaxed);
                let status = crate::hints::own_change(|| {
                    rm!(RedisModule_ModuleTypeSetValue(self.key, ty, value))
                });
                if status == Some(raw::REDISMODULE_OK as c_int) {
                    crate::stats::value_counted(1, holders);
                } else {
                    // SAFETY: Redis did not take the value; it is still ours.
                    drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
                }
            }
        }
    }
}

impl Slot for LockKey {
    fn lock(&mut self) -> Option<&mut Lock> {
        match self.pending {
            Pending::Delete => None,
            Pending::Store(ref mut lock) => Some(lock),
            Pending::Nothing => self.stored(),
        }
    }

    fn store(&mut self, lock: Lock) {
        self.pending = Pending::Store(Box::new(lock));
    }

    fn delete(&mut self) {
        self.pending = Pending::Delete;
    }
}

fn key_type(key: *mut raw::RedisModuleKey) -> c_int {
    rm!(RedisModule_KeyType(key)).unwrap_or(raw::REDISMODULE_KEYTYPE_EMPTY as c_int)
}

/// An open, non-empty key holds one of our locks.
fn is_lock(key: *mut raw::RedisModuleKey) -> bool {
    key_type(key) == raw::REDISMODULE_KEYTYPE_MODULE as c_int
        && rm!(RedisModule_ModuleTypeGetType(key)) == Some(LOCK_TYPE_PTR.load(Ordering::Relaxed))
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            rm!(RedisModule_CloseKey(self.key));
        }
    }
}
