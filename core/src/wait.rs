//! When a `LOCK.ACQUIRE … WAIT` blocks. A request that cannot be granted
//! now (the lock is held, or the node is in its recovery window) blocks the
//! caller in the key's queue only where blocking is possible and a grant can
//! come: on a primary (a replica never grants: its locks change only through
//! its primary's stream), outside `MULTI`, Lua scripts and functions (which
//! cannot block, and whose callers the server marks as unable to). Anywhere
//! else `WAIT` degrades to a plain acquisition: the caller gets the answer
//! it would get without `WAIT` (nil when the lock is held, the recovery
//! error in the window).

/// What the adapter reads of the calling context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The node is a primary.
    pub primary: bool,
    /// The server lets this client block (not `DENY_BLOCKING`).
    pub may_block: bool,
    /// Inside `MULTI … EXEC`.
    pub in_multi: bool,
    /// Inside a Lua script or a function.
    pub in_script: bool,
}

/// What becomes of a request that cannot be granted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Answer now, as without `WAIT`.
    Answer,
    /// Block the caller in the key's queue for at most `timeout_ms`
    /// (0: no limit).
    Block { timeout_ms: u64 },
}

/// `wait_ms`: the request's `WAIT` timeout, if it has one.
pub fn then(wait_ms: Option<u64>, caller: Caller) -> Then {
    match wait_ms {
        Some(timeout_ms)
            if caller.primary && caller.may_block && !caller.in_multi && !caller.in_script =>
        {
            Then::Block { timeout_ms }
        }
        _ => Then::Answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FREE: Caller = Caller {
        primary: true,
        may_block: true,
        in_multi: false,
        in_script: false,
    };

    #[test]
    fn only_a_request_with_wait_blocks() {
        assert_eq!(then(Some(250), FREE), Then::Block { timeout_ms: 250 });
        assert_eq!(then(Some(0), FREE), Then::Block { timeout_ms: 0 });
        assert_eq!(then(None, FREE), Then::Answer);
    }

    #[test]
    fn wait_degrades_in_multi_scripts_on_replicas_and_where_blocking_is_denied() {
        for caller in [
            Caller {
                in_multi: true,
                ..FREE
            },
            Caller {
                in_script: true,
                ..FREE
            },
            Caller {
                primary: false,
                ..FREE
            },
            Caller {
                may_block: false,
                ..FREE
            },
        ] {
            assert_eq!(then(Some(1_000), caller), Then::Answer, "{caller:?}");
        }
    }
}
