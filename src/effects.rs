//! What follows a change to a lock: the effect written to replicas and the
//! AOF (absolute values, never the command to re-run), the keyspace event,
//! and the expiry index. One place, so every path (commands, waiter grants,
//! the expiry timer) propagates the same way.

use std::ffi::{c_char, c_int, CStr};

use redis_lock_core::{lease, Lock, Now};
use redis_module::raw;

use crate::expiry;
use crate::ffi::{rm, Ctx, RString};
use crate::state::{with_state, KeyId, CLOCK};

/// The key a command or callback works on, and the instant it does: both
/// clocks are read once per command (clock reads were 7% of its time).
pub struct Target<'a> {
    pub ctx: Ctx,
    pub name: RString,
    pub db: i32,
    pub bytes: &'a [u8],
    pub now: Now,
}

impl<'a> Target<'a> {
    /// `name` in the context's selected database, now.
    pub fn new(ctx: Ctx, name: RString, db: i32, bytes: &'a [u8]) -> Self {
        Target {
            ctx,
            name,
            db,
            bytes,
            now: Now::of(&CLOCK),
        }
    }

    pub fn id(&self) -> KeyId {
        (self.db, self.bytes.into())
    }
}

/// The fields of a stored lock that its effect carries.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    pub holds: u32,
    pub token: i64,
    pub deadline: u64,
    pub expiry_id: u64,
}

impl Facts {
    pub fn of(lock: &Lock) -> Facts {
        Facts {
            holds: lock.holds(),
            token: lock.token(),
            deadline: lock.deadline(),
            expiry_id: lock.expiry_id(),
        }
    }
}

/// `target` now holds `owner`'s lock as `facts`: replicate `LOCK.APPLY` with
/// the absolute lease end, move the expiry entry, announce `event`. Returns
/// the expiry entry id the lock must carry from now on.
#[must_use]
pub fn stored(target: &Target, owner: &[u8], facts: Facts, event: &CStr) -> u64 {
    let wall_end = lease::to_wall_ms(&target.now, facts.deadline);
    rm!(RedisModule_Replicate(
        target.ctx,
        c"LOCK.APPLY".as_ptr(),
        c"sblll".as_ptr(),
        target.name,
        owner.as_ptr().cast::<c_char>(),
        owner.len(),
        i64::from(facts.holds),
        facts.token,
        wall_end,
    ));
    let id = index(target, facts);
    notify(target, raw::REDISMODULE_NOTIFY_MODULE, event);
    id
}

/// Only the expiry index changes (a replicated effect being applied: the
/// primary's stream already carries it onwards). A lock changed in place
/// moves its entry; a new lock (id 0) gets one. Returns the entry id the
/// lock must carry.
#[must_use]
pub fn index(target: &Target, facts: Facts) -> u64 {
    with_state(|state| {
        let moved =
            facts.expiry_id != 0 && state.deadlines.reschedule(facts.expiry_id, facts.deadline);
        let id = if moved {
            facts.expiry_id
        } else {
            state.deadlines.insert(facts.deadline, target.id())
        };
        expiry::arm(state);
        id
    })
    .unwrap_or(0)
}

/// The lock was released and its key removed.
pub fn deleted(target: &Target, event: &CStr) {
    replicate_del(target);
    notify(target, raw::REDISMODULE_NOTIFY_MODULE, event);
}

/// The lease ended and the key was removed: `DEL` to replicas and the AOF,
/// and the same `expired` event Redis sends for keys with a TTL.
pub fn expired(target: &Target) {
    replicate_del(target);
    notify(target, raw::REDISMODULE_NOTIFY_EXPIRED, c"expired");
}

fn replicate_del(target: &Target) {
    rm!(RedisModule_Replicate(
        target.ctx,
        c"DEL".as_ptr(),
        c"s".as_ptr(),
        target.name
    ));
}

fn notify(target: &Target, class: c_int, event: &CStr) {
    rm!(RedisModule_NotifyKeyspaceEvent(
        target.ctx,
        class,
        event.as_ptr(),
        target.name
    ));
}
