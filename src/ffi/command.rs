//! Registering a command with everything the server shows of it: its
//! flags, key position, ACL categories (Redis 7.2+ and Valkey; on 7.0
//! module commands are only in `@all`, see docs/src/behaviour.md, ACL), the module's own
//! category `lock` (Redis 7.4+ and Valkey), and `COMMAND DOCS`
//! with arity, through `RedisModule_SetCommandInfo` (the `#[command]` macro
//! of `redis-module` needs Redis 7.2). Redis enforces the minimum arity
//! with its standard error; every arity is "at least" (negative) so that
//! extra arguments reach the parser and get `ERR syntax error`.

use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut};

use redis_module::raw;

use crate::ffi::{log_warning, rm, Ctx, RString};

/// A command's entry point.
pub type Handler = extern "C" fn(Ctx, *mut RString, c_int) -> c_int;

/// One argument after the key.
pub struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
    multiple: bool,
}

pub const fn required(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
    }
}

pub const fn option(
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: &'static CStr,
) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
    }
}

/// Optional arguments, any number of them, without a token.
pub const fn rest(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: true,
        multiple: true,
    }
}

/// An optional argument without a token.
pub const fn optional(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: true,
        multiple: false,
    }
}

pub const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
pub const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
pub const TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
// Redis allows one of INSERT, UPDATE, DELETE per key spec: the main effect.
pub const RW_INSERT: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT;
pub const RW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;
pub const RW_DELETE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE;
pub const RO_ACCESS: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
pub const OW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE;

/// One command, all of it in one place.
pub struct Command {
    pub name: &'static CStr,
    pub handler: Handler,
    /// The command flags (`write deny-oom fast`, ...).
    pub flags: &'static CStr,
    /// The ACL categories.
    pub acl: &'static CStr,
    /// Also in the module's own category (`@lock`) where the server has it.
    pub in_own_category: bool,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub arity: c_int,
    /// Key-spec flags: how the command uses its key, at position 1 (also
    /// the legacy first = last = step = 1); `None` for a command without a
    /// key.
    pub key: Option<u32>,
    /// The arguments from position 3 are a command line whose keys only
    /// the command itself can tell (`LOCK.FENCED`): a second key spec,
    /// `incomplete` with variable flags, so that the server asks the
    /// command (`getkeys-api` in `flags`) for every key.
    pub inner_command: bool,
    pub args: &'static [Arg],
}

/// Adds the module's own ACL category `name`, at load and before any
/// command is given its categories. `false` where the server has no such
/// API (Redis before 7.4) or refuses: the commands then keep the server's
/// categories only.
pub fn add_acl_category(ctx: Ctx, name: &CStr) -> bool {
    rm!(RedisModule_AddACLCategory(ctx, name.as_ptr())) == Some(raw::REDISMODULE_OK as c_int)
}

/// Creates `command`, then gives it its ACL categories (and `own_category`,
/// the module's, if added and the command belongs to it) and docs (a
/// failure of those only loses them, so it is logged). `Err` if the command
/// could not be created.
pub fn register(ctx: Ctx, command: &Command, own_category: Option<&CStr>) -> Result<(), String> {
    let key = c_int::from(command.key.is_some());
    let created = rm!(RedisModule_CreateCommand(
        ctx,
        command.name.as_ptr(),
        Some(command.handler),
        command.flags.as_ptr(),
        key,
        key,
        key
    ));
    if created != Some(raw::REDISMODULE_OK as c_int) {
        return Err(format!(
            "could not create {}",
            command.name.to_string_lossy()
        ));
    }
    let registered = rm!(RedisModule_GetCommand(ctx, command.name.as_ptr())).unwrap_or(null_mut());
    if registered.is_null() {
        return Ok(());
    }
    let categories = match own_category.filter(|_| command.in_own_category) {
        Some(own) => {
            let mut both = command.acl.to_bytes().to_vec();
            both.push(b' ');
            both.extend_from_slice(own.to_bytes());
            CString::new(both).ok()
        }
        None => Some(command.acl.to_owned()),
    };
    let set = categories.and_then(|categories| {
        rm!(RedisModule_SetCommandACLCategories(
            registered,
            categories.as_ptr()
        ))
    });
    if set.is_some_and(|status| status != raw::REDISMODULE_OK as c_int) {
        warn(ctx, "no ACL categories", command);
    }
    if !describe(registered, command) {
        warn(ctx, "COMMAND DOCS unavailable", command);
    }
    Ok(())
}

fn warn(ctx: Ctx, what: &str, command: &Command) {
    log_warning(
        ctx,
        &format!("redis-lock: {what} for {}", command.name.to_string_lossy()),
    );
}

fn arg(
    name: &CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&CStr>,
    optional: bool,
    multiple: bool,
) -> raw::RedisModuleCommandArg {
    let mut flags = 0;
    if optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
    }
    if multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
    }
    raw::RedisModuleCommandArg {
        name: name.as_ptr(),
        type_: kind,
        key_spec_index: if kind == raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY {
            0
        } else {
            -1
        },
        token: token.map_or(null(), CStr::as_ptr),
        summary: null(),
        since: null(),
        flags,
        deprecated_since: null(),
        subargs: null_mut(),
        display_text: null(),
    }
}

/// Sets the docs of a registered command.
fn describe(registered: *mut raw::RedisModuleCommand, doc: &Command) -> bool {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: all-zero is the documented terminator of both arrays.
    let mut key_specs: [raw::RedisModuleCommandKeySpec; 3] = unsafe { std::mem::zeroed() };
    key_specs[0].flags = u64::from(doc.key.unwrap_or(0));
    key_specs[0].begin_search_type =
        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_specs[0].bs.index.pos = 1;
    key_specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    key_specs[0].fk.range.lastkey = 0;
    key_specs[0].fk.range.keystep = 1;
    key_specs[0].fk.range.limit = 0;
    if doc.inner_command {
        // Redis requires one of RO, RW, OW, RM even with variable flags.
        key_specs[1].flags = u64::from(
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_INCOMPLETE
                | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS,
        );
        key_specs[1].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_UNKNOWN;
        key_specs[1].find_keys_type =
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_UNKNOWN;
    }
    let key_type = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
    let key = doc.key.map(|_| arg(c"key", key_type, None, false, false));
    let mut args: Vec<raw::RedisModuleCommandArg> = key
        .into_iter()
        .chain(
            doc.args
                .iter()
                .map(|a| arg(a.name, a.kind, a.token, a.optional, a.multiple)),
        )
        .collect();
    // SAFETY: as above.
    args.push(unsafe { std::mem::zeroed() });
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: null_mut(),
        tips: null(),
        arity: doc.arity,
        key_specs: if doc.key.is_some() {
            key_specs.as_mut_ptr()
        } else {
            null_mut()
        },
        args: args.as_mut_ptr(),
    };
    rm!(RedisModule_SetCommandInfo(registered, &info)) == Some(raw::REDISMODULE_OK as c_int)
}
