//! `COMMAND DOCS` and arity for every command, through
//! `RedisModule_SetCommandInfo` (the `#[command]` macro of `redis-module`
//! needs Redis 7.2). Redis enforces the minimum arity with its standard
//! error; every arity is "at least" (negative) so that extra arguments reach
//! the parser and get `ERR syntax error`.

use std::ffi::{c_int, CStr};
use std::ptr::{null, null_mut};

use redis_module::raw;

use crate::ffi::{log_warning, rm, Ctx};

/// One argument after the key.
struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
}

const fn required(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

const fn option(
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: &'static CStr,
) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
    }
}

pub struct Doc {
    pub name: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: c_int,
    /// Key-spec flags: how the command uses its key (at position 1); `None`
    /// for a command without a key.
    key_flags: Option<u32>,
    args: &'static [Arg],
}

const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
// Redis allows one of INSERT, UPDATE, DELETE per key spec: the main effect.
const RW_INSERT: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT;
const RW_UPDATE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE;
const RW_DELETE: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE;
const RO_ACCESS: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;

pub const DOCS: [Doc; 8] = [
    Doc {
        name: c"lock.acquire",
        summary: c"Acquires or re-enters a lock and returns its fencing token; nil when another owner holds it. With WAIT, blocks in FIFO order until granted or timeout (0 waits forever).",
        complexity: c"O(1)",
        arity: -4,
        key_flags: Some(RW_INSERT),
        args: &[
            required(c"owner", STRING),
            required(c"ttl-ms", INTEGER),
            option(c"timeout-ms", INTEGER, c"WAIT"),
        ],
    },
    Doc {
        name: c"lock.release",
        summary: c"Releases one hold (or ALL) of a lock held by owner; returns the holds left (0: freed), nil when owner does not hold it.",
        complexity: c"O(1)",
        arity: -3,
        key_flags: Some(RW_DELETE),
        args: &[required(c"owner", STRING), option(c"all", TOKEN, c"ALL")],
    },
    Doc {
        name: c"lock.extend",
        summary: c"Makes the holder's lease end ttl-ms from now; 1 if owner holds the lock, else 0.",
        complexity: c"O(1)",
        arity: -4,
        key_flags: Some(RW_UPDATE),
        args: &[required(c"owner", STRING), required(c"ttl-ms", INTEGER)],
    },
    Doc {
        name: c"lock.fence",
        summary: c"Returns the holder's fencing token, first raising it and this node's counter to at least n with ATLEAST; nil when owner does not hold the lock.",
        complexity: c"O(1)",
        arity: -3,
        key_flags: Some(RW_UPDATE),
        args: &[required(c"owner", STRING), option(c"n", INTEGER, c"ATLEAST")],
    },
    Doc {
        name: c"lock.info",
        summary: c"Returns owner, holds, token, pttl and waiters of a held lock; nil when there is none.",
        complexity: c"O(1)",
        arity: -2,
        key_flags: Some(RO_ACCESS),
        args: &[],
    },
    Doc {
        name: c"lock.apply",
        summary: c"Internal: the effect of a lock change as replicated to replicas and the AOF (owner, holds, token, absolute lease end). Refused from ordinary clients.",
        complexity: c"O(1)",
        arity: -6,
        key_flags: Some(raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE),
        args: &[
            required(c"owner", STRING),
            required(c"holds", INTEGER),
            required(c"token", INTEGER),
            required(c"wall-end-ms", INTEGER),
        ],
    },
    Doc {
        name: c"lock.counter",
        summary: c"Internal: raises this node's token counter to at least n (written to the AOF when a rewrite starts). Refused from ordinary clients.",
        complexity: c"O(1)",
        arity: 2,
        key_flags: None,
        args: &[required(c"n", INTEGER)],
    },
    Doc {
        name: c"lock.debug",
        summary: c"Debug only (module loaded with debug yes): WALLCLOCK-OFFSET [ms] reads or sets the offset added to the wall clock the module reads, to show that leases ignore wall-clock steps.",
        complexity: c"O(1)",
        arity: -2,
        key_flags: None,
        args: &[
            required(c"subcommand", STRING),
            Arg { name: c"ms", kind: INTEGER, token: None, optional: true },
        ],
    },
];

fn arg(
    name: &CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&CStr>,
    optional: bool,
) -> raw::RedisModuleCommandArg {
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
        flags: if optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
        } else {
            0
        },
        deprecated_since: null(),
        subargs: null_mut(),
        display_text: null(),
    }
}

/// Sets the docs of one registered command. A failure only loses the docs,
/// so it is logged, not fatal.
pub fn describe(ctx: Ctx, doc: &Doc) {
    let command = rm!(RedisModule_GetCommand(ctx, doc.name.as_ptr())).unwrap_or(null_mut());
    if command.is_null() {
        return;
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: all-zero is the documented terminator of both arrays.
    let mut key_specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    key_specs[0].flags = u64::from(doc.key_flags.unwrap_or(0));
    key_specs[0].begin_search_type =
        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_specs[0].bs.index.pos = 1;
    key_specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    key_specs[0].fk.range.lastkey = 0;
    key_specs[0].fk.range.keystep = 1;
    key_specs[0].fk.range.limit = 0;
    let key_type = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
    let key = doc.key_flags.map(|_| arg(c"key", key_type, None, false));
    let mut args: Vec<raw::RedisModuleCommandArg> = key
        .into_iter()
        .chain(
            doc.args
                .iter()
                .map(|a| arg(a.name, a.kind, a.token, a.optional)),
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
        key_specs: if doc.key_flags.is_some() {
            key_specs.as_mut_ptr()
        } else {
            null_mut()
        },
        args: args.as_mut_ptr(),
    };
    if rm!(RedisModule_SetCommandInfo(command, &info)) != Some(raw::REDISMODULE_OK as c_int) {
        log_warning(
            ctx,
            &format!(
                "redis-lock: COMMAND DOCS unavailable for {}",
                doc.name.to_string_lossy()
            ),
        );
    }
}
