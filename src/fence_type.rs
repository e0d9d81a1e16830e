//! The `lockfence` data type: one fence's value (the highest token a
//! fenced write was accepted with) saved to and loaded from RDB (and
//! `DUMP`/`RESTORE`, `MIGRATE`), rewritten into the AOF as
//! `LOCK.FENCEAPPLY`, digested, measured, copied and freed. Nothing here
//! touches the lock machinery: a fence is no lock (no lease, no waiters,
//! not in `INFO lock`).

use std::ffi::{c_int, c_void};

use redis_lock_core::fence;
use redis_module::{native_types::RedisType, raw};

use crate::ffi::fence as value;
use crate::ffi::io::{Digest, LoadIo, SaveIo};
use crate::ffi::RString;
use crate::guard;

/// The layout written: one signed integer.
const ENCODING_VERSION: c_int = 1;

pub static FENCE_TYPE: RedisType = RedisType::new(
    "lockfence",
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        // A copy of a fence is harmless: it accepts exactly what the
        // original accepts at the time of the copy.
        copy2: Some(copy2),
        aux_save2: None,
    },
);

fn null_ctx() -> crate::ffi::Ctx {
    std::ptr::null_mut()
}

/// A fence's value, refused whole (null: Redis reports a bad payload) when
/// the stream is short or the value out of 0..=2^53−1.
extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard::callback(null_ctx(), "fence rdb_load", std::ptr::null_mut(), || {
        if encver != ENCODING_VERSION {
            return std::ptr::null_mut();
        }
        match LoadIo::new(rdb).signed().and_then(fence::loaded) {
            Some(token) => {
                // A fence is data the module guards like a lock: an
                // evicting policy must warn about it (`eviction`), so the
                // server events start listening here too (review of #35:
                // a fence-only store restarted from its RDB warned only at
                // its first LOCK.* command).
                crate::activation::activate();
                value::into_value(token)
            }
            None => std::ptr::null_mut(),
        }
    })
}

extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, fence: *mut c_void) {
    guard::callback(null_ctx(), "fence rdb_save", (), || {
        if let Some(token) = value::value_of(fence) {
            SaveIo::new(rdb).signed(token);
        }
    });
}

extern "C" fn aof_rewrite(aof: *mut raw::RedisModuleIO, key: RString, fence: *mut c_void) {
    guard::callback(null_ctx(), "fence aof_rewrite", (), || {
        if let Some(token) = value::value_of(fence) {
            value::emit_aof_apply(aof, key, token);
        }
    });
}

extern "C" fn mem_usage(_fence: *const c_void) -> usize {
    value::VALUE_BYTES
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, fence: *mut c_void) {
    guard::callback(null_ctx(), "fence digest", (), || {
        if let Some(token) = value::value_of(fence) {
            let digest = Digest::new(md);
            digest.integer(token);
            digest.end_sequence();
        }
    });
}

extern "C" fn free(fence: *mut c_void) {
    guard::callback(null_ctx(), "fence free", (), || value::free_value(fence));
}

extern "C" fn copy2(_ctx: *mut raw::RedisModuleKeyOptCtx, fence: *const c_void) -> *mut c_void {
    guard::callback(null_ctx(), "fence copy", std::ptr::null_mut(), || {
        value::value_of(fence).map_or(std::ptr::null_mut(), value::into_value)
    })
}
