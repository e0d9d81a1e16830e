//! Our data type's values as Redis holds them, behind a `void *`: a
//! `Box<Compact>` (48 bytes) for an exclusive lock whose owner the compact
//! form keeps (`core/src/compact.rs`), a `Box<Lock>` (80 bytes and up) for
//! every other lock. Both are 8-byte aligned; the pointer's low bit says
//! which one it is. Only the type's callbacks and the key access see these
//! pointers; everything above gets a scoped reference to a [`Lock`].

use std::ffi::c_void;
use std::ptr::NonNull;

use redis_lock_core::compact::{Compact, OwnerText};
use redis_lock_core::Lock;

use crate::ffi::lock_copy::LockCopy;

/// The low bit of a compact value's pointer.
const COMPACT_TAG: usize = 1;

/// A value's two forms.
enum Form {
    Full(*mut Lock),
    Compact(*mut Compact),
}

fn form(value: *mut c_void) -> Option<Form> {
    if value.is_null() {
        return None;
    }
    Some(if (value as usize) & COMPACT_TAG == 0 {
        Form::Full(value.cast())
    } else {
        Form::Compact(value.cast::<u8>().wrapping_sub(COMPACT_TAG).cast())
    })
}

/// A lock handed to Redis, which owns it from now on, in the compact form
/// when it fits.
pub fn into_value(lock: Lock) -> *mut c_void {
    match Compact::of(&lock) {
        Some(compact) => tagged(compact),
        None => Box::into_raw(Box::new(lock)).cast(),
    }
}

fn tagged(compact: Compact) -> *mut c_void {
    Box::into_raw(Box::new(compact))
        .cast::<u8>()
        .wrapping_add(COMPACT_TAG)
        .cast()
}

/// [`into_value`] for a key access's new lock, with an [`Access`] to the
/// new value that needs not read it back (the key access keeps using the
/// lock it stored). The `Access` speaks for the value only once Redis has
/// taken it. `None` for a copy given up already.
pub fn into_value_with_access(mut copy: LockCopy) -> Option<(*mut c_void, Access)> {
    let lock = copy.lock()?;
    let Some(compact) = Compact::of(lock) else {
        let value = Box::into_raw(Box::new(copy.take_lock()?)).cast();
        let access = Access {
            value: NonNull::new(value)?,
            decoded: LockCopy::none(),
        };
        return Some((value, access));
    };
    let owner = lock
        .holders()
        .first()
        .and_then(|holder| OwnerText::of(holder.owner()))
        .unwrap_or_else(|| compact.owner_text());
    copy.set_owner(owner);
    let value = tagged(compact);
    let access = Access {
        value: NonNull::new(value)?,
        decoded: copy,
    };
    Some((value, access))
}

/// Runs `f` with the lock behind a value Redis passed to one of our type's
/// callbacks; `None` for null. The reference does not outlive the call.
pub fn with_lock<R>(value: *const c_void, f: impl FnOnce(&Lock) -> R) -> Option<R> {
    // SAFETY: Redis only passes our type's callbacks values it got from
    // `into_value` (directly or through `ModuleTypeSetValue`), alive for the
    // callback; `form` undoes the tag `into_value` set.
    match form(value.cast_mut())? {
        Form::Full(lock) => unsafe { lock.as_ref() }.map(f),
        Form::Compact(compact) => unsafe { compact.as_ref() }.map(|c| f(&c.to_lock())),
    }
}

/// Calls `f` with each holder's lease index entry of the lock behind a
/// value, without spelling a compact lock out (`unlink2` runs for every
/// lock that leaves the keyspace, each release among them); `None` for
/// null.
pub fn for_each_expiry_id(value: *const c_void, mut f: impl FnMut(u64)) -> Option<()> {
    match form(value.cast_mut())? {
        // SAFETY: as in `with_lock`.
        Form::Full(lock) => unsafe { lock.as_ref() }
            .map(|lock| lock.holders().iter().for_each(|h| f(h.expiry_id()))),
        Form::Compact(compact) => unsafe { compact.as_ref() }.map(|c| f(c.expiry_id())),
    }
}

/// The holders of the lock behind a value (without spelling a compact
/// lock out: the `free` callback runs for every lock that ends).
pub fn holder_count(value: *const c_void) -> Option<usize> {
    match form(value.cast_mut())? {
        // SAFETY: as in `with_lock`.
        Form::Full(lock) => unsafe { lock.as_ref() }.map(|lock| lock.holders().len()),
        Form::Compact(_) => Some(1),
    }
}

/// Bytes the lock behind a value owns, for `MEMORY USAGE`.
pub fn heap_bytes(value: *const c_void) -> Option<usize> {
    match form(value.cast_mut())? {
        // SAFETY: as in `with_lock`.
        Form::Full(lock) => unsafe { lock.as_ref() }.map(Lock::heap_bytes),
        Form::Compact(compact) => unsafe { compact.as_ref() }.map(Compact::heap_bytes),
    }
}

/// Frees a value Redis is done with (`free`, or one Redis did not take);
/// `false` for null.
pub fn free_value(value: *mut c_void) -> bool {
    // SAFETY: as in `with_lock`; Redis frees each of our values exactly once.
    match form(value) {
        None => false,
        Some(Form::Full(lock)) => {
            drop(unsafe { Box::from_raw(lock) });
            true
        }
        Some(Form::Compact(compact)) => {
            drop(unsafe { Box::from_raw(compact) });
            true
        }
    }
}

/// The lock behind a value in the keyspace, opened for changes: a full lock
/// is changed where it lies; a compact one is read out once and written
/// back by [`Access::write_back`]. Whoever holds an `Access` keeps the key
/// open and drops the `Access` before the key's value is replaced, deleted
/// or the key closed (`LockKey` does).
pub struct Access {
    value: NonNull<c_void>,
    /// A compact value's lock as read (with its owner as read), which the
    /// caller changes; none for a full value.
    decoded: LockCopy,
}

impl Access {
    /// Access to the lock behind `value`; `None` for null.
    pub fn new(value: *mut c_void) -> Option<Access> {
        let value = NonNull::new(value)?;
        let decoded = match form(value.as_ptr())? {
            Form::Full(_) => LockCopy::none(),
            // SAFETY: as in `with_lock`, for as long as the key is open.
            Form::Compact(compact) => LockCopy::decoded(unsafe { compact.as_ref() }?),
        };
        Some(Access { value, decoded })
    }

    /// The lock (none for a compact one given back by `write_back`).
    pub fn lock(&mut self) -> Option<&mut Lock> {
        match form(self.value.as_ptr())? {
            Form::Compact(_) => self.decoded.lock_mut(),
            // SAFETY: a full value is a `Box<Lock>` Redis keeps alive while
            // the key is open; the `&mut self` borrow is the only access.
            Form::Full(lock) => unsafe { lock.as_mut() },
        }
    }

    /// Writes a compact lock's changes back into its value. `Err` with the
    /// lock when it no longer has the compact shape (the caller stores it
    /// as a full value instead); the `Access` then gives no lock.
    pub fn write_back(&mut self) -> Result<(), Lock> {
        let decoded = &self.decoded;
        let (Some(Form::Compact(compact)), Some(lock), Some(owner)) =
            (form(self.value.as_ptr()), decoded.lock(), decoded.owner())
        else {
            return Ok(());
        };
        // SAFETY: as in `new`; no reference into the value is alive (the
        // decoded lock is a copy).
        let Some(stored) = (unsafe { compact.as_mut() }) else {
            return Ok(());
        };
        if stored.update(owner, lock) {
            return Ok(());
        }
        // From here on the `Access` gives no lock.
        match self.decoded.take_lock() {
            Some(lock) => Err(lock),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &[u8] = b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c";

    #[test]
    fn a_value_reads_back_as_the_lock_it_was_made_from() {
        let long = [b'x'; 40];
        for owner in [UUID, b"short", &long[..]] {
            let lock = Lock::exclusive(owner, 2, 7, 1_000);
            let value = into_value(lock.clone());
            assert_eq!(with_lock(value, Clone::clone), Some(lock.clone()));
            assert_eq!(holder_count(value), Some(1));
            let compact = (value as usize) & COMPACT_TAG != 0;
            assert_eq!(compact, owner.len() <= 36, "{owner:?}");
            assert_eq!(
                heap_bytes(value),
                Some(if compact { 48 } else { lock.heap_bytes() })
            );
            assert!(free_value(value));
        }
        assert!(!free_value(std::ptr::null_mut()));
        assert_eq!(with_lock(std::ptr::null(), |_| ()), None);
    }

    #[test]
    fn a_stored_value_and_its_access_agree() {
        for owner in [UUID, &[b'x'; 40][..]] {
            let lock = Lock::exclusive(owner, 2, 7, 1_000);
            let (value, mut access) = into_value_with_access(LockCopy::new(lock.clone())).unwrap();
            assert_eq!(access.lock(), Some(&mut lock.clone()));
            access.lock().unwrap().holders_mut()[0].set_expiry_id(5);
            assert_eq!(access.write_back(), Ok(()));
            let entry = with_lock(value, |lock| lock.holders()[0].expiry_id());
            assert_eq!(entry, Some(5));
            assert!(free_value(value));
        }
    }

    #[test]
    fn changes_through_access_are_written_back() {
        let value = into_value(Lock::exclusive(UUID, 1, 7, 1_000));
        let mut access = Access::new(value).unwrap();
        let holder = &mut access.lock().unwrap().holders_mut()[0];
        holder.set_expiry_id(42);
        assert_eq!(access.write_back(), Ok(()));
        let read = with_lock(value, |lock| lock.holders()[0].expiry_id());
        assert_eq!(read, Some(42));
        // A change of shape is handed back to be stored in full.
        let mut access = Access::new(value).unwrap();
        *access.lock().unwrap() = Lock::exclusive(&[b'y'; 50], 1, 8, 2_000);
        let full = access.write_back().unwrap_err();
        assert_eq!(full.holders()[0].owner(), &[b'y'; 50][..]);
        assert!(free_value(value));
    }
}
