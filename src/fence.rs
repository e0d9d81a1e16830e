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
use std::hash::{BuildHasherDefault, Hasher};

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
    /// `PerLine`: their key-spec flags depend on the line's arguments
    /// (`variable_flags`, e.g. `SET … GET` reads, `SET … NX` does not),
    /// so the server is asked for them on each keys request.
    Range(KeyRange, KeyFlags),
    /// Only the server can say, for each command line.
    Movable,
}

/// Whether a command's key-spec flags are fixed by the line's shape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyFlags {
    ByShape,
    PerLine,
}

/// A command's verdict, or "a container: ask for its subcommand".
#[derive(Clone, Copy)]
enum Cached {
    Verdict(Result<Keys, Refusal>),
    Container,
}

/// FNV-1a: the caches below are looked up on every fenced write (and
/// every keys request for one) by short command names the server knows,
/// where the standard hasher's SipHash was most of a lookup.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type FastMap<V> = HashMap<Vec<u8>, V, BuildHasherDefault<Fnv>>;

thread_local! {
    static VERDICTS: RefCell<FastMap<Cached>> = RefCell::new(FastMap::default());
    /// The keys (positions and key-spec flags) of the command lines of a
    /// command whose keys are at fixed places and whose key specs have no
    /// `variable_flags`, by the line's shape: its number of arguments (one
    /// byte) and the command's cache name, which decide them. Learned from
    /// the server once per shape.
    static SHAPES: RefCell<FastMap<Vec<(usize, u32)>>> = RefCell::new(FastMap::default());
}

thread_local! {
    /// The last allowed command without subcommands, by its name exactly
    /// as sent: a client fences the same write again and again, and this
    /// answers it without folding the name's case or hashing it.
    static RECENT: RefCell<Option<Recent>> = const { RefCell::new(None) };
}

/// The longest name `RECENT` keeps.
const RECENT_NAME_MAX: usize = 24;

/// An allowed command's verdict and the keys of its last line's shape.
struct Recent {
    name: [u8; RECENT_NAME_MAX],
    len: usize,
    keys: Keys,
    /// The argument count of its last line whose keys were asked, and
    /// those keys (for a command whose keys are at fixed places).
    shape: Option<(usize, Vec<(usize, u32)>)>,
}

impl Recent {
    fn is(&self, command: &[u8]) -> bool {
        self.name.get(..self.len) == Some(command)
    }

    /// Remembers allowed `command` (as sent) with its keys in place of
    /// the command remembered before (called only when `keys` did not
    /// know `command`).
    fn remember(command: &[u8], keys: Keys) {
        let mut name = [0u8; RECENT_NAME_MAX];
        let Some(room) = name.get_mut(..command.len()) else {
            return;
        };
        room.copy_from_slice(command);
        RECENT.with(|recent| {
            *recent.borrow_mut() = Some(Recent {
                name,
                len: command.len(),
                keys,
                shape: None,
            });
        });
    }

    /// The verdict on `command` if it is the recent one.
    fn keys(command: &[u8]) -> Option<Keys> {
        RECENT.with(|recent| {
            recent
                .borrow()
                .as_ref()
                .filter(|r| r.is(command))
                .map(|r| r.keys)
        })
    }
}

/// Lines longer than this are not remembered by shape.
const SHAPE_MAX_ARGS: usize = 32;
/// The most shapes remembered (the cache starts again when full).
const SHAPES_MAX: usize = 4096;
/// The longest shape (argument count, name, `|`, subcommand) built on the
/// stack; longer ones are not remembered.
const SHAPE_MAX_BYTES: usize = 96;

/// The cached verdict on `name` (lowercase), never asking the server.
fn peek(name: &[u8]) -> Option<Cached> {
    VERDICTS.with(|cache| cache.borrow().get(name).copied())
}

/// A line's shape, built on the stack: its argument count, then the
/// lowercase cache name of its command.
struct Shape {
    bytes: [u8; SHAPE_MAX_BYTES],
    len: usize,
}

impl Shape {
    fn push(&mut self, part: &[u8]) -> Option<()> {
        let end = self.len.checked_add(part.len())?;
        let room = self.bytes.get_mut(self.len..end)?;
        for (to, from) in room.iter_mut().zip(part) {
            *to = from.to_ascii_lowercase();
        }
        self.len = end;
        Some(())
    }

    fn key(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }

    fn name(&self) -> &[u8] {
        self.bytes.get(1..self.len).unwrap_or_default()
    }

    /// The shape of a line of `argc` arguments whose command is allowed
    /// and has its keys at fixed places, if its verdict is cached already.
    fn of(argc: usize, command: &[u8], sub: Option<&[u8]>) -> Option<Shape> {
        let mut shape = Shape {
            bytes: [0; SHAPE_MAX_BYTES],
            len: 0,
        };
        shape.push(&[u8::try_from(argc).ok()?])?;
        shape.push(command)?;
        let cached = match peek(shape.name())? {
            Cached::Container => {
                shape.push(b"|")?;
                shape.push(sub?)?;
                peek(shape.name())?
            }
            verdict => verdict,
        };
        matches!(
            cached,
            Cached::Verdict(Ok(Keys::Range(_, KeyFlags::ByShape)))
        )
        .then_some(shape)
    }
}

/// Reports the inner command's keys and their flags for the server's keys
/// request: by the line's shape where the command's keys are at fixed
/// places and its verdict is cached (the server is asked once per shape),
/// else as the server finds them. Nothing for a line the server cannot
/// read (an unknown command, a wrong arity).
fn report_inner_keys(ctx: Ctx, inner: &[RString], command: &[u8], sub: Option<&[u8]>) {
    let report = |keys: &[(usize, u32)]| {
        for &(pos, flags) in keys {
            call::key_at(ctx, pos.saturating_add(3), flags);
        }
    };
    let recent = RECENT.with(|recent| match recent.borrow().as_ref() {
        Some(r) if r.is(command) => match &r.shape {
            Some((argc, keys)) if *argc == inner.len() => {
                report(keys);
                Some(true)
            }
            _ => Some(false),
        },
        _ => None,
    });
    if recent == Some(true) {
        return;
    }
    let shape = (inner.len() <= SHAPE_MAX_ARGS)
        .then(|| Shape::of(inner.len(), command, sub))
        .flatten();
    // The recent command's shape, kept for the next line like this one.
    let keep = |keys: &[(usize, u32)]| {
        if recent.is_some() && shape.is_some() {
            RECENT.with(|recent| {
                if let Some(r) = recent.borrow_mut().as_mut().filter(|r| r.is(command)) {
                    r.shape = Some((inner.len(), keys.to_vec()));
                }
            });
        }
    };
    if let Some(shape) = &shape {
        let known = SHAPES.with(|shapes| {
            shapes
                .borrow()
                .get(shape.key())
                .map(|keys| {
                    report(keys);
                    keep(keys);
                })
                .is_some()
        });
        if known {
            return;
        }
    }
    let Ok(keys) = call::command_keys(ctx, inner) else {
        return;
    };
    report(&keys);
    keep(&keys);
    if let Some(shape) = shape {
        SHAPES.with(|shapes| {
            let mut shapes = shapes.borrow_mut();
            if shapes.len() >= SHAPES_MAX {
                shapes.clear();
            }
            shapes.insert(shape.key().to_vec(), keys);
        });
    }
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
        let flags = if info.variable_key_flags {
            KeyFlags::PerLine
        } else {
            KeyFlags::ByShape
        };
        let keys = match (movable, info.arity, info.key_range) {
            (false, Some(arity), Some([first, last, step])) => Keys::Range(
                KeyRange {
                    arity,
                    first,
                    last,
                    step,
                },
                flags,
            ),
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
    if let Some(keys) = Recent::keys(command) {
        return Ok(keys);
    }
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
    if let (Ok(keys), Some(Cached::Verdict(_))) = (&verdict, peek(&name)) {
        Recent::remember(command, *keys);
    }
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
        SHAPES.with(|shapes| shapes.borrow_mut().clear());
        RECENT.with(|recent| recent.borrow_mut().take());
    });
}

/// Empties the verdict cache whenever a module loads or unloads (from the
/// first `LOCK.*` command on, `activation`: the cache is empty before).
pub fn init(ctx: Ctx) -> bool {
    crate::activation::defer(ctx, raw::REDISMODULE_EVENT_MODULE_CHANGE, on_module_change)
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

/// The arguments `fenced_keys` reads as bytes: up to the inner command's
/// first argument (a container command's subcommand).
pub const KEYS_HEAD: usize = 5;

/// `LOCK.FENCED`'s answer to the server's question where its keys are
/// (`args` holds the bytes of the first `KEYS_HEAD` arguments only).
pub fn fenced_keys(ctx: Ctx, args: &Argv) -> c_int {
    call::key_at(ctx, 1, FENCE_KEY_FLAGS);
    // The server is asked for the inner command's keys only when the
    // inner command can run at all: a nested `LOCK.FENCED` (refused by
    // name) would have the server call us back for its own inner
    // command, level after level, until the stack overflowed (a crash
    // any client could cause with `COMMAND GETKEYS` or a cluster
    // routing check). The guard stops any other way back in.
    let argv = args.bytes();
    let command = argv
        .get(3)
        .copied()
        .filter(|name| fence::refused_by_name(name).is_none());
    if let (Some(command), Some(_lookup)) = (command, KeyLookup::enter()) {
        report_inner_keys(ctx, args.strings_from(3), command, argv.get(4).copied());
    }
    raw::REDISMODULE_OK as c_int
}

/// `LOCK.FENCED fence-key token command [arg ...]`
pub fn fenced(ctx: Ctx, args: &Argv) -> c_int {
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
    // The inner command must write some key and never the fence; a line
    // of the wrong arity (its keys unknown) is left to the call, which
    // answers it as the server would.
    let inner_line = argv.get(3..).unwrap_or_default();
    let judged = match keys {
        Keys::Range(range, _) => range
            .positions(inner.len())
            .map(|positions| fence::check_inner_keys(inner_line, positions, key_name)),
        Keys::Movable => call::command_keys(ctx, inner).ok().map(|keys| {
            fence::check_inner_keys(inner_line, keys.into_iter().map(|(pos, _)| pos), key_name)
        }),
    };
    if let Some(Err(error)) = judged {
        return reply_fence_error(ctx, &error);
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
    // `raises` first: a token equal to the fence needs no look at the reply.
    if raises && !reply.is_error() && raise(ctx, name, token, propagates).is_none() {
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
