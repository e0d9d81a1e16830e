//! The data type's streams: saving and loading values and aux data (RDB,
//! `DUMP`/`RESTORE`, full syncs), the digest (`DEBUG DIGEST`), and the
//! key-operation context of `unlink2`. Typed and safe: the type callbacks
//! above make no raw call of their own.

use std::ffi::{c_char, c_void};

use redis_lock_core::record::FieldReader;
use redis_lock_core::KeyId;
use redis_module::raw;

use crate::ffi::{bytes, rm};

/// A stream a value or aux data is saved to.
pub struct SaveIo(*mut raw::RedisModuleIO);

impl SaveIo {
    /// The stream Redis passed to `rdb_save`/`aux_save`.
    pub fn new(io: *mut raw::RedisModuleIO) -> Self {
        SaveIo(io)
    }

    pub fn unsigned(&self, n: u64) {
        rm!(RedisModule_SaveUnsigned(self.0, n));
    }

    pub fn signed(&self, n: i64) {
        rm!(RedisModule_SaveSigned(self.0, n));
    }

    pub fn string(&self, value: &[u8]) {
        rm!(RedisModule_SaveStringBuffer(
            self.0,
            value.as_ptr().cast::<c_char>(),
            value.len()
        ));
    }
}

/// A stream a value or aux data is loaded from. Every read checks Redis's
/// error flag (the type declares `HANDLE_IO_ERRORS`): a truncated or
/// corrupt stream reads as `None`, never as a made-up value.
pub struct LoadIo(*mut raw::RedisModuleIO);

impl LoadIo {
    /// The stream Redis passed to `rdb_load`/`aux_load`.
    pub fn new(io: *mut raw::RedisModuleIO) -> Self {
        LoadIo(io)
    }

    fn failed(&self) -> bool {
        rm!(RedisModule_IsIOError(self.0)).unwrap_or(1) != 0
    }

    pub fn signed(&mut self) -> Option<i64> {
        let value = rm!(RedisModule_LoadSigned(self.0))?;
        (!self.failed()).then_some(value)
    }
}

impl FieldReader for LoadIo {
    fn string(&mut self) -> Option<Vec<u8>> {
        let mut len: usize = 0;
        let buffer = rm!(RedisModule_LoadStringBuffer(self.0, &mut len))?;
        if buffer.is_null() || self.failed() {
            return None;
        }
        // SAFETY: Redis returned `len` bytes it allocated for us; we copy
        // and free them.
        let value = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) }.to_vec();
        rm!(RedisModule_Free(buffer.cast::<c_void>()));
        Some(value)
    }

    fn unsigned(&mut self) -> Option<u64> {
        let value = rm!(RedisModule_LoadUnsigned(self.0))?;
        (!self.failed()).then_some(value)
    }
}

/// A value's digest (`DEBUG DIGEST`, `DEBUG DIGEST-VALUE`).
pub struct Digest(*mut raw::RedisModuleDigest);

impl Digest {
    pub fn new(md: *mut raw::RedisModuleDigest) -> Self {
        Digest(md)
    }

    pub fn string(&self, value: &[u8]) {
        rm!(RedisModule_DigestAddStringBuffer(
            self.0,
            value.as_ptr().cast::<c_char>(),
            value.len()
        ));
    }

    pub fn integer(&self, n: i64) {
        rm!(RedisModule_DigestAddLongLong(self.0, n));
    }

    pub fn end_sequence(&self) {
        rm!(RedisModule_DigestEndSequence(self.0));
    }
}

/// The key's name and database in a key-operation context (`unlink2`).
pub fn key_of(ctx: *mut raw::RedisModuleKeyOptCtx) -> Option<KeyId> {
    let name = rm!(RedisModule_GetKeyNameFromOptCtx(ctx))?;
    let db = rm!(RedisModule_GetDbIdFromOptCtx(ctx))?;
    Some(KeyId::new(db, bytes(name)))
}
