//! redis-lock: native distributed-lock commands for Redis.
//!
//! This crate is the thin adapter between the Redis modules API and the lock
//! logic in `redis-lock-core`: it registers the commands, the data type, the
//! expiry timer, the event hooks and the configuration. See the README for
//! the commands and their replies.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Unit tests build the crate without its Redis entry points (RedisAlloc
// aborts outside Redis), which leaves the adapter unreferenced.
#![cfg_attr(test, allow(dead_code))]

mod async_load;
mod caller_db;
mod commands;
mod config;
mod counter_record;
mod datatype;
mod docs;
mod effects;
mod events;
mod eviction;
mod expiry;
mod ffi;
mod guard;
mod hints;
mod info;
mod propagation;
mod recovery;
mod state;
mod stats;
mod sweep;
mod timer;
mod waiter;
mod waiting;

#[cfg(not(test))]
mod module {
    use std::ffi::{c_int, CStr};
    use std::sync::atomic::Ordering;

    use redis_module::{raw, Context, RedisString, Status};

    use crate::datatype::LOCK_TYPE;
    use crate::ffi::{self, rm, Ctx, RString};
    use crate::{
        async_load, commands, config, counter_record, docs, events, eviction, expiry, guard, info,
        propagation, recovery, timer,
    };

    /// Wraps a command handler in an `extern "C"` entry point that catches
    /// panics.
    macro_rules! entry_point {
        ($name:ident, $label:literal, $handler:path) => {
            extern "C" fn $name(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
                guard::command(ctx, $label, || $handler(ctx, argv, argc))
            }
        };
    }

    entry_point!(acquire, "LOCK.ACQUIRE", commands::acquire);
    entry_point!(release, "LOCK.RELEASE", commands::release);
    entry_point!(extend, "LOCK.EXTEND", commands::extend);
    entry_point!(fence, "LOCK.FENCE", commands::fence);
    entry_point!(info_command, "LOCK.INFO", commands::info);
    entry_point!(apply, "LOCK.APPLY", commands::apply);
    entry_point!(counter, "LOCK.COUNTER", commands::counter);
    entry_point!(debug, "LOCK.DEBUG", commands::debug);

    type Handler = extern "C" fn(Ctx, *mut RString, c_int) -> c_int;

    /// Name, handler, flags, the legacy key position (first = last = step),
    /// and the ACL categories (set on Redis 7.2+, which has the API; on 7.0
    /// module commands are only in `@all`, see the README).
    const COMMANDS: [(&CStr, Handler, &CStr, c_int, &CStr); 8] = [
        (
            c"lock.acquire",
            acquire,
            c"write deny-oom fast",
            1,
            c"write fast",
        ),
        (c"lock.release", release, c"write fast", 1, c"write fast"),
        (c"lock.extend", extend, c"write fast", 1, c"write fast"),
        (c"lock.fence", fence, c"write fast", 1, c"write fast"),
        (
            c"lock.info",
            info_command,
            c"readonly fast",
            1,
            c"read fast",
        ),
        (c"lock.apply", apply, c"write", 1, c"write"),
        (c"lock.counter", counter, c"write", 0, c"write"),
        (c"lock.debug", debug, c"admin", 0, c"admin dangerous"),
    ];

    /// Puts a command in its ACL categories where the server supports it.
    fn set_acl_categories(ctx: Ctx, name: &CStr, categories: &CStr) {
        let command =
            rm!(RedisModule_GetCommand(ctx, name.as_ptr())).unwrap_or(std::ptr::null_mut());
        if command.is_null() {
            return;
        }
        if rm!(RedisModule_SetCommandACLCategories(
            command,
            categories.as_ptr()
        ))
        .is_some_and(|status| status != raw::REDISMODULE_OK as c_int)
        {
            ffi::log_warning(
                ctx,
                &format!(
                    "redis-lock: no ACL categories for {}",
                    name.to_string_lossy()
                ),
            );
        }
    }

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
        // A truncated or corrupt payload (RESTORE, a diskless replica sync)
        // is refused by our loader instead of aborting the server; without
        // this Redis also turns diskless loading off for the whole server.
        // It also loads replicas in the background (`repl-diskless-load
        // swapdb`): the lease index is rebuilt when such a load completes.
        rm!(RedisModule_SetModuleOptions(
            ctx,
            (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
                | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD) as c_int
        ));
        let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
        if let Err(why) = config::apply_module_args(&args) {
            return fail(ctx, &why);
        }
        config::register(context, restart_recovery_window);
        rm!(RedisModule_LoadConfigs(ctx));
        for (name, handler, flags, key, categories) in COMMANDS {
            let created = rm!(RedisModule_CreateCommand(
                ctx,
                name.as_ptr(),
                Some(handler),
                flags.as_ptr(),
                key,
                key,
                key
            ));
            if created != Some(raw::REDISMODULE_OK as c_int) {
                return fail(ctx, &format!("could not create {}", name.to_string_lossy()));
            }
            set_acl_categories(ctx, name, categories);
        }
        for doc in &docs::DOCS {
            docs::describe(ctx, doc);
        }
        if !events::subscribe(ctx) {
            return fail(ctx, "could not subscribe to keyspace and server events");
        }
        if !propagation::init(ctx) {
            return fail(
                ctx,
                "could not register the command filter and replication events",
            );
        }
        if !counter_record::init(ctx) {
            return fail(ctx, "could not subscribe to fork events");
        }
        if !async_load::init(ctx) {
            return fail(ctx, "could not subscribe to replica loading events");
        }
        if !eviction::init(ctx) {
            return fail(ctx, "could not subscribe to configuration changes");
        }
        if !timer::init(ctx, expiry::run) {
            return fail(ctx, "could not create the timer context");
        }
        rm!(RedisModule_RegisterInfoFunc(ctx, Some(info::info)));
        recovery::mark_loaded();
        Status::Ok
    }

    redis_module::redis_module! {
        name: "lock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [LOCK_TYPE],
        init: on_load,
    }
}
