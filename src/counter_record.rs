//! The node's token counter in the AOF, when no lock carries it.
//!
//! RDB files (and the RDB preamble of an AOF) save the counter as aux data,
//! and every `LOCK.APPLY` effect in the AOF carries a token. An AOF rewrite
//! without the preamble writes only the locks alive at that moment: a
//! counter raised by `LOCK.FENCE ... ATLEAST` and then released would be
//! lost with the incremental file the rewrite replaces. So when a rewrite
//! starts (Redis fires `FORK_CHILD_BORN` in the parent after it opened the
//! new incremental file, which survives the rewrite), the module writes
//! `LOCK.COUNTER last` there. If clients are paused (`CLIENT PAUSE`,
//! `FAILOVER`), writing would trip the server's assertion: the record waits
//! for the next cron tick that may write.

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::ffi::{self, Ctx};
use crate::state::with_state;

/// A rewrite started and its record is not written yet.
static OWED: AtomicBool = AtomicBool::new(false);

/// From `propagation`'s fork event (`FORK_CHILD_BORN`, in the parent).
pub fn on_fork_born(ctx: Ctx) {
    if ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_AOF) && rewriting_aof(ctx) {
        OWED.store(true, Ordering::Relaxed);
        write_if_owed(ctx);
    }
}

/// The fork is the AOF rewrite's (not a `BGSAVE` or a full sync's).
fn rewriting_aof(ctx: Ctx) -> bool {
    ffi::server_info_field(ctx, c"persistence", c"aof_rewrite_in_progress")
        .is_some_and(|value| value == b"1")
}

/// Writes the owed record now if the server lets the module write.
pub fn write_if_owed(ctx: Ctx) {
    if !OWED.load(Ordering::Relaxed) || ffi::avoid_replica_traffic() {
        return;
    }
    let Some(last) = with_state(|state| state.node.tokens.last()) else {
        return;
    };
    if last > 0 && ffi::has_flag(ctx, raw::REDISMODULE_CTX_FLAGS_AOF) {
        ffi::replicate_counter(ctx, last);
    }
    OWED.store(false, Ordering::Relaxed);
}
