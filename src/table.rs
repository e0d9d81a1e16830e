//! The command table: every `LOCK.*` command with its entry point, flags,
//! ACL categories, key use, arity and docs, in one place. `lib.rs`
//! registers each (`ffi::command::register`); a new command is one row
//! here and its handler in `commands.rs`.

use std::ffi::CStr;

use crate::ffi::command::{
    option, optional, required, rest, Command, INTEGER, OW_UPDATE, RO_ACCESS, RW_DELETE, RW_INSERT,
    RW_UPDATE, STRING, TOKEN,
};

/// The `extern "C"` entry points: each runs its handler inside
/// `guard::command`, which catches panics.
mod entry {
    use std::ffi::c_int;

    use crate::commands;
    use crate::fence;
    use crate::ffi::{self, Ctx, RString};
    use crate::guard;

    macro_rules! entry_point {
        ($name:ident, $label:literal, $handler:path) => {
            pub extern "C" fn $name(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
                guard::command(ctx, $label, || {
                    crate::activation::activate();
                    ffi::with_argv(argv, argc, |args| $handler(ctx, args))
                })
            }
        };
    }

    entry_point!(acquire, "LOCK.ACQUIRE", commands::acquire);
    entry_point!(release, "LOCK.RELEASE", commands::release);
    entry_point!(extend, "LOCK.EXTEND", commands::extend);
    entry_point!(fence, "LOCK.FENCE", commands::fence);
    entry_point!(info, "LOCK.INFO", commands::info);
    entry_point!(holders, "LOCK.HOLDERS", commands::holders);
    entry_point!(apply, "LOCK.APPLY", commands::apply);
    entry_point!(drop, "LOCK.DROP", commands::drop);
    entry_point!(counter, "LOCK.COUNTER", commands::counter);
    entry_point!(floor, "LOCK.FLOOR", commands::floor);
    entry_point!(debug, "LOCK.DEBUG", commands::debug);
    /// `LOCK.FENCED`: the server's question where its keys are reads
    /// only the head of the line (the inner command's name and first
    /// argument); the rest goes to the server as it came.
    pub extern "C" fn fenced(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
        guard::command(ctx, "LOCK.FENCED", || {
            crate::activation::activate();
            if ffi::call::is_keys_position_request(ctx) {
                ffi::with_argv_head(argv, argc, fence::KEYS_HEAD, |args| {
                    fence::fenced_keys(ctx, args)
                })
            } else {
                ffi::with_argv(argv, argc, |args| fence::fenced(ctx, args))
            }
        })
    }
    entry_point!(fencecheck, "LOCK.FENCECHECK", fence::fencecheck);
    entry_point!(fenceget, "LOCK.FENCEGET", fence::fenceget);
    entry_point!(fenceapply, "LOCK.FENCEAPPLY", fence::fenceapply);
}

/// The module's own ACL category (`ACL CAT lock`, `+@lock`; Redis 7.4+ and
/// Valkey): the commands clients use, not the internal effects nor
/// `LOCK.DEBUG`, so that `+@lock` never grants an admin command.
pub const ACL_CATEGORY: &CStr = c"lock";

pub const COMMANDS: [Command; 15] = [
    Command {
        name: c"lock.acquire",
        handler: entry::acquire,
        flags: c"write deny-oom fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Acquires or re-enters a lock and returns its fencing token; nil when it cannot be granted now. SHARED: a read lock held with other shared holders; SHARED LIMIT n: a semaphore of n permits. With WAIT, blocks in FIFO order until granted or timeout (0 waits forever).",
        complexity: c"O(1) for an exclusive lock, O(holders) for a shared one",
        arity: -4,
        key: Some(RW_INSERT),
        inner_command: false,
        args: &[
            required(c"owner", STRING),
            required(c"ttl-ms", INTEGER),
            option(c"shared", TOKEN, c"SHARED"),
            option(c"n", INTEGER, c"LIMIT"),
            option(c"timeout-ms", INTEGER, c"WAIT"),
        ],
    },
    Command {
        name: c"lock.release",
        handler: entry::release,
        flags: c"write fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Releases one hold (or ALL) of a lock held by owner; returns the holds left (0: freed), nil when owner does not hold it.",
        complexity: c"O(1)",
        arity: -3,
        key: Some(RW_DELETE),
        inner_command: false,
        args: &[required(c"owner", STRING), option(c"all", TOKEN, c"ALL")],
    },
    Command {
        name: c"lock.extend",
        handler: entry::extend,
        flags: c"write fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Makes the holder's lease end ttl-ms from now; 1 if owner holds the lock, else 0.",
        complexity: c"O(1)",
        arity: -4,
        key: Some(RW_UPDATE),
        inner_command: false,
        args: &[required(c"owner", STRING), required(c"ttl-ms", INTEGER)],
    },
    Command {
        name: c"lock.fence",
        handler: entry::fence,
        flags: c"write fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Returns the holder's fencing token, first raising it and this node's counter to at least n with ATLEAST; nil when owner does not hold the lock.",
        complexity: c"O(1)",
        arity: -3,
        key: Some(RW_UPDATE),
        inner_command: false,
        args: &[required(c"owner", STRING), option(c"n", INTEGER, c"ATLEAST")],
    },
    Command {
        name: c"lock.info",
        handler: entry::info,
        flags: c"readonly fast",
        acl: c"read fast",
        in_own_category: true,
        summary: c"Returns owner, holds, token, pttl, waiters and mode of an exclusive lock, or mode, limit, holders and waiters of a shared one; nil when there is none.",
        complexity: c"O(1) for an exclusive lock, O(holders) for a shared one",
        arity: -2,
        key: Some(RO_ACCESS),
        inner_command: false,
        args: &[],
    },
    Command {
        name: c"lock.holders",
        handler: entry::holders,
        flags: c"readonly",
        acl: c"read slow",
        in_own_category: true,
        summary: c"Returns the holders of a lock in grant order (at most n with COUNT), each with owner, holds, token and pttl; an empty array when there is none.",
        complexity: c"O(holders)",
        arity: -2,
        key: Some(RO_ACCESS),
        inner_command: false,
        args: &[option(c"n", INTEGER, c"COUNT")],
    },
    Command {
        name: c"lock.apply",
        handler: entry::apply,
        flags: c"write",
        acl: c"write slow",
        in_own_category: false,
        summary: c"Internal: the effect of a lock change as replicated to replicas and the AOF (owner, holds, token, absolute lease end; SHARED and the limit for a shared lock's holder). Refused from ordinary clients.",
        complexity: c"O(1) for an exclusive lock, O(holders) for a shared one",
        arity: -6,
        key: Some(OW_UPDATE),
        inner_command: false,
        args: &[
            required(c"owner", STRING),
            required(c"holds", INTEGER),
            required(c"token", INTEGER),
            required(c"wall-end-ms", INTEGER),
            option(c"limit", INTEGER, c"SHARED"),
        ],
    },
    Command {
        name: c"lock.drop",
        handler: entry::drop,
        flags: c"write",
        acl: c"write slow",
        in_own_category: false,
        summary: c"Internal: the effect of an owner's hold leaving a shared lock that others still hold. Refused from ordinary clients.",
        complexity: c"O(holders)",
        arity: -3,
        key: Some(RW_DELETE),
        inner_command: false,
        args: &[required(c"owner", STRING)],
    },
    Command {
        name: c"lock.counter",
        handler: entry::counter,
        flags: c"write",
        acl: c"write slow",
        in_own_category: false,
        summary: c"Internal: raises this node's token counter to at least n (written to the AOF when a rewrite starts). Refused from ordinary clients.",
        complexity: c"O(1)",
        arity: 2,
        key: None,
        inner_command: false,
        args: &[required(c"n", INTEGER)],
    },
    Command {
        name: c"lock.floor",
        handler: entry::floor,
        flags: c"write fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Makes every later fencing token of this node greater than n (raises its token counter to at least n) and returns the counter; refused when that would put the counter more than 24 hours ahead of the node's wall clock in microseconds. Touches no key: send it to the node whose counter to raise.",
        complexity: c"O(1)",
        arity: 2,
        key: None,
        inner_command: false,
        args: &[required(c"n", INTEGER)],
    },
    Command {
        name: c"lock.fenced",
        handler: entry::fenced,
        flags: c"write deny-oom getkeys-api",
        acl: c"write slow",
        in_own_category: true,
        summary: c"Runs a write command only if token is not below the fence at key (the highest token accepted there), then raises the fence to token; replies the command's reply. A stale token is refused with STALE and nothing runs. The command runs with the caller's ACL; reads, blocking commands, transactions, scripts and LOCK.* commands are refused.",
        complexity: c"O(1) plus the inner command's",
        arity: -4,
        key: Some(RW_UPDATE),
        inner_command: true,
        args: &[
            required(c"token", INTEGER),
            required(c"command", STRING),
            rest(c"arg", STRING),
        ],
    },
    Command {
        name: c"lock.fencecheck",
        handler: entry::fencecheck,
        flags: c"write deny-oom fast",
        acl: c"write fast",
        in_own_category: true,
        summary: c"Refuses a token below the fence at key with STALE (for a script to call before its writes); else raises the fence to token and returns its value.",
        complexity: c"O(1)",
        arity: 3,
        key: Some(RW_UPDATE),
        inner_command: false,
        args: &[required(c"token", INTEGER)],
    },
    Command {
        name: c"lock.fenceget",
        handler: entry::fenceget,
        flags: c"readonly fast",
        acl: c"read fast",
        in_own_category: true,
        summary: c"Returns the highest token the fence at key has accepted, or nil when there is no fence.",
        complexity: c"O(1)",
        arity: 2,
        key: Some(RO_ACCESS),
        inner_command: false,
        args: &[],
    },
    Command {
        name: c"lock.fenceapply",
        handler: entry::fenceapply,
        flags: c"write",
        acl: c"write slow",
        in_own_category: false,
        summary: c"Internal: the effect of a fence raised to token, as replicated to replicas and the AOF. Refused from ordinary clients.",
        complexity: c"O(1)",
        arity: 3,
        key: Some(OW_UPDATE),
        inner_command: false,
        args: &[required(c"token", INTEGER)],
    },
    Command {
        name: c"lock.debug",
        handler: entry::debug,
        flags: c"admin",
        acl: c"admin slow dangerous",
        in_own_category: false,
        summary: c"Debug only (module loaded with debug yes): WALLCLOCK-OFFSET [ms] reads or sets the offset added to the wall clock the module reads, to show that leases ignore wall-clock steps; MONOTONIC-RATE [ppm] reads or sets how fast the lease clock runs (parts per million fast, negative: slow); MONOTONIC-JUMP ms moves the lease clock forward; LEASE-INDEX replies the lease index's heap items, live entries and whole rebuilds.",
        complexity: c"O(1)",
        arity: -2,
        key: None,
        inner_command: false,
        args: &[
            required(c"subcommand", STRING),
            optional(c"ms", INTEGER),
        ],
    },
];
