//! Redlock over nodes running the redis-lock module: quorum locks with
//! fencing tokens that only go up.
//!
//! Point a [`Redlock`] at N independent Redis masters with the module loaded
//! (five is typical; one is a valid single-node mode) and lock resources by
//! name:
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::Redlock;
//!
//! # async fn run() -> Result<(), redis_lock_client::Error> {
//! let redlock = Redlock::new((7101..=7105).map(|port| format!("redis://127.0.0.1:{port}")))?;
//!
//! let lock = redlock.acquire("invoice:1042", Duration::from_secs(10)).await?;
//! let token = lock.fencing_token().await?; // pass it to the storage you write to
//! println!("holding invoice:1042 (token {token}) for at least {:?}", lock.validity());
//! let release = lock.release().await?;
//! assert!(!release.lapsed(), "the work overran the lease");
//! # Ok(()) }
//! ```
//!
//! Code without an async runtime uses [`blocking::Redlock`], which has the
//! same methods and runs its own small runtime.
//!
//! # Acquiring
//!
//! One acquisition attempt sends `LOCK.ACQUIRE key owner ttl` to **all nodes
//! at once**, each call bounded by [`Config::node_timeout`]. The owner id is
//! 128 random bits, the same on every node. The lock is held iff a majority
//! (N/2 + 1) granted it and the validity
//!
//! ```text
//! validity = ttl − elapsed − drift        drift = 1% of ttl + 2 ms (configurable)
//! ```
//!
//! is positive, where `elapsed` is the time from sending the first command
//! to the last answer. Every granting node started its lease after the
//! round began, so for `validity` after the round all of them still hold
//! it, give or take the clock-rate drift allowed for.
//!
//! A failed attempt releases the lock on **all** nodes at once (also those
//! that did not answer: their grant may merely be late), then waits
//! [`Config::retry_delay`] plus a random part of [`Config::retry_jitter`] so
//! that clients that collided split up, and tries again, up to
//! [`Config::retry_count`] times and within [`Config::acquire_timeout`].
//! Failing nodes (timeouts, refused connections, error replies such as a
//! node refusing acquisitions during its recovery window) are recorded per
//! node in the [`Error::NotAcquired`] outcomes, never fatal on their own: two
//! of five nodes can be down and locks are still granted.
//!
//! # Single-node mode and server-side waiting
//!
//! With one node there is no quorum to split, so a busy lock is waited for
//! on the server with `LOCK.ACQUIRE … WAIT timeout` (on a connection of its
//! own, since Redis holds a blocked connection's later commands): the module
//! hands the lock to waiters in arrival order the instant it is free,
//! without polling. Redlock (N > 1) does **not** wait on the nodes: five
//! independent FIFO queues hand the lock out independently, so while one
//! client sits first in the queue of nodes 1–3 another can sit first on
//! nodes 4–5 and a third anywhere in between; each node grants its own
//! first waiter, the grants scatter, nobody gets a majority, and the nodes
//! stay locked by minority holders until those notice and release. Retrying
//! with random delays instead lets one client win the whole round.
//!
//! # Validity: exactly what the client vouches for
//!
//! The handle keeps, per node, a lower bound on when that node's lease for
//! it ends, on the client's clock: `round start + ttl − drift` for a node
//! that confirmed a lease-setting command (`ACQUIRE`, re-entry, `EXTEND`:
//! the node ran it after the round began). Such a command sets the lease to
//! `now + ttl` on the node, so it can shorten a lease as well as lengthen
//! it; a node that did not answer may or may not have run it, so its bound
//! becomes the earlier of the two; a node that answered "not held" or
//! "held by another owner" has none. [`Lock::validity`] is the time left
//! until the `quorum`-th latest bound: at least a majority of nodes hold the
//! lock for us until then. Hence:
//!
//! - a failed or partial [`Lock::extend_with`] to a shorter TTL, or a failed
//!   renewal at the TTL after a longer extension, shortens the validity to
//!   at most `round start + new ttl − drift`; a validity is never kept past
//!   the leases that guarantee it;
//! - an extension only counts if it finished before the validity ended
//!   (afterwards the confirmations say nothing about the time in between;
//!   the result is [`Error::Expired`]);
//! - the property is tested over random sequences of acquire, extend,
//!   re-entry and renewal with random per-node outcomes and clock rates.
//!
//! # Extending and releasing
//!
//! [`Lock::extend`] renews the lease on every node still holding it: a
//! majority must confirm before the current validity ends. The
//! [`Extended`] report counts the nodes that renewed and those that no
//! longer hold the lock, so a lock kept by a bare majority is visible.
//! [`Lock::release`] releases on all nodes at once. A release after the
//! lease ended is *not* an error: [`Release::lapsed`] says that so many
//! nodes answered "not held" that fewer than a quorum can have held it, so
//! a critical section that overran its validity is visible to the caller.
//! Nodes that did not answer are counted apart ([`Release::failed`]): a
//! slow node does not make an intact lock look lapsed.
//!
//! # Cancellation
//!
//! Dropping the future of [`Lock::acquire`], [`Lock::extend`] or
//! [`Lock::release`] (a `select!`, a timeout, an aborted task) does not
//! abandon its round: each runs as a task of its own and finishes. An
//! acquisition whose caller is gone stops retrying, and a grant it won
//! anyway is released on every node in the background before the handle's
//! next operation runs; an extension still updates the validity; a release
//! still frees every node. In single-node mode an abandoned or timed-out
//! wait's connection is killed on the server (`CLIENT KILL ID … ADDR …`,
//! sent on the shared connection) and the wait undone on the shared connection
//! after it: nothing sent on the waiting connection runs after that, so
//! neither a late grant nor a stale undo lands after the handle's next
//! command (a cluster's waiting connection, which has no client id, ends
//! by its own server-side timeout and is undone on its own connection
//! after it, instead; one that cannot be named, for a user without
//! `client|info` or over a unix socket, is not waited on: the acquisition
//! retries as with several nodes); the acquisition itself returns by [`Config::acquire_timeout`], as
//! [`Error::NotAcquired`] with the node's timeout as its outcome when the
//! wait's reply has not come by then (the node said busy; a reply late
//! past the deadline is a slow or loaded node, not a failed one).
//! (Without a tokio runtime, as when a runtime shuts down, nothing can run
//! in the background: the leases then end by themselves.)
//!
//! # Reentrancy
//!
//! Acquiring a handle that already holds its lock adds a hold: one round of
//! `LOCK.ACQUIRE` with the same owner, which re-enters where the lock is
//! held (renewing its lease) and grants afresh where a node lost it; it must
//! again win a majority. Holds are released one by one; only the last
//! release contacts the nodes, with `LOCK.RELEASE … ALL`. Inner releases
//! stay local on purpose: a node that missed the outer acquisition holds one
//! hold fewer than the others, so releasing hold by hold on the nodes could
//! free it there early and shrink the holders below a majority while the
//! handle still believes it holds the lock.
//!
//! # Fencing tokens
//!
//! A lease can end while its holder is paused (GC, swapping, a stopped
//! VM), so a lock alone cannot stop a stale holder from writing. Storage
//! that remembers the highest token it accepted and rejects lower ones can,
//! if tokens grow with every holder. [`Lock::fencing_token`] returns such a
//! token.
//!
//! Each node gives every fresh acquisition a token greater than every token
//! it issued or was raised to before (the module's counter rule, kept across
//! restarts when the node persists its data). Per-node tokens alone are not
//! enough: the previous holder's highest token may come from a node the next
//! holder never wins, and the next holder's nodes may all be far behind. So
//! the client **writes the maximum back**:
//!
//! 1. `M` = the highest token the nodes granted this hold.
//! 2. `LOCK.FENCE key owner ATLEAST M` to all nodes at once: each node still
//!    holding our lock raises the lock's token and its own counter to at
//!    least `M` and answers with the lock's token.
//! 3. If fewer than a majority answered, the lock is lost
//!    ([`Error::QuorumLost`]); if some node answered more than `M`, repeat
//!    with that value. Otherwise `M` is the token.
//!
//! **Why it is monotonic.** Let holder A get token `M` and holder B acquire
//! the lock after A's hold ended (released, or lease ended). A's write-back
//! reached a majority `Q_A` while A's lease was live on each of those
//! nodes; B's acquisition was granted by a majority `Q_B`. Two majorities
//! share a node `x`. B's grant on `x` came after A's lease on `x` ended
//! (a node grants only a free lock), so after the write-back: `x`'s counter
//! was already at least `M` and B's token on `x` is greater than `M`. B's
//! own token is the maximum over all of B's grants, so it is greater than
//! `M` too. By induction, tokens strictly increase across successive
//! holders, however their majorities differ and however far ahead one
//! node's counter is, as long as a majority of nodes keep their state (a
//! node that restarts without its data must stay out of new acquisitions
//! for longer than the longest TTL: the module's recovery window).
//!
//! The token is computed on first use and cached for the hold, so a lock
//! whose token is never asked for costs one round trip to acquire. The
//! maximum comes from the acquisition replies, so asking costs one more
//! round (two if a node reports a higher token). The cache is dropped when
//! a re-entry may have been granted afresh by some node (a token other than
//! the one that node reported before): after a lapse, another holder may
//! have come and gone, and the fresh grants carry tokens above its token,
//! so the next [`Lock::fencing_token`] computes and writes back again. A
//! token is refused with [`Error::Expired`] once the validity has ended.
//!
//! **Cluster mode** ([`Redlock::cluster`]) is one logical node: the key's
//! shard grants, and each shard has its own counter, which a free lock's
//! slot does not carry when it moves. So before the token is returned the
//! client also raises every master's counter to it (`LOCK.FLOOR`, within
//! `node_timeout`; [`Config::raise_cluster_counters`]): a later grant on
//! any master that took the raise, wherever the slot has moved, is above
//! it whatever the clocks. A master that misses the raise does not fail
//! the call; docs/src/client.md states the bound that is left then.
//!
//! When the data lives in a Redis or Valkey with the module loaded, the
//! store can be that storage: [`Lock::fenced`] sends a write as
//! `LOCK.FENCED fence-key <token> <write…>`, which the store runs only if no
//! write through the same fence key was accepted with a higher token
//! (and refuses with a `STALE` error otherwise, see [`is_stale`]), in one
//! round trip.
//!
//! # Watchdog
//!
//! [`Lock::watchdog`] turns a held lock into a [`Watchdog`] that renews the
//! lease until it is released, stopped or dropped. Each renewal starts at
//! the earlier of `ttl / 3` ([`Config::watchdog_interval`]) after the last
//! one and the last moment from which it can still finish (one
//! [`Config::node_timeout`]) before the loss signal; however little validity
//! is left (a slow round, a watchdog started late), a renewal is tried
//! before any loss is reported. The loss ([`LockStatus::Lost`], through
//! [`Watchdog::lost`] and [`Watchdog::status`]) is signalled
//! [`Config::watchdog_margin`] *before* the validity ends, or at once when a
//! majority denies holding the lock, so that work stopped on the signal
//! stops while the lock is still certainly held. [`Redlock::with_lock`] runs
//! a future under a watchdog and drops it (cancels it) on the signal. A
//! configured interval must satisfy
//! `interval + node_timeout + margin < ttl − drift`.
//!
//! # Shared locks and semaphores
//!
//! [`Redlock::acquire_shared`] takes a read lock: other shared holders hold
//! the resource at the same time, an exclusive holder (the same resource
//! through [`Redlock::acquire`]) never does. [`Redlock::semaphore`] gives a
//! [`Semaphore`] of `n` leased permits; [`Semaphore::acquire`] takes one (a
//! shared lock limited to `n` holders). Each holder is a [`Lock`] with its
//! own owner id, fencing token (written back to a quorum like an exclusive
//! lock's), lease, watchdog and release, and the Redlock rules are those
//! above. On a node a shared request never overtakes a queued one, so
//! writers waiting with `WAIT` (single-node mode) are not starved by
//! readers. Every user of a semaphore must give the same number of
//! permits: a node refuses another number (`ERR LIMIT … does not match …`).
//!
//! # Features
//!
//! - `tracing`: spans for acquire, extend, release and `fencing_token`,
//!   with trace events for each node's outcome.
//! - `tls`: `rediss://` nodes through rustls, and `Tls` for a private CA
//!   and client certificates (mutual TLS).
//! - `metrics`: lock metrics through the `metrics` crate's facade (see the
//!   `metrics` example and the crate README for the series).

mod acknowledge;
mod acquire;
mod client;
mod coalesce;
mod config;
#[cfg(feature = "tls")]
mod crypto;
mod error;
mod fanout;
mod handle;
mod hold;
mod kind;
mod ledger;
mod lock;
mod metrics;
mod node;
mod node_error;
mod outcome;
mod owner;
mod protocol;
mod quorum;
mod redlock;
mod scoped;
mod semaphore;
mod single;
mod timing;
#[cfg(feature = "tls")]
mod tls;
mod watchdog;

pub mod blocking;

pub use acknowledge::Acknowledge;
pub use client::Redlock;
pub use config::Config;
pub use error::{Error, NodeError, Result};
pub use kind::Kind;
pub use lock::Lock;
#[doc(hidden)]
pub use metrics::observe_node_errors;
pub use node::IntoClient;
pub use outcome::{Acquired, Extended, NodeOutcome, Release, Reply};
pub use protocol::{is_stale, is_stale_message, LockInfo, NodeInfo};
pub use scoped::LockContext;
pub use semaphore::Semaphore;
#[cfg(feature = "tls")]
pub use tls::{Tls, TlsNode};
pub use watchdog::{LockStatus, Watchdog};

/// Quorum arithmetic, exposed for callers that size deployments or check
/// reports: `quorum(5) == 3`.
pub use timing::quorum;

/// The Rust blocks of the documentation (README.md and the book's pages in
/// docs/src/), compiled by `cargo test --doc` as this crate's doc tests, so
/// that an example that no longer matches the API fails `make test`.
/// `scripts/check-docs.py` checks that every page with a Rust block is
/// listed here.
#[cfg(doctest)]
pub mod documentation {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/src/client.md")]
    pub struct Client;
}
