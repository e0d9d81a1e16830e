//! Locks and `maxmemory`: a lock key has no TTL, so only an `allkeys-*`
//! policy evicts it, and an evicted lock is a lock its holder no longer has.
//! The module says so: a warning in the log at load and whenever the policy
//! becomes evicting, `lock_evictable` and `lock_evicted` in `INFO lock`.
//! It listens to `evicted` keyspace events only from the first time the
//! policy can evict locks: a keyspace subscription makes every keyspace
//! event of the server pass through the module machinery.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_module::raw;

use crate::ffi::{self, Ctx, RString};
use crate::guard;
use crate::state::KeyId;

/// The policy evicts keys without a TTL (`allkeys-*`).
pub static EVICTABLE: AtomicBool = AtomicBool::new(false);
/// Locks evicted since the module loaded.
pub static EVICTED: AtomicU64 = AtomicU64::new(0);
/// The module listens to `evicted` events (from the first evicting policy
/// on; a subscription cannot be taken back on every server).
static LISTENING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The lock whose key left the keyspace last, while eviction is
    /// possible: Redis announces an eviction after the key is gone.
    static LAST_UNLINKED: RefCell<Option<KeyId>> = const { RefCell::new(None) };
}

/// Whether `policy` (a `maxmemory-policy` value) may evict a lock.
fn evicts_locks(policy: &[u8]) -> bool {
    policy.starts_with(b"allkeys-")
}

/// Reads the policy again; warns when it has just become evicting.
pub fn check_policy(ctx: Ctx) {
    let Some(policy) = ffi::server_info_field(ctx, c"memory", c"maxmemory_policy") else {
        return;
    };
    let evictable = evicts_locks(&policy);
    let was = EVICTABLE.swap(evictable, Ordering::Relaxed);
    if evictable && !was {
        ffi::log_warning(
            ctx,
            &format!(
                "redis-lock: maxmemory-policy {} can evict locks and fences: an evicted lock is \
                 lost to its holder and may be granted again, and an evicted fence accepts stale \
                 tokens. Use noeviction (or a volatile-* policy with no expire on a fence) on a lock node.",
                String::from_utf8_lossy(&policy)
            ),
        );
    }
    if evictable
        && !LISTENING.load(Ordering::Relaxed)
        && ffi::subscribe_keyspace_events(ctx, raw::REDISMODULE_NOTIFY_EVICTED, on_evicted)
    {
        LISTENING.store(true, Ordering::Relaxed);
    }
}

/// From `unlink2`: a lock key is leaving the keyspace.
pub fn lock_unlinked(key: impl FnOnce() -> Option<KeyId>) {
    if EVICTABLE.load(Ordering::Relaxed) {
        let key = key();
        LAST_UNLINKED.with(|last| *last.borrow_mut() = key);
    }
}

/// From the `evicted` keyspace event.
fn evicted(db: i32, name: &[u8]) {
    let was_lock = LAST_UNLINKED.with(|last| {
        let mut last = last.borrow_mut();
        let matches = last
            .as_ref()
            .is_some_and(|key| key.db() == db && key.name() == name);
        if matches {
            *last = None;
        }
        matches
    });
    if was_lock {
        EVICTED.fetch_add(1, Ordering::Relaxed);
    }
}

extern "C" fn on_evicted(ctx: Ctx, _class: c_int, event: *const c_char, key: RString) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    guard::callback(ctx, "eviction event", ok, || {
        if ffi::with_event_name(event, |name| name == b"evicted") {
            ffi::with_bytes(key, |name| evicted(ffi::selected_db(ctx), name));
        }
        ok
    })
}

/// The config event (one subscriber per module): the eviction policy, and
/// the latency monitor's threshold (`latency`, read again when next used).
extern "C" fn on_config(ctx: Ctx, _event: raw::RedisModuleEvent, _sub: u64, data: *mut c_void) {
    guard::callback(ctx, "config event", (), || {
        check_policy(ctx);
        if ffi::config_changed(data, crate::latency::SETTING) {
            crate::latency::threshold_changed();
        }
    });
}

/// Checks the policy at load and follows `CONFIG SET` from the server's
/// first lock on (`activation`, which checks it again then: a policy set
/// while the server held no lock is warned about, and its evictions
/// counted, from that moment).
pub fn init(ctx: Ctx) -> bool {
    check_policy(ctx);
    crate::activation::on_activation(check_policy)
        && crate::activation::defer(ctx, raw::REDISMODULE_EVENT_CONFIG, on_config)
}

#[cfg(test)]
mod tests {
    use super::evicts_locks;

    #[test]
    fn only_allkeys_policies_evict_locks() {
        for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random"] {
            assert!(evicts_locks(policy.as_bytes()), "{policy}");
        }
        for policy in ["noeviction", "volatile-lru", "volatile-ttl", ""] {
            assert!(!evicts_locks(policy.as_bytes()), "{policy}");
        }
    }
}
