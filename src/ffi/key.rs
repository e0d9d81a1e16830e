//! One open key seen as a lock [`Slot`]. Reads and in-place changes go straight
//! to the value in the keyspace; storing a new lock or deleting the key is
//! kept pending until [`LockKey::commit`], which the adapter calls after it has
//! let go of the module state, because Redis calls back into the module
//! (`unlink2`, `free`) while it replaces or deletes a value.

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_core::{Lock, Slot};
use redis_module::raw;

use crate::ffi::lock_copy::LockCopy;
use crate::ffi::value::{self, Access};
use crate::ffi::{rm, Ctx, RString};

/// Our data type, set once at load.
pub static LOCK_TYPE_PTR: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// The key holds a value of another type.
#[derive(Debug)]
pub struct WrongType;

enum Pending {
    Nothing,
    Store(LockCopy),
    Delete,
}

pub struct LockKey {
    key: *mut raw::RedisModuleKey,
    pending: Pending,
    /// The stored lock, opened for changes (a compact one read out), until
    /// its changes are written back.
    access: Option<Access>,
    /// The key held nothing when it was opened.
    opened_empty: bool,
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
        let mut opened = LockKey {
            key,
            pending: Pending::Nothing,
            access: None,
            opened_empty: true,
        };
        if key.is_null() {
            return Ok(opened);
        }
        if key_type(key) == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(opened);
        }
        opened.opened_empty = false;
        if is_lock(key) {
            Ok(opened)
        } else {
            Err(WrongType)
        }
    }

    /// The key held nothing when it was opened (no lock, no lease to end).
    pub fn opened_empty(&self) -> bool {
        self.opened_empty
    }

    /// The lock in a key opened by someone else (a scan), if it holds one.
    /// `f` may change its holders' fields (filing), not its shape.
    pub fn scanned(key: *mut raw::RedisModuleKey, f: impl FnOnce(&mut Lock)) {
        if key.is_null() || !is_lock(key) {
            return;
        }
        let value = rm!(RedisModule_ModuleTypeGetValue(key)).unwrap_or(std::ptr::null_mut());
        let Some(mut access) = Access::new(value) else {
            return;
        };
        if let Some(lock) = access.lock() {
            f(lock);
        }
        // Filing changes no lock's shape: the write-back cannot fail (and
        // a key a scan opened could not take a new value).
        let _ = access.write_back();
    }

    /// The lock stored in the keyspace, ignoring anything pending.
    fn stored(&mut self) -> Option<&mut Lock> {
        if self.key.is_null() {
            return None;
        }
        if self.access.is_none() {
            self.access = Access::new(rm!(RedisModule_ModuleTypeGetValue(self.key))?);
        }
        self.access.as_mut()?.lock()
    }

    /// Writes changes to a compact stored lock back into its value; a lock
    /// that lost the compact shape replaces it as a full value.
    fn write_back(&mut self) {
        let Some(access) = &mut self.access else {
            return;
        };
        match access.write_back() {
            Ok(()) => {}
            Err(lock) => {
                // The `Access` no longer speaks for the value.
                self.access = None;
                let new = value::into_value(lock);
                let ty = LOCK_TYPE_PTR.load(Ordering::Relaxed);
                let mut old = std::ptr::null_mut();
                let status = rm!(RedisModule_ModuleTypeReplaceValue(
                    self.key, ty, new, &mut old
                ));
                if status == Some(raw::REDISMODULE_OK as c_int) {
                    // Redis took the new value and handed back the old one
                    // (the `Access`'s), calling none of our callbacks.
                    value::free_value(old);
                } else {
                    value::free_value(new);
                }
            }
        }
    }

    /// A new value is pending: it is counted when it is committed, with
    /// every holder it has by then.
    pub fn stores_new_value(&self) -> bool {
        matches!(self.pending, Pending::Store(_))
    }

    /// [`LockKey::commit`] for a caller that serves the key's waiters
    /// itself right after (`waiting::grant_waiters`): removing the lock
    /// leaves no grant pending for the timer, whose firing would only find
    /// them served.
    pub fn commit_then_serve(&mut self) {
        crate::hints::served_next(|| self.commit());
    }

    /// Carries out a pending store or delete. Call it with no module-state
    /// borrow held: Redis calls our type callbacks from inside.
    pub fn commit(&mut self) {
        let pending = std::mem::replace(&mut self.pending, Pending::Nothing);
        if matches!(pending, Pending::Nothing) {
            self.write_back();
        } else if let Some(mut access) = self.access.take() {
            // The stored value is about to go. Its changes are written back
            // first all the same: `unlink2` reads it to drop its holders'
            // lease-index entries. (A change of shape has no value to go
            // to: the value is replaced or deleted anyway.)
            let _ = access.write_back();
        }
        match pending {
            Pending::Nothing => {}
            Pending::Delete => {
                // Not through `stored()`: no `Access` may outlive the value.
                if !self.key.is_null() && is_lock(self.key) {
                    crate::hints::own_change(|| rm!(RedisModule_DeleteKey(self.key)));
                }
            }
            Pending::Store(copy) => {
                let holders = copy.lock().map_or(0, |lock| lock.holders().len());
                let Some((value, access)) = value::into_value_with_access(copy) else {
                    return;
                };
                let ty = LOCK_TYPE_PTR.load(Ordering::Relaxed);
                let status = crate::hints::own_change(|| {
                    rm!(RedisModule_ModuleTypeSetValue(self.key, ty, value))
                });
                if status == Some(raw::REDISMODULE_OK as c_int) {
                    crate::stats::value_counted(1, holders);
                    // What the command reads next (its effects) is the lock
                    // it just stored: no need to read the value back.
                    self.access = Some(access);
                } else {
                    // Redis did not take the value; it is still ours.
                    drop(access);
                    value::free_value(value);
                }
            }
        }
    }
}

impl Slot for LockKey {
    fn lock(&mut self) -> Option<&mut Lock> {
        match self.pending {
            Pending::Delete => None,
            Pending::Store(ref mut copy) => copy.lock_mut(),
            Pending::Nothing => self.stored(),
        }
    }

    fn store(&mut self, lock: Lock) {
        self.pending = Pending::Store(LockCopy::new(lock));
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
        self.write_back();
        if !self.key.is_null() {
            rm!(RedisModule_CloseKey(self.key));
        }
    }
}
