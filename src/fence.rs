//! The fence commands: `LOCK.FENCED fence-key token command [arg ...]`
//! (a write the store refuses for a stale token), `LOCK.FENCECHECK
//! fence-key token` (the same check for scripts), `LOCK.FENCEGET
//! fence-key`, and the internal effect `LOCK.FENCEAPPLY fence-key token`.
//! The rules are core's (`redis_lock_core::fence`); this file opens the
//! fence, runs the inner command as the caller and carries out the raise.
//!
//! Which inner commands may run is decided from their `COMMAND INFO`
//! flags, asked once per command name (and per subcommand of a container
//! such as `XGROUP`) and cached: the command table changes only when a
//! module loads or unloads, and the cache is emptied then. Unknown names
//! are not cached, so the cache holds at most one entry per command the
//! server has.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use redis_lock_core::fence::{self, FenceError, KeyRange, Refusal};
use redis_module::raw;

use crate::ffi::call;
use crate::ffi::fence::{self as fence_key, FenceKey};
use crate::ffi::key::WrongType;
use crate::ffi::{self, Argv, Ctx, RString};
use crate::guard;
use crate::propagation;

/// Where an allowed command's keys are.
#[derive(Clone, Copy)]
enum Keys {
    /// At fixed places (no `movablekeys` flag): found without asking.
    Range(KeyRange),
    /// Only the server can say, for each command line.
    Movable,
}

/// A command's verdict, or "a container: ask for its subcommand".
#[derive(Clone, Copy)]
enum Cached {
    Verdict(Result<Keys, Refusal>),
    Container,
}

thread_local! {
    static VERDICTS: RefCell<HashMap<Vec<u8>, Cached>> = RefCell::new(HashMap::new());
}

/// The cached verdict on `name` (lowercase), asking the server the first
/// time; `None` for a command the server does not know.
fn lookup(ctx: Ctx, name: &[u8]) -> Option<Cached> {
    if let Some(cached) = VERDICTS.with(|cache| cache.borrow().get(name).copied()) {
        return Some(cached);
    }
    let info = call::command_info(ctx, name)?;
    let cached = if info.has_subcommands {
        Cached::Container
    } else {
        let movable = info
            .flags
            .iter()
            .any(|flag| flag.eq_ignore_ascii_case(b"movablekeys"));
        let keys = match (movable, info.arity, info.key_range) {
            (false, Some(arity), Some([first, last, step])) => Keys::Range(KeyRange {
                arity,
                first,
                last,
                step,
            }),
            _ => Keys::Movable,
        };
        Cached::Verdict(fence::allowed(name, Some(&info.flags)).map(|()| keys))
    };
    VERDICTS.with(|cache| cache.borrow_mut().insert(name.to_vec(), cached));
    Some(cached)
}

/// Whether `LOCK.FENCED` may run `command` (with `sub` its first
/// argument, for a container command), and where its keys are.
fn inner_allowed(ctx: Ctx, command: &[u8], sub: Option<&[u8]>) -> Result<Keys, FenceError> {
    let name = command.to_ascii_lowercase();
    let verdict = match fence::refused_by_name(&name) {
        Some(refusal) => Err(refusal),
        None => match (lookup(ctx, &name), sub) {
            (None, _) | (Some(Cached::Container), None) => Err(Refusal::Unknown),
            (Some(Cached::Verdict(verdict)), _) => verdict,
            (Some(Cached::Container), Some(sub)) => {
                let mut full = name.clone();
                full.push(b'|');
                full.extend(sub.to_ascii_lowercase());
                match lookup(ctx, &full) {
                    Some(Cached::Verdict(verdict)) => verdict,
                    _ => Err(Refusal::Unknown),
                }
            }
        },
    };
    verdict.map_err(|reason| FenceError::Refused {
        command: command.to_vec(),
        reason,
    })
}

extern "C" fn on_module_change(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    guard::callback(ctx, "module change event", (), || {
        VERDICTS.with(|cache| cache.borrow_mut().clear());
    });
}

/// Empties the verdict cache whenever a module loads or unloads.
pub fn init(ctx: Ctx) -> bool {
    ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_MODULE_CHANGE, on_module_change)
}

/// The fence key's flags: read, then raised.
const FENCE_KEY_FLAGS: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;

thread_local! {
    /// Set while the server is asked for an inner command's keys.
    static IN_KEY_LOOKUP: Cell<bool> = const { Cell::new(false) };
}

/// The one key lookup of an inner command under way on this thread;
/// cleared when dropped (also when the lookup unwinds).
struct KeyLookup;

impl KeyLookup {
    /// `None` while another lookup is under way (a way back in).
    fn enter() -> Option<KeyLookup> {
        IN_KEY_LOOKUP.with(|flag| (!flag.replace(true)).then_some(KeyLookup))
    }
}

impl Drop for KeyLookup {
    fn drop(&mut self) {
        IN_KEY_LOOKUP.with(|flag| flag.set(false));
    }
}

/// Raises the fence `name` to at least `token` (creating it) and
/// propagates the effect. Its value after.
///
/// The `LOCK.FENCEAPPLY` effect is built only when Redis would write it
/// somewhere (`propagates`, see `propagation`): building one that Redis
/// then drops was a sixth of a fenced write's server instructions. The
/// raise still counts as a change (`server.dirty`, which drives `save`
/// points), as `RedisModule_ReplicateVerbatim` does when nothing
/// propagates.
fn raise(ctx: Ctx, name: RString, token: i64, propagates: bool) -> Option<i64> {
    let mut key = FenceKey::open(ctx, name, true).ok()?;
    let new = fence::raised(key.value(), token);
    if !key.set(new) {
        return None;
    }
    drop(key);
    if propagates {
        fence_key::replicate_apply(ctx, name, new);
    } else {
        ffi::replicate_verbatim(ctx);
    }
    fence_key::notify(ctx, name);
    Some(new)
}

/// The fence's value, read without counting as a write (a write-mode
/// close would invalidate `WATCH`es of the key).
fn current(ctx: Ctx, name: RString) -> Result<Option<i64>, WrongType> {
    FenceKey::open(ctx, name, false).map(|key| key.value())
}

fn reply_fence_error(ctx: Ctx, error: &FenceError) -> c_int {
    ffi::reply_error(ctx, &error.to_string())
}

/// What an inner command's keys are to the fence.
enum InnerKeys {
    None,
    TouchFence,
    Others,
}

/// Judges the inner command's key `positions` (counted from the inner
/// command's name, `argv[3]`) against the fence key's name.
fn judge_keys(positions: impl Iterator<Item = usize>, argv: &[&[u8]], fence: &[u8]) -> InnerKeys {
    let mut any = false;
    for pos in positions {
        any = true;
        if argv.get(pos.saturating_add(3)) == Some(&fence) {
            return InnerKeys::TouchFence;
        }
    }
    if any {
        InnerKeys::Others
    } else {
        InnerKeys::None
    }
}

/// `LOCK.FENCED fence-key token command [arg ...]`
pub fn fenced(ctx: Ctx, args: &Argv) -> c_int {
    if call::is_keys_position_request(ctx) {
        call::key_at(ctx, 1, FENCE_KEY_FLAGS);
        // The server is asked for the inner command's keys only when the
        // inner command can run at all: a nested `LOCK.FENCED` (refused by
        // name) would have the server call us back for its own inner
        // command, level after level, until the stack overflowed (a crash
        // any client could cause with `COMMAND GETKEYS` or a cluster
        // routing check). The guard stops any other way back in.
        let refused = args
            .bytes()
            .get(3)
            .map_or(true, |name| fence::refused_by_name(name).is_some());
        if let (false, Some(_lookup)) = (refused, KeyLookup::enter()) {
            let inner = call::command_keys(ctx, args.strings_from(3)).unwrap_or_default();
            for (pos, flags) in inner {
                call::key_at(ctx, pos.saturating_add(3), flags);
            }
        }
        return raw::REDISMODULE_OK as c_int;
    }
    let argv = args.bytes();
    let (Some(name), Some(&key_name), Some(&token), Some(&command)) =
        (args.string(1), argv.get(1), argv.get(2), argv.get(3))
    else {
        return ffi::reply_wrong_arity(ctx);
    };
    let token = match fence::parse_token(token) {
        Ok(token) => token,
        Err(error) => return reply_fence_error(ctx, &error),
    };
    let keys = match inner_allowed(ctx, command, argv.get(4).copied()) {
        Ok(keys) => keys,
        Err(error) => return reply_fence_error(ctx, &error),
    };
    let inner = args.strings_from(3);
    // Where the inner command's keys are; unknown for a line of the wrong
    // arity, which is left to the call (it answers as the server would).
    let judged = match keys {
        Keys::Range(range) => range
            .positions(inner.len())
            .map(|positions| judge_keys(positions, argv, key_name)),
        Keys::Movable => call::command_keys(ctx, inner)
            .ok()
            .map(|keys| judge_keys(keys.into_iter().map(|(pos, _)| pos), argv, key_name)),
    };
    match judged {
        Some(InnerKeys::None) => {
            let refused = FenceError::Refused {
                command: command.to_vec(),
                reason: Refusal::NoKeys,
            };
            return reply_fence_error(ctx, &refused);
        }
        Some(InnerKeys::TouchFence) => {
            return ffi::reply_error(
                ctx,
                "ERR LOCK.FENCED: the inner command cannot use the fence key",
            );
        }
        Some(InnerKeys::Others) | None => {}
    }
    let current = match current(ctx, name) {
        Ok(current) => current,
        Err(WrongType) => return ffi::reply_error(ctx, ffi::WRONGTYPE),
    };
    let raises = match fence::admit(key_name, current, token) {
        Ok(raises) => raises,
        Err(error) => return reply_fence_error(ctx, &error),
    };
    let propagates = propagation::redis_propagates(ffi::context_flags(ctx));
    let reply = match call::call_as_caller(ctx, command, inner, propagates) {
        Ok(reply) => reply,
        Err(failed) => return ffi::reply_error(ctx, &failed.message(command)),
    };
    if !reply.is_error() && raises && raise(ctx, name, token, propagates).is_none() {
        // The write ran and propagated; the fence did not move (the inner
        // command changed the fence key behind keys it never reported,
        // e.g. through a command filter). Say so rather than succeed.
        let message = "ERR LOCK.FENCED: the write ran but the fence could not be raised (the inner command changed the fence key): check the fence";
        ffi::log_warning(ctx, &format!("redis-lock: {message}"));
        return ffi::reply_error(ctx, message);
    }
    reply.reply(ctx)
}

/// `LOCK.FENCECHECK fence-key token`: the fence's value after the check.
pub fn fencecheck(ctx: Ctx, args: &Argv) -> c_int {
    let argv = args.bytes();
    let (Some(name), Some(&key_name), Some(&token), None) =
        (args.string(1), argv.get(1), argv.get(2), argv.get(3))
    else {
        return ffi::reply_wrong_arity(ctx);
    };
    let token = match fence::parse_token(token) {
        Ok(token) => token,
        Err(error) => return reply_fence_error(ctx, &error),
    };
    let current = match current(ctx, name) {
        Ok(current) => current,
        Err(WrongType) => return ffi::reply_error(ctx, ffi::WRONGTYPE),
    };
    match fence::admit(key_name, current, token) {
        Err(error) => reply_fence_error(ctx, &error),
        Ok(false) => ffi::reply_integer(ctx, current.unwrap_or(token)),
        Ok(true) => match raise(
            ctx,
            name,
            token,
            propagation::redis_propagates(ffi::context_flags(ctx)),
        ) {
            Some(value) => ffi::reply_integer(ctx, value),
            None => ffi::reply_error(ctx, "ERR the fence could not be stored"),
        },
    }
}

/// `LOCK.FENCEGET fence-key`: the fence's value, or nil.
pub fn fenceget(ctx: Ctx, args: &Argv) -> c_int {
    let (Some(name), 2) = (args.string(1), args.bytes().len()) else {
        return ffi::reply_wrong_arity(ctx);
    };
    match current(ctx, name) {
        Ok(Some(value)) => ffi::reply_integer(ctx, value),
        Ok(None) => ffi::reply_null(ctx),
        Err(WrongType) => ffi::reply_error(ctx, ffi::WRONGTYPE),
    }
}

/// `LOCK.FENCEAPPLY fence-key token`: the effect of a raise, as replicated
/// and logged; sets the fence to the greater of its value and `token`.
/// Accepted only from a primary or while loading the AOF.
pub fn fenceapply(ctx: Ctx, args: &Argv) -> c_int {
    if !crate::commands::trusted(ctx) {
        return ffi::reply_error(
            ctx,
            "ERR LOCK.FENCEAPPLY is internal: it is accepted only from a primary or while loading the AOF",
        );
    }
    let argv = args.bytes();
    let (Some(name), Some(&token), 3) = (args.string(1), argv.get(2), argv.len()) else {
        return ffi::reply_wrong_arity(ctx);
    };
    let token = match fence::parse_token(token) {
        Ok(token) => token,
        Err(error) => return reply_fence_error(ctx, &error),
    };
    let Ok(mut key) = FenceKey::open(ctx, name, true) else {
        return ffi::reply_error(ctx, ffi::WRONGTYPE);
    };
    let new = fence::raised(key.value(), token);
    if !key.set(new) {
        return ffi::reply_error(ctx, "ERR the fence could not be stored");
    }
    drop(key);
    // A replica's own AOF and replicas get the change as it came.
    ffi::replicate_verbatim(ctx);
    ffi::reply_ok(ctx)
}
