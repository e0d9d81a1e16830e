//! What follows a change to a lock: the effect written to replicas and the
//! AOF (absolute values, never the command to re-run), the keyspace event,
//! and the expiry index. One place, so every path (commands, waiter grants,
//! the expiry timer) propagates the same way.

use std::cell::Cell;
use std::ffi::{c_int, CStr};

use redis_lock_core::{filing, lease, Change, Clock, Holder, Now, Slot, UnitInstant};
use redis_module::raw;

use crate::ffi::key::LockKey;
use crate::ffi::{self, Ctx, RString};
use crate::propagation;
use crate::state::{KeyId, ModuleState, CLOCK};
use crate::timer;

/// The key a command or callback works on, and the instant it does: the
/// clocks are read once per command (clock reads were 7% of its time), and
/// once per transaction or script for the commands inside one
/// ([`command_now`]).
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

    /// `name` in the calling client's database, now, from a command: inside
    /// a transaction, script or function, the instant of the whole unit
    /// ([`command_now`]).
    pub fn of_command(ctx: Ctx, name: RString, bytes: &'a [u8]) -> Self {
        let flags = ffi::context_flags(ctx);
        Target {
            ctx,
            name,
            db: ffi::selected_db(ctx),
            bytes,
            now: command_now(flags),
            flags: Some(flags),
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

thread_local! {
    static UNIT: Cell<UnitInstant> = const { Cell::new(UnitInstant::new()) };
}

/// The instant of a command whose context flags are `flags`. Inside an
/// `EXEC`, a script or a function, every command sees the same instant,
/// as every command there sees the same server time for key expiry: the
/// unit's first reading, kept by the server's frozen time
/// (`redis_lock_core::UnitInstant`), so that no lease ends between two
/// commands of one transaction. Elsewhere, and on a server that does not
/// tell its frozen time (Redis 7.0), the clock is read now.
///
/// The wall clock (a token's floor, a lease end written for a replica)
/// is the server's cached time of the command, or of its unit, where the
/// server tells it (Redis 7.2+, Valkey): the time it read as the command
/// (or unit) started, which saves a clock read per grant.
fn command_now(flags: c_int) -> Now<'static> {
    const IN_UNIT: c_int =
        (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA) as c_int;
    let Some(cached_us) = ffi::cached_server_micros() else {
        return Now::of(&CLOCK);
    };
    let now = if flags & IN_UNIT != 0 {
        let reading = UNIT.with(|kept| {
            let mut instant = kept.get();
            let reading = instant.reading(cached_us, || CLOCK.monotonic_ms());
            kept.set(instant);
            reading
        });
        Now::at(reading, &CLOCK)
    } else {
        Now::of(&CLOCK)
    };
    now.with_wall_us(CLOCK.wall_us_of(cached_us))
}

/// Files `owner`'s hold in `slot` after `change`, by the lease index's
/// rules (`redis_lock_core::filing`); a hold that left a shared lock drops
/// its entry. Called inside the state borrow of the operation that made the
/// change: a change and its filing cannot come apart, so no hold is ever
/// left without an entry (and never ends).
pub fn file(
    state: &mut ModuleState,
    slot: &mut LockKey,
    owner: &[u8],
    change: Change,
    key: impl FnOnce() -> KeyId,
) {
    let previous_deadline = match change {
        Change::Stored { previous_deadline } => previous_deadline,
        Change::Joined => {
            // A join to a value not committed yet (a hand-off that made the
            // lock and admitted more shared waiters) is counted with it.
            if !slot.stores_new_value() {
                crate::stats::holders_counted(1);
            }
            None
        }
        Change::Left { entry, .. } => {
            crate::stats::holders_counted(-1);
            timer::remove_lease(state, entry);
            return;
        }
        Change::None | Change::Deleted { .. } => return,
    };
    let Some(holder) = slot.holder(owner) else {
        return;
    };
    // A lease filed under a new entry only adds its own end to what the
    // timer waits for: when a firing is armed by then, it stays (most
    // grants: the armed firing is an earlier lease's end).
    let added = holder.expiry_id() == 0;
    if filing::on_change(&mut state.deadlines, holder, previous_deadline, key)
        && !(added && timer::fires_by(state, holder.ends_at()))
    {
        timer::arm(state);
    }
}

/// What a stored hold's effect carries besides its owner.
#[derive(Clone, Copy, Debug)]
pub struct Effect {
    holds: u32,
    token: i64,
    wall_end_ms: i64,
    /// The lock's `Lock::shared_limit`.
    shared: Option<u32>,
}

impl Effect {
    /// `holder` of a lock whose `shared_limit` is `shared`, as it stands,
    /// its lease end on the wall clock.
    pub fn of(target: &Target, holder: &Holder, shared: Option<u32>) -> Effect {
        Effect {
            holds: holder.holds(),
            token: holder.token(),
            wall_end_ms: lease::to_wall_ms(&target.now, holder.deadline()),
            shared,
        }
    }
}

/// After the change is committed: replicate `LOCK.APPLY` with the absolute
/// lease end, and announce `event`.
pub fn announce(target: &Target, owner: &[u8], effect: Effect, event: &CStr) {
    replicate(target, || {
        let apply = ffi::ApplyEffect {
            owner,
            holds: effect.holds,
            token: effect.token,
            wall_end_ms: effect.wall_end_ms,
            shared: effect.shared,
        };
        ffi::replicate_apply(target.ctx, target.name, &apply);
    });
    notify(target, raw::REDISMODULE_NOTIFY_MODULE, event);
}

/// After a committed change to `owner`'s hold in `slot`: announce a stored
/// hold (nothing for any other change).
pub fn stored(target: &Target, slot: &mut impl Slot, owner: &[u8], change: Change, event: &CStr) {
    let (Change::Stored { .. } | Change::Joined) = change else {
        return;
    };
    let Some(lock) = slot.lock() else {
        return;
    };
    let shared = lock.shared_limit();
    if let Some(holder) = lock.holder(owner) {
        let effect = Effect::of(target, holder, shared);
        announce(target, owner, effect, event);
    }
}

/// `owner`'s hold left a shared lock that others still hold: `LOCK.DROP`
/// to replicas and the AOF, and `event`.
pub fn left(target: &Target, owner: &[u8], event: &CStr) {
    replicate(target, || {
        ffi::replicate_drop(target.ctx, target.name, owner);
    });
    notify(target, raw::REDISMODULE_NOTIFY_MODULE, event);
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
