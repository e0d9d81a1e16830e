//! Hand-off: who gets a lock that may have come free (released, its lease
//! ended, its key deleted), decided in one step over the key's FIFO queue.
//!
//! - The head of the queue is served first, never a newcomer: a plain
//!   `LOCK.ACQUIRE` finds the lock held by the head by the time it runs.
//! - A head that the lock cannot be granted to (another owner holds it)
//!   keeps its place, and so does everyone behind it.
//! - A head whose request is refused now (its ttl is above a `lock.max-ttl`
//!   lowered while it waited, tokens exhausted) is answered with the error
//!   its request would get now, and the next one is tried: one bad request
//!   never blocks the queue.
//! - In the recovery window nobody is granted anything: the queue keeps its
//!   order and is served when the window ends.
//! - Waiters right behind a granted one with the same owner re-enter the
//!   lock (one more hold each), as that owner's plain `LOCK.ACQUIRE` would.
//! - A shared head is admitted with every shared waiter directly behind
//!   it, up to the lock's `LIMIT`; an exclusive head only once nobody
//!   holds the lock. A shared waiter behind an exclusive one waits for it.
//! - A lowered `lock.max-holders`, `lock.max-ttl` or `lock.max-owner-bytes`
//!   answers a waiter whose request it no longer allows with the error that
//!   request gets now.

use std::num::NonZeroU32;

use crate::clock::Clock;
use crate::lock::{Holder, Mode};
use crate::ops::{self, Change, Node, OpError, Slot, Window};
use crate::waiters::WaitQueues;
use std::hash::Hash;

/// What hand-off reads of a waiter.
pub trait Request {
    fn owner(&self) -> &[u8];
    fn ttl_ms(&self) -> u64;
    fn mode(&self) -> Mode {
        Mode::Exclusive
    }
    fn limit(&self) -> Option<NonZeroU32> {
        None
    }
}

/// What hand-off may not do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The node's recovery window.
    pub window: Window,
    /// The longest lease a request may get now (`lock.max-ttl`).
    pub max_ttl_ms: u64,
    /// The longest owner id a request may have now (`lock.max-owner-bytes`).
    pub max_owner_bytes: usize,
    /// The most holders of a shared lock without a `LIMIT`
    /// (`lock.max-holders`), and the largest `LIMIT`.
    pub max_holders: u32,
}

/// The answer to one waiter taken off the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It holds the lock: `holder` is its hold as the grant left it (the
    /// effect to propagate), `change` what the grant did to the slot.
    Granted { holder: Holder, change: Change },
    /// Its request is refused now, with this error.
    Refused(String),
}

/// Why hand-off stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Nobody is left waiting.
    Empty,
    /// The lock is held by someone other than the head.
    Held,
    /// The node is in its recovery window: serve the queue when it ends.
    Recovering,
}

/// The outcome of one hand-off: the waiters taken off the queue, in order,
/// with their answers, and why it stopped.
#[derive(Debug)]
pub struct HandOff<W> {
    pub answered: Vec<(W, Answer)>,
    pub stopped: Stopped,
}

impl<W: Request> HandOff<W> {
    /// The owners granted, each once, with the first change a grant made
    /// to its hold in this hand-off (a new lock, a join, or a re-entry with
    /// the lease end it had before): what the lease index files
    /// (`filing::on_change`) for the holds as the hand-off left them.
    pub fn to_file(&self) -> Vec<(&[u8], Change)> {
        let mut owners: Vec<(&[u8], Change)> = Vec::new();
        for (waiter, answer) in &self.answered {
            let Answer::Granted { change, .. } = answer else {
                continue;
            };
            if owners.iter().all(|(owner, _)| *owner != waiter.owner()) {
                owners.push((waiter.owner(), *change));
            }
        }
        owners
    }
}

/// Serves `key`'s queue against the lock in `slot`.
pub fn serve<K, W>(
    node: &mut Node,
    slot: &mut impl Slot,
    clock: &impl Clock,
    queues: &mut WaitQueues<K, W>,
    key: &K,
    rules: Rules,
) -> HandOff<W>
where
    K: Eq + Hash + Clone,
    W: Request,
{
    let mut answered = Vec::new();
    let stopped = loop {
        let Some(head) = queues.front(key) else {
            break Stopped::Empty;
        };
        let too_many = head
            .limit()
            .is_some_and(|limit| limit.get() > rules.max_holders);
        let answer = if let Err(error) =
            crate::args::check_owner_length(head.owner(), rules.max_owner_bytes)
        {
            Answer::Refused(error.to_string())
        } else if head.ttl_ms() > rules.max_ttl_ms {
            Answer::Refused(
                crate::args::ArgError::Ttl {
                    max: rules.max_ttl_ms,
                }
                .to_string(),
            )
        } else if too_many {
            Answer::Refused(
                crate::args::ArgError::Limit {
                    max: rules.max_holders,
                }
                .to_string(),
            )
        } else {
            let request = ops::Request {
                owner: head.owner(),
                ttl_ms: head.ttl_ms(),
                mode: head.mode(),
                limit: head.limit(),
            };
            let admission = ops::Admission {
                window: rules.window,
                queued: false,
                max_holders: rules.max_holders,
            };
            match ops::grant_with(node, slot, clock, &request, &admission) {
                Ok(Some(outcome)) => {
                    let Some(holder) = slot.holder(head.owner()).cloned() else {
                        break Stopped::Held;
                    };
                    Answer::Granted {
                        holder,
                        change: outcome.change,
                    }
                }
                Ok(None) => break Stopped::Held,
                Err(OpError::Recovering { .. }) => break Stopped::Recovering,
                Err(error) => Answer::Refused(error.message()),
            }
        };
        let Some(waiter) = queues.pop_front(key) else {
            break Stopped::Empty;
        };
        answered.push((waiter, answer));
    };
    HandOff { answered, stopped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::testing::MemorySlot;
    use crate::Lock;

    #[derive(Debug, PartialEq)]
    struct W(&'static [u8], u64);

    impl Request for W {
        fn owner(&self) -> &[u8] {
            self.0
        }
        fn ttl_ms(&self) -> u64 {
            self.1
        }
    }

    /// A shared waiter with a `LIMIT` (0: none).
    #[derive(Debug, PartialEq)]
    struct S(&'static [u8], u32);

    impl Request for S {
        fn owner(&self) -> &[u8] {
            self.0
        }
        fn ttl_ms(&self) -> u64 {
            500
        }
        fn mode(&self) -> Mode {
            Mode::Shared
        }
        fn limit(&self) -> Option<NonZeroU32> {
            NonZeroU32::new(self.1)
        }
    }

    /// Either kind of waiter in one queue.
    #[derive(Debug, PartialEq)]
    enum Q {
        X(&'static [u8]),
        Sh(&'static [u8], u32),
    }

    impl Request for Q {
        fn owner(&self) -> &[u8] {
            match self {
                Q::X(o) | Q::Sh(o, _) => o,
            }
        }
        fn ttl_ms(&self) -> u64 {
            500
        }
        fn mode(&self) -> Mode {
            match self {
                Q::X(_) => Mode::Exclusive,
                Q::Sh(..) => Mode::Shared,
            }
        }
        fn limit(&self) -> Option<NonZeroU32> {
            match self {
                Q::X(_) => None,
                Q::Sh(_, n) => NonZeroU32::new(*n),
            }
        }
    }

    fn queue_of(waiters: Vec<Q>) -> WaitQueues<&'static str, Q> {
        let mut queues = WaitQueues::default();
        for w in waiters {
            queues.push("k", w);
        }
        queues
    }

    fn served(handed: &HandOff<Q>) -> Vec<(&[u8], bool)> {
        handed
            .answered
            .iter()
            .map(|(w, a)| (w.owner(), matches!(a, Answer::Granted { .. })))
            .collect()
    }

    #[test]
    fn shared_waiters_behind_the_head_are_admitted_together_up_to_the_limit() {
        let (mut node, mut slot, clock, _) = setup(&[]);
        let mut queues = queue_of(vec![
            Q::Sh(b"r1", 2),
            Q::Sh(b"r2", 2),
            Q::Sh(b"r3", 2),
            Q::X(b"w"),
        ]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(served(&handed), vec![(&b"r1"[..], true), (b"r2", true)]);
        assert_eq!(handed.stopped, Stopped::Held);
        assert_eq!(
            handed.to_file(),
            vec![
                (
                    &b"r1"[..],
                    Change::Stored {
                        previous_deadline: None
                    }
                ),
                (&b"r2"[..], Change::Joined)
            ]
        );
        let lock = slot.0.as_ref().unwrap();
        assert_eq!((lock.mode(), lock.holders().len()), (Mode::Shared, 2));
        let tokens: Vec<i64> = lock.holders().iter().map(Holder::token).collect();
        assert!(
            tokens[1] > tokens[0],
            "every fresh grant gets a greater token"
        );
        assert_eq!(queues.len(&"k"), 2);
    }

    #[test]
    fn a_shared_waiter_behind_an_exclusive_one_waits_for_it() {
        let (mut node, mut slot, clock, _) = setup(&[]);
        slot.0 = Some(Lock::shared(None, Holder::new(b"r0", 1, 5, 1_000)));
        let mut queues = queue_of(vec![Q::X(b"w"), Q::Sh(b"r1", 0)]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert!(
            handed.answered.is_empty(),
            "the reader must not overtake the writer"
        );
        assert_eq!(handed.stopped, Stopped::Held);
        // The last reader leaves: the writer, then (after it) the reader.
        slot.0 = None;
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(served(&handed), vec![(&b"w"[..], true)]);
        assert_eq!(queues.front(&"k"), Some(&Q::Sh(b"r1", 0)));
    }

    #[test]
    fn a_shared_waiter_with_another_limit_is_answered_with_the_error() {
        let (mut node, mut slot, clock, _) = setup(&[]);
        slot.0 = Some(Lock::shared(
            NonZeroU32::new(3),
            Holder::new(b"r0", 1, 5, 1_000),
        ));
        let mut queues = WaitQueues::default();
        queues.push("k", S(b"r1", 2));
        queues.push("k", S(b"r2", 3));
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(
            handed.answered[0].1,
            Answer::Refused("ERR LIMIT 2 does not match the lock's LIMIT 3".into())
        );
        assert!(matches!(handed.answered[1].1, Answer::Granted { .. }));
        // A LIMIT above a lowered lock.max-holders: the error it gets now.
        let mut queues = WaitQueues::default();
        queues.push("k", S(b"big", 500));
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(
            handed.answered[0].1,
            Answer::Refused(
                "ERR LIMIT must be an integer between 1 and 100 (lock.max-holders)".into()
            )
        );
    }

    const RULES: Rules = Rules {
        window: Window::Open,
        max_ttl_ms: 10_000,
        max_owner_bytes: 8,
        max_holders: 100,
    };

    fn setup(waiters: &[W]) -> (Node, MemorySlot, ManualClock, WaitQueues<&'static str, W>) {
        let mut queues = WaitQueues::default();
        for w in waiters {
            queues.push("k", W(w.0, w.1));
        }
        (
            Node::default(),
            MemorySlot::default(),
            ManualClock::new(100, 1_700_000_000_000),
            queues,
        )
    }

    fn owners(handed: &HandOff<W>) -> Vec<(&[u8], bool)> {
        handed
            .answered
            .iter()
            .map(|(w, a)| (w.0, matches!(a, Answer::Granted { .. })))
            .collect()
    }

    #[test]
    fn the_head_gets_a_free_lock_and_the_next_owner_keeps_its_place() {
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"a", 500), W(b"b", 500)]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(owners(&handed), vec![(&b"a"[..], true)]);
        assert_eq!(handed.stopped, Stopped::Held);
        assert_eq!(queues.front(&"k"), Some(&W(b"b", 500)));
        let Answer::Granted { holder, change } = &handed.answered[0].1 else {
            panic!("not granted");
        };
        assert_eq!((holder.holds(), holder.deadline()), (1, 600));
        assert_eq!(
            *change,
            Change::Stored {
                previous_deadline: None
            }
        );
        assert_eq!(slot.sole().map(|h| h.owner().to_vec()), Some(b"a".to_vec()));
        assert_eq!(node.stats.wait_grants, 1);
    }

    #[test]
    fn a_held_lock_leaves_the_queue_as_it_is() {
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"a", 500)]);
        slot.0 = Some(Lock::exclusive(b"x", 1, 5, 1_000));
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert!(handed.answered.is_empty());
        assert_eq!(handed.stopped, Stopped::Held);
        assert_eq!(queues.len(&"k"), 1);
    }

    #[test]
    fn the_same_owner_behind_the_head_reenters() {
        let (mut node, mut slot, clock, mut queues) =
            setup(&[W(b"a", 500), W(b"a", 900), W(b"b", 500), W(b"a", 500)]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(owners(&handed), vec![(&b"a"[..], true), (b"a", true)]);
        let Answer::Granted { holder, .. } = &handed.answered[1].1 else {
            panic!("not granted");
        };
        assert_eq!((holder.holds(), holder.deadline()), (2, 1_000));
        assert_eq!(
            handed.to_file(),
            vec![(
                &b"a"[..],
                Change::Stored {
                    previous_deadline: None
                }
            )]
        );
        // b keeps its place ahead of a's third request.
        assert_eq!(queues.len(&"k"), 2);
        assert_eq!(queues.front(&"k"), Some(&W(b"b", 500)));
    }

    #[test]
    fn an_owner_over_a_lowered_owner_limit_is_refused_at_grant_time() {
        let (mut node, mut slot, clock, mut queues) =
            setup(&[W(b"a-long-owner", 500), W(b"a", 500)]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(
            owners(&handed),
            vec![(&b"a-long-owner"[..], false), (b"a", true)]
        );
        assert_eq!(
            handed.answered[0].1,
            Answer::Refused("ERR owner must be at most 8 bytes (lock.max-owner-bytes)".into())
        );
    }

    #[test]
    fn a_refused_head_is_answered_and_the_next_one_served() {
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"long", 20_000), W(b"a", 500)]);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(owners(&handed), vec![(&b"long"[..], false), (b"a", true)]);
        assert_eq!(
            handed.answered[0].1,
            Answer::Refused(
                "ERR ttl-ms must be an integer between 1 and 10000 (lock.max-ttl)".into()
            )
        );
        assert_eq!(handed.stopped, Stopped::Empty);
        // Tokens exhausted: every head is refused, none waits forever.
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"a", 500), W(b"b", 500)]);
        node.tokens.raise(i64::MAX);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(owners(&handed), vec![(&b"a"[..], false), (b"b", false)]);
        assert!(slot.0.is_none());
    }

    #[test]
    fn nothing_is_granted_in_the_recovery_window_and_the_order_stays() {
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"a", 500), W(b"b", 500)]);
        let rules = Rules {
            window: Window::Recovering { left_ms: 40 },
            ..RULES
        };
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", rules);
        assert!(handed.answered.is_empty());
        assert_eq!(handed.stopped, Stopped::Recovering);
        assert_eq!(queues.front(&"k"), Some(&W(b"a", 500)));
        assert!(slot.0.is_none());
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        assert_eq!(owners(&handed), vec![(&b"a"[..], true)]);
    }

    #[test]
    fn an_ended_lease_is_handed_on_with_a_higher_token() {
        let (mut node, mut slot, clock, mut queues) = setup(&[W(b"a", 500)]);
        slot.0 = Some(Lock::exclusive(b"x", 1, 1_700_000_000_000_000, 150));
        node.tokens.raise(1_700_000_000_000_000);
        clock.advance_ms(51);
        let handed = serve(&mut node, &mut slot, &clock, &mut queues, &"k", RULES);
        let Answer::Granted { holder, change } = &handed.answered[0].1 else {
            panic!("not granted");
        };
        assert!(holder.token() > 1_700_000_000_000_000);
        assert_eq!(
            *change,
            Change::Stored {
                previous_deadline: Some(150)
            }
        );
    }
}
