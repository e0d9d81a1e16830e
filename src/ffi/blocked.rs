//! Blocked clients (`LOCK.ACQUIRE … WAIT`): blocking, the answer handed to
//! an unblocked client, and its release. A blocked client's private data is
//! always a `Box<A>` of the one answer type its blocker uses (`waiting.rs`
//! uses one); the callbacks read it back as that type.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use crate::ffi::{rm, Ctx, RString};

/// A blocked client's handle (its address names it in the module's books).
pub type Client = *mut raw::RedisModuleBlockedClient;

pub type ReplyCallback = extern "C" fn(Ctx, *mut RString, c_int) -> c_int;
pub type FreeCallback = extern "C" fn(Ctx, *mut c_void);
pub type DisconnectCallback = extern "C" fn(Ctx, Client);

/// The callbacks of a blocked client.
pub struct Callbacks {
    /// Replies in the client's context once it is unblocked.
    pub reply: ReplyCallback,
    /// `CLIENT UNBLOCK … TIMEOUT` (the client is blocked without a
    /// Redis-side timeout).
    pub timeout: ReplyCallback,
    /// Frees the answer, after the reply or instead of it.
    pub free: FreeCallback,
    /// The client went away while blocked.
    pub disconnect: DisconnectCallback,
}

/// Blocks the calling client with no Redis-side timeout; `None` if Redis
/// refused.
pub fn block(ctx: Ctx, callbacks: &Callbacks) -> Option<Client> {
    let client = rm!(RedisModule_BlockClient(
        ctx,
        Some(callbacks.reply),
        Some(callbacks.timeout),
        Some(callbacks.free),
        0
    ))
    .filter(|client| !client.is_null())?;
    rm!(RedisModule_SetDisconnectCallback(
        client,
        Some(callbacks.disconnect)
    ));
    Some(client)
}

/// Unblocks `client`, handing it `answer` (none: the reply callback sees
/// none). An answer Redis did not take is dropped here.
pub fn unblock<A>(client: Client, answer: Option<A>) {
    let data = answer.map_or(std::ptr::null_mut(), |answer| {
        Box::into_raw(Box::new(answer)).cast::<c_void>()
    });
    let status = rm!(RedisModule_UnblockClient(client, data));
    if status != Some(raw::REDISMODULE_OK as c_int) && !data.is_null() {
        // SAFETY: Redis did not take the answer; it is still ours, boxed
        // just above as an `A`.
        drop(unsafe { Box::from_raw(data.cast::<A>()) });
    }
}

/// Runs `f` with the answer of the client being replied to (in its reply
/// callback); the reference does not outlive the call.
pub fn with_answer<A, R>(ctx: Ctx, f: impl FnOnce(Option<&A>) -> R) -> R {
    let data = rm!(RedisModule_GetBlockedClientPrivateData(ctx)).unwrap_or(std::ptr::null_mut());
    // SAFETY: the private data of our blocked clients is null or an `A`
    // boxed by `unblock`, freed by the free callback after the reply.
    f(unsafe { data.cast::<A>().as_ref() })
}

/// Takes back the answer Redis frees (the free callback); `None` for null.
pub fn take_answer<A>(data: *mut c_void) -> Option<A> {
    if data.is_null() {
        return None;
    }
    // SAFETY: as in `with_answer`; Redis frees each answer exactly once.
    Some(*unsafe { Box::from_raw(data.cast::<A>()) })
}

/// The handle of the client a timeout callback runs for.
pub fn handle(ctx: Ctx) -> Client {
    rm!(RedisModule_GetBlockedClientHandle(ctx)).unwrap_or(std::ptr::null_mut())
}
