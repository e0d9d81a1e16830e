//! Fuzzes shared locks and semaphores (`redis_lock_core::ops` with
//! `Request`s of both modes, and the FIFO hand-off of
//! `redis_lock_core::handoff::serve`) on one key with a wait queue, under a
//! manual clock the input moves forward.
//!
//! A model decides each acquisition from the lock as it was (its live
//! holders, mode and limit, the caller's own hold, the queue, the recovery
//! window) and the target checks the core agrees:
//! - exclusive: granted only on a free lock; shared: granted on a free lock
//!   or alongside shared holders with the same `LIMIT`, below the limit (or
//!   `max_holders`), with nobody queued; otherwise busy;
//! - the owner's own hold re-enters in the same mode (same token, one more
//!   hold, lease renewed) and is refused in the other mode
//!   (`ModeHeld`), or with another `LIMIT` (`LimitMismatch`);
//! - every fresh grant's token is above every token seen before;
//! - a refusal or a busy answer changes nothing.
//!
//! Release, extend and fence act on the caller's hold alone; per-holder
//! leases end on their own. After holders leave, the hand-off serves the
//! queue in order: the waiters it answers are the queue's head, in order,
//! and when it stops with waiters left, the head could not be granted now.
//! After every step: a lock has at least one holder, owners are unique, an
//! exclusive lock has one holder, a shared lock no more live holders than
//! its limit, and no token is above the node's counter.
#![no_main]

use std::collections::VecDeque;
use std::num::NonZeroU32;

#[path = "common/input.rs"]
mod input;

use input::Input;
use libfuzzer_sys::fuzz_target;
use redis_lock_core::handoff::{self, Answer, Rules, Stopped};
use redis_lock_core::ops::{self, Acquired, Admission, Change, OpError, Request, Window};
use redis_lock_core::testing::MemorySlot;
use redis_lock_core::waiters::WaitQueues;
use redis_lock_core::{Clock, Holder, Lock, ManualClock, Mode, Node};

const OWNERS: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"\x00\xff"];
/// `lock.max-holders` in the model: small, so the cap is reached.
const MAX_HOLDERS: u32 = 3;
const KEY: u8 = 0;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Waiter {
    owner: &'static [u8],
    ttl_ms: u64,
    mode: Mode,
    limit: Option<NonZeroU32>,
}

impl handoff::Request for Waiter {
    fn owner(&self) -> &[u8] {
        self.owner
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

impl Waiter {
    fn request(&self) -> Request<'_> {
        Request {
            owner: self.owner,
            ttl_ms: self.ttl_ms,
            mode: self.mode,
            limit: self.limit,
        }
    }
}

struct World {
    node: Node,
    slot: MemorySlot,
    clock: ManualClock,
    queues: WaitQueues<u8, Waiter>,
    /// The queue as the model sees it.
    queue: VecDeque<Waiter>,
    /// The greatest token seen so far.
    max_seen: i64,
}

/// What the model expects of an acquisition.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Fresh,
    Reenter,
    Busy,
    Refused(OpError),
}

/// Holders whose lease runs at `now`.
fn live(lock: Option<&Lock>, now: u64) -> Vec<Holder> {
    lock.map(|l| {
        l.holders()
            .iter()
            .filter(|h| !h.has_expired(now))
            .cloned()
            .collect()
    })
    .unwrap_or_default()
}

/// The model's answer to `request` on `lock` at `now`. Token exhaustion is
/// left to the caller (the counter is checked against the clock).
fn expect(
    lock: Option<&Lock>,
    now: u64,
    request: &Request,
    queued: bool,
    window: Window,
) -> Expect {
    let holders = live(lock, now);
    let recovering = match window {
        Window::Open => None,
        Window::Recovering { left_ms } => Some(OpError::Recovering { left_ms }),
    };
    let Some(lock) = lock.filter(|_| !holders.is_empty()) else {
        return recovering.map_or(Expect::Fresh, Expect::Refused);
    };
    let mismatch = lock.mode() == Mode::Shared
        && request.mode == Mode::Shared
        && lock.limit() != request.limit;
    if let Some(own) = holders.iter().find(|h| h.is(request.owner)) {
        if lock.mode() != request.mode {
            return Expect::Refused(OpError::ModeHeld { held: lock.mode() });
        }
        if mismatch {
            return Expect::Refused(OpError::LimitMismatch {
                asked: request.limit,
                lock: lock.limit(),
            });
        }
        if let Some(error) = recovering {
            return Expect::Refused(error);
        }
        if own.holds() == u32::MAX {
            return Expect::Refused(OpError::TooManyHolds);
        }
        return Expect::Reenter;
    }
    if mismatch {
        return Expect::Refused(OpError::LimitMismatch {
            asked: request.limit,
            lock: lock.limit(),
        });
    }
    let most = lock.limit().map_or(MAX_HOLDERS, NonZeroU32::get) as usize;
    let joins = lock.mode() == Mode::Shared && request.mode == Mode::Shared && !queued;
    if !joins || holders.len() >= most {
        return Expect::Busy;
    }
    recovering.map_or(Expect::Fresh, Expect::Refused)
}

impl World {
    fn lock(&self) -> Option<&Lock> {
        self.slot.0.as_ref()
    }

    fn check(&self) {
        let Some(lock) = self.lock() else { return };
        let holders = lock.holders();
        assert!(!holders.is_empty(), "a lock without holders");
        for (i, h) in holders.iter().enumerate() {
            assert!(
                holders[..i].iter().all(|o| o.owner() != h.owner()),
                "an owner holds twice"
            );
            assert!(h.holds() >= 1, "a holder with no hold");
            assert!(h.token() >= 1 && h.token() <= self.node.tokens.last());
        }
        match lock.mode() {
            Mode::Exclusive => {
                assert_eq!(holders.len(), 1, "an exclusive lock with several holders");
                assert_eq!(lock.limit(), None);
            }
            Mode::Shared => {
                let most = lock.limit().map_or(MAX_HOLDERS, NonZeroU32::get) as usize;
                let now = self.clock.monotonic_ms();
                let live = holders.iter().filter(|h| !h.has_expired(now)).count();
                assert!(live <= most, "{live} live holders, at most {most}");
            }
        }
    }

    /// Holders other than `owner`, as they were.
    fn others(&self, owner: &[u8]) -> Vec<Holder> {
        self.lock()
            .map(|l| {
                l.holders()
                    .iter()
                    .filter(|h| !h.is(owner))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Serves the queue and checks the hand-off.
    fn serve(&mut self, window: Window) {
        let rules = Rules {
            window,
            max_ttl_ms: u64::MAX,
            max_owner_bytes: usize::MAX,
            max_holders: MAX_HOLDERS,
        };
        // Owners holding now, and those granted in this hand-off: a grant to
        // one of them is a re-entry, any other a fresh hold.
        let mut holding: Vec<&[u8]> = live(self.lock(), self.clock.monotonic_ms())
            .iter()
            .map(|h| OWNERS.into_iter().find(|o| h.is(o)).unwrap_or(b""))
            .collect();
        let World {
            node,
            slot,
            clock,
            queues,
            ..
        } = self;
        let done = handoff::serve(node, slot, clock, queues, &KEY, rules);
        for (waiter, answer) in done.answered {
            let expected = self.queue.pop_front();
            assert_eq!(Some(&waiter), expected.as_ref(), "served out of order");
            match answer {
                Answer::Granted { holder, change } => {
                    let lock = self.lock().expect("granted means stored");
                    assert_eq!(lock.mode(), waiter.mode);
                    assert!(holder.is(waiter.owner));
                    let stored = lock.holder(waiter.owner).expect("the grantee holds");
                    assert_eq!(stored.token(), holder.token());
                    if holding.contains(&waiter.owner) {
                        assert!(holder.holds() > 1, "a re-entry without a hold more");
                    } else {
                        assert!(
                            holder.token() > self.max_seen,
                            "waiter's fresh token {} not above {}",
                            holder.token(),
                            self.max_seen
                        );
                        assert_eq!(holder.holds(), 1);
                        assert!(matches!(change, Change::Stored { .. } | Change::Joined));
                        self.max_seen = holder.token();
                        holding.push(waiter.owner);
                    }
                }
                Answer::Refused(message) => {
                    // Only errors the request itself earns: another mode
                    // or LIMIT than the owner's hold, or holds exhausted.
                    assert!(
                        message.contains("mode")
                            || message.contains("LIMIT")
                            || message.contains("4294967295")
                            || message.contains("exhausted"),
                        "refused waiter: {message}"
                    );
                }
            }
        }
        assert_eq!(self.queues.len(&KEY), self.queue.len());
        match done.stopped {
            Stopped::Empty => assert!(self.queue.is_empty()),
            Stopped::Recovering => assert!(matches!(window, Window::Recovering { .. })),
            Stopped::Held => {
                // The head could not be granted now.
                let head = self.queue.front().expect("held with a waiter left");
                let now = self.clock.monotonic_ms();
                assert_eq!(
                    expect(self.lock(), now, &head.request(), false, Window::Open),
                    Expect::Busy,
                    "the hand-off stopped before a waiter it could grant"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mut world = World {
        node: Node::default(),
        slot: MemorySlot::default(),
        clock: ManualClock::new(u64::from(input.u8()) << 16, 1_700_000_000_000),
        queues: WaitQueues::default(),
        queue: VecDeque::new(),
        max_seen: 0,
    };

    for _ in 0..256 {
        if input.0.is_empty() {
            break;
        }
        let op = input.u8();
        let owner = OWNERS[usize::from(input.u8()) % OWNERS.len()];
        let now = world.clock.monotonic_ms();
        let before = world.slot.0.clone();
        let tokens_before = world.node.tokens;
        let own_before = live(world.lock(), now).into_iter().find(|h| h.is(owner));
        let others_before = world.others(owner);

        match op % 8 {
            // LOCK.ACQUIRE [SHARED [LIMIT n]] [WAIT]
            0..=2 => {
                let shape = input.u8();
                let (mode, limit) = match shape % 4 {
                    0 => (Mode::Exclusive, None),
                    1 => (Mode::Shared, None),
                    _ => (Mode::Shared, NonZeroU32::new(1 + u32::from(shape >> 2) % 3)),
                };
                let ttl_ms = 1 + input.u16();
                let window = if input.u8() % 8 == 0 {
                    Window::Recovering {
                        left_ms: 1 + input.u16(),
                    }
                } else {
                    Window::Open
                };
                let wait = shape & 0x80 != 0;
                let waiter = Waiter {
                    owner,
                    ttl_ms,
                    mode,
                    limit,
                };
                let queued = world.queues.has_waiters(&KEY);
                let model = expect(world.lock(), now, &waiter.request(), queued, window);
                let admission = Admission {
                    window,
                    queued,
                    max_holders: MAX_HOLDERS,
                };
                let World {
                    node, slot, clock, ..
                } = &mut world;
                let result = ops::acquire_with(node, slot, clock, &waiter.request(), &admission);
                match result {
                    Ok(outcome) => match outcome.reply {
                        Acquired::Granted { token, reentered } => {
                            let lock = world.slot.0.clone().expect("granted means stored");
                            let mine = lock.holder(owner).expect("the owner holds");
                            assert_eq!(mine.token(), token);
                            assert_eq!(mine.deadline(), now.saturating_add(ttl_ms));
                            assert_eq!(lock.mode(), mode);
                            if reentered {
                                assert_eq!(model, Expect::Reenter);
                                let was = own_before.as_ref().expect("re-entry of a hold");
                                assert_eq!(token, was.token(), "re-entry changed the token");
                                assert_eq!(mine.holds(), was.holds() + 1);
                                assert_eq!(world.node.tokens, tokens_before);
                            } else {
                                assert_eq!(model, Expect::Fresh);
                                assert_eq!(mine.holds(), 1);
                                assert!(
                                    token > world.max_seen,
                                    "fresh token {token} not above {}",
                                    world.max_seen
                                );
                                world.max_seen = token;
                                if outcome.change == Change::Joined {
                                    assert_eq!(mode, Mode::Shared);
                                    assert_eq!(lock.limit(), limit);
                                }
                            }
                            // The other holders' holds, tokens and leases
                            // are as they were (ended ones may make way).
                            for other in world.others(owner) {
                                assert!(others_before.contains(&other), "another holder changed");
                            }
                        }
                        Acquired::Busy => {
                            assert_eq!(model, Expect::Busy);
                            assert_eq!(outcome.change, Change::None);
                            assert_eq!(world.slot.0, before, "busy changed the lock");
                            assert_eq!(world.node.tokens, tokens_before);
                            if wait {
                                world.queues.push(KEY, waiter.clone());
                                world.queue.push_back(waiter);
                            }
                        }
                    },
                    Err(error) => {
                        assert_eq!(world.slot.0, before, "a refusal changed the lock");
                        assert_eq!(world.node.tokens, tokens_before);
                        match error {
                            OpError::TokensExhausted => assert_eq!(model, Expect::Fresh),
                            error => assert_eq!(model, Expect::Refused(error)),
                        }
                    }
                }
            }
            // LOCK.RELEASE [ALL], then the hand-off.
            3 => {
                let all = input.u8() % 2 == 0;
                let World {
                    node, slot, clock, ..
                } = &mut world;
                let outcome = ops::release(node, slot, clock, owner, all);
                assert_eq!(world.node.tokens, tokens_before);
                match (outcome.reply, &own_before) {
                    (None, None) => assert_eq!(world.slot.0, before),
                    (Some(left), Some(was)) => {
                        assert_eq!(left, if all { 0 } else { was.holds() - 1 });
                        let mine = world.lock().and_then(|l| l.holder(owner)).cloned();
                        match mine {
                            Some(mine) => {
                                assert_eq!(mine.holds(), left);
                                assert_eq!(
                                    (mine.token(), mine.deadline()),
                                    (was.token(), was.deadline())
                                );
                            }
                            None => assert_eq!(left, 0),
                        }
                        assert_eq!(world.others(owner), others_before, "another holder changed");
                    }
                    (reply, own) => panic!("release replied {reply:?} for hold {own:?}"),
                }
                world.serve(Window::Open);
            }
            // LOCK.EXTEND
            4 => {
                let ttl_ms = 1 + input.u16();
                let World {
                    node, slot, clock, ..
                } = &mut world;
                let outcome = ops::extend(node, slot, clock, owner, ttl_ms);
                assert_eq!(outcome.reply, own_before.is_some());
                if outcome.reply {
                    let mine = world
                        .lock()
                        .and_then(|l| l.holder(owner))
                        .expect("extended");
                    assert_eq!(mine.deadline(), now.saturating_add(ttl_ms));
                } else {
                    assert_eq!(world.slot.0, before);
                }
                assert_eq!(world.others(owner), others_before, "another holder changed");
            }
            // LOCK.FENCE [ATLEAST n]
            5 => {
                let floor = (input.u8() % 2 == 0).then(|| world.max_seen + i64::from(input.u8()));
                let World {
                    node, slot, clock, ..
                } = &mut world;
                let outcome = ops::fence(node, slot, clock, owner, floor);
                match (outcome.reply, &own_before) {
                    (None, None) => {
                        assert_eq!(world.slot.0, before);
                        assert_eq!(world.node.tokens, tokens_before);
                    }
                    (Some(token), Some(was)) => {
                        assert_eq!(token, was.token().max(floor.unwrap_or(0)));
                        if let Some(floor) = floor {
                            assert!(world.node.tokens.last() >= floor);
                            world.max_seen = world.max_seen.max(floor);
                        }
                    }
                    (reply, own) => panic!("fence replied {reply:?} for hold {own:?}"),
                }
                assert_eq!(world.others(owner), others_before, "another holder changed");
            }
            // The expiry timer: ended leases go, one by one; then the
            // hand-off (sometimes inside the recovery window).
            6 => {
                let World {
                    node, slot, clock, ..
                } = &mut world;
                let ended = ops::expire_if_due(node, slot, clock);
                match ended {
                    Some(ops::Ended::Lock { deadline }) => {
                        let lock = before.as_ref().expect("ended a lock");
                        assert!(lock.all_expired(now));
                        assert_eq!(
                            Some(deadline),
                            lock.holders().iter().map(Holder::deadline).max()
                        );
                        assert!(world.slot.0.is_none());
                    }
                    Some(ops::Ended::Holders(gone)) => {
                        let lock = before.as_ref().expect("ended holders");
                        assert!(!gone.is_empty());
                        for (owner, _) in &gone {
                            let was = lock.holder(owner).expect("an ended holder held");
                            assert!(was.has_expired(now));
                        }
                        let after = world.lock().expect("others hold on");
                        assert!(after.holders().iter().all(|h| !h.has_expired(now)));
                    }
                    None => {
                        assert_eq!(world.slot.0, before);
                        assert!(
                            live(before.as_ref(), now).len()
                                == before.as_ref().map_or(0, |l| l.holders().len())
                        );
                    }
                }
                let window = if input.u8() % 4 == 0 {
                    Window::Recovering { left_ms: 1 }
                } else {
                    Window::Open
                };
                world.serve(window);
            }
            // Time passes.
            _ => world.clock.advance_ms(input.u16()),
        }
        world.check();
    }
});
