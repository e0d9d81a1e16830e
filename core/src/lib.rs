//! The lock logic of redis-lock, in plain Rust with no Redis FFI.
//!
//! The Redis module (the crate at the workspace root) is a thin adapter over
//! this crate: it parses nothing and decides nothing itself. Everything that
//! can be wrong about a lock (ownership, re-entrancy, leases, fencing tokens,
//! argument validation, expiry order, waiter order) lives here and is unit
//! tested against an in-memory [`Slot`] and a [`ManualClock`].
#![forbid(unsafe_code)]

pub mod args;
mod chunked;
pub mod clock;
pub mod compact;
pub mod deadlines;
pub mod fence;
pub mod filing;
pub mod firing;
pub mod handoff;
mod inline;
pub mod key_id;
pub mod lease;
pub mod lock;
pub mod ops;
pub mod record;
pub mod slot;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod token;
pub mod wait;
pub mod waiters;

pub use clock::{Clock, ManualClock, Now, SystemClock, UnitInstant};
pub use key_id::KeyId;
pub use lock::{Holder, Lock, Mode};
pub use ops::{Change, Node, Outcome, Slot};
