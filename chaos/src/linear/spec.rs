//! The sequential specification of one lock key: an exclusive, re-entrant
//! lock with fencing tokens and leases, and its FIFO queue of waiters, as
//! `LOCK.ACQUIRE [WAIT]`, `LOCK.RELEASE [ALL]`, `LOCK.EXTEND`, `LOCK.FENCE
//! [ATLEAST n]` and `LOCK.INFO` define it. (Shared locks and semaphores
//! are not modelled.)
//!
//! **Time.** Each step carries the real-time stamps of its call and its
//! return (nanoseconds on the recorder's monotonic clock), and takes effect
//! at one moment between them, never before a step linearized earlier (a
//! timed model, as Jepsen's and Porcupine's). A lease granted or renewed
//! with `ttl` ms by a step linearized at `t` (at least `now`, the earliest
//! moment the state allows, at most the step's return `r`) ends at a moment
//! `E` only known to lie in `[t + ttl − early(ttl), r + ttl + late(ttl)]`
//! ([`early_ns`], [`late_ns`]): before every step the lease may have ended
//! if that interval starts before the step's return, and must have ended
//! if it ends before the earliest moment the step can take effect. A lease
//! end is a step of its own that nobody sent: the key is free from it on.
//! So are a `WAIT`'s grant (to the head of the queue, whenever the lock is
//! free) and its timeout (no earlier than its timeout after it queued).
//!
//! A step whose reply never came (the node was killed first) may or may not
//! have taken effect, and a grant's token is then unknown: the
//! specification is nondeterministic. It is made deterministic the usual
//! way, for `todc_utils`'s checker: the state is the set of every state the
//! key may be in ([`Keys`]), each with the earliest moment it allows for the
//! next step, and a step is valid when at least one of them allows it.

use std::collections::BTreeMap;

use todc_utils::specifications::Specification;

/// An owner, by number (`o0`, `o1`, ...).
pub type Owner = u8;

/// A command on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmd {
    /// `LOCK.ACQUIRE key owner ttl`.
    Acquire {
        owner: Owner,
        ttl_ms: u64,
    },
    Release {
        owner: Owner,
        all: bool,
    },
    /// `LOCK.EXTEND key owner ttl`: the lease ends `ttl` from now, shorter or
    /// longer than before.
    Extend {
        owner: Owner,
        ttl_ms: u64,
    },
    Fence {
        owner: Owner,
        at_least: Option<u64>,
    },
    Info,
    /// A `LOCK.ACQUIRE … WAIT` runs: a grant at once (a free lock nobody
    /// waits for, or a re-entry), or a place at the end of the queue. Its
    /// reply is `Nil` (it ran: known once its answer came, or once the
    /// recorder saw its client blocked), or `None` (its connection broke:
    /// it may never have run). `answer_by`: the moment its answer came
    /// (`u64::MAX`: never), which bounds its grant's lease and its timeout.
    Enqueue {
        wait: Wait,
        answer_by: u64,
    },
    /// The answer of that `WAIT`: its token, or nil (timed out).
    Answer(Wait),
}

/// One `LOCK.ACQUIRE key owner ttl WAIT timeout`: its two moments (it
/// runs, it is answered) are two steps of the history ([`Cmd::Enqueue`],
/// [`Cmd::Answer`]), and what happens between them (a hand-off when the
/// lock is released or its lease ends, a timeout) happens on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Wait {
    /// Unique in the history.
    pub id: u32,
    pub owner: Owner,
    pub ttl_ms: u64,
    pub timeout_ms: u64,
}

/// A reply, as far as the specification looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Nil,
    /// A token (acquire, fence), holds left (release) or 0/1 (extend).
    Int(u64),
    /// `LOCK.INFO` of a held lock.
    Holder {
        owner: Owner,
        holds: u32,
        token: u64,
    },
}

/// What a client did: one command, or the commands of one `MULTI` (all on
/// the key, applied at once), each with its reply (`None`: never came).
pub type Step = Vec<(Cmd, Option<Reply>)>;

/// A step with the moments it was sent and its reply came (nanoseconds on
/// the recorder's monotonic clock; `returned` is the kill that cut a lost
/// reply, or `u64::MAX`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timed {
    pub step: Step,
    pub called: u64,
    pub returned: u64,
}

/// How far the node's lease clock may run fast or slow against the
/// recorder's, parts per million. Both read the machine's `CLOCK_MONOTONIC`
/// (a lease is a deadline on it), so they run at one rate; a lease that
/// crossed a `kill -9` and restart went through the wall clock (saved as
/// its absolute wall-clock end), which NTP may slew by up to 500 ppm.
pub const RATE_ALLOWANCE_PPM: u64 = 1_000;

/// The fixed part of the early allowance: the lease clock counts whole
/// milliseconds, and a lease that crosses a restart is converted to the
/// wall clock and back (each a millisecond of rounding at most). Nothing in
/// it depends on load: the node reads its clock while it runs the step,
/// between the step's stamps.
pub const EARLY_FIXED_NS: u64 = 5_000_000;

/// The fixed part of the late allowance: a lease lives through the
/// millisecond of its deadline, plus the same rounding as above, with room.
pub const LATE_FIXED_NS: u64 = 20_000_000;

/// How much earlier than `ttl` after its grant a lease may end.
pub fn early_ns(ttl_ms: u64) -> u64 {
    ttl_ms
        .saturating_mul(RATE_ALLOWANCE_PPM)
        .saturating_add(EARLY_FIXED_NS)
}

/// How much later than `ttl` after its grant's reply a lease may end.
pub fn late_ns(ttl_ms: u64) -> u64 {
    ttl_ms
        .saturating_mul(RATE_ALLOWANCE_PPM)
        .saturating_add(LATE_FIXED_NS)
}

/// The moments between which a lease ends (nanoseconds): it is live at a
/// moment before `from`, over at one from `by` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Ends {
    from: u64,
    by: u64,
}

impl Ends {
    /// A lease of `ttl_ms` granted or renewed at a moment in `[at, returned]`.
    fn after(at: u64, returned: u64, ttl_ms: u64) -> Ends {
        let ttl = ttl_ms.saturating_mul(1_000_000);
        Ends {
            from: at.saturating_add(ttl).saturating_sub(early_ns(ttl_ms)),
            by: returned.saturating_add(ttl).saturating_add(late_ns(ttl_ms)),
        }
    }
}

/// A holder's token: known, or (its grant's reply was lost) only known to
/// be above a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Token {
    Is(u64),
    Above(u64),
}

impl Token {
    fn matches(self, reply: u64) -> bool {
        match self {
            Token::Is(token) => token == reply,
            Token::Above(bound) => reply > bound,
        }
    }

    /// The token after `LOCK.FENCE ATLEAST floor`.
    fn raised(self, floor: u64) -> Token {
        match self {
            Token::Is(token) => Token::Is(token.max(floor)),
            // max(t, floor) with t > bound: above both bound and floor - 1.
            Token::Above(bound) => Token::Above(bound.max(floor.saturating_sub(1))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Held {
    owner: Owner,
    holds: u32,
    token: Token,
    ends: Ends,
}

/// A client in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Waiter {
    wait: Wait,
    /// When it times out (its lower bound; the answer bounds it above).
    timeout: Ends,
    answer_by: u64,
}

/// What a waiter was given, not yet answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Outcome {
    Granted(Token),
    TimedOut,
}

/// One state of the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    held: Option<Held>,
    /// Every token granted on the key so far is at most this, except an
    /// unseen one, which is at least this (a grant whose reply was lost
    /// raises it by one: its token is above the old value). A new lock's
    /// token is above it.
    issued: u64,
    /// The waiters in order, then `None`s: at most 6 (the workload has
    /// fewer waiting clients). (With a named constant for the length,
    /// rustc 1.95 fails with an internal error on the struct updates.)
    queue: [Option<Waiter>; 6],
    /// Waits granted or timed out and not yet answered (sorted).
    outcomes: [Option<(u32, Outcome)>; 6],
}

impl Key {
    /// Time passes until the step `[called, returned]` takes effect, from a
    /// state whose next step takes effect at `now` at the earliest: the
    /// states it may take effect in, each with the earliest moment it can.
    /// Meanwhile things may happen that no step of the history sent
    /// ([`Key::events`]), in any number: the lease may end (if it can end
    /// before the step's return), the head of the queue be granted, a
    /// waiter time out. A state whose lease must have ended by its moment is
    /// left out.
    fn advance(self, now: u64, called: u64, returned: u64) -> Vec<(Key, u64)> {
        let at = now.max(called);
        if at > returned {
            return Vec::new();
        }
        let mut seen: BTreeMap<Key, u64> = BTreeMap::from([(self, at)]);
        let mut todo = vec![(self, at)];
        while let Some((key, at)) = todo.pop() {
            for (next, next_at) in key.events(at, returned) {
                if next_at > returned {
                    continue;
                }
                let earliest = seen.entry(next).or_insert(u64::MAX);
                if next_at < *earliest {
                    *earliest = next_at;
                    todo.push((next, next_at));
                }
            }
        }
        seen.into_iter()
            .filter(|(key, at)| key.held.map_or(true, |held| held.ends.by > *at))
            .collect()
    }

    /// What may happen on its own from `at` on, before `returned`: each
    /// with the moment it happens at the earliest.
    fn events(self, at: u64, returned: u64) -> Vec<(Key, u64)> {
        let mut events = Vec::new();
        if let Some(held) = self.held {
            if held.ends.from <= returned {
                events.push((Key { held: None, ..self }, at.max(held.ends.from)));
            }
        }
        if let Some(head) = self.waiter(0) {
            // The lock is free (or the head's owner holds it: a re-entry):
            // the head is served.
            if let Some(granted) = self.without(0).grant(head.wait, at, head.answer_by) {
                events.push((granted, at));
            }
        }
        for (i, waiter) in self.queue.iter().enumerate() {
            let Some(waiter) = waiter else { break };
            if waiter.timeout.from <= returned {
                if let Some(key) = self
                    .without(i)
                    .with_outcome(waiter.wait.id, Outcome::TimedOut)
                {
                    events.push((key, at.max(waiter.timeout.from)));
                }
            }
            // Its client is gone (the node was killed): it left the queue.
            if waiter.answer_by == u64::MAX {
                events.push((self.without(i), at));
            }
        }
        events
    }

    fn waiter(&self, i: usize) -> Option<Waiter> {
        self.queue.get(i).copied().flatten()
    }

    /// The key without waiter `i` (the others keep their order).
    fn without(mut self, i: usize) -> Key {
        if let Some(rest) = self.queue.get_mut(i..) {
            rest.rotate_left(1);
            if let Some(last) = rest.last_mut() {
                *last = None;
            }
        }
        self
    }

    /// The key with `waiter` at the end of the queue (`None`: full).
    fn with_waiter(mut self, waiter: Waiter) -> Option<Key> {
        *self.queue.iter_mut().find(|slot| slot.is_none())? = Some(waiter);
        Some(self)
    }

    fn with_outcome(mut self, id: u32, outcome: Outcome) -> Option<Key> {
        *self.outcomes.iter_mut().find(|slot| slot.is_none())? = Some((id, outcome));
        self.outcomes.sort_unstable();
        Some(self)
    }

    fn take_outcome(mut self, id: u32) -> Option<(Key, Outcome)> {
        let slot = self
            .outcomes
            .iter_mut()
            .find(|slot| matches!(slot, Some((got, _)) if *got == id))?;
        let (_, outcome) = slot.take()?;
        self.outcomes.sort_unstable();
        Some((self, outcome))
    }

    /// `wait` joins the end of the queue at a moment in `[at, answer_by]`.
    fn queued(self, wait: Wait, at: u64, answer_by: u64) -> Option<Key> {
        self.with_waiter(Waiter {
            wait,
            timeout: Ends::after(at, answer_by, wait.timeout_ms),
            answer_by,
        })
    }

    /// `wait` is granted at a moment in `[at, answer_by]`: a new lock if it
    /// is free, a re-entry if its owner holds it; `None` otherwise (or if
    /// the outcome has no room).
    fn grant(self, wait: Wait, at: u64, answer_by: u64) -> Option<Key> {
        let ends = Ends::after(at, answer_by, wait.ttl_ms);
        let (held, token, issued) = match self.held {
            None => {
                let token = Token::Above(self.issued);
                let held = Held {
                    owner: wait.owner,
                    holds: 1,
                    token,
                    ends,
                };
                (held, token, self.issued.saturating_add(1))
            }
            Some(held) if held.owner == wait.owner => {
                let held = Held {
                    holds: held.holds.saturating_add(1),
                    ends,
                    ..held
                };
                (held, held.token, self.issued)
            }
            Some(_) => return None,
        };
        Key {
            held: Some(held),
            issued,
            ..self
        }
        .with_outcome(wait.id, Outcome::Granted(token))
    }

    /// The states `cmd` can lead to when it replied `reply` (any reply when
    /// `None`, including having had no effect), taking effect at a moment
    /// in `[at, returned]`; none if it cannot have.
    fn next(self, cmd: Cmd, reply: Option<Reply>, at: u64, returned: u64) -> Vec<Key> {
        let mine = |owner: Owner| self.held.filter(|held| held.owner == owner);
        // A command that does not change the key and replies `expected`.
        let read = |expected: Reply| match reply {
            None => vec![self],
            Some(got) if got == expected => vec![self],
            Some(_) => Vec::new(),
        };
        match cmd {
            Cmd::Acquire { owner, ttl_ms } => {
                let ends = Ends::after(at, returned, ttl_ms);
                let held = match (self.held, mine(owner)) {
                    // A free lock with waiters goes to the first of them,
                    // never to a newcomer.
                    (None, _) if self.waiter(0).is_some() => return read(Reply::Nil),
                    // A new lock: a token above every earlier one.
                    (None, _) => Held {
                        owner,
                        holds: 1,
                        token: Token::Above(self.issued),
                        ends,
                    },
                    // A re-entry: one more hold, the same token, the lease
                    // renewed.
                    (Some(_), Some(held)) => Held {
                        holds: held.holds.saturating_add(1),
                        ends,
                        ..held
                    },
                    (Some(_), None) => return read(Reply::Nil),
                };
                // A new lock's unseen token is above `issued`: every later
                // one must be above `issued + 1` at least.
                let issued = if self.held.is_none() {
                    self.issued.saturating_add(1)
                } else {
                    self.issued
                };
                match reply {
                    None => vec![
                        self,
                        Key {
                            held: Some(held),
                            issued,
                            ..self
                        },
                    ],
                    Some(Reply::Int(token)) if held.token.matches(token) => vec![Key {
                        held: Some(Held {
                            token: Token::Is(token),
                            ..held
                        }),
                        issued: self.issued.max(token),
                        ..self
                    }],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Release { owner, all } => {
                let Some(held) = mine(owner) else {
                    return read(Reply::Nil);
                };
                let left = if all { 0 } else { held.holds.saturating_sub(1) };
                let after = Key {
                    held: (left > 0).then_some(Held {
                        holds: left,
                        ..held
                    }),
                    ..self
                };
                match reply {
                    None => vec![self, after],
                    Some(Reply::Int(n)) if n == u64::from(left) => vec![after],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Extend { owner, ttl_ms } => {
                let Some(held) = mine(owner) else {
                    return read(Reply::Int(0));
                };
                let after = Key {
                    held: Some(Held {
                        ends: Ends::after(at, returned, ttl_ms),
                        ..held
                    }),
                    ..self
                };
                match reply {
                    None => vec![self, after],
                    Some(Reply::Int(1)) => vec![after],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Fence { owner, at_least } => {
                let Some(held) = mine(owner) else {
                    return read(Reply::Nil);
                };
                let floor = at_least.unwrap_or(0);
                let token = held.token.raised(floor);
                let raised = |token: Token, issued: u64| Key {
                    held: Some(Held { token, ..held }),
                    issued: issued.max(floor),
                    ..self
                };
                match reply {
                    None => vec![self, raised(token, self.issued)],
                    Some(Reply::Int(got)) if token.matches(got) => {
                        vec![raised(Token::Is(got), self.issued.max(got))]
                    }
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Enqueue { wait, answer_by } => {
                let ran = if self.held.is_none() && self.waiter(0).is_some() {
                    // Behind the others, even for a free lock.
                    self.queued(wait, at, answer_by)
                } else {
                    self.grant(wait, at, answer_by)
                        .or_else(|| self.queued(wait, at, answer_by))
                };
                match reply {
                    None => std::iter::once(self).chain(ran).collect(),
                    Some(Reply::Nil) => ran.into_iter().collect(),
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Answer(wait) => {
                let Some((after, outcome)) = self.take_outcome(wait.id) else {
                    return if reply.is_none() {
                        vec![self]
                    } else {
                        Vec::new()
                    };
                };
                match (outcome, reply) {
                    (_, None) => vec![self, after],
                    (Outcome::TimedOut, Some(Reply::Nil)) => vec![after],
                    (Outcome::Granted(token), Some(Reply::Int(got))) if token.matches(got) => {
                        // The holder's token is that one if the grant still
                        // holds the lock.
                        let held = after.held.map(|held| {
                            if held.owner == wait.owner && held.token == token {
                                Held {
                                    token: Token::Is(got),
                                    ..held
                                }
                            } else {
                                held
                            }
                        });
                        vec![Key {
                            held,
                            issued: after.issued.max(got),
                            ..after
                        }]
                    }
                    _ => Vec::new(),
                }
            }
            Cmd::Info => match (self.held, reply) {
                (_, None) => vec![self],
                (None, Some(Reply::Nil)) => vec![self],
                (
                    Some(held),
                    Some(Reply::Holder {
                        owner,
                        holds,
                        token,
                    }),
                ) if held.owner == owner && held.holds == holds && held.token.matches(token) => {
                    vec![Key {
                        held: Some(Held {
                            token: Token::Is(token),
                            ..held
                        }),
                        issued: self.issued.max(token),
                        ..self
                    }]
                }
                _ => Vec::new(),
            },
        }
    }
}

/// Every state the key may be in, each with the earliest moment its next
/// step can take effect. Of two states that differ only in that moment the
/// earlier allows all the later does (every bound that moment sets, a
/// lease's earliest end included, only moves later with it): only the
/// earliest is kept.
pub type Keys = BTreeMap<Key, u64>;

/// Applies `timed` to every state in `keys`: the states it may lead to. The
/// commands of a `MULTI` take effect in order within the step's interval
/// (each reads the lease clock: a lease may end between two of them).
pub fn apply(timed: &Timed, keys: &Keys) -> Keys {
    let mut now = keys.clone();
    for &(cmd, reply) in &timed.step {
        let mut next = Keys::new();
        for (&key, &at) in &now {
            for (key, at) in key.advance(at, timed.called, timed.returned) {
                for key in key.next(cmd, reply, at, timed.returned) {
                    let earliest = next.entry(key).or_insert(at);
                    *earliest = (*earliest).min(at);
                }
            }
        }
        now = next;
    }
    now
}

/// The specification for `todc_utils::WGLChecker`.
pub struct LockSpec;

impl Specification for LockSpec {
    type State = Keys;
    type Operation = Timed;

    fn init() -> Keys {
        BTreeMap::from([(Key::default(), 0)])
    }

    fn apply(timed: &Timed, keys: &Keys) -> (bool, Keys) {
        let next = apply(timed, keys);
        if next.is_empty() {
            return (false, keys.clone());
        }
        (true, next)
    }
}
