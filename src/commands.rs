//! The `LOCK.*` commands: parse (core), open the key, run the operation
//! (core), commit, propagate (effects), reply. Nothing here decides anything
//! the core crate could decide.

use std::ffi::{c_int, CStr};

use redis_lock_core::args::{self as parse, ArgError};
use redis_lock_core::ops::{self, Acquired, Change, Outcome};
use redis_lock_core::wait::{self, Caller, Then};
use redis_lock_core::{Clock, Mode, Now};
use redis_module::raw;

use crate::config::{self, DEBUG};
use crate::effects::{self, Target};
use crate::ffi::key::{LockKey, WrongType};
use crate::ffi::{self, Argv, Ctx};
use crate::recovery;
use crate::state::{with_state, CLOCK};
use crate::timer;
use crate::waiting;

/// A command's key, opened and settled (an ended lease removed, waiters
/// served), ready for the operation.
struct Opened<'a> {
    target: Target<'a>,
    key: LockKey,
}

fn open<'a>(ctx: Ctx, args: &Argv<'a>, write: bool) -> Result<Opened<'a>, c_int> {
    let (Some(name), Some(&bytes)) = (args.string(1), args.bytes().get(1)) else {
        return Err(ffi::reply_wrong_arity(ctx));
    };
    let mut key = LockKey::open(ctx, name, write)
        .map_err(|WrongType| ffi::reply_error(ctx, ffi::WRONGTYPE))?;
    // A read settles nothing, but it sees the instant of its transaction
    // as a write does.
    let target = Target::of_command(ctx, name, bytes);
    if write && target.on_primary() {
        waiting::settle(&target, &mut key);
    }
    Ok(Opened { target, key })
}

fn reply_arg_error(ctx: Ctx, error: &ArgError) -> c_int {
    match error {
        ArgError::WrongArity => ffi::reply_wrong_arity(ctx),
        other => ffi::reply_error(ctx, &other.to_string()),
    }
}

/// The answer to a command that found the module state borrowed (a
/// callback re-entered from inside one of our own steps): nothing ran.
const STATE_BUSY: &str = "ERR internal error: state busy";

/// Runs a lock operation on the opened key with the module state, and
/// files the changed hold's lease in the same borrow (`effects::file`).
/// `None`: the state was busy and nothing ran.
fn run<R>(
    opened: &mut Opened,
    owner: &[u8],
    op: impl FnOnce(&mut ops::Node, &mut LockKey, &Now) -> Outcome<R>,
) -> Option<Outcome<R>> {
    let (key, target) = (&mut opened.key, &opened.target);
    with_state(|state| {
        let outcome = op(&mut state.node, key, &target.now);
        effects::file(state, key, owner, outcome.change, || target.id());
        outcome
    })
}

/// [`run`] for an operation on `owner`'s own hold: `ops::as_holder` checks
/// the owner against the lock and the `lock.max-owner-bytes` in force.
fn run_as_holder<R>(
    opened: &mut Opened,
    owner: &[u8],
    op: impl FnOnce(&mut ops::Node, &mut LockKey, &Now) -> Outcome<R>,
) -> Option<Outcome<Result<R, ArgError>>> {
    let max_owner_bytes = config::limits().max_owner_bytes;
    run(opened, owner, |node, key, now| {
        ops::as_holder(node, key, now, owner, max_owner_bytes, op)
    })
}

/// Commits what the operation changed and propagates it.
fn finish<R>(opened: &mut Opened, owner: &[u8], outcome: &Outcome<R>, event: &CStr) {
    // A freed lock's waiters are served below.
    waiting::commit(&mut opened.key, outcome.change);
    match outcome.change {
        Change::Stored { .. } | Change::Joined => {
            effects::stored(
                &opened.target,
                &mut opened.key,
                owner,
                outcome.change,
                event,
            );
        }
        Change::Deleted { .. } => {
            effects::deleted(&opened.target, event);
            waiting::grant_waiters(&opened.target, &mut opened.key);
        }
        Change::Left { .. } => {
            effects::left(&opened.target, owner, event);
            waiting::grant_waiters(&opened.target, &mut opened.key);
        }
        Change::None => {}
    }
}

macro_rules! parse_or_reply {
    ($ctx:expr, $parsed:expr) => {
        match $parsed {
            Ok(parsed) => parsed,
            Err(error) => return reply_arg_error($ctx, &error),
        }
    };
}

macro_rules! open_or_return {
    ($ctx:expr, $args:expr, $write:expr) => {
        match open($ctx, $args, $write) {
            Ok(opened) => opened,
            Err(status) => return status,
        }
    };
}

/// What `WAIT` needs to know of the calling context (`redis_lock_core::wait`).
fn caller(ctx: Ctx) -> Caller {
    let flags = ffi::context_flags(ctx);
    let set = |flag: u32| flags & flag as c_int != 0;
    Caller {
        primary: set(raw::REDISMODULE_CTX_FLAGS_MASTER),
        may_block: !set(raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING),
        in_multi: set(raw::REDISMODULE_CTX_FLAGS_MULTI),
        in_script: set(raw::REDISMODULE_CTX_FLAGS_LUA),
    }
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n]] [WAIT timeout-ms]`
pub fn acquire(ctx: Ctx, args: &Argv) -> c_int {
    let argv_bytes = args.bytes();
    let limits = config::limits();
    let parsed = parse_or_reply!(ctx, parse::parse_acquire(argv_bytes, &limits));
    let request = ops::Request {
        owner: parsed.owner,
        ttl_ms: parsed.ttl_ms,
        mode: parsed.mode,
        limit: parsed.limit,
    };
    // Opening settles the key: a free lock with a queue has gone to its head.
    let mut opened = open_or_return!(ctx, args, true);
    let window = ops::Window::of(recovery::refusal(opened.target.now.monotonic_ms));
    let (key, target) = (&mut opened.key, &opened.target);
    let Some(result) = with_state(|state| {
        // Only a shared request asks whether anyone waits (an exclusive
        // one finds a free lock only when nobody does).
        let queued = parsed.mode == Mode::Shared
            && !state.waiters.is_empty()
            && state.waiters.has_waiters(&target.id());
        let admission = ops::Admission {
            window,
            queued,
            max_holders: limits.max_holders,
        };
        let result = ops::acquire_with(&mut state.node, key, &target.now, &request, &admission);
        if let Ok(outcome) = &result {
            effects::file(state, key, parsed.owner, outcome.change, || target.id());
        }
        result
    }) else {
        return ffi::reply_error(ctx, STATE_BUSY);
    };
    let block =
        |opened: &Opened, timeout_ms| waiting::block(ctx, opened.target.id(), &request, timeout_ms);
    match result {
        // A waiter waits through the recovery window (within its timeout):
        // the timer serves it when the window ends.
        Err(error) => match (error, wait::then(parsed.wait_ms, caller(ctx))) {
            (ops::OpError::Recovering { .. }, Then::Block { timeout_ms }) => {
                block(&opened, timeout_ms)
            }
            _ => ffi::reply_error(ctx, &error.message()),
        },
        Ok(outcome) => match outcome.reply {
            Acquired::Granted { token, .. } => {
                finish(&mut opened, parsed.owner, &outcome, c"lock.acquire");
                ffi::reply_integer(ctx, token)
            }
            Acquired::Busy => match wait::then(parsed.wait_ms, caller(ctx)) {
                Then::Block { timeout_ms } => block(&opened, timeout_ms),
                Then::Answer => ffi::reply_null(ctx),
            },
        },
    }
}

/// `LOCK.RELEASE key owner [ALL]`
pub fn release(ctx: Ctx, args: &Argv) -> c_int {
    let argv_bytes = args.bytes();
    let parsed = parse_or_reply!(ctx, parse::parse_release(argv_bytes));
    let mut opened = open_or_return!(ctx, args, true);
    let Some(outcome) = run_as_holder(&mut opened, parsed.owner, |node, key, now| {
        ops::release(node, key, now, parsed.owner, parsed.all)
    }) else {
        return ffi::reply_error(ctx, STATE_BUSY);
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.release");
    match outcome.reply {
        Ok(Some(left)) => ffi::reply_integer(ctx, i64::from(left)),
        Ok(None) => ffi::reply_null(ctx),
        Err(error) => ffi::reply_error(ctx, &error.to_string()),
    }
}

/// `LOCK.EXTEND key owner ttl-ms`
pub fn extend(ctx: Ctx, args: &Argv) -> c_int {
    let argv_bytes = args.bytes();
    let parsed = parse_or_reply!(ctx, parse::parse_extend(argv_bytes, &config::limits()));
    let mut opened = open_or_return!(ctx, args, true);
    let Some(outcome) = run_as_holder(&mut opened, parsed.owner, |node, key, now| {
        ops::extend(node, key, now, parsed.owner, parsed.ttl_ms)
    }) else {
        return ffi::reply_error(ctx, STATE_BUSY);
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.extend");
    match outcome.reply {
        Ok(extended) => ffi::reply_integer(ctx, i64::from(extended)),
        Err(error) => ffi::reply_error(ctx, &error.to_string()),
    }
}

/// `LOCK.FENCE key owner [ATLEAST n]`
pub fn fence(ctx: Ctx, args: &Argv) -> c_int {
    let argv_bytes = args.bytes();
    let parsed = parse_or_reply!(ctx, parse::parse_fence(argv_bytes));
    let mut opened = open_or_return!(ctx, args, true);
    let Some(outcome) = run_as_holder(&mut opened, parsed.owner, |node, key, now| {
        ops::fence(node, key, now, parsed.owner, parsed.at_least)
    }) else {
        return ffi::reply_error(ctx, STATE_BUSY);
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.fence");
    match outcome.reply {
        Ok(Some(token)) => ffi::reply_integer(ctx, token),
        Ok(None) => ffi::reply_null(ctx),
        Err(error) => ffi::reply_error(ctx, &error.to_string()),
    }
}

/// `LOCK.INFO key`: an exclusive lock's holder (owner, holds, token, pttl),
/// its waiters and `mode`; a shared lock's mode, limit, holders and waiters.
pub fn info(ctx: Ctx, args: &Argv) -> c_int {
    let argv_bytes = args.bytes();
    parse_or_reply!(ctx, parse::parse_info(argv_bytes));
    let mut opened = open_or_return!(ctx, args, false);
    let holders = ops::holders_now(&mut opened.key, &opened.target.now);
    let Some(view) = ops::view(&mut opened.key, &opened.target.now, 1) else {
        return ffi::reply_null(ctx);
    };
    let waiters = i64::try_from(waiting::waiting(&opened.target.id())).unwrap_or(i64::MAX);
    match (view.mode, view.holders.first()) {
        (Mode::Exclusive, Some(holder)) => {
            ffi::reply_map(ctx, 6);
            reply_holder(ctx, holder);
            ffi::reply_bulk(ctx, b"waiters");
            ffi::reply_integer(ctx, waiters);
            ffi::reply_bulk(ctx, b"mode");
            ffi::reply_bulk(ctx, Mode::Exclusive.name().as_bytes())
        }
        _ => {
            ffi::reply_map(ctx, 4);
            ffi::reply_bulk(ctx, b"mode");
            ffi::reply_bulk(ctx, view.mode.name().as_bytes());
            ffi::reply_bulk(ctx, b"limit");
            match view.limit {
                Some(limit) => ffi::reply_integer(ctx, i64::from(limit.get())),
                None => ffi::reply_null(ctx),
            };
            ffi::reply_bulk(ctx, b"holders");
            ffi::reply_integer(ctx, i64::try_from(holders).unwrap_or(i64::MAX));
            ffi::reply_bulk(ctx, b"waiters");
            ffi::reply_integer(ctx, waiters)
        }
    }
}

/// A holder's four fields, as map entries.
fn reply_holder(ctx: Ctx, holder: &ops::HolderView) {
    ffi::reply_bulk(ctx, b"owner");
    ffi::reply_bulk(ctx, &holder.owner);
    ffi::reply_bulk(ctx, b"holds");
    ffi::reply_integer(ctx, i64::from(holder.holds));
    ffi::reply_bulk(ctx, b"token");
    ffi::reply_integer(ctx, holder.token);
    ffi::reply_bulk(ctx, b"pttl");
    ffi::reply_integer(ctx, i64::try_from(holder.pttl_ms).unwrap_or(i64::MAX));
}

/// `LOCK.HOLDERS key [COUNT n]`: the holders in grant order, each a map of
/// owner, holds, token and pttl; an empty array when the lock is not held.
pub fn holders(ctx: Ctx, args: &Argv) -> c_int {
    let count = parse_or_reply!(ctx, parse::parse_holders(args.bytes()));
    let mut opened = open_or_return!(ctx, args, false);
    let holders = ops::view(&mut opened.key, &opened.target.now, count)
        .map(|view| view.holders)
        .unwrap_or_default();
    ffi::reply_array(ctx, holders.len());
    for holder in &holders {
        ffi::reply_map(ctx, 4);
        reply_holder(ctx, holder);
    }
    raw::REDISMODULE_OK as c_int
}

/// `LOCK.APPLY key owner holds token wall-end-ms [SHARED limit]`: the
/// effect a primary
/// replicates and the AOF logs. Accepted only from the replication link or
/// while loading the AOF; a user calling it could forge any lock.
pub fn apply(ctx: Ctx, args: &Argv) -> c_int {
    if !trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.APPLY is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let argv_bytes = args.bytes();
    let parsed = parse_or_reply!(ctx, parse::parse_apply(argv_bytes));
    if !redis_lock_core::lease::plausible_wall_end(&CLOCK, parsed.wall_end_ms) {
        return reply_arg_error(ctx, &ArgError::Effect("lease end"));
    }
    let (Some(name), Some(&bytes)) = (args.string(1), args.bytes().get(1)) else {
        return ffi::reply_wrong_arity(ctx);
    };
    let Ok(mut key) = LockKey::open(ctx, name, true) else {
        return ffi::reply_error(ctx, ffi::WRONGTYPE);
    };
    let target = Target::of_command(ctx, name, bytes);
    let applied = with_state(|state| {
        let outcome = ops::apply(
            &mut state.node,
            &mut key,
            &target.now,
            parsed.owner,
            parsed.holds,
            parsed.token,
            parsed.wall_end_ms,
            parsed.shared,
        );
        // Only the lease index changes here: the primary's stream already
        // carries the effect onwards.
        effects::file(state, &mut key, parsed.owner, outcome.change, || {
            target.id()
        });
    });
    if applied.is_none() {
        return ffi::reply_error(ctx, STATE_BUSY);
    }
    key.commit();
    ffi::reply_ok(ctx)
}

/// `LOCK.DROP key owner`: the effect of an owner's hold leaving a shared
/// lock that others still hold. Internal, like `LOCK.APPLY`.
pub fn drop(ctx: Ctx, args: &Argv) -> c_int {
    if !trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.DROP is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let owner = parse_or_reply!(ctx, parse::parse_drop(args.bytes()));
    let (Some(name), Some(&bytes)) = (args.string(1), args.bytes().get(1)) else {
        return ffi::reply_wrong_arity(ctx);
    };
    let Ok(mut key) = LockKey::open(ctx, name, true) else {
        return ffi::reply_error(ctx, ffi::WRONGTYPE);
    };
    let target = Target::of_command(ctx, name, bytes);
    let dropped = with_state(|state| {
        let outcome = ops::drop_holder(&mut key, owner);
        effects::file(state, &mut key, owner, outcome.change, || target.id());
    });
    if dropped.is_none() {
        return ffi::reply_error(ctx, STATE_BUSY);
    }
    key.commit();
    ffi::reply_ok(ctx)
}

/// `LOCK.COUNTER n`: raises this node's token counter to at least `n`. The
/// record an AOF rewrite's incremental file starts with
/// (`counter_record`); accepted, like `LOCK.APPLY`, only from a primary or
/// while loading the AOF.
pub fn counter(ctx: Ctx, args: &Argv) -> c_int {
    if !trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.COUNTER is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let argv_bytes = args.bytes();
    let last = parse_or_reply!(ctx, parse::parse_counter(argv_bytes));
    if with_state(|state| state.node.tokens.raise(last)).is_none() {
        return ffi::reply_error(ctx, STATE_BUSY);
    }
    ffi::reply_ok(ctx)
}

/// `LOCK.FLOOR n`: makes every later token of this node greater than `n`
/// (raises the counter to at least `n`) and replies the counter. Refused,
/// changing nothing, when that would carry the counter more than 24 h ahead
/// of the node's wall clock (`token::MAX_FLOOR_LEAD_US`). A raise
/// replicates as the `LOCK.COUNTER` effect, so replicas and the AOF keep it.
pub fn floor(ctx: Ctx, args: &Argv) -> c_int {
    let floor = parse_or_reply!(ctx, parse::parse_floor(args.bytes()));
    let wall_us = CLOCK.wall_us();
    let Some(raised) = with_state(|state| {
        let tokens = &mut state.node.tokens;
        tokens
            .raise_floor(floor, wall_us)
            .map(|rose| (rose, tokens.last()))
    }) else {
        return ffi::reply_error(ctx, STATE_BUSY);
    };
    match raised {
        Ok((rose, last)) => {
            if rose {
                ffi::replicate_counter(ctx, last);
            }
            ffi::reply_integer(ctx, last)
        }
        Err(too_far) => ffi::reply_error(ctx, &too_far.to_string()),
    }
}

/// The command comes from the replication link or the AOF being loaded.
pub(crate) fn trusted(ctx: Ctx) -> bool {
    ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_REPLICATED)
        || ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_LOADING)
}

/// `LOCK.DEBUG WALLCLOCK-OFFSET [ms]`: shifts the wall clock the module reads,
/// to show that leases ignore wall-clock steps. `MONOTONIC-RATE [ppm]` and
/// `MONOTONIC-JUMP ms`: a lease clock that runs fast or slow, or jumps
/// forward, to exercise the client's drift allowance. `LEASE-INDEX`: the
/// lease index's heap items (live or stale), live entries and whole
/// rebuilds of its heap. Only with `debug yes`.
pub fn debug(ctx: Ctx, args: &Argv) -> c_int {
    if !DEBUG.load(std::sync::atomic::Ordering::Relaxed) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.DEBUG is disabled: load the module with 'debug yes'",
        );
    }
    let argv_bytes = args.bytes();
    match argv_bytes {
        [_, sub] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            ffi::reply_integer(ctx, CLOCK.wall_offset_ms())
        }
        [_, sub, offset] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            match parse::parse_i64(offset) {
                Some(offset) => {
                    CLOCK.set_wall_offset_ms(offset);
                    ffi::reply_ok(ctx)
                }
                None => ffi::reply_error(ctx, "ERR the offset must be an integer (milliseconds)"),
            }
        }
        [_, sub] if sub.eq_ignore_ascii_case(b"MONOTONIC-RATE") => {
            ffi::reply_integer(ctx, CLOCK.monotonic_rate_ppm())
        }
        [_, sub, rate] if sub.eq_ignore_ascii_case(b"MONOTONIC-RATE") => {
            match parse::parse_i64(rate).and_then(|rate| CLOCK.set_monotonic_rate_ppm(rate)) {
                Some(()) => {
                    with_state(timer::rearm);
                    ffi::reply_ok(ctx)
                }
                None => ffi::reply_error(
                    ctx,
                    "ERR the rate must be an integer from -900000 to 1000000 (parts per million)",
                ),
            }
        }
        [_, sub, jump] if sub.eq_ignore_ascii_case(b"MONOTONIC-JUMP") => {
            let latest = redis_lock_core::lease::LATEST_READING_MS;
            match parse::parse_i64(jump).and_then(|ms| u64::try_from(ms).ok()) {
                Some(ms) => match CLOCK.jump_monotonic_ms(ms, latest) {
                    Some(()) => {
                        with_state(timer::rearm);
                        ffi::reply_ok(ctx)
                    }
                    None => ffi::reply_error(
                        ctx,
                        &format!(
                            "ERR the jump would carry the lease clock past {latest} ms, the latest reading leases and waits can be filed at (it reads {} ms)",
                            CLOCK.monotonic_ms()
                        ),
                    ),
                },
                None => ffi::reply_error(
                    ctx,
                    "ERR the jump must be a non-negative integer (milliseconds)",
                ),
            }
        }
        [_, sub] if sub.eq_ignore_ascii_case(b"LEASE-INDEX") => {
            let (items, live, rebuilds) = with_state(|state| {
                let index = &state.deadlines;
                (index.queued_items(), index.len(), index.rebuilds())
            })
            .unwrap_or_default();
            let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            ffi::reply_array(ctx, 6);
            ffi::reply_bulk(ctx, b"items");
            ffi::reply_integer(ctx, count(items));
            ffi::reply_bulk(ctx, b"live");
            ffi::reply_integer(ctx, count(live));
            ffi::reply_bulk(ctx, b"rebuilds");
            ffi::reply_integer(ctx, i64::try_from(rebuilds).unwrap_or(i64::MAX))
        }
        [_] => ffi::reply_wrong_arity(ctx),
        _ => ffi::reply_error(
            ctx,
            "ERR unknown LOCK.DEBUG subcommand: try WALLCLOCK-OFFSET [ms], MONOTONIC-RATE [ppm], MONOTONIC-JUMP ms or LEASE-INDEX",
        ),
    }
}
#[cfg(test)]
mod tests {
    /// An opened key is moved on every command: at 128 bytes the move is
    /// a few register stores, not a call to `memcpy` (a compact lock read
    /// out lives in a reused box, not in the key access). The key access
    /// itself is six words at most: the key, what is pending, the access
    /// and whether the key held nothing when opened.
    #[test]
    fn an_opened_key_is_at_most_128_bytes() {
        assert!(std::mem::size_of::<crate::ffi::key::LockKey>() <= 48);
        assert!(std::mem::size_of::<Result<super::Opened, std::ffi::c_int>>() <= 128);
    }
}
