//! Running a command from inside ours (`RedisModule_Call`) and telling the
//! server which arguments are keys (`getkeys-api`): what `LOCK.FENCED`
//! needs. The reply of a call is freed on drop.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use redis_module::raw;

use crate::ffi::{rm, Ctx, OwnedString, RString};

/// A reply of `RedisModule_Call`, freed on drop.
pub struct CallReply(*mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        rm!(RedisModule_FreeCallReply(self.0));
    }
}

fn reply_type(reply: *mut raw::RedisModuleCallReply) -> c_int {
    rm!(RedisModule_CallReplyType(reply)).unwrap_or(raw::REDISMODULE_REPLY_UNKNOWN as c_int)
}

fn reply_bytes(reply: *mut raw::RedisModuleCallReply) -> Option<Vec<u8>> {
    // The server reads a null reply (an element that is not there).
    if reply.is_null() {
        return None;
    }
    let mut len: usize = 0;
    let ptr = rm!(RedisModule_CallReplyStringPtr(reply, &mut len))?;
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `len` bytes owned by the reply, copied before it is freed.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
}

fn element(reply: *mut raw::RedisModuleCallReply, index: usize) -> *mut raw::RedisModuleCallReply {
    if reply.is_null() {
        return std::ptr::null_mut();
    }
    rm!(RedisModule_CallReplyArrayElement(reply, index)).unwrap_or(std::ptr::null_mut())
}

fn length(reply: *mut raw::RedisModuleCallReply) -> usize {
    if reply.is_null() {
        return 0;
    }
    rm!(RedisModule_CallReplyLength(reply)).unwrap_or(0)
}

impl CallReply {
    pub fn is_error(&self) -> bool {
        reply_type(self.0) == raw::REDISMODULE_REPLY_ERROR as c_int
    }

    /// Sends this reply, as it is, to the caller.
    pub fn reply(&self, ctx: Ctx) -> c_int {
        rm!(RedisModule_ReplyWithCallReply(ctx, self.0)).unwrap_or(raw::REDISMODULE_ERR as c_int)
    }
}

/// Why a call returned no reply: the `errno` Redis set.
#[derive(Debug, Clone, Copy)]
pub struct CallFailed(pub i32);

impl CallFailed {
    /// The error to answer with.
    pub fn message(self, command: &[u8]) -> String {
        let name = String::from_utf8_lossy(command);
        match self.0 {
            libc::ENOENT => format!("ERR unknown command '{name}'"),
            libc::EINVAL => format!("ERR wrong number of arguments for '{name}' command"),
            libc::EACCES => format!(
                "NOPERM this user has no permissions to run the '{name}' command or its keys"
            ),
            libc::ENOSPC => "OOM command not allowed when used memory > 'maxmemory'".to_owned(),
            libc::ESPIPE => format!("ERR '{name}' cannot run from a module or script"),
            libc::EROFS | libc::EPERM => {
                "READONLY You can't write against a read only replica.".to_owned()
            }
            libc::ENETDOWN => "CLUSTERDOWN The cluster is down".to_owned(),
            errno => format!("ERR '{name}' was refused by the server (errno {errno})"),
        }
    }
}

/// The call flags: replicate the effects (`!`, only when `propagate`: the
/// server counts the change either way), run with the caller's ACL
/// (`C`), refuse over `maxmemory` as the caller would be (`M`), refuse
/// what a script may not run (`S`), reply in the caller's protocol (`0`),
/// and errors as replies (`E`, Redis 7.2+ and Valkey; before it a refusal
/// is a null reply with `errno`).
fn call_format(propagate: bool) -> &'static std::ffi::CStr {
    let version = rm!(RedisModule_GetServerVersion()).unwrap_or(0);
    match (version >= 0x0007_0200, propagate) {
        (true, true) => c"v!CMS0E",
        (true, false) => c"vCMS0E",
        (false, true) => c"v!CMS0",
        (false, false) => c"vCMS0",
    }
}

/// The most arguments passed one by one (`s` each) rather than as a
/// vector.
const SPELLED_OUT: usize = 6;

/// `count` times `s`, then the call flags (`flags` without the leading
/// `v`), NUL-terminated: `None` for no argument or more than
/// `SPELLED_OUT`.
fn each_string_format(count: usize, flags: &[u8]) -> Option<[u8; 16]> {
    if count == 0 || count > SPELLED_OUT {
        return None;
    }
    let mut format = [0u8; 16];
    let (strings, rest) = format.split_at_mut(count);
    strings.fill(b's');
    rest.get_mut(..flags.len())?.copy_from_slice(flags);
    // The byte after the flags stays 0 (at most 6 + 7 of 16 are used).
    (rest.get(flags.len()) == Some(&0)).then_some(format)
}

/// The longest command name passed on the stack (longer ones are copied
/// to the heap).
const NAME_ON_STACK: usize = 64;

/// Runs `args[0]` with the arguments `args[1..]` as the caller; its
/// effects are replicated when `propagate` (see `propagation`).
pub fn call_as_caller(
    ctx: Ctx,
    name: &[u8],
    args: &[RString],
    propagate: bool,
) -> Result<CallReply, CallFailed> {
    if name.contains(&0) {
        return Err(CallFailed(libc::ENOENT));
    }
    // The name as a C string: on the stack when it fits.
    let mut stack = [0u8; NAME_ON_STACK];
    let heap;
    let name_ptr = match stack.get_mut(..name.len()) {
        Some(prefix) if name.len() < NAME_ON_STACK => {
            prefix.copy_from_slice(name);
            stack.as_ptr().cast::<c_char>()
        }
        _ => {
            let Ok(owned) = CString::new(name) else {
                return Err(CallFailed(libc::ENOENT));
            };
            heap = owned;
            heap.as_ptr()
        }
    };
    let rest = args.get(1..).unwrap_or(&[]);
    let flags = call_format(propagate).to_bytes();
    clear_errno();
    let reply = match each_string_format(rest.len(), flags.get(1..).unwrap_or_default()) {
        // Up to SPELLED_OUT arguments, one `s` each: a vector (`v`) costs
        // the server a second allocation of the argument array.
        Some(format) => {
            let at = |i: usize| rest.get(i).copied().unwrap_or(std::ptr::null_mut());
            let f = format.as_ptr().cast::<c_char>();
            macro_rules! call_with {
                ($($i:literal),*) => {
                    rm!(RedisModule_Call(ctx, name_ptr, f, $(at($i)),*))
                };
            }
            match rest.len() {
                1 => call_with!(0),
                2 => call_with!(0, 1),
                3 => call_with!(0, 1, 2),
                4 => call_with!(0, 1, 2, 3),
                5 => call_with!(0, 1, 2, 3, 4),
                _ => call_with!(0, 1, 2, 3, 4, 5),
            }
        }
        None => rm!(RedisModule_Call(
            ctx,
            name_ptr,
            flags.as_ptr().cast::<c_char>(),
            rest.as_ptr().cast_mut(),
            rest.len()
        )),
    }
    .unwrap_or(std::ptr::null_mut());
    if reply.is_null() {
        Err(CallFailed(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    } else {
        Ok(CallReply(reply))
    }
}

fn clear_errno() {
    // SAFETY: errno is thread-local; writing 0 to it is always allowed.
    unsafe { *libc::__errno_location() = 0 };
}

/// What `COMMAND INFO name` says of a command: `None` if the server does
/// not know it (or cannot be asked); its flags, and whether it is a
/// container whose subcommands have flags of their own.
pub struct CommandInfo {
    pub flags: Vec<Vec<u8>>,
    pub has_subcommands: bool,
    /// Arity, first key, last key and step, as listed.
    pub arity: Option<i64>,
    pub key_range: Option<[i64; 3]>,
    /// A key spec says `variable_flags`: its keys' flags depend on the
    /// line's other arguments, not only on their number (`SET … GET`).
    pub variable_key_flags: bool,
}

/// Whether any key spec in `specs` (`COMMAND INFO`'s list, each spec as
/// name/value pairs in RESP2) has the flag `variable_flags`. A missing
/// list or element reads as empty (`length`, `element` and `reply_bytes`
/// take a null reply as nothing).
fn any_variable_key_flags(specs: *mut raw::RedisModuleCallReply) -> bool {
    (0..length(specs)).any(|i| {
        let spec = element(specs, i);
        (0..length(spec) / 2).any(|pair| {
            let name = reply_bytes(element(spec, pair * 2));
            if !name.is_some_and(|name| name.eq_ignore_ascii_case(b"flags")) {
                return false;
            }
            let flags = element(spec, pair * 2 + 1);
            (0..length(flags)).any(|f| {
                reply_bytes(element(flags, f))
                    .is_some_and(|flag| flag.eq_ignore_ascii_case(b"variable_flags"))
            })
        })
    })
}

fn integer(reply: *mut raw::RedisModuleCallReply) -> Option<i64> {
    if reply.is_null() || reply_type(reply) != raw::REDISMODULE_REPLY_INTEGER as c_int {
        return None;
    }
    rm!(RedisModule_CallReplyInteger(reply))
}

pub fn command_info(ctx: Ctx, name: &[u8]) -> Option<CommandInfo> {
    let name = OwnedString::new(ctx, name)?;
    let reply = rm!(RedisModule_Call(
        ctx,
        c"COMMAND".as_ptr(),
        c"cs".as_ptr(),
        c"INFO".as_ptr().cast::<c_char>(),
        name.as_ptr()
    ))
    .unwrap_or(std::ptr::null_mut());
    if reply.is_null() {
        return None;
    }
    let reply = CallReply(reply);
    let entry = element(reply.0, 0);
    if entry.is_null() || reply_type(entry) != raw::REDISMODULE_REPLY_ARRAY as c_int {
        return None;
    }
    // [name, arity, flags, first key, last key, step, ACL categories,
    //  tips, key specs, subcommands]
    let flags_reply = element(entry, 2);
    if flags_reply.is_null() {
        return None;
    }
    let flags = (0..length(flags_reply))
        .filter_map(|i| reply_bytes(element(flags_reply, i)))
        .collect();
    let subcommands = element(entry, 9);
    let has_subcommands = !subcommands.is_null() && length(subcommands) > 0;
    let at = |index| integer(element(entry, index));
    let key_range = match (at(3), at(4), at(5)) {
        (Some(first), Some(last), Some(step)) => Some([first, last, step]),
        _ => None,
    };
    Some(CommandInfo {
        flags,
        has_subcommands,
        arity: at(1),
        key_range,
        variable_key_flags: any_variable_key_flags(element(entry, 8)),
    })
}

/// `CONFIG GET name`'s value as a number: `None` when the call fails (a
/// `CONFIG` renamed away) or the value is not one.
pub fn config_integer(ctx: Ctx, name: &CStr) -> Option<i64> {
    let reply = rm!(RedisModule_Call(
        ctx,
        c"CONFIG".as_ptr(),
        c"cc".as_ptr(),
        c"GET".as_ptr(),
        name.as_ptr()
    ))
    .unwrap_or(std::ptr::null_mut());
    if reply.is_null() {
        return None;
    }
    let reply = CallReply(reply);
    if reply_type(reply.0) != raw::REDISMODULE_REPLY_ARRAY as c_int || length(reply.0) < 2 {
        return None;
    }
    let value = element(reply.0, 1);
    if value.is_null() || reply_type(value) != raw::REDISMODULE_REPLY_STRING as c_int {
        return None;
    }
    std::str::from_utf8(&reply_bytes(value)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The server asks a `getkeys-api` command where its keys are, instead of
/// running it.
pub fn is_keys_position_request(ctx: Ctx) -> bool {
    rm!(RedisModule_IsKeysPositionRequest(ctx)).unwrap_or(0) != 0
}

/// Reports the argument at `pos` as a key with the key-spec `flags`.
pub fn key_at(ctx: Ctx, pos: usize, flags: u32) {
    let Ok(pos) = c_int::try_from(pos) else {
        return;
    };
    // SAFETY: reading a function pointer filled by RedisModule_Init.
    if unsafe { raw::RedisModule_KeyAtPosWithFlags }.is_some() {
        rm!(RedisModule_KeyAtPosWithFlags(ctx, pos, flags as c_int));
    } else {
        rm!(RedisModule_KeyAtPos(ctx, pos));
    }
}

/// The keys of command line `args` (the command name first): their
/// positions in it and their key-spec flags (0 where the server cannot
/// say). `Err(errno)` for an unknown command (`ENOENT`) or a wrong arity
/// (`EINVAL`); empty for a command without keys.
pub fn command_keys(ctx: Ctx, args: &[RString]) -> Result<Vec<(usize, u32)>, CallFailed> {
    // Redis reads the command name without checking the count.
    let (true, Ok(argc)) = (!args.is_empty(), c_int::try_from(args.len())) else {
        return Err(CallFailed(libc::EINVAL));
    };
    clear_errno();
    let argv = args.as_ptr().cast_mut();
    let mut count: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: reading a function pointer filled by RedisModule_Init.
    let positions = if unsafe { raw::RedisModule_GetCommandKeysWithFlags }.is_some() {
        rm!(RedisModule_GetCommandKeysWithFlags(
            ctx, argv, argc, &mut count, &mut flags
        ))
    } else {
        rm!(RedisModule_GetCommandKeys(ctx, argv, argc, &mut count))
    }
    .unwrap_or(std::ptr::null_mut());
    if positions.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno != 0 {
            return Err(CallFailed(errno));
        }
    }
    let count = usize::try_from(count).unwrap_or(0);
    let mut keys = Vec::with_capacity(count);
    if !positions.is_null() {
        for i in 0..count {
            // SAFETY: Redis returned `count` positions (and as many flags
            // when it filled `flags`), freed below.
            let pos = unsafe { *positions.add(i) };
            let flag = if flags.is_null() {
                0
            } else {
                unsafe { *flags.add(i) }
            };
            if let Ok(pos) = usize::try_from(pos) {
                keys.push((pos, flag as u32));
            }
        }
        rm!(RedisModule_Free(positions.cast::<c_void>()));
    }
    if !flags.is_null() {
        rm!(RedisModule_Free(flags.cast::<c_void>()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_line_is_spelled_out_one_string_each() {
        let format = each_string_format(3, b"!CMS0E").expect("three arguments");
        assert_eq!(
            CStr::from_bytes_until_nul(&format).unwrap().to_bytes(),
            b"sss!CMS0E"
        );
        let format = each_string_format(SPELLED_OUT, b"!CMS0E").expect("the most");
        assert_eq!(
            CStr::from_bytes_until_nul(&format).unwrap().to_bytes(),
            b"ssssss!CMS0E"
        );
        assert!(each_string_format(0, b"CMS0").is_none());
        assert!(each_string_format(SPELLED_OUT + 1, b"CMS0").is_none());
    }
}
