//! The last line of defence: a panic inside a module aborts the whole server
//! and every lock on it, so every entry point Redis calls runs inside
//! `catch_unwind`. A caught panic is logged and, for a command, answered with
//! an error; the lock logic is written so that it never gets here.

use std::any::Any;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use crate::ffi::{log_warning, reply_error, Ctx};

fn describe(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic")
}

/// Runs a command handler; a panic becomes an error reply.
pub fn command(ctx: Ctx, name: &str, handler: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(handler)) {
        Ok(status) => status,
        Err(payload) => {
            let what = describe(payload.as_ref());
            log_warning(ctx, &format!("redis-lock: {name} panicked: {what}"));
            reply_error(ctx, &format!("ERR internal error in {name}: {what}"));
            raw::REDISMODULE_OK as c_int
        }
    }
}

/// Runs a callback (timer, event, type method); a panic is logged and
/// `fallback` returned.
pub fn callback<R>(ctx: Ctx, name: &str, fallback: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            log_warning(
                ctx,
                &format!(
                    "redis-lock: {name} panicked: {}",
                    describe(payload.as_ref())
                ),
            );
            fallback
        }
    }
}
