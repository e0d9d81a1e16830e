//! Whether Redis will write our effects anywhere, so that a command builds
//! its `LOCK.APPLY` or `DEL` only when someone reads it.
//!
//! `RedisModule_Replicate` looks the command up by name and turns every
//! argument into a Redis string before Redis asks itself whether anything
//! propagates at all (it does only with the AOF on, or on a primary that has
//! replicas or keeps a replication backlog). Building an effect that Redis
//! then drops was 12–15% of a re-entrant acquire. The AOF is in the context
//! flags; the backlog is not, so this file keeps its own answer, on the safe
//! side of the truth:
//!
//! - it starts as "a backlog may exist";
//! - it turns back to that the moment a `SYNC`/`PSYNC` reaches the server
//!   (a command filter sees it before Redis creates the backlog for it) or
//!   the node's role changes (a promoted replica keeps its backlog);
//! - it becomes "no backlog" only when `INFO replication` says there is
//!   neither a backlog nor a replica, checked on Redis's cron.
//!
//! A skipped effect still counts as a change (`server.dirty`, which drives
//! `save` points and `rdb_changes_since_last_save`): with nothing to
//! propagate, `RedisModule_ReplicateVerbatim` does exactly that and nothing
//! else.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::ffi::{self, Ctx};
use crate::guard;

/// False only while `INFO replication` has shown no backlog and no replica
/// and no replica has asked to sync since.
static BACKLOG_MAY_EXIST: AtomicBool = AtomicBool::new(true);

/// Whether Redis would propagate an effect replicated now, in a context
/// with these flags.
pub fn redis_propagates(flags: c_int) -> bool {
    if flags & raw::REDISMODULE_CTX_FLAGS_AOF as c_int != 0 {
        return true;
    }
    // A replica never forwards its own effects (its replicas read its
    // primary's stream), only appends them to its AOF, checked above.
    flags & raw::REDISMODULE_CTX_FLAGS_MASTER as c_int != 0
        && BACKLOG_MAY_EXIST.load(Ordering::Relaxed)
}

/// For `INFO lock`: whether effects are being built and propagated.
pub fn propagating_to_replicas() -> bool {
    BACKLOG_MAY_EXIST.load(Ordering::Relaxed)
}

/// The two commands with which a replica starts to sync: Redis creates the
/// backlog inside them.
fn starts_a_sync(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"psync") || name.eq_ignore_ascii_case(b"sync")
}

extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    guard::callback(std::ptr::null_mut(), "command filter", (), || {
        ffi::with_filter_arg(fctx, 0, |name| {
            if starts_a_sync(name) {
                BACKLOG_MAY_EXIST.store(true, Ordering::Relaxed);
            }
            crate::caller_db::on_command(fctx, name);
        });
    });
}

extern "C" fn on_role_change(
    ctx: Ctx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    guard::callback(ctx, "role change event", (), || {
        BACKLOG_MAY_EXIST.store(true, Ordering::Relaxed);
    });
}

extern "C" fn on_cron(ctx: Ctx, _event: raw::RedisModuleEvent, _subevent: u64, _data: *mut c_void) {
    guard::callback(ctx, "cron event", (), || {
        if BACKLOG_MAY_EXIST.load(Ordering::Relaxed) && !backlog_or_replicas(ctx) {
            BACKLOG_MAY_EXIST.store(false, Ordering::Relaxed);
        }
        crate::counter_record::write_if_owed(ctx);
    });
}

/// What `INFO replication` says; true (the safe answer) if it cannot be read.
fn backlog_or_replicas(ctx: Ctx) -> bool {
    let [backlog, replicas] = ffi::server_info_signed(
        ctx,
        c"replication",
        [c"repl_backlog_active", c"connected_slaves"],
    );
    backlog.unwrap_or(1) != 0 || replicas.unwrap_or(1) != 0
}

/// Registers the filter and the events at load.
pub fn init(ctx: Ctx) -> bool {
    ffi::register_command_filter(ctx, on_command)
        && ffi::subscribe_server_event(
            ctx,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_change,
        )
        && ffi::subscribe_server_event(ctx, raw::REDISMODULE_EVENT_CRON_LOOP, on_cron)
}

#[cfg(test)]
mod tests {
    use super::starts_a_sync;

    #[test]
    fn both_sync_commands_in_any_case_and_nothing_else() {
        for name in [&b"PSYNC"[..], b"psync", b"Sync", b"SYNC"] {
            assert!(starts_a_sync(name));
        }
        for name in [&b"PSYNCX"[..], b"REPLCONF", b"", b"SYN"] {
            assert!(!starts_a_sync(name));
        }
    }
}
