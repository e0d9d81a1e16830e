//! What follows a change to a lock: the effect written to replicas and the
//! AOF (absolute values, never the command to re-run), the keyspace event,
//! and the expiry index. One place, so every path (commands, waiter grants,
//! the expiry timer) propagates the same way.

use std::ffi::{c_int, CStr};

use redis_lock_core::{lease, Change, Lock, Now};
use redis_module::raw;

use crate::ffi::{self, Ctx, RString};
use crate::propagation;
use crate::state::{with_state, KeyId, CLOCK};
use crate::timer;

/// The key a command or callback works on, and the instant it does: the
/// clocks are read once per command (clock reads were 7% of its time).
pub struct Target<'a> {
    pub ctx: Ctx,
    pub name: RString,
    pub db: i32,
    pub bytes: &'a [u8],
    pub now: Now<'static>,
    /// A command's context flags, read once at its start (role, AOF); none
    /// for a callback, whose context has no client to count a change with
    /// (see [`replicate`]).
    flags: Option<c_int>,
}

impl<'a> Target<'a> {
    /// `name` in database `db`, now, from a callback (timer, event).
    pub fn new(ctx: Ctx, name: RString, db: i32, bytes: &'a [u8]) -> Self {
        Target {
            ctx,
            name,
            db,
            bytes,
            now: Now::of(&CLOCK),
            flags: None,
        }
    }

    /// `name` in the calling client's database, now, from a command.
    pub fn of_command(ctx: Ctx, name: RString, bytes: &'a [u8]) -> Self {
        Target {
            flags: Some(ffi::context_flags(ctx)),
            ..Target::new(ctx, name, ffi::selected_db(ctx), bytes)
        }
    }

    /// This node is a primary (so it decides expiry).
    pub fn on_primary(&self) -> bool {
        let flags = self.flags.unwrap_or_else(|| ffi::context_flags(self.ctx));
        flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0
    }

    pub fn id(&self) -> KeyId {
        KeyId::new(self.db, self.bytes)
    }
}

/// The fields of a stored lock that its effect carries.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    pub holds: u32,
    pub token: i64,
    pub deadline: u64,
    pub expiry_id: u64,
    /// The lease end the lock had before this change, if it was held.
    pub previous_deadline: Option<u64>,
}

impl Facts {
    /// `lock` as stored by `change` (see [`Change::Stored`]).
    pub fn of(lock: &Lock, change: Change) -> Facts {
        let previous_deadline = match change {
            Change::Stored { previous_deadline } => previous_deadline,
            _ => None,
        };
        Facts {
            holds: lock.holds(),
            token: lock.token(),
            deadline: lock.deadline(),
            expiry_id: lock.expiry_id(),
            previous_deadline,
        }
    }
}

/// `target` now holds `owner`'s lock as `facts`: replicate `LOCK.APPLY` with
/// the absolute lease end, file the lease, announce `event`. Returns the
/// expiry entry id the lock must carry from now on.
#[must_use]
pub fn stored(target: &Target, owner: &[u8], facts: Facts, event: &CStr) -> u64 {
    replicate(target, || {
        let wall_end = lease::to_wall_ms(&target.now, facts.deadline);
        let effect = ffi::ApplyEffect {
            owner,
            holds: facts.holds,
            token: facts.token,
            wall_end_ms: wall_end,
        };
        ffi::replicate_apply(target.ctx, target.name, &effect);
    });
    let id = index(target, facts);
    notify(target, raw::REDISMODULE_NOTIFY_MODULE, event);
    id
}

/// Only the expiry index changes (a replicated effect being applied: the
/// primary's stream already carries it onwards). A new lock (id 0) gets an
/// entry. A lock changed in place keeps its entry: a lease that grew is
/// found still running when its old deadline surfaces and filed again then
/// (so a re-entry or a renewal costs the index nothing); one that shrank
/// gets an earlier item. Returns the entry id the lock must carry.
#[must_use]
pub fn index(target: &Target, facts: Facts) -> u64 {
    let shrank = facts
        .previous_deadline
        .map_or(true, |previous| facts.deadline < previous);
    if facts.expiry_id != 0 && !shrank {
        return facts.expiry_id;
    }
    // Filed at the first millisecond the lease is over (`Lock::ends_at`).
    let ends_at = facts.deadline.saturating_add(1);
    with_state(|state| {
        let id = if facts.expiry_id == 0 {
            state.deadlines.insert(ends_at, target.id())
        } else {
            state.deadlines.file_earlier(facts.expiry_id, ends_at);
            facts.expiry_id
        };
        timer::arm(state);
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
    replicate(target, || {
        ffi::replicate_del(target.ctx, target.name);
    });
}

/// Runs `build`, which replicates an effect, unless Redis would drop the
/// effect unread (see `propagation`); then only counts the change, as
/// `RedisModule_Replicate` would have. Callbacks always build it: their
/// context has no command of its own to count with, and they are rare.
fn replicate(target: &Target, build: impl FnOnce()) {
    match target.flags {
        Some(flags) if !propagation::redis_propagates(flags) => {
            ffi::replicate_verbatim(target.ctx);
        }
        _ => build(),
    }
}

fn notify(target: &Target, class: c_int, event: &CStr) {
    ffi::notify_keyspace_event(target.ctx, class, event, target.name);
}
