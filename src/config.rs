//! Module configuration: `loadmodule` arguments, then `CONFIG SET/GET` under
//! the `lock.` prefix (and `lock.NAME value` lines in redis.conf).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis_lock_core::args::{parse_i64, Limits};
use redis_module::configuration::{
    register_bool_configuration, register_i64_configuration, ConfigurationContext,
    ConfigurationFlags,
};
use redis_module::Context;

/// `lock.max-ttl`: the longest lease in ms (default one day).
pub static MAX_TTL: AtomicI64 = AtomicI64::new(86_400_000);
/// The largest `lock.max-owner-bytes`; no loaded owner may be longer.
pub const MAX_OWNER_LIMIT: i64 = 1 << 20;
/// `lock.max-owner-bytes`: the longest owner id (default 256).
pub static MAX_OWNER_BYTES: AtomicI64 = AtomicI64::new(256);
/// The largest `lock.max-holders`; no loaded shared lock may have more.
pub const MAX_HOLDERS_LIMIT: i64 = 1 << 20;
/// `lock.max-holders`: the largest `LIMIT`, and the most holders of a
/// shared lock without one (default 10000).
pub static MAX_HOLDERS: AtomicI64 = AtomicI64::new(10_000);
/// `lock.recovery-ms`: how long after load new acquisitions are refused.
pub static RECOVERY_MS: AtomicI64 = AtomicI64::new(0);
/// `lock.debug`: enables `LOCK.DEBUG` (load time only; off by default).
pub static DEBUG: AtomicBool = AtomicBool::new(false);

/// Ten years: the largest `lock.max-ttl` and `lock.recovery-ms`, so that no
/// deadline arithmetic can overflow.
const TEN_YEARS_MS: i64 = redis_lock_core::lease::MAX_TTL_MS as i64;

struct Numeric {
    name: &'static str,
    value: &'static AtomicI64,
    min: i64,
    max: i64,
}

const NUMERIC: [Numeric; 4] = [
    Numeric {
        name: "max-ttl",
        value: &MAX_TTL,
        min: 1,
        max: TEN_YEARS_MS,
    },
    Numeric {
        name: "max-owner-bytes",
        value: &MAX_OWNER_BYTES,
        min: 1,
        max: MAX_OWNER_LIMIT,
    },
    Numeric {
        name: "max-holders",
        value: &MAX_HOLDERS,
        min: 1,
        max: MAX_HOLDERS_LIMIT,
    },
    Numeric {
        name: "recovery-ms",
        value: &RECOVERY_MS,
        min: 0,
        max: TEN_YEARS_MS,
    },
];

/// The limits the argument parser enforces now.
pub fn limits() -> Limits {
    Limits {
        max_ttl_ms: u64::try_from(MAX_TTL.load(Ordering::Relaxed)).unwrap_or(1),
        max_owner_bytes: usize::try_from(MAX_OWNER_BYTES.load(Ordering::Relaxed)).unwrap_or(1),
        max_holders: u32::try_from(MAX_HOLDERS.load(Ordering::Relaxed)).unwrap_or(1),
    }
}

/// Applies `loadmodule` arguments (`name value` pairs, `name` with or without
/// the `lock.` prefix). Any unknown name or bad value refuses the load, with
/// the reason in the server log: a lock node must not start misconfigured.
pub fn apply_module_args(args: &[&[u8]]) -> Result<(), String> {
    if args.len() % 2 != 0 {
        return Err("module arguments must be name/value pairs, e.g. `max-ttl 60000`".into());
    }
    for pair in args.chunks_exact(2) {
        let (name, value) = match pair {
            [name, value] => (String::from_utf8_lossy(name), *value),
            _ => continue,
        };
        let bare = name.strip_prefix("lock.").unwrap_or(&name);
        if bare == "debug" {
            let on = match value.to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => return Err(format!("module argument {name} must be yes or no")),
            };
            DEBUG.store(on, Ordering::Relaxed);
            continue;
        }
        let numeric = NUMERIC
            .iter()
            .find(|numeric| numeric.name == bare)
            .ok_or_else(|| format!("unknown module argument '{name}' (known: max-ttl, max-owner-bytes, max-holders, recovery-ms, debug)"))?;
        let parsed = parse_i64(value)
            .filter(|v| (numeric.min..=numeric.max).contains(v))
            .ok_or_else(|| {
                format!(
                    "module argument {name} must be an integer between {} and {}",
                    numeric.min, numeric.max
                )
            })?;
        numeric.value.store(parsed, Ordering::Relaxed);
    }
    Ok(())
}

type OnChanged = Box<dyn Fn(&ConfigurationContext, &str, &'static AtomicI64)>;

/// Registers the `lock.*` configs with the values the arguments set as
/// defaults, so `CONFIG GET` shows them and `CONFIG SET` changes them.
/// `restart_recovery_window` runs after `CONFIG SET lock.recovery-ms` (the
/// window counts from then).
pub fn register(ctx: &Context, restart_recovery_window: fn()) {
    for numeric in &NUMERIC {
        let current = numeric.value.load(Ordering::Relaxed);
        // A recovery window set at run time starts when it is set.
        let on_changed: Option<OnChanged> = (numeric.name == "recovery-ms").then(|| {
            Box::new(
                move |_: &ConfigurationContext, _: &str, _: &'static AtomicI64| {
                    restart_recovery_window();
                },
            ) as OnChanged
        });
        register_i64_configuration(
            ctx,
            numeric.name,
            numeric.value,
            current,
            numeric.min,
            numeric.max,
            ConfigurationFlags::DEFAULT,
            on_changed,
        );
    }
    let debug = DEBUG.load(Ordering::Relaxed);
    register_bool_configuration(
        ctx,
        "debug",
        &DEBUG,
        debug,
        ConfigurationFlags::IMMUTABLE,
        None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_arguments() {
        assert!(apply_module_args(&[b"max-ttl", b"5000", b"lock.max-owner-bytes", b"8"]).is_ok());
        assert_eq!(
            limits(),
            Limits {
                max_ttl_ms: 5000,
                max_owner_bytes: 8,
                max_holders: 10_000,
            }
        );
        assert!(apply_module_args(&[b"max-ttl"]).is_err());
        assert!(apply_module_args(&[b"nope", b"1"]).is_err());
        assert!(apply_module_args(&[b"max-ttl", b"0"]).is_err());
        assert!(apply_module_args(&[b"debug", b"maybe"]).is_err());
        assert!(apply_module_args(&[b"debug", b"YES"]).is_ok());
        assert!(DEBUG.load(Ordering::Relaxed));
    }
}
