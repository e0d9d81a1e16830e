//! Our data type's values as Redis holds them: a `Box<Lock>` behind a
//! `void *`. Only the type's callbacks and the key access see these
//! pointers; everything above gets a scoped reference.

use std::ffi::c_void;

use redis_lock_core::Lock;

/// A loaded lock handed to Redis, which owns it from now on.
pub fn into_value(lock: Lock) -> *mut c_void {
    Box::into_raw(Box::new(lock)).cast::<c_void>()
}

/// Runs `f` with the lock behind a value Redis passed to one of our type's
/// callbacks; `None` for null. The reference does not outlive the call.
pub fn with_lock<R>(value: *const c_void, f: impl FnOnce(&Lock) -> R) -> Option<R> {
    // SAFETY: Redis only passes our type's callbacks values it got from
    // `into_value` (or `ModuleTypeSetValue` of a `Box<Lock>`), alive for
    // the callback.
    unsafe { value.cast::<Lock>().as_ref() }.map(f)
}

/// Frees a value Redis is done with (`free`); `false` for null.
pub fn free_value(value: *mut c_void) -> bool {
    if value.is_null() {
        return false;
    }
    // SAFETY: as above; Redis frees each of our values exactly once.
    drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
    true
}
