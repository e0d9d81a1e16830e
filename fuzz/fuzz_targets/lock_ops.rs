//! Fuzzes sequences of lock operations (`redis_lock_core::ops`) on a few
//! in-memory slots sharing one node, under a manual clock that the input
//! moves forward and whose wall clock it steps back and forth.
//!
//! After every operation it checks:
//! - a stored lock has at least one hold and a token in 1..=the node's
//!   counter, and the counter never goes down;
//! - a fresh acquisition (or a waiter's grant) gets a token greater than
//!   every token seen before (issued, applied or raised by FENCE ATLEAST);
//! - re-entry keeps the token, adds one hold and renews the lease;
//! - an operation that is refused (an error, Busy, nil, 0) changes no slot
//!   and no token, and errors happen only for their reason;
//! - the reported `Change` matches what happened to the slot;
//! - replies agree with the state (INFO, RELEASE's holds left, FENCE's token).
#![no_main]

#[path = "common/input.rs"]
mod input;

use input::Input;
use libfuzzer_sys::fuzz_target;
use redis_lock_core::args::MAX_WAIT_MS;
use redis_lock_core::ops::{self, Acquired, Change, OpError};
use redis_lock_core::testing::MemorySlot;
use redis_lock_core::token::MAX_TOKEN;
use redis_lock_core::{Clock, Holder, ManualClock, Node};

const OWNERS: [&[u8]; 3] = [b"a", b"b", b"\x00\xff"];
const SLOTS: usize = 3;

struct World {
    node: Node,
    slots: [MemorySlot; SLOTS],
    clock: ManualClock,
    /// The greatest token seen anywhere so far.
    max_seen: i64,
}

impl World {
    fn check_slots(&self) {
        for slot in &self.slots {
            if let Some(lock) = slot.sole() {
                let whole = slot.0.as_ref().map(|l| l.holders().len());
                assert_eq!(whole, Some(1), "an exclusive lock has one holder");
                assert!(lock.holds() >= 1, "a stored lock with no hold");
                assert!(lock.token() >= 1, "token {}", lock.token());
                assert!(
                    lock.token() <= self.node.tokens.last(),
                    "lock token {} above the node's counter {}",
                    lock.token(),
                    self.node.tokens.last()
                );
            }
        }
    }

    fn live(&self, slot: usize) -> Option<&Holder> {
        let now = self.clock.monotonic_ms();
        self.slots[slot].sole().filter(|l| !l.has_expired(now))
    }
}

/// `change` says what happened to a slot that went from `before` to `after`.
fn check_change(change: Change, before: &Option<Holder>, after: &Option<Holder>) {
    match change {
        Change::None => assert_eq!(before, after, "Change::None, but the slot changed"),
        Change::Stored { previous_deadline } => {
            assert!(after.is_some(), "Change::Stored, but the slot is empty");
            assert_eq!(previous_deadline, before.as_ref().map(Holder::deadline));
        }
        Change::Deleted { deadline } => {
            assert!(
                after.is_none(),
                "Change::Deleted, but the slot holds a lock"
            );
            assert_eq!(Some(deadline), before.as_ref().map(Holder::deadline));
        }
        Change::Left { .. } | Change::Joined => panic!("{change:?} from an exclusive lock"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let monotonic = u64::from(input.u8()) << 16;
    let wall_ms = 1_700_000_000_000 + (u64::from(input.u8()) << 24) as i64;
    let mut world = World {
        node: Node::default(),
        slots: Default::default(),
        clock: ManualClock::new(monotonic, wall_ms),
        max_seen: 0,
    };

    for _ in 0..256 {
        if input.0.is_empty() {
            break;
        }
        let op = input.u8();
        let s = usize::from(input.u8()) % SLOTS;
        let owner = OWNERS[usize::from(input.u8()) % OWNERS.len()];
        let before = world.slots[s].sole().cloned();
        let tokens_before = world.node.tokens;
        let last_before = tokens_before.last();
        let now = world.clock.monotonic_ms();
        let live_before = world.live(s).cloned();
        let others_before: Vec<Option<Holder>> = (0..SLOTS)
            .filter(|i| *i != s)
            .map(|i| world.slots[i].sole().cloned())
            .collect();

        match op % 10 {
            // LOCK.ACQUIRE, and a waiter's grant.
            0..=2 => {
                let ttl = 1 + input.up_to(MAX_WAIT_MS - 1);
                let recovering = (input.u8() % 4 == 0).then(|| 1 + input.up_to(1_000_000));
                let window = ops::Window::of(recovering);
                let grant = op % 10 == 2;
                let World {
                    node, slots, clock, ..
                } = &mut world;
                // A waiter whose owner holds the lock by now re-enters it.
                let reenters = live_before.as_ref().is_some_and(|l| l.is(owner));
                let result = if grant {
                    ops::grant(node, &mut slots[s], clock, owner, ttl, window).map(|o| {
                        o.map(|o| {
                            (
                                Acquired::Granted {
                                    token: o.reply,
                                    reentered: reenters,
                                },
                                o.change,
                            )
                        })
                        .unwrap_or((Acquired::Busy, Change::None))
                    })
                } else {
                    ops::acquire(node, &mut slots[s], clock, owner, ttl, window)
                        .map(|o| (o.reply, o.change))
                };
                let after = world.slots[s].sole().cloned();
                match result {
                    Err(error) => {
                        assert_eq!(before, after, "a refused acquisition changed the slot");
                        assert_eq!(world.node.tokens, tokens_before);
                        match error {
                            OpError::Recovering { left_ms } => {
                                assert_eq!(Some(left_ms), recovering);
                                // Fresh locks and re-entries alike; another
                                // owner's live lock answers busy first.
                                assert!(
                                    live_before.as_ref().map_or(true, |l| l.is(owner)),
                                    "recovery refused an acquisition that was busy"
                                );
                            }
                            OpError::TokensExhausted => {
                                assert!(
                                    last_before >= MAX_TOKEN || world.clock.wall_us() > MAX_TOKEN,
                                    "exhausted with the counter at {last_before}"
                                );
                                assert!(live_before.is_none());
                            }
                            OpError::TooManyHolds => {
                                let lock = live_before.as_ref().expect("holds of a live lock");
                                assert!(lock.is(owner) && lock.holds() == u32::MAX);
                            }
                            OpError::ModeHeld { .. } | OpError::LimitMismatch { .. } => {
                                panic!("{error:?} from exclusive requests only")
                            }
                        }
                    }
                    Ok((Acquired::Busy, change)) => {
                        assert_eq!(change, Change::None);
                        assert_eq!(before, after, "a busy acquisition changed the slot");
                        assert_eq!(world.node.tokens, tokens_before);
                        let holder = live_before.as_ref().expect("busy means held");
                        assert!(!holder.is(owner), "busy for its own holder");
                    }
                    Ok((Acquired::Granted { token, reentered }, change)) => {
                        check_change(change, &before, &after);
                        let lock = after.as_ref().expect("granted means stored");
                        assert!(lock.is(owner));
                        assert_eq!(lock.token(), token);
                        assert_eq!(lock.deadline(), now.saturating_add(ttl));
                        if reentered {
                            let was = live_before.as_ref().expect("re-entry of a live lock");
                            assert!(was.is(owner));
                            assert_eq!(token, was.token(), "re-entry changed the token");
                            assert_eq!(lock.holds(), was.holds() + 1);
                            assert_eq!(world.node.tokens, tokens_before);
                            assert!(recovering.is_none(), "a re-entry while recovering");
                        } else {
                            assert!(live_before.is_none(), "a fresh lock over a live one");
                            assert!(recovering.is_none(), "a fresh lock while recovering");
                            assert_eq!(lock.holds(), 1);
                            assert!(
                                token > last_before && token > world.max_seen,
                                "fresh token {token} not above {last_before} / {}",
                                world.max_seen
                            );
                            assert!(token >= world.clock.wall_us(), "token below the clock");
                            assert!(token <= MAX_TOKEN, "token {token} above 2^53-1");
                            assert_eq!(world.node.tokens.last(), token);
                        }
                    }
                }
            }
            // LOCK.RELEASE
            3 => {
                let all = input.u8() % 2 == 0;
                let World {
                    node, slots, clock, ..
                } = &mut world;
                let outcome = ops::release(node, &mut slots[s], clock, owner, all);
                let after = world.slots[s].sole().cloned();
                check_change(outcome.change, &before, &after);
                assert_eq!(world.node.tokens, tokens_before);
                match outcome.reply {
                    None => {
                        assert_eq!(before, after);
                        assert!(!live_before.as_ref().is_some_and(|l| l.is(owner)));
                    }
                    Some(left) => {
                        let was = live_before.as_ref().expect("released a live lock");
                        assert!(was.is(owner));
                        let expected = if all { 0 } else { was.holds() - 1 };
                        assert_eq!(left, expected);
                        match &after {
                            None => assert_eq!(left, 0),
                            Some(lock) => {
                                assert_eq!(lock.holds(), left);
                                assert_eq!(
                                    (lock.token(), lock.deadline()),
                                    (was.token(), was.deadline())
                                );
                            }
                        }
                    }
                }
            }
            // LOCK.EXTEND
            4 => {
                let ttl = 1 + input.up_to(MAX_WAIT_MS - 1);
                let World {
                    node, slots, clock, ..
                } = &mut world;
                let outcome = ops::extend(node, &mut slots[s], clock, owner, ttl);
                let after = world.slots[s].sole().cloned();
                check_change(outcome.change, &before, &after);
                assert_eq!(world.node.tokens, tokens_before);
                if outcome.reply {
                    let was = live_before.as_ref().expect("extended a live lock");
                    let lock = after.as_ref().expect("still stored");
                    assert!(was.is(owner));
                    assert_eq!((lock.holds(), lock.token()), (was.holds(), was.token()));
                    assert_eq!(lock.deadline(), now.saturating_add(ttl));
                } else {
                    assert_eq!(before, after);
                }
            }
            // LOCK.FENCE [ATLEAST n]
            5 => {
                let floor = (input.u8() % 2 == 0).then(|| input.up_to(MAX_TOKEN as u64) as i64);
                let World {
                    node, slots, clock, ..
                } = &mut world;
                let outcome = ops::fence(node, &mut slots[s], clock, owner, floor);
                let after = world.slots[s].sole().cloned();
                check_change(outcome.change, &before, &after);
                match outcome.reply {
                    None => {
                        assert_eq!(before, after);
                        assert_eq!(world.node.tokens, tokens_before, "a refused fence raised");
                    }
                    Some(token) => {
                        let was = live_before.as_ref().expect("fenced a live lock");
                        let lock = after.as_ref().expect("still stored");
                        assert!(was.is(owner));
                        assert_eq!(token, lock.token());
                        assert_eq!(token, was.token().max(floor.unwrap_or(0)));
                        assert_eq!(
                            (lock.holds(), lock.deadline()),
                            (was.holds(), was.deadline())
                        );
                        if let Some(floor) = floor {
                            assert!(world.node.tokens.last() >= floor);
                            world.max_seen = world.max_seen.max(floor);
                        }
                    }
                }
            }
            // LOCK.INFO
            6 => {
                let snapshot = ops::info(&mut world.slots[s], &world.clock);
                assert_eq!(
                    before,
                    world.slots[s].sole().cloned(),
                    "INFO changed the slot"
                );
                match (snapshot, &live_before) {
                    (None, None) => {}
                    (Some(snap), Some(lock)) => {
                        assert_eq!(snap.owner, lock.owner());
                        assert_eq!((snap.holds, snap.token), (lock.holds(), lock.token()));
                        // Live through the reading of its deadline (pttl 0
                        // then): a lease ends only past it.
                        assert!(now <= lock.deadline());
                        assert_eq!(snap.pttl_ms, lock.deadline() - now);
                    }
                    (snap, live) => panic!("INFO {snap:?} for live lock {live:?}"),
                }
            }
            // LOCK.APPLY (a replicated effect)
            7 => {
                let holds = 1 + input.up_to(u64::from(u32::MAX) - 1) as u32;
                let token = 1 + input.up_to(i64::MAX as u64 - 1) as i64;
                let wall_end = input.u64() as i64;
                let World {
                    node, slots, clock, ..
                } = &mut world;
                let outcome = ops::apply(
                    node,
                    &mut slots[s],
                    clock,
                    owner,
                    holds,
                    token,
                    wall_end,
                    None,
                );
                let after = world.slots[s].sole().cloned();
                check_change(outcome.change, &before, &after);
                let lock = after.as_ref().expect("applied");
                assert_eq!(
                    (lock.owner(), lock.holds(), lock.token()),
                    (owner, holds, token)
                );
                assert!(world.node.tokens.last() >= token.max(last_before));
                world.max_seen = world.max_seen.max(token);
            }
            // The expiry timer.
            8 => {
                let World {
                    node, slots, clock, ..
                } = &mut world;
                let expired = ops::expire_if_due(node, &mut slots[s], clock);
                match expired {
                    Some(ops::Ended::Holders(gone)) => {
                        panic!("holders {gone:?} ended alone in an exclusive lock")
                    }
                    Some(ops::Ended::Lock { deadline }) => {
                        assert_eq!(before.as_ref().map(Holder::deadline), Some(deadline));
                        assert!(deadline < now, "a lease ends only past its deadline");
                        assert!(world.slots[s].0.is_none());
                    }
                    None => {
                        assert_eq!(before, world.slots[s].sole().cloned());
                        assert!(live_before.is_some() || before.is_none());
                    }
                }
                assert_eq!(world.node.tokens, tokens_before);
            }
            // Time passes, or the wall clock steps.
            _ => {
                if input.u8() % 2 == 0 {
                    let ms = input.up_to(1 << 32);
                    world.clock.advance_ms(ms);
                } else {
                    let ms = (input.u64() % (1 << 31)) as i64 - (1 << 30);
                    world.clock.step_wall_ms(ms);
                }
            }
        }

        // Nothing touched the other slots.
        let others_after: Vec<Option<Holder>> = (0..SLOTS)
            .filter(|i| *i != s)
            .map(|i| world.slots[i].sole().cloned())
            .collect();
        assert_eq!(
            others_before, others_after,
            "an operation touched another slot"
        );
        assert!(
            world.node.tokens.last() >= last_before,
            "the token counter went down"
        );
        if let Some(lock) = world.slots[s].sole() {
            world.max_seen = world.max_seen.max(lock.token());
        }
        world.check_slots();
    }
});
