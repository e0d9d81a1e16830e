//! redis-lock: native distributed-lock commands for Redis.
//!
//! This crate is the thin adapter between the Redis modules API and the lock
//! logic in `redis-lock-core`: it registers the commands, the data type, the
//! expiry timer, the event hooks and the configuration. See docs/src/commands.md for
//! the commands and their replies.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Unit tests build the crate without its Redis entry points (RedisAlloc
// aborts outside Redis), which leaves the adapter unreferenced.
#![cfg_attr(test, allow(dead_code))]

mod activation;
mod async_load;
mod commands;
mod config;
mod counter_record;
mod datatype;
mod effects;
mod events;
mod eviction;
mod expiry;
mod fence;
mod fence_type;
mod ffi;
mod guard;
mod hints;
mod info;
mod latency;
mod propagation;
mod recovery;
mod state;
mod stats;
mod sweep;
mod table;
mod timer;
mod waiter;
mod waiting;

#[cfg(not(test))]
mod module {
    use std::sync::atomic::Ordering;

    use redis_module::{raw, Context, RedisString, Status};

    use crate::datatype::LOCK_TYPE;
    use crate::fence_type::FENCE_TYPE;
    use crate::ffi::{self, Ctx};
    use crate::{
        activation, async_load, config, events, eviction, expiry, guard, info, propagation,
        recovery, table, timer,
    };

    /// `CONFIG SET lock.recovery-ms`: the window counts from now. Waiters
    /// it keeps are served when it ends, which may be sooner than the timer
    /// is armed for.
    fn restart_recovery_window() {
        recovery::mark_loaded();
        crate::state::with_state(timer::arm);
    }

    fn fail(ctx: Ctx, why: &str) -> Status {
        ffi::log_warning(ctx, &format!("redis-lock: not loaded: {why}"));
        Status::Err
    }

    fn on_load(context: &Context, args: &[RedisString]) -> Status {
        let ctx = context.ctx;
        guard::callback(ctx, "module load", Status::Err, || load(ctx, context, args))
    }

    fn load(ctx: Ctx, context: &Context, args: &[RedisString]) -> Status {
        if let Some(missing) = ffi::missing_api() {
            return fail(
                ctx,
                &format!("this Redis lacks {missing}; Redis 7.0 or newer is required"),
            );
        }
        match LOCK_TYPE.raw_type.try_borrow() {
            Ok(raw_type) if !raw_type.is_null() => {
                ffi::key::LOCK_TYPE_PTR.store(*raw_type, Ordering::Relaxed)
            }
            _ => return fail(ctx, "the data type was not created"),
        }
        match FENCE_TYPE.raw_type.try_borrow() {
            Ok(raw_type) if !raw_type.is_null() => {
                ffi::fence::FENCE_TYPE_PTR.store(*raw_type, Ordering::Relaxed)
            }
            _ => return fail(ctx, "the fence data type was not created"),
        }
        // A truncated or corrupt payload (RESTORE, a diskless replica sync)
        // is refused by our loader instead of aborting the server; without
        // this Redis also turns diskless loading off for the whole server.
        // It also loads replicas in the background (`repl-diskless-load
        // swapdb`): the lease index is rebuilt when such a load completes.
        // On Valkey 9, it also handles atomic slot migration (`CLUSTER
        // MIGRATESLOTS`, `slot_migration.rs`); Valkey refuses a migration
        // while any loaded module has not said so.
        let slot_migration = if ffi::has_atomic_slot_migration() {
            ffi::HANDLE_ATOMIC_SLOT_MIGRATION
        } else {
            0
        };
        ffi::set_module_options(
            ctx,
            raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
                | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD
                | slot_migration,
        );
        let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
        if let Err(why) = config::apply_module_args(&args) {
            return fail(ctx, &why);
        }
        config::register(context, restart_recovery_window);
        ffi::load_configs(ctx);
        // `@lock` for operators, where the server lets a module add one.
        let own_category =
            ffi::command::add_acl_category(ctx, table::ACL_CATEGORY).then_some(table::ACL_CATEGORY);
        for command in &table::COMMANDS {
            if let Err(why) = ffi::command::register(ctx, command, own_category) {
                return fail(ctx, &why);
            }
        }
        if !activation::init(ctx) {
            return fail(
                ctx,
                "could not create the module's context for its event subscriptions",
            );
        }
        if !events::subscribe(ctx) {
            return fail(ctx, "could not subscribe to keyspace and server events");
        }
        if !propagation::init(ctx) {
            return fail(ctx, "could not subscribe to fork and replication events");
        }
        if !async_load::init(ctx) {
            return fail(ctx, "could not subscribe to replica loading events");
        }
        if !eviction::init(ctx) {
            return fail(ctx, "could not subscribe to configuration changes");
        }
        if !crate::latency::init() {
            return fail(ctx, "could not follow the latency monitor's threshold");
        }
        if !crate::fence::init(ctx) {
            return fail(ctx, "could not subscribe to module changes");
        }
        if !timer::init(ctx, expiry::run) {
            return fail(ctx, "could not create the timer context");
        }
        ffi::register_info_func(ctx, info::info);
        recovery::mark_loaded();
        Status::Ok
    }

    redis_module::redis_module! {
        name: "lock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE, FENCE_TYPE],
        init: on_load,
    }
}
