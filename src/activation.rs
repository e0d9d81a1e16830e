//! Server events the module listens to only once this server has a lock.
//!
//! Redis 7.2+ and Valkey fire their `Key` server event on every key they
//! delete (`moduleNotifyKeyUnlink`, for every `DEL`, `UNLINK`, expiry and
//! overwrite, of any type), and `moduleFireServerEvent` then walks every
//! server-event subscription of every module, whatever event it is for
//! (callgrind, `callgrind_annotate` of 5,000 `DEL`s): with the module's
//! nine or ten subscriptions, +92 instructions per `DEL` in that function
//! on Valkey 9.1.2, +101 on Valkey 8.1.8, +87 on Redis 8.6.3 (1.016–1.023×
//! a `DEL` without the module, issue #35); with three left it was still
//! +59 on Valkey 8.1.8 (a fixed part once the list is not empty). Only an
//! empty list takes the server's fast path.
//!
//! None of the module's events matters before the server has a lock: a
//! flush, a `SWAPDB` or a slot that leaves change nothing in an empty lease
//! index and waiter queue; a load (or a replica's background load) that
//! reads no lock has nothing to index; the effects switch (`propagation`:
//! fork, role change, cron) matters only to a command that builds an effect,
//! and stays on the safe side ("a backlog may exist") until the cron has
//! looked; the fenced-write verdict cache (`fence`: module change) is empty
//! until a `LOCK.FENCED` runs; a new eviction policy (`eviction`:
//! configuration) can evict no lock (its check runs again at activation,
//! `on_activation`). So the subscriptions are checked at load (made and
//! removed at once: a server that refuses one refuses the load, as before)
//! and made for good the first time the server has a lock or a counter: the
//! first `LOCK.*` command (every entry point calls `activate`, also during
//! an AOF load), the first lock or fence value read from a payload (`rdb_load`: an
//! RDB, `RESTORE`, `MIGRATE`, a replica's sync, a slot import; before its
//! load's end or swap event) and a counter above zero read from an RDB
//! (`aux_load`: the AOF-rewrite record of `counter_record` needs the fork
//! event). A server that loads the module and holds no lock pays nothing on
//! a deletion; from its first lock on, every event is heard as before (and a
//! `DEL` pays the walk).

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

use crate::ffi::{self, Ctx, ServerEventCallback};

/// Set once the deferred subscriptions are made.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A context of the module's own (detached), to subscribe from places that
/// have none (`rdb_load`, `aux_load`).
static CONTEXT: AtomicPtr<redis_module::raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// The subscriptions to make at activation: (event id, callback).
static DEFERRED: Mutex<Vec<(u64, ServerEventCallback)>> = Mutex::new(Vec::new());

/// What else runs at activation (after the subscriptions are made).
static HOOKS: Mutex<Vec<fn(Ctx)>> = Mutex::new(Vec::new());

/// At load: `hook` runs once, at activation.
pub fn on_activation(hook: fn(Ctx)) -> bool {
    match HOOKS.lock() {
        Ok(mut hooks) => {
            hooks.push(hook);
            true
        }
        Err(_) => false,
    }
}

/// At load: keeps a detached context for `activate`.
pub fn init(ctx: Ctx) -> bool {
    let detached = ffi::detached_context(ctx);
    CONTEXT.store(detached, Ordering::Relaxed);
    !detached.is_null()
}

/// At load: checks that the server takes a subscription to `id` (made and
/// removed at once) and keeps it for `activate`. False if the server
/// refuses it.
pub fn defer(ctx: Ctx, id: u64, callback: ServerEventCallback) -> bool {
    if !ffi::subscribe_server_event(ctx, id, callback) || !ffi::unsubscribe_server_event(ctx, id) {
        return false;
    }
    match DEFERRED.lock() {
        Ok(mut deferred) => {
            deferred.push((id, callback));
            true
        }
        Err(_) => false,
    }
}

/// The server has (or is about to have) a lock, a waiter, a fence verdict
/// or a counter: makes the deferred subscriptions, once. A relaxed load
/// after the first time.
pub fn activate() {
    if ACTIVE.load(Ordering::Relaxed) {
        return;
    }
    ACTIVE.store(true, Ordering::Relaxed);
    let ctx = CONTEXT.load(Ordering::Relaxed);
    let deferred = match DEFERRED.lock() {
        Ok(deferred) => deferred.clone(),
        Err(_) => Vec::new(),
    };
    for (id, callback) in deferred {
        if !ffi::subscribe_server_event(ctx, id, callback) {
            ffi::log_warning(
                ctx,
                &format!("redis-lock: could not subscribe to server event {id}"),
            );
        }
    }
    let hooks = match HOOKS.lock() {
        Ok(hooks) => hooks.clone(),
        Err(_) => Vec::new(),
    };
    for hook in hooks {
        hook(ctx);
    }
}
