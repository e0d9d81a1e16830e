//! The `LOCK.*` commands: parse (core), open the key, run the operation
//! (core), commit, propagate (effects), reply. Nothing here decides anything
//! the core crate could decide.

use std::ffi::{c_int, CStr};

use redis_lock_core::args::{self, ArgError};
use redis_lock_core::ops::{self, Acquired, Change, Outcome};
use redis_lock_core::Slot;
use redis_module::raw;

use crate::config::{self, DEBUG};
use crate::effects::{self, Target};
use crate::ffi::key::{LockKey, WrongType};
use crate::ffi::{self, Ctx, RString};
use crate::recovery;
use crate::state::{with_state, CLOCK};
use crate::waiting;

/// A command's key, opened and settled (an ended lease removed, waiters
/// served), ready for the operation.
struct Opened<'a> {
    target: Target<'a>,
    key: LockKey,
}

fn open<'a>(ctx: Ctx, argv: *mut RString, argc: c_int, write: bool) -> Result<Opened<'a>, c_int> {
    let Some(name) = ffi::arg(argv, argc, 1) else {
        return Err(ffi::reply_wrong_arity(ctx));
    };
    let mut key = LockKey::open(ctx, name, write)
        .map_err(|WrongType| ffi::reply_error(ctx, ffi::WRONGTYPE))?;
    // A read propagates nothing and settles nothing: no flags to read.
    let target = if write {
        Target::of_command(ctx, name, ffi::bytes(name))
    } else {
        Target::new(ctx, name, ffi::selected_db(ctx), ffi::bytes(name))
    };
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

/// Commits what the operation changed and propagates it.
fn finish<R>(opened: &mut Opened, owner: &[u8], outcome: &Outcome<R>, event: &CStr) {
    opened.key.commit();
    match outcome.change {
        Change::Stored { .. } => {
            if let Some(holder) = opened.key.holder(owner) {
                effects::stored(&opened.target, holder, outcome.change, event);
            }
        }
        Change::Deleted { .. } => {
            effects::deleted(&opened.target, event);
            waiting::grant_waiters(&opened.target, &mut opened.key);
        }
        _ => {}
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
    ($ctx:expr, $argv:expr, $argc:expr, $write:expr) => {
        match open($ctx, $argv, $argc, $write) {
            Ok(opened) => opened,
            Err(status) => return status,
        }
    };
}

/// Whether this client may block: not inside MULTI, Lua or a function, and
/// only on a primary (a replica never grants: its locks change only through
/// its primary's stream); elsewhere `WAIT` degrades to a plain acquisition.
fn may_block(ctx: Ctx) -> bool {
    let flags = ffi::context_flags(ctx);
    let set = |flag: u32| flags & flag as c_int != 0;
    set(raw::REDISMODULE_CTX_FLAGS_MASTER)
        && !set(raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
        && !set(raw::REDISMODULE_CTX_FLAGS_MULTI)
        && !set(raw::REDISMODULE_CTX_FLAGS_LUA)
}

/// `LOCK.ACQUIRE key owner ttl-ms [WAIT timeout-ms]`
pub fn acquire(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let parsed = parse_or_reply!(ctx, args::parse_acquire(&argv_bytes, &config::limits()));
    // Opening settles the key: a free lock with a queue has gone to its head.
    let mut opened = open_or_return!(ctx, argv, argc, true);
    let refusal = recovery::refusal(opened.target.now.monotonic_ms);
    let Some(result) = with_state(|state| {
        ops::acquire(
            &mut state.node,
            &mut opened.key,
            &opened.target.now,
            parsed.owner,
            parsed.ttl_ms,
            refusal,
        )
    }) else {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    };
    match result {
        // A waiter waits through the recovery window (within its timeout):
        // the timer serves it when the window ends.
        Err(ops::OpError::Recovering { .. }) if parsed.wait_ms.is_some() && may_block(ctx) => {
            waiting::block(
                ctx,
                opened.target.id(),
                parsed.owner,
                parsed.ttl_ms,
                parsed.wait_ms.unwrap_or(0),
            )
        }
        Err(error) => ffi::reply_error(ctx, &error.message()),
        Ok(outcome) => match outcome.reply {
            Acquired::Granted { token, .. } => {
                finish(&mut opened, parsed.owner, &outcome, c"lock.acquire");
                ffi::reply_integer(ctx, token)
            }
            Acquired::Busy => match parsed.wait_ms {
                Some(timeout_ms) if may_block(ctx) => waiting::block(
                    ctx,
                    opened.target.id(),
                    parsed.owner,
                    parsed.ttl_ms,
                    timeout_ms,
                ),
                _ => ffi::reply_null(ctx),
            },
        },
    }
}

/// `LOCK.RELEASE key owner [ALL]`
pub fn release(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let parsed = parse_or_reply!(ctx, args::parse_release(&argv_bytes, &config::limits()));
    let mut opened = open_or_return!(ctx, argv, argc, true);
    let Some(outcome) = with_state(|state| {
        ops::release(
            &mut state.node,
            &mut opened.key,
            &opened.target.now,
            parsed.owner,
            parsed.all,
        )
    }) else {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.release");
    match outcome.reply {
        Some(left) => ffi::reply_integer(ctx, i64::from(left)),
        None => ffi::reply_null(ctx),
    }
}

/// `LOCK.EXTEND key owner ttl-ms`
pub fn extend(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let parsed = parse_or_reply!(ctx, args::parse_extend(&argv_bytes, &config::limits()));
    let mut opened = open_or_return!(ctx, argv, argc, true);
    let Some(outcome) = with_state(|state| {
        ops::extend(
            &mut state.node,
            &mut opened.key,
            &opened.target.now,
            parsed.owner,
            parsed.ttl_ms,
        )
    }) else {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.extend");
    ffi::reply_integer(ctx, i64::from(outcome.reply))
}

/// `LOCK.FENCE key owner [ATLEAST n]`
pub fn fence(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let parsed = parse_or_reply!(ctx, args::parse_fence(&argv_bytes, &config::limits()));
    let mut opened = open_or_return!(ctx, argv, argc, true);
    let Some(outcome) = with_state(|state| {
        ops::fence(
            &mut state.node,
            &mut opened.key,
            &opened.target.now,
            parsed.owner,
            parsed.at_least,
        )
    }) else {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    };
    finish(&mut opened, parsed.owner, &outcome, c"lock.fence");
    match outcome.reply {
        Some(token) => ffi::reply_integer(ctx, token),
        None => ffi::reply_null(ctx),
    }
}

/// `LOCK.INFO key`
pub fn info(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let argv_bytes = ffi::argv_bytes(argv, argc);
    parse_or_reply!(ctx, args::parse_info(&argv_bytes));
    let mut opened = open_or_return!(ctx, argv, argc, false);
    let Some(snapshot) = ops::info(&mut opened.key, &opened.target.now) else {
        return ffi::reply_null(ctx);
    };
    let waiters = waiting::waiting(&opened.target.id());
    ffi::reply_map(ctx, 5);
    ffi::reply_bulk(ctx, b"owner");
    ffi::reply_bulk(ctx, &snapshot.owner);
    ffi::reply_bulk(ctx, b"holds");
    ffi::reply_integer(ctx, i64::from(snapshot.holds));
    ffi::reply_bulk(ctx, b"token");
    ffi::reply_integer(ctx, snapshot.token);
    ffi::reply_bulk(ctx, b"pttl");
    ffi::reply_integer(ctx, i64::try_from(snapshot.pttl_ms).unwrap_or(i64::MAX));
    ffi::reply_bulk(ctx, b"waiters");
    ffi::reply_integer(ctx, i64::try_from(waiters).unwrap_or(i64::MAX))
}

/// `LOCK.APPLY key owner holds token wall-end-ms`: the effect a primary
/// replicates and the AOF logs. Accepted only from the replication link or
/// while loading the AOF; a user calling it could forge any lock.
pub fn apply(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    if !trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.APPLY is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let parsed = parse_or_reply!(ctx, args::parse_apply(&argv_bytes));
    if !redis_lock_core::lease::plausible_wall_end(&CLOCK, parsed.wall_end_ms) {
        return reply_arg_error(ctx, &ArgError::Effect("lease end"));
    }
    let Some(name) = ffi::arg(argv, argc, 1) else {
        return ffi::reply_wrong_arity(ctx);
    };
    let Ok(mut key) = LockKey::open(ctx, name, true) else {
        return ffi::reply_error(ctx, ffi::WRONGTYPE);
    };
    let target = Target::of_command(ctx, name, ffi::bytes(name));
    let Some(outcome) = with_state(|state| {
        ops::apply(
            &mut state.node,
            &mut key,
            &target.now,
            parsed.owner,
            parsed.holds,
            parsed.token,
            parsed.wall_end_ms,
        )
    }) else {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    };
    key.commit();
    if let (Change::Stored { previous_deadline }, Some(holder)) =
        (outcome.change, key.holder(parsed.owner))
    {
        effects::index(&target, holder, previous_deadline);
    }
    ffi::reply_ok(ctx)
}

/// `LOCK.COUNTER n`: raises this node's token counter to at least `n`. The
/// record an AOF rewrite's incremental file starts with
/// (`counter_record`); accepted, like `LOCK.APPLY`, only from a primary or
/// while loading the AOF.
pub fn counter(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    if !trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.COUNTER is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let argv_bytes = ffi::argv_bytes(argv, argc);
    let last = parse_or_reply!(ctx, args::parse_counter(&argv_bytes));
    if with_state(|state| state.node.tokens.raise(last)).is_none() {
        return ffi::reply_error(ctx, "ERR internal error: state busy");
    }
    ffi::reply_ok(ctx)
}

/// The command comes from the replication link or the AOF being loaded.
fn trusted(ctx: Ctx) -> bool {
    ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_REPLICATED)
        || ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_LOADING)
}

/// `LOCK.DEBUG WALLCLOCK-OFFSET [ms]`: shifts the wall clock the module reads,
/// to show that leases ignore wall-clock steps. Only with `debug yes`.
pub fn debug(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    if !DEBUG.load(std::sync::atomic::Ordering::Relaxed) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.DEBUG is disabled: load the module with 'debug yes'",
        );
    }
    let argv_bytes = ffi::argv_bytes(argv, argc);
    match &argv_bytes[..] {
        [_, sub] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            ffi::reply_integer(ctx, CLOCK.wall_offset_ms())
        }
        [_, sub, offset] if sub.eq_ignore_ascii_case(b"WALLCLOCK-OFFSET") => {
            match args::parse_i64(offset) {
                Some(offset) => {
                    CLOCK.set_wall_offset_ms(offset);
                    ffi::reply_ok(ctx)
                }
                None => ffi::reply_error(ctx, "ERR the offset must be an integer (milliseconds)"),
            }
        }
        [_] => ffi::reply_wrong_arity(ctx),
        _ => ffi::reply_error(
            ctx,
            "ERR unknown LOCK.DEBUG subcommand: try WALLCLOCK-OFFSET [ms]",
        ),
    }
}
