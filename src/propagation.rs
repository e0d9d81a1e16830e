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
//! - it turns back to that the moment the server forks (`FORK_CHILD_BORN`,
//!   fired in the parent right after `fork()`, before any other command
//!   runs) or the node's role changes (a promoted replica keeps its
//!   backlog);
//! - it becomes "no backlog" only when `INFO replication` says there is
//!   neither a backlog nor a replica, checked on Redis's cron (which also
//!   turns it back on when either appears, by any path);
//! - in a cluster, effects are always built (see `redis_propagates`).
//!
//! Why a fork is early enough (read in Redis 7.0.15 and 8.6.3 and Valkey
//! 8.0.1 and 9.1.2, `replication.c`, `rdb.c`, `server.c`): once the cron
//! has seen no backlog, a replica's stream can begin only with a full sync
//! (a partial one needs a backlog; the backlog that `SYNC`/`PSYNC`, the rdb
//! channel of Redis 8 or Valkey's dual channel create is created with a new
//! replication id, so no replica holds an offset inside it from before).
//! Every full sync's snapshot is a fork, on disk or diskless, with or
//! without `repl-diskless-sync-delay`, and a replica that joins a `BGSAVE`
//! already running for another replica shares that replica's start (its
//! fork already set the answer, and the cron keeps it while that replica or
//! the backlog exists). The replica's stream starts at the replication
//! offset of its fork: every write before it is in the snapshot (the keys
//! themselves), every write after it finds the answer set. Replacing a
//! command filter that saw `SYNC`/`PSYNC`: a filter runs for every command
//! of the server (and on Redis 8 makes it extract every command's keys a
//! second time).
//!
//! A skipped effect still counts as a change (`server.dirty`, which drives
//! `save` points and `rdb_changes_since_last_save`): with nothing to
//! propagate, `RedisModule_ReplicateVerbatim` does exactly that and nothing
//! else.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::activation;
use crate::ffi::{self, Ctx};
use crate::guard;

/// False only while `INFO replication` has shown no backlog and no replica
/// and no replica has asked to sync since.
static BACKLOG_MAY_EXIST: AtomicBool = AtomicBool::new(true);

/// Whether Redis would propagate an effect replicated now, in a context
/// with these flags.
pub fn redis_propagates(flags: c_int) -> bool {
    // In a cluster, a slot being migrated atomically (Redis 8.4+'s
    // `CLUSTER MIGRATION`, Valkey 9's `MIGRATESLOTS`) streams the source's
    // writes of that slot to the target whatever its replicas, its backlog
    // or its AOF: a skipped effect would be lost on the target (and a
    // command replicated verbatim in its place would run again there).
    // Cluster nodes always build their effects.
    let always = raw::REDISMODULE_CTX_FLAGS_AOF | raw::REDISMODULE_CTX_FLAGS_CLUSTER;
    if flags & always as c_int != 0 {
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

extern "C" fn on_fork(ctx: Ctx, _event: raw::RedisModuleEvent, subevent: u64, _data: *mut c_void) {
    guard::callback(ctx, "fork event", (), || {
        if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
            BACKLOG_MAY_EXIST.store(true, Ordering::Relaxed);
            crate::counter_record::on_fork_born(ctx);
        }
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
        // Both ways: a backlog or a replica that appeared by a path not
        // foreseen above switches effects back on within a cron tick.
        BACKLOG_MAY_EXIST.store(backlog_or_replicas(ctx), Ordering::Relaxed);
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

/// Subscribes to the events at load (a module has one callback per event:
/// the fork event also serves `counter_record`).
///
/// All three are made when the server first has a lock (`activation`):
/// until then the answer stays "a backlog may exist" (only the cron turns
/// it off), and it is made together with the fork and role events, so the
/// rules above hold from that moment on. The counter's AOF record
/// (`counter_record`) is owed only once a counter exists, which activates
/// them too.
pub fn init(ctx: Ctx) -> bool {
    activation::defer(ctx, raw::REDISMODULE_EVENT_FORK_CHILD, on_fork)
        && activation::defer(
            ctx,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            on_role_change,
        )
        && activation::defer(ctx, raw::REDISMODULE_EVENT_CRON_LOOP, on_cron)
        && activation::on_activation(on_activation)
}

/// What the cron would find, at once, as the fork and role events start
/// to be heard.
fn on_activation(ctx: Ctx) {
    BACKLOG_MAY_EXIST.store(backlog_or_replicas(ctx), Ordering::Relaxed);
}
