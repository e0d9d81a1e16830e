//! What the module state keeps about blocked clients: a waiter in a queue,
//! and a grant on its way to a waiter's reply. Plain data, below the state
//! (`waiting.rs` blocks, grants and answers).

use std::cell::Cell;

use redis_module::raw;

use std::num::NonZeroU32;

use redis_lock_core::handoff::Request;
use redis_lock_core::{KeyId, Mode};

/// One blocked `LOCK.ACQUIRE … WAIT`.
pub struct Waiter {
    pub client: *mut raw::RedisModuleBlockedClient,
    pub owner: Box<[u8]>,
    pub ttl_ms: u64,
    pub mode: Mode,
    pub limit: Option<NonZeroU32>,
    /// Its entry in the wait-timeout index; none for `WAIT 0`.
    pub timeout: Option<u64>,
}

impl Request for Waiter {
    fn owner(&self) -> &[u8] {
        &self.owner
    }
    fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }
    fn mode(&self) -> Mode {
        self.mode
    }
    fn limit(&self) -> Option<NonZeroU32> {
        self.limit
    }
}

/// A lock granted to a waiter, carried to its reply. Redis completes an
/// unblock only in `beforeSleep`; a client freed before then (killed,
/// `CLIENT UNBLOCK … ERROR`, demotion) never gets the reply, and the grant
/// must be taken back, or the lock stays held by nobody until its lease ends.
pub struct Grant {
    pub key: KeyId,
    pub owner: Box<[u8]>,
    pub token: i64,
    /// The granted lease's end on the lease clock: a reply that goes out
    /// after it says the lease ended rather than that the lock was removed.
    pub deadline: u64,
    pub delivered: Cell<bool>,
}
