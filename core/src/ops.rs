//! The lock operations, one per command, over an abstract [`Slot`] (the value
//! stored under one key) so that they are tested without Redis.
//!
//! Each operation either succeeds and reports the [`Change`] it made, which
//! the adapter turns into replication, AOF, keyspace events and expiry-index
//! updates, or fails before touching anything: a rejected command changes
//! nothing. Operations see a lock whose lease has ended as absent; the
//! adapter first removes such a lock with [`expire_if_due`] so that its
//! expiry is replicated and announced like any other.

use std::num::NonZeroU32;

use crate::args::{check_owner_length, ArgError};
use crate::clock::Clock;
use crate::lease;
use crate::lock::{Holder, Lock, Mode};
use crate::stats::Stats;
use crate::token::{TokenCounter, TokensExhausted};

/// The lock stored under one key. The adapter has already checked that the
/// key holds no other type.
pub trait Slot {
    /// The lock stored here, if any (whether or not its lease has ended).
    fn lock(&mut self) -> Option<&mut Lock>;
    /// Stores `lock`, replacing what was here.
    fn store(&mut self, lock: Lock);
    /// Removes the lock and its key.
    fn delete(&mut self);
    /// `owner`'s hold on the lock stored here (whether or not its lease
    /// has ended).
    fn holder(&mut self, owner: &[u8]) -> Option<&mut Holder> {
        self.lock()?.holder_mut(owner)
    }
}

/// Node-wide state: the fencing-token counter and the statistics.
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub tokens: TokenCounter,
    pub stats: Stats,
}

/// What an operation did to the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    None,
    /// The slot now holds a lock (new or modified). `previous_deadline` is
    /// the deadline the slot's lock had before, if it had one.
    Stored { previous_deadline: Option<u64> },
    /// The lock was released and its key removed.
    Deleted { deadline: u64 },
    /// A new holder joined a shared lock that others hold (in place).
    Joined,
    /// The owner's hold left a shared lock that others still hold;
    /// `entry` was its lease-index entry.
    Left { deadline: u64, entry: u64 },
}

/// The result of an operation: the reply and what changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome<R> {
    pub reply: R,
    pub change: Change,
}

/// Why an operation was refused (it changed nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpError {
    /// No token greater than every earlier one is left on this node.
    TokensExhausted,
    /// The holder already holds the lock `u32::MAX` times.
    TooManyHolds,
    /// The node is in its recovery window: no new lock for `left_ms` more.
    Recovering { left_ms: u64 },
    /// The owner holds the lock in the other mode (no upgrade or
    /// downgrade: two readers upgrading at once would wait for each other
    /// forever).
    ModeHeld { held: Mode },
    /// A shared request's `LIMIT` differs from the lock's.
    LimitMismatch {
        asked: Option<NonZeroU32>,
        lock: Option<NonZeroU32>,
    },
}

/// A `LIMIT` as the errors name it.
fn limit_name(limit: Option<NonZeroU32>) -> String {
    limit.map_or_else(|| "(none)".into(), |n| n.to_string())
}

impl From<TokensExhausted> for OpError {
    fn from(_: TokensExhausted) -> Self {
        OpError::TokensExhausted
    }
}

impl OpError {
    /// The error reply.
    pub fn message(&self) -> String {
        match self {
            OpError::TokensExhausted => "ERR fencing tokens exhausted on this node".into(),
            OpError::TooManyHolds => {
                "ERR the lock is already held 4294967295 times by this owner".into()
            }
            OpError::Recovering { left_ms } => format!(
                "RECOVERING this node refuses new locks for another {left_ms} ms (lock.recovery-ms)"
            ),
            OpError::ModeHeld { held } => {
                format!("ERR owner holds this lock in {} mode", held.name())
            }
            OpError::LimitMismatch { asked, lock } => format!(
                "ERR LIMIT {} does not match the lock's LIMIT {}",
                limit_name(*asked),
                limit_name(*lock)
            ),
        }
    }
}

/// The node's recovery window as a granting operation sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Window {
    /// The node grants.
    #[default]
    Open,
    /// The node grants nothing for `left_ms` more.
    Recovering { left_ms: u64 },
}

impl Window {
    /// The time left in the window, if the node is in it.
    pub fn of(left_ms: Option<u64>) -> Self {
        left_ms.map_or(Window::Open, |left_ms| Window::Recovering { left_ms })
    }

    /// Refuses a grant inside the window.
    fn check(self) -> Result<(), OpError> {
        match self {
            Window::Open => Ok(()),
            Window::Recovering { left_ms } => Err(OpError::Recovering { left_ms }),
        }
    }
}

/// Reply of [`acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// `owner` holds the lock: a fresh acquisition or a re-entry.
    Granted { token: i64, reentered: bool },
    /// Another owner holds it.
    Busy,
}

/// A snapshot of a held lock for `LOCK.INFO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub owner: Vec<u8>,
    pub holds: u32,
    pub token: i64,
    pub pttl_ms: u64,
}

/// What [`expire_if_due`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every lease on the lock ended: the lock and its key were removed.
    Lock { deadline: u64 },
    /// These holders' leases ended (owner, lease-index entry); others hold
    /// on.
    Holders(Vec<(Vec<u8>, u64)>),
}

/// Removes the holds whose lease has ended: the whole lock (and its key)
/// when every one has. The adapter calls it before every write command and
/// from the expiry timer.
pub fn expire_if_due(node: &mut Node, slot: &mut impl Slot, clock: &impl Clock) -> Option<Ended> {
    let now = clock.monotonic_ms();
    let lock = slot.lock()?;
    if lock.all_expired(now) {
        let deadline = lock.holders().iter().map(Holder::deadline).max()?;
        slot.delete();
        node.stats.expired += 1;
        return Some(Ended::Lock { deadline });
    }
    let ended: Vec<Vec<u8>> = lock
        .holders()
        .iter()
        .filter(|h| h.has_expired(now))
        .map(|h| h.owner().to_vec())
        .collect();
    if ended.is_empty() {
        return None;
    }
    let mut gone = Vec::with_capacity(ended.len());
    for owner in ended {
        if let Some(holder) = lock.remove_holder(&owner) {
            gone.push((owner, holder.expiry_id()));
            node.stats.holders_expired += 1;
        }
    }
    Some(Ended::Holders(gone))
}

/// A token for a fresh lock in `slot`: above every token this node issued
/// or saw, and above the token of the lock the slot held before (the
/// adapter raises the counter as a lock arrives; this keeps the rule local
/// for any slot). Changes nothing when it fails.
fn fresh_token(node: &mut Node, slot: &mut impl Slot, clock: &impl Clock) -> Result<i64, OpError> {
    let mut tokens = node.tokens;
    if let Some(previous) = slot.lock() {
        for holder in previous.holders() {
            tokens.raise(holder.token());
        }
    }
    let token = tokens.issue(clock.wall_us())?;
    node.tokens = tokens;
    Ok(token)
}

/// The lock in `slot` if a lease on it has not ended.
fn live<'a>(slot: &'a mut impl Slot, clock: &impl Clock) -> Option<&'a mut Lock> {
    let now = clock.monotonic_ms();
    slot.lock().filter(|lock| !lock.all_expired(now))
}

/// `owner`'s hold on the lock in `slot`, if its lease has not ended.
fn live_holder<'a>(
    slot: &'a mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
) -> Option<&'a mut Holder> {
    let now = clock.monotonic_ms();
    live(slot, clock)?
        .holder_mut(owner)
        .filter(|holder| !holder.has_expired(now))
}

/// The latest lease end among the lock's holders (the slot held a lock
/// whose leases have all ended, or none).
fn previous_deadline(slot: &mut impl Slot) -> Option<u64> {
    slot.lock()?.holders().iter().map(Holder::deadline).max()
}

/// What `LOCK.ACQUIRE` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    pub mode: Mode,
    /// `SHARED LIMIT n`.
    pub limit: Option<NonZeroU32>,
}

impl<'a> Request<'a> {
    /// An exclusive request.
    pub fn exclusive(owner: &'a [u8], ttl_ms: u64) -> Self {
        Request {
            owner,
            ttl_ms,
            mode: Mode::Exclusive,
            limit: None,
        }
    }
}

/// What besides the lock decides whether a request is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The node's recovery window.
    pub window: Window,
    /// Someone waits in the key's queue: a shared request never overtakes
    /// a queued request (so writers do not starve).
    pub queued: bool,
    /// `lock.max-holders`: the most holders of a shared lock without a
    /// `LIMIT`.
    pub max_holders: u32,
}

impl Admission {
    /// Nobody waiting, the default number of holders, in `window`.
    pub fn in_window(window: Window) -> Self {
        Admission {
            window,
            queued: false,
            max_holders: crate::args::Limits::default().max_holders,
        }
    }
}

/// `LOCK.ACQUIRE` of an exclusive lock (see [`acquire_with`]).
pub fn acquire(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    ttl_ms: u64,
    window: Window,
) -> Result<Outcome<Acquired>, OpError> {
    let request = Request::exclusive(owner, ttl_ms);
    acquire_with(node, slot, clock, &request, &Admission::in_window(window))
}

/// `LOCK.ACQUIRE`: a fresh hold (a new lock, or a new holder of a shared
/// lock), or one more hold for the owner with its lease renewed to
/// `ttl_ms`; [`Acquired::Busy`] when it cannot be granted now.
///
/// - Exclusive: granted when nobody holds the lock.
/// - Shared: granted when the lock is free, or shared with the same
///   `LIMIT` (an error otherwise), fewer holders than the limit (or
///   `max_holders`), and nobody waiting in its queue.
/// - Re-entry in the same mode adds a hold and renews the owner's lease;
///   the other mode is an error (no upgrade or downgrade).
///
/// Inside the node's recovery window (`window`) a fresh hold and a
/// re-entry are both refused: after a restart that lost writes, the lock
/// this node holds under `owner` may be older than a grant the node forgot
/// (a release and another owner's acquisition), and a re-entry would hand
/// `owner` that old, smaller token while the other holder still believes
/// it holds the lock. `EXTEND`, `RELEASE` and `FENCE` stay allowed: they
/// never grant anything.
pub fn acquire_with(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    request: &Request,
    admission: &Admission,
) -> Result<Outcome<Acquired>, OpError> {
    let now = clock.monotonic_ms();
    let deadline = lease::deadline_after(clock, request.ttl_ms);
    let Some(lock) = live(slot, clock) else {
        // Free: a new lock.
        admission.window.check()?;
        let token = fresh_token(node, slot, clock)?;
        let previous_deadline = previous_deadline(slot);
        let holder = Holder::new(request.owner, 1, token, deadline);
        slot.store(match request.mode {
            Mode::Exclusive => Lock::exclusive(request.owner, 1, token, deadline),
            Mode::Shared => Lock::shared(request.limit, holder),
        });
        node.stats.acquired += 1;
        if request.mode == Mode::Shared {
            node.stats.shared_grants += 1;
        }
        return Ok(Outcome {
            reply: Acquired::Granted {
                token,
                reentered: false,
            },
            change: Change::Stored { previous_deadline },
        });
    };
    let (mode, limit) = (lock.mode(), lock.limit());
    let shared_mismatch =
        mode == Mode::Shared && request.mode == Mode::Shared && limit != request.limit;
    if let Some(holder) = lock
        .holder_mut(request.owner)
        .filter(|holder| !holder.has_expired(now))
    {
        // The owner holds it: re-entry, in the same mode only.
        if mode != request.mode {
            return Err(OpError::ModeHeld { held: mode });
        }
        if shared_mismatch {
            return Err(OpError::LimitMismatch {
                asked: request.limit,
                lock: limit,
            });
        }
        admission.window.check()?;
        let holds = holder.holds().checked_add(1).ok_or(OpError::TooManyHolds)?;
        let previous_deadline = Some(holder.deadline());
        holder.set_holds(holds);
        holder.set_deadline(deadline);
        node.stats.reentered += 1;
        return Ok(Outcome {
            reply: Acquired::Granted {
                token: holder.token(),
                reentered: true,
            },
            change: Change::Stored { previous_deadline },
        });
    }
    // Others hold it: only a shared request may join shared holders.
    if shared_mismatch {
        return Err(OpError::LimitMismatch {
            asked: request.limit,
            lock: limit,
        });
    }
    let joins = mode == Mode::Shared && request.mode == Mode::Shared && !admission.queued;
    let room = {
        let most = limit.map_or(admission.max_holders, NonZeroU32::get);
        let holding = lock
            .holders()
            .iter()
            .filter(|h| !h.has_expired(now))
            .count();
        holding < usize::try_from(most).unwrap_or(usize::MAX)
    };
    if !(joins && room) {
        node.stats.contended += 1;
        if joins && limit.is_some() {
            node.stats.semaphore_full += 1;
        }
        return Ok(Outcome {
            reply: Acquired::Busy,
            change: Change::None,
        });
    }
    admission.window.check()?;
    let token = fresh_token(node, slot, clock)?;
    let Some(lock) = slot.lock() else {
        return Ok(Outcome {
            reply: Acquired::Busy,
            change: Change::None,
        });
    };
    // An ended hold of the same owner (not removed yet) makes way.
    lock.remove_holder(request.owner);
    lock.add_holder(Holder::new(request.owner, 1, token, deadline));
    node.stats.acquired += 1;
    node.stats.shared_grants += 1;
    Ok(Outcome {
        reply: Acquired::Granted {
            token,
            reentered: false,
        },
        change: Change::Joined,
    })
}

/// Serves a waiter at the head of a queue, as its `LOCK.ACQUIRE` would be
/// served now with nobody ahead of it (a fresh grant, or a re-entry when
/// another of the owner's waiters was granted just before). Returns `None`
/// (and changes nothing) if it cannot be granted now.
pub fn grant_with(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    request: &Request,
    admission: &Admission,
) -> Result<Option<Outcome<i64>>, OpError> {
    let admission = Admission {
        queued: false,
        ..*admission
    };
    let (contended, full) = (node.stats.contended, node.stats.semaphore_full);
    let outcome = acquire_with(node, slot, clock, request, &admission)?;
    Ok(match outcome.reply {
        Acquired::Granted { token, reentered } => {
            if !reentered {
                node.stats.wait_grants += 1;
            }
            Some(Outcome {
                reply: token,
                change: outcome.change,
            })
        }
        Acquired::Busy => {
            // A waiter that stays is no new contention.
            node.stats.contended = contended;
            node.stats.semaphore_full = full;
            None
        }
    })
}

/// [`grant_with`] of an exclusive request.
pub fn grant(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    ttl_ms: u64,
    window: Window,
) -> Result<Option<Outcome<i64>>, OpError> {
    let request = Request::exclusive(owner, ttl_ms);
    grant_with(node, slot, clock, &request, &Admission::in_window(window))
}

/// Runs `op` (`LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.FENCE`) for `owner`,
/// whose id is checked against the lock rather than the setting alone: a
/// holder is never locked out of its own hold by a `lock.max-owner-bytes`
/// lowered after its grant, so an owner longer than `max_owner_bytes` is
/// refused (the argument error, nothing changed) only when it does not hold
/// the lock here (never did, or its lease ended).
pub fn as_holder<S: Slot, C: Clock, R>(
    node: &mut Node,
    slot: &mut S,
    clock: &C,
    owner: &[u8],
    max_owner_bytes: usize,
    op: impl FnOnce(&mut Node, &mut S, &C) -> Outcome<R>,
) -> Outcome<Result<R, ArgError>> {
    if let Err(error) = check_owner_length(owner, max_owner_bytes) {
        if live_holder(slot, clock, owner).is_none() {
            return Outcome {
                reply: Err(error),
                change: Change::None,
            };
        }
    }
    let outcome = op(node, slot, clock);
    Outcome {
        reply: Ok(outcome.reply),
        change: outcome.change,
    }
}

/// `LOCK.RELEASE`: drops one hold (or all with `all`); the reply is the
/// number of holds left, `None` when `owner` does not hold the lock.
pub fn release(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    all: bool,
) -> Outcome<Option<u32>> {
    let now = clock.monotonic_ms();
    let Some(lock) = live(slot, clock) else {
        return Outcome {
            reply: None,
            change: Change::None,
        };
    };
    let Some(holder) = lock
        .holder_mut(owner)
        .filter(|holder| !holder.has_expired(now))
    else {
        return Outcome {
            reply: None,
            change: Change::None,
        };
    };
    let left = if all {
        0
    } else {
        holder.holds().saturating_sub(1)
    };
    let deadline = holder.deadline();
    if left > 0 {
        holder.set_holds(left);
        return Outcome {
            reply: Some(left),
            change: Change::Stored {
                previous_deadline: Some(deadline),
            },
        };
    }
    node.stats.released += 1;
    // The last holder leaving removes the key; another leaves the others
    // holding.
    let change = match lock.remove_holder(owner) {
        Some(gone) => Change::Left {
            deadline,
            entry: gone.expiry_id(),
        },
        None => {
            slot.delete();
            Change::Deleted { deadline }
        }
    };
    Outcome {
        reply: Some(0),
        change,
    }
}

/// Takes back one hold that a waiter was granted but never heard of (its
/// client went away before the reply reached it): only if `owner` still
/// holds the lock with that very `token`, so a later holder, or the same
/// owner's later fresh grant, is never touched. The reply says whether a
/// hold was taken back.
pub fn revoke(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    token: i64,
) -> Outcome<bool> {
    let same_grant = live_holder(slot, clock, owner).is_some_and(|held| held.token() == token);
    if !same_grant {
        return Outcome {
            reply: false,
            change: Change::None,
        };
    }
    node.stats.wait_grants_undelivered += 1;
    let outcome = release(node, slot, clock, owner, false);
    Outcome {
        reply: true,
        change: outcome.change,
    }
}

/// `LOCK.EXTEND`: the holder's lease now ends `ttl_ms` from now.
pub fn extend(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    ttl_ms: u64,
) -> Outcome<bool> {
    let (reply, change) = match live_holder(slot, clock, owner) {
        Some(lock) => {
            let previous_deadline = Some(lock.deadline());
            lock.set_deadline(lease::deadline_after(clock, ttl_ms));
            node.stats.extended += 1;
            (true, Change::Stored { previous_deadline })
        }
        _ => (false, Change::None),
    };
    Outcome { reply, change }
}

/// `LOCK.FENCE`: the holder's token, first raised to at least `at_least`
/// (and this node's counter with it, so later tokens here exceed it).
pub fn fence(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    at_least: Option<i64>,
) -> Outcome<Option<i64>> {
    let (reply, change) = match live_holder(slot, clock, owner) {
        Some(lock) => {
            let mut change = Change::None;
            if let Some(floor) = at_least {
                node.tokens.raise(floor);
                if lock.token() < floor {
                    lock.set_token(floor);
                    change = Change::Stored {
                        previous_deadline: Some(lock.deadline()),
                    };
                }
            }
            node.stats.fenced += 1;
            (Some(lock.token()), change)
        }
        _ => (None, Change::None),
    };
    Outcome { reply, change }
}

/// `LOCK.INFO`: the held lock (its first holder whose lease runs), or
/// `None` if there is none or its leases ended.
pub fn info(slot: &mut impl Slot, clock: &impl Clock) -> Option<Snapshot> {
    let now = clock.monotonic_ms();
    let lock = live(slot, clock)?
        .holders()
        .iter()
        .find(|holder| !holder.has_expired(now))?;
    Some(Snapshot {
        owner: lock.owner().to_vec(),
        holds: lock.holds(),
        token: lock.token(),
        pttl_ms: lease::remaining_ms(clock, lock.deadline()),
    })
}

/// Applies a replicated effect (from the primary or the AOF): `owner`'s
/// hold is exactly this, its lease ending at wall-clock `wall_end_ms`. An
/// exclusive hold replaces whatever the slot held; a shared one (`shared`:
/// the lock's limit) replaces the owner's hold in a shared lock, joins it,
/// or starts one.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    owner: &[u8],
    holds: u32,
    token: i64,
    wall_end_ms: i64,
    shared: Option<Option<NonZeroU32>>,
) -> Outcome<()> {
    node.tokens.raise(token);
    let deadline = lease::from_wall_ms(clock, wall_end_ms);
    let stored = |previous_deadline| Outcome {
        reply: (),
        change: Change::Stored { previous_deadline },
    };
    let Some(limit) = shared else {
        let previous_deadline = previous_deadline(slot);
        slot.store(Lock::exclusive(owner, holds, token, deadline));
        return stored(previous_deadline);
    };
    if let Some(lock) = slot
        .lock()
        .filter(|lock| lock.mode() == Mode::Shared && lock.limit() == limit)
    {
        if let Some(holder) = lock.holder_mut(owner) {
            let previous = holder.deadline();
            holder.set_holds(holds);
            holder.set_token(token);
            holder.set_deadline(deadline);
            return stored(Some(previous));
        }
        lock.add_holder(Holder::new(owner, holds, token, deadline));
        return Outcome {
            reply: (),
            change: Change::Joined,
        };
    }
    let previous_deadline = previous_deadline(slot);
    slot.store(Lock::shared(
        limit,
        Holder::new(owner, holds, token, deadline),
    ));
    stored(previous_deadline)
}

/// Applies `LOCK.DROP`: `owner`'s hold leaves the lock (the key goes with
/// its last holder).
pub fn drop_holder(slot: &mut impl Slot, owner: &[u8]) -> Outcome<()> {
    let Some(lock) = slot.lock() else {
        return Outcome {
            reply: (),
            change: Change::None,
        };
    };
    let Some(holder) = lock.holder(owner) else {
        return Outcome {
            reply: (),
            change: Change::None,
        };
    };
    let (deadline, entry) = (holder.deadline(), holder.expiry_id());
    let change = match lock.remove_holder(owner) {
        Some(_) => Change::Left { deadline, entry },
        None => {
            slot.delete();
            Change::Deleted { deadline }
        }
    };
    Outcome { reply: (), change }
}

/// A live holder as `LOCK.HOLDERS` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderView {
    pub owner: Vec<u8>,
    pub holds: u32,
    pub token: i64,
    pub pttl_ms: u64,
}

/// A held lock as `LOCK.INFO` and `LOCK.HOLDERS` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub mode: Mode,
    pub limit: Option<NonZeroU32>,
    /// Holders whose lease runs, in grant order.
    pub holders: Vec<HolderView>,
}

/// The held lock and its live holders (at most `count`), or `None` if
/// there is none or every lease on it ended.
pub fn view(slot: &mut impl Slot, clock: &impl Clock, count: usize) -> Option<View> {
    let now = clock.monotonic_ms();
    let lock = live(slot, clock)?;
    let holders = lock
        .holders()
        .iter()
        .filter(|h| !h.has_expired(now))
        .take(count)
        .map(|h| HolderView {
            owner: h.owner().to_vec(),
            holds: h.holds(),
            token: h.token(),
            pttl_ms: lease::remaining_ms(clock, h.deadline()),
        })
        .collect();
    Some(View {
        mode: lock.mode(),
        limit: lock.limit(),
        holders,
    })
}

/// The token of `owner`'s hold on the lock in `slot`, if its lease runs.
pub fn token_of(slot: &mut impl Slot, clock: &impl Clock, owner: &[u8]) -> Option<i64> {
    live_holder(slot, clock, owner).map(|holder| holder.token())
}

/// How many holders of the lock in `slot` hold it now.
pub fn holders_now(slot: &mut impl Slot, clock: &impl Clock) -> usize {
    let now = clock.monotonic_ms();
    live(slot, clock).map_or(0, |lock| {
        lock.holders()
            .iter()
            .filter(|h| !h.has_expired(now))
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::token::MAX_TOKEN;

    use crate::testing::MemorySlot;

    const WALL: i64 = 1_700_000_000_000;

    fn setup() -> (Node, MemorySlot, ManualClock) {
        (
            Node::default(),
            MemorySlot::default(),
            ManualClock::new(100, WALL),
        )
    }

    fn granted(outcome: Result<Outcome<Acquired>, OpError>) -> (i64, bool) {
        match outcome.map(|o| o.reply) {
            Ok(Acquired::Granted { token, reentered }) => (token, reentered),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn a_holder_is_not_locked_out_by_a_lowered_owner_limit() {
        let (mut node, mut slot, clock) = setup();
        let long: &[u8] = b"a-long-owner";
        granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            long,
            1_000,
            Window::Open,
        ));
        // The limit is now 4 bytes: the holder still extends, fences and
        // releases; another long owner gets the error and changes nothing.
        let too_long = Err(ArgError::OwnerTooLong { max: 4 });
        let other: &[u8] = b"another-long";
        let refused = as_holder(&mut node, &mut slot, &clock, other, 4, |n, s, c| {
            release(n, s, c, other, true)
        });
        assert_eq!(refused.reply, too_long);
        assert_eq!(refused.change, Change::None);
        let extended = as_holder(&mut node, &mut slot, &clock, long, 4, |n, s, c| {
            extend(n, s, c, long, 5_000)
        });
        assert_eq!(extended.reply, Ok(true));
        let fenced = as_holder(&mut node, &mut slot, &clock, long, 4, |n, s, c| {
            fence(n, s, c, long, None)
        });
        assert!(matches!(fenced.reply, Ok(Some(_))));
        // A short owner that holds nothing gets the operation's own answer.
        let short = as_holder(&mut node, &mut slot, &clock, b"me", 4, |n, s, c| {
            release(n, s, c, b"me", false)
        });
        assert_eq!(short.reply, Ok(None));
        let released = as_holder(&mut node, &mut slot, &clock, long, 4, |n, s, c| {
            release(n, s, c, long, false)
        });
        assert_eq!(released.reply, Ok(Some(0)));
        // Once it no longer holds the lock, the long owner is refused.
        let after = as_holder(&mut node, &mut slot, &clock, long, 4, |n, s, c| {
            release(n, s, c, long, false)
        });
        assert_eq!(after.reply, too_long);
    }

    #[test]
    fn a_long_owner_whose_lease_ended_is_no_holder() {
        let (mut node, mut slot, clock) = setup();
        let long: &[u8] = b"a-long-owner";
        granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            long,
            10,
            Window::Open,
        ));
        clock.advance_ms(11);
        let outcome = as_holder(&mut node, &mut slot, &clock, long, 4, |n, s, c| {
            extend(n, s, c, long, 1_000)
        });
        assert_eq!(outcome.reply, Err(ArgError::OwnerTooLong { max: 4 }));
        assert_eq!(outcome.change, Change::None);
    }

    #[test]
    fn a_fresh_token_is_above_the_token_of_the_lock_the_slot_held() {
        let (mut node, mut slot, clock) = setup();
        // A lock that arrived from elsewhere with a token above the counter.
        slot.0 = Some(Lock::exclusive(b"a", 1, WALL * 1000 + 5_000, 50));
        let (token, reentered) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"b",
            1_000,
            Window::Open,
        ));
        assert!(!reentered);
        assert_eq!(token, WALL * 1000 + 5_001);
        // A refusal raises nothing.
        let mut node = Node::default();
        slot.0 = Some(Lock::exclusive(b"a", 1, MAX_TOKEN, 50));
        assert_eq!(
            acquire(&mut node, &mut slot, &clock, b"b", 1_000, Window::Open),
            Err(OpError::TokensExhausted)
        );
        assert_eq!(node.tokens.last(), 0);
    }

    #[test]
    fn a_waiter_whose_owner_holds_the_lock_by_now_reenters() {
        let (mut node, mut slot, clock) = setup();
        let first = grant(&mut node, &mut slot, &clock, b"x", 1_000, Window::Open)
            .unwrap()
            .unwrap();
        clock.advance_ms(10);
        let second = grant(&mut node, &mut slot, &clock, b"x", 2_000, Window::Open)
            .unwrap()
            .unwrap();
        assert_eq!(second.reply, first.reply, "a re-entry keeps the token");
        let lock = slot.sole().unwrap().clone();
        assert_eq!((lock.holds(), lock.deadline()), (2, 100 + 10 + 2_000));
        assert_eq!(node.stats.reentered, 1);
        // Another owner still waits.
        assert_eq!(
            grant(&mut node, &mut slot, &clock, b"y", 1_000, Window::Open),
            Ok(None)
        );
        // Not while recovering.
        assert_eq!(
            grant(
                &mut node,
                &mut slot,
                &clock,
                b"x",
                1_000,
                Window::Recovering { left_ms: 5 }
            ),
            Err(OpError::Recovering { left_ms: 5 })
        );
    }

    #[test]
    fn revoke_takes_back_one_hold_of_that_grant_only() {
        let (mut node, mut slot, clock) = setup();
        let (token, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            1_000,
            Window::Open,
        ));
        // Another owner, or another token: nothing changes.
        let before = slot.0.clone();
        for (owner, t) in [(&b"b"[..], token), (b"a", token + 1)] {
            let outcome = revoke(&mut node, &mut slot, &clock, owner, t);
            assert_eq!((outcome.reply, outcome.change), (false, Change::None));
            assert_eq!(slot.0, before);
        }
        // The same owner re-entered meanwhile: only the granted hold goes.
        granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            1_000,
            Window::Open,
        ));
        let outcome = revoke(&mut node, &mut slot, &clock, b"a", token);
        assert!(outcome.reply);
        assert_eq!(slot.sole().map(Holder::holds), Some(1));
        let outcome = revoke(&mut node, &mut slot, &clock, b"a", token);
        assert_eq!(outcome.change, Change::Deleted { deadline: 1_100 });
        assert!(slot.0.is_none());
        assert_eq!(node.stats.wait_grants_undelivered, 2);
        // A lease that already ended is not revoked (expiry handles it).
        let (token, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            10,
            Window::Open,
        ));
        clock.advance_ms(11);
        assert!(!revoke(&mut node, &mut slot, &clock, b"a", token).reply);
    }

    #[test]
    fn fresh_acquire_creates_one_hold_with_a_clock_floored_token() {
        let (mut node, mut slot, clock) = setup();
        let outcome = acquire(&mut node, &mut slot, &clock, b"a", 1_000, Window::Open);
        assert_eq!(
            outcome.map(|o| o.change),
            Ok(Change::Stored {
                previous_deadline: None
            })
        );
        let lock = slot.sole().unwrap().clone();
        assert_eq!(
            (lock.owner(), lock.holds(), lock.deadline()),
            (&b"a"[..], 1, 1_100)
        );
        assert_eq!(lock.token(), WALL * 1000);
        assert_eq!(node.stats.acquired, 1);
    }

    #[test]
    fn reentry_keeps_the_token_adds_a_hold_and_renews_the_lease() {
        let (mut node, mut slot, clock) = setup();
        let (first, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            1_000,
            Window::Open,
        ));
        clock.advance_ms(600);
        let outcome = acquire(&mut node, &mut slot, &clock, b"a", 300, Window::Open);
        assert_eq!(
            outcome.map(|o| o.change),
            Ok(Change::Stored {
                previous_deadline: Some(1_100)
            })
        );
        let lock = slot.sole().unwrap().clone();
        assert_eq!(
            (lock.token(), lock.holds(), lock.deadline()),
            (first, 2, 1_000)
        );
        assert_eq!(node.stats.reentered, 1);
    }

    #[test]
    fn another_owner_is_refused_and_nothing_changes() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 1_000, Window::Open).unwrap();
        let before = slot.0.clone();
        let tokens = node.tokens;
        let outcome = acquire(&mut node, &mut slot, &clock, b"b", 1_000, Window::Open).unwrap();
        assert_eq!(
            (outcome.reply, outcome.change),
            (Acquired::Busy, Change::None)
        );
        assert_eq!(slot.0, before);
        assert_eq!(node.tokens, tokens);
        assert_eq!(node.stats.contended, 1);
    }

    #[test]
    fn an_ended_lease_frees_the_lock_for_others_with_a_higher_token() {
        let (mut node, mut slot, clock) = setup();
        let (first, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            1_000,
            Window::Open,
        ));
        clock.advance_ms(1_001);
        assert_eq!(
            expire_if_due(&mut node, &mut slot, &clock),
            Some(Ended::Lock { deadline: 1_100 })
        );
        assert_eq!(node.stats.expired, 1);
        let (second, reentered) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"b",
            1_000,
            Window::Open,
        ));
        assert!(second > first && !reentered);
    }

    #[test]
    fn a_lease_ends_at_the_first_reading_past_its_deadline() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 10, Window::Open).unwrap();
        clock.advance_ms(9);
        assert_eq!(info(&mut slot, &clock).map(|s| s.pttl_ms), Some(1));
        // Readings are truncated: at a reading of its deadline up to a
        // millisecond of the lease may be left, so it still holds.
        clock.advance_ms(1);
        assert_eq!(info(&mut slot, &clock).map(|s| s.pttl_ms), Some(0));
        assert_eq!(expire_if_due(&mut node, &mut slot, &clock), None);
        clock.advance_ms(1);
        assert_eq!(info(&mut slot, &clock), None);
        assert_eq!(
            expire_if_due(&mut node, &mut slot, &clock),
            Some(Ended::Lock { deadline: 110 })
        );
        assert!(slot.0.is_none());
    }

    #[test]
    fn wall_clock_steps_neither_end_nor_lengthen_a_lease() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 10_000, Window::Open).unwrap();
        clock.step_wall_ms(3_600_000);
        assert_eq!(info(&mut slot, &clock).map(|s| s.pttl_ms), Some(10_000));
        assert!(matches!(
            acquire(&mut node, &mut slot, &clock, b"b", 10, Window::Open)
                .unwrap()
                .reply,
            Acquired::Busy
        ));
        clock.step_wall_ms(-7_200_000);
        clock.advance_ms(10_001);
        assert_eq!(info(&mut slot, &clock), None);
        let (token, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"b",
            10,
            Window::Open,
        ));
        assert!(token > WALL * 1000, "a backward step must not lower tokens");
    }

    #[test]
    fn release_counts_down_then_deletes() {
        let (mut node, mut slot, clock) = setup();
        for _ in 0..3 {
            acquire(&mut node, &mut slot, &clock, b"a", 1_000, Window::Open).unwrap();
        }
        assert_eq!(
            release(&mut node, &mut slot, &clock, b"b", false).reply,
            None
        );
        let once = release(&mut node, &mut slot, &clock, b"a", false);
        assert_eq!(
            (once.reply, once.change),
            (
                Some(2),
                Change::Stored {
                    previous_deadline: Some(1_100)
                }
            )
        );
        let all = release(&mut node, &mut slot, &clock, b"a", true);
        assert_eq!(
            (all.reply, all.change),
            (Some(0), Change::Deleted { deadline: 1_100 })
        );
        assert!(slot.0.is_none());
        assert_eq!(
            release(&mut node, &mut slot, &clock, b"a", false).reply,
            None
        );
        assert_eq!(node.stats.released, 1);
    }

    #[test]
    fn an_ended_lease_is_absent_even_before_it_is_removed() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 10, Window::Open).unwrap();
        clock.advance_ms(11);
        assert_eq!(
            release(&mut node, &mut slot, &clock, b"a", false).reply,
            None
        );
        assert!(!extend(&mut node, &mut slot, &clock, b"a", 10).reply);
        assert_eq!(fence(&mut node, &mut slot, &clock, b"a", None).reply, None);
        let outcome = acquire(&mut node, &mut slot, &clock, b"b", 10, Window::Open).unwrap();
        assert_eq!(
            outcome.change,
            Change::Stored {
                previous_deadline: Some(110)
            }
        );
    }

    #[test]
    fn extend_only_for_the_holder() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 100, Window::Open).unwrap();
        assert!(!extend(&mut node, &mut slot, &clock, b"b", 5_000).reply);
        clock.advance_ms(50);
        let outcome = extend(&mut node, &mut slot, &clock, b"a", 5_000);
        assert!(outcome.reply);
        assert_eq!(info(&mut slot, &clock).map(|s| s.pttl_ms), Some(5_000));
    }

    #[test]
    fn fence_at_least_raises_the_lock_and_the_node() {
        let (mut node, mut slot, clock) = setup();
        let (token, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            1_000,
            Window::Open,
        ));
        assert_eq!(
            fence(&mut node, &mut slot, &clock, b"a", None).reply,
            Some(token)
        );
        assert_eq!(
            fence(&mut node, &mut slot, &clock, b"b", Some(token * 2)).reply,
            None
        );
        assert_eq!(node.tokens.last(), token, "a refused fence changes nothing");
        let raised = fence(&mut node, &mut slot, &clock, b"a", Some(token * 2));
        assert_eq!(raised.reply, Some(token * 2));
        assert_eq!(
            raised.change,
            Change::Stored {
                previous_deadline: Some(1_100)
            }
        );
        let lower = fence(&mut node, &mut slot, &clock, b"a", Some(5));
        assert_eq!((lower.reply, lower.change), (Some(token * 2), Change::None));
        release(&mut node, &mut slot, &clock, b"a", true);
        let (next, _) = granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"c",
            1_000,
            Window::Open,
        ));
        assert!(next > token * 2);
    }

    #[test]
    fn apply_reproduces_the_primary_lock_and_raises_the_counter() {
        let (mut node, mut slot, clock) = setup();
        apply(
            &mut node,
            &mut slot,
            &clock,
            b"a",
            3,
            42,
            WALL + 2_500,
            None,
        );
        let lock = slot.sole().unwrap().clone();
        assert_eq!(
            (lock.holds(), lock.token(), lock.deadline()),
            (3, 42, 2_600)
        );
        assert!(node.tokens.last() >= 42);
    }

    #[test]
    fn grant_only_a_free_slot() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 1_000, Window::Open).unwrap();
        assert_eq!(
            grant(&mut node, &mut slot, &clock, b"w", 500, Window::Open),
            Ok(None)
        );
        release(&mut node, &mut slot, &clock, b"a", false);
        let outcome = grant(&mut node, &mut slot, &clock, b"w", 500, Window::Open)
            .unwrap()
            .unwrap();
        assert!(slot.0.as_ref().unwrap().holder(b"w").is_some());
        assert_eq!(outcome.reply, slot.sole().unwrap().token());
        assert_eq!(node.stats.wait_grants, 1);
    }

    #[test]
    fn recovery_window_refuses_fresh_locks_and_reentry() {
        let (mut node, mut slot, clock) = setup();
        acquire(&mut node, &mut slot, &clock, b"a", 1_000, Window::Open).unwrap();
        let before = slot.0.clone();
        assert_eq!(
            acquire(
                &mut node,
                &mut slot,
                &clock,
                b"a",
                5_000,
                Window::Recovering { left_ms: 50 }
            ),
            Err(OpError::Recovering { left_ms: 50 })
        );
        assert_eq!(slot.0, before, "a refused re-entry changes nothing");
        // What never grants anything still works.
        assert!(extend(&mut node, &mut slot, &clock, b"a", 1_000).reply);
        assert!(fence(&mut node, &mut slot, &clock, b"a", None)
            .reply
            .is_some());
        assert!(matches!(
            acquire(
                &mut node,
                &mut slot,
                &clock,
                b"b",
                10,
                Window::Recovering { left_ms: 50 }
            )
            .map(|o| o.reply),
            Ok(Acquired::Busy)
        ));
        release(&mut node, &mut slot, &clock, b"a", true);
        let tokens = node.tokens;
        assert_eq!(
            acquire(
                &mut node,
                &mut slot,
                &clock,
                b"b",
                10,
                Window::Recovering { left_ms: 50 }
            ),
            Err(OpError::Recovering { left_ms: 50 })
        );
        assert_eq!(
            grant(
                &mut node,
                &mut slot,
                &clock,
                b"b",
                10,
                Window::Recovering { left_ms: 50 }
            ),
            Err(OpError::Recovering { left_ms: 50 })
        );
        assert!(slot.0.is_none());
        assert_eq!(node.tokens, tokens);
        assert_eq!(
            OpError::Recovering { left_ms: 50 }.message(),
            "RECOVERING this node refuses new locks for another 50 ms (lock.recovery-ms)"
        );
    }

    fn shared(owner: &[u8], limit: u32) -> Request<'_> {
        Request {
            owner,
            ttl_ms: 1_000,
            mode: Mode::Shared,
            limit: NonZeroU32::new(limit),
        }
    }

    fn take(
        node: &mut Node,
        slot: &mut MemorySlot,
        clock: &ManualClock,
        request: Request,
        queued: bool,
    ) -> Result<Outcome<Acquired>, OpError> {
        let admission = Admission {
            window: Window::Open,
            queued,
            max_holders: 3,
        };
        acquire_with(node, slot, clock, &request, &admission)
    }

    #[test]
    fn readers_share_a_lock_a_writer_waits_and_each_reader_has_its_own_hold() {
        let (mut node, mut slot, clock) = setup();
        let (r1, _) = granted(take(&mut node, &mut slot, &clock, shared(b"r1", 0), false));
        clock.advance_ms(10);
        let (r2, _) = granted(take(&mut node, &mut slot, &clock, shared(b"r2", 0), false));
        assert!(r2 > r1);
        let writer = take(
            &mut node,
            &mut slot,
            &clock,
            Request::exclusive(b"w", 1_000),
            false,
        );
        assert_eq!(writer.map(|o| o.reply), Ok(Acquired::Busy));
        // Re-entry by r1: its token, its lease renewed, r2's untouched.
        clock.advance_ms(10);
        let (again, reentered) =
            granted(take(&mut node, &mut slot, &clock, shared(b"r1", 0), false));
        assert_eq!((again, reentered), (r1, true));
        let lock = slot.0.clone().unwrap();
        let deadlines: Vec<(u32, u64)> = lock
            .holders()
            .iter()
            .map(|h| (h.holds(), h.deadline()))
            .collect();
        assert_eq!(deadlines, vec![(2, 1_120), (1, 1_110)]);
        // Without a LIMIT, lock.max-holders (3 here) caps the readers.
        granted(take(&mut node, &mut slot, &clock, shared(b"r3", 0), false));
        let fourth = take(&mut node, &mut slot, &clock, shared(b"r4", 0), false);
        assert_eq!(fourth.map(|o| o.reply), Ok(Acquired::Busy));
        assert_eq!(node.stats.shared_grants, 3);
    }

    #[test]
    fn no_upgrade_no_downgrade_and_the_limit_must_match() {
        let (mut node, mut slot, clock) = setup();
        granted(take(&mut node, &mut slot, &clock, shared(b"r", 2), false));
        let before = slot.0.clone();
        assert_eq!(
            take(
                &mut node,
                &mut slot,
                &clock,
                Request::exclusive(b"r", 1_000),
                false
            ),
            Err(OpError::ModeHeld { held: Mode::Shared })
        );
        for (owner, limit, message) in [
            (
                &b"r"[..],
                3,
                "ERR LIMIT 3 does not match the lock's LIMIT 2",
            ),
            (
                b"other",
                0,
                "ERR LIMIT (none) does not match the lock's LIMIT 2",
            ),
        ] {
            let refused = take(&mut node, &mut slot, &clock, shared(owner, limit), false);
            assert_eq!(refused.map_err(|e| e.message()), Err(message.to_string()));
        }
        assert_eq!(slot.0, before, "a refusal changes nothing");
        let (mut node, mut slot, clock) = setup();
        granted(acquire(
            &mut node,
            &mut slot,
            &clock,
            b"w",
            1_000,
            Window::Open,
        ));
        assert_eq!(
            take(&mut node, &mut slot, &clock, shared(b"w", 0), false).map_err(|e| e.message()),
            Err("ERR owner holds this lock in exclusive mode".to_string())
        );
    }

    #[test]
    fn a_semaphore_refuses_past_its_limit_and_a_queue_stops_newcomers() {
        let (mut node, mut slot, clock) = setup();
        granted(take(&mut node, &mut slot, &clock, shared(b"a", 2), false));
        let queued = take(&mut node, &mut slot, &clock, shared(b"b", 2), true);
        assert_eq!(
            queued.map(|o| o.reply),
            Ok(Acquired::Busy),
            "nobody overtakes a queue"
        );
        assert_eq!(node.stats.semaphore_full, 0);
        granted(take(&mut node, &mut slot, &clock, shared(b"b", 2), false));
        let full = take(&mut node, &mut slot, &clock, shared(b"c", 2), false);
        assert_eq!(full.map(|o| o.reply), Ok(Acquired::Busy));
        assert_eq!(node.stats.semaphore_full, 1);
        // A permit given back makes room; the key stays while one is held.
        let outcome = release(&mut node, &mut slot, &clock, b"a", false);
        assert!(matches!(
            outcome.change,
            Change::Left {
                deadline: 1_100,
                ..
            }
        ));
        granted(take(&mut node, &mut slot, &clock, shared(b"c", 2), false));
        release(&mut node, &mut slot, &clock, b"b", true);
        let last = release(&mut node, &mut slot, &clock, b"c", false);
        assert_eq!(last.change, Change::Deleted { deadline: 1_100 });
        assert!(slot.0.is_none());
    }

    #[test]
    fn each_holder_lease_ends_on_its_own() {
        let (mut node, mut slot, clock) = setup();
        granted(take(
            &mut node,
            &mut slot,
            &clock,
            shared(b"short", 0),
            false,
        ));
        clock.advance_ms(500);
        granted(take(
            &mut node,
            &mut slot,
            &clock,
            shared(b"long", 0),
            false,
        ));
        clock.advance_ms(501);
        assert_eq!(
            expire_if_due(&mut node, &mut slot, &clock),
            Some(Ended::Holders(vec![(b"short".to_vec(), 0)]))
        );
        assert_eq!(node.stats.holders_expired, 1);
        assert_eq!(expire_if_due(&mut node, &mut slot, &clock), None);
        // A holder whose lease ended but is not removed yet may join again
        // (its old hold makes way).
        clock.advance_ms(200);
        let lock = slot.0.as_mut().unwrap();
        lock.add_holder(Holder::new(b"late", 1, 1, 1_300));
        assert!(lock.holders()[1].has_expired(clock.monotonic_ms()));
        granted(take(
            &mut node,
            &mut slot,
            &clock,
            shared(b"late", 0),
            false,
        ));
        let lock = slot.0.as_ref().unwrap();
        let owners: Vec<&[u8]> = lock.holders().iter().map(Holder::owner).collect();
        assert_eq!(owners, vec![&b"long"[..], b"late"]);
        assert_eq!(lock.holders()[1].deadline(), 2_301);
        clock.advance_ms(1_001);
        assert_eq!(
            expire_if_due(&mut node, &mut slot, &clock),
            Some(Ended::Lock { deadline: 2_301 })
        );
        assert!(slot.0.is_none());
    }

    /// Random sequences of exclusive, shared and semaphore requests,
    /// releases, extensions, expiries and clock steps on one key keep the
    /// sharing rules: an exclusive lock has one holder, a semaphore no more
    /// than its limit, each owner holds once, every fresh grant's token is
    /// above every earlier one, and a refusal changes nothing.
    #[test]
    fn random_sequences_keep_the_sharing_rules() {
        let mut seed: u64 = 0x5eed_5a7e;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut node, mut slot, clock) = setup();
        let owners: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
        let mut max_token = 0;
        for step in 0..20_000 {
            let owner = owners[next(4) as usize];
            let before = slot.0.clone();
            match next(6) {
                0..=2 => {
                    let (mode, limit) = match next(3) {
                        0 => (Mode::Exclusive, None),
                        1 => (Mode::Shared, None),
                        _ => (Mode::Shared, NonZeroU32::new(2)),
                    };
                    let request = Request {
                        owner,
                        ttl_ms: 1 + next(300),
                        mode,
                        limit,
                    };
                    let admission = Admission {
                        window: Window::Open,
                        queued: next(10) == 0,
                        max_holders: 3,
                    };
                    match acquire_with(&mut node, &mut slot, &clock, &request, &admission) {
                        Ok(Outcome {
                            reply: Acquired::Granted { token, reentered },
                            ..
                        }) => {
                            if reentered {
                                assert!(token <= max_token, "step {step}");
                            } else {
                                assert!(token > max_token, "step {step}: a stale fresh token");
                                max_token = token;
                            }
                            let lock = slot.0.as_ref().unwrap();
                            assert_eq!(lock.mode(), mode, "step {step}");
                            assert_eq!(lock.holder(owner).map(Holder::token), Some(token));
                        }
                        Ok(Outcome {
                            reply: Acquired::Busy,
                            change,
                        }) => {
                            assert_eq!(change, Change::None);
                            assert_eq!(slot.0, before, "step {step}: busy changed the lock");
                        }
                        Err(error) => {
                            assert!(
                                matches!(
                                    error,
                                    OpError::ModeHeld { .. } | OpError::LimitMismatch { .. }
                                ),
                                "step {step}: {error:?}"
                            );
                            assert_eq!(slot.0, before, "step {step}: an error changed the lock");
                        }
                    }
                }
                3 => {
                    release(&mut node, &mut slot, &clock, owner, next(2) == 0);
                }
                4 => {
                    extend(&mut node, &mut slot, &clock, owner, 1 + next(300));
                }
                _ => {
                    clock.advance_ms(next(120));
                    expire_if_due(&mut node, &mut slot, &clock);
                }
            }
            if let Some(lock) = &slot.0 {
                let holders = lock.holders();
                assert!(!holders.is_empty(), "step {step}: a lock without holders");
                for (i, h) in holders.iter().enumerate() {
                    assert!(holders[..i].iter().all(|o| o.owner() != h.owner()));
                    assert!(h.holds() >= 1);
                }
                match lock.mode() {
                    Mode::Exclusive => assert_eq!(holders.len(), 1, "step {step}"),
                    Mode::Shared => {
                        let most = lock.limit().map_or(3, NonZeroU32::get) as usize;
                        let now = clock.monotonic_ms();
                        let live = holders.iter().filter(|h| !h.has_expired(now)).count();
                        assert!(live <= most, "step {step}: {live} live holders of {most}");
                    }
                }
            }
        }
        assert!(node.stats.shared_grants > 100 && node.stats.acquired > node.stats.shared_grants);
    }

    #[test]
    fn exhausted_tokens_refuse_without_change() {
        let (mut node, mut slot, clock) = setup();
        node.tokens.raise(i64::MAX);
        assert_eq!(
            acquire(&mut node, &mut slot, &clock, b"a", 10, Window::Open),
            Err(OpError::TokensExhausted)
        );
        assert!(slot.0.is_none());
    }
}
