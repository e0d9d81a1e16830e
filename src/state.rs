//! The module's node-wide state. Redis runs module code on its main thread
//! (and in fork children, which get a copy), so the state is thread-local:
//! no locking on the hot path. It is borrowed only for short pure steps and
//! never across a Redis call that can call back into the module.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use redis_lock_core::deadlines::DeadlineIndex;
use redis_lock_core::waiters::{Place, WaitQueues};
use redis_lock_core::{Node, SystemClock};

/// The clock every lease and token is read from.
pub static CLOCK: SystemClock = SystemClock::new();

/// A key in a database: how the expiry index and the waiter queues name it.
pub use redis_lock_core::KeyId;

#[derive(Default)]
pub struct ModuleState {
    pub node: Node,
    pub deadlines: DeadlineIndex<KeyId>,
    /// The armed expiry timer: its id and the monotonic time it fires at.
    pub timer: Option<(u64, u64)>,
    pub waiters: WaitQueues<KeyId, crate::waiter::Waiter>,
    /// Which queue each blocked client waits in, and where, by its handle's
    /// address.
    pub blocked: HashMap<usize, (KeyId, Place)>,
    /// Keys removed outside our commands (`DEL`, `FLUSHDB`) whose waiters
    /// the timer must serve: a keyspace callback may not write.
    pub pending_grants: BTreeSet<KeyId>,
    /// Names with waiters that hold a value of another type (a `SET` over a
    /// lock): looked at again every so often, as it may expire or be
    /// evicted without any event the module hears of.
    pub behind_foreign: BTreeSet<KeyId>,
    /// `WAIT` timeouts, by blocked client address. The module ends waits
    /// itself: a Redis-side timeout can race a grant made in the same
    /// event-loop turn and lose the reply.
    pub wait_deadlines: DeadlineIndex<usize>,
    /// Grants whose reply never reached the waiter, for the timer to take
    /// back (a type callback may not write).
    pub undelivered: Vec<crate::waiter::Grant>,
    /// Waiters were kept waiting by the recovery window: the timer serves
    /// every queue when it ends.
    pub waits_for_recovery: bool,
}

thread_local! {
    static STATE: RefCell<ModuleState> = RefCell::new(ModuleState::default());
}

/// Runs `f` with the state; `None` if the state is already borrowed further
/// up the stack (a callback re-entered from inside one of our own steps).
pub fn with_state<R>(f: impl FnOnce(&mut ModuleState) -> R) -> Option<R> {
    STATE.with(|cell| cell.try_borrow_mut().ok().map(|mut state| f(&mut state)))
}
