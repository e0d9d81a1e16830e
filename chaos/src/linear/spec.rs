//! The sequential specification of one lock key: a re-entrant lock with
//! fencing tokens and leases, exclusive, shared (readers) or a semaphore
//! (`SHARED LIMIT n`), and its FIFO queue of waiters, as `LOCK.ACQUIRE
//! [SHARED [LIMIT n]] [WAIT]`, `LOCK.RELEASE [ALL]`, `LOCK.EXTEND`,
//! `LOCK.FENCE [ATLEAST n]` and `LOCK.INFO` define it. Each holder of a
//! shared lock has its own holds, lease and token; a new holder (of either
//! mode) gets a token above every earlier one on the key. A shared request
//! joins shared holders with the same `LIMIT` while there is room and
//! nobody waits; an exclusive one needs a free lock and an empty queue; a
//! re-entry (the same mode) needs neither.
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
//! end is a step of its own that nobody sent: its holder is gone from it
//! on. So are a `WAIT`'s grant (to the head of the queue, when it can be
//! admitted: an exclusive head once nobody holds the lock, a shared head
//! while there is room, each waiter behind it then in turn) and its timeout
//! (no earlier than its timeout after it queued). The grant comes no later
//! than [`HANDOFF_LATE_NS`] after the head could first be admitted (a
//! release's return, a lease's latest end, a timeout's answer): a state in
//! which it is still waiting after that is left out.
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
    /// `LOCK.ACQUIRE key owner ttl [SHARED [LIMIT n]]`.
    Acquire {
        owner: Owner,
        ttl_ms: u64,
        mode: Mode,
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
    /// reply is [`Reply::Queued`] (the recorder saw its client blocked: a
    /// place in the queue), `Nil` (it ran, one way or the other: its
    /// answer came before the recorder saw it blocked), or `None` (its
    /// connection broke: it may never have run). `answer_by`: the moment its answer came
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
    pub mode: Mode,
}

/// A lock's mode, as `LOCK.ACQUIRE` asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// No `SHARED`: one holder at a time.
    #[default]
    Exclusive,
    /// `SHARED` (a reader: any number of holders, [`MAX_HOLDERS`] in the
    /// model), or `SHARED LIMIT n` (a semaphore of `n` permits).
    Shared { limit: Option<u8> },
}

/// A reply, as far as the specification looks at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Nil,
    /// A `LOCK.ACQUIRE … WAIT`'s run ([`Cmd::Enqueue`]) whose client the
    /// recorder saw blocked (`CLIENT LIST`): it took a place in the queue.
    /// A request the node could grant at once is answered at once and
    /// never blocks, so it was not granted then.
    Queued,
    /// A token (acquire, fence), holds left (release) or 0/1 (extend).
    Int(u64),
    /// `LOCK.INFO` of a held exclusive lock.
    Holder {
        owner: Owner,
        holds: u32,
        token: u64,
    },
    /// `LOCK.INFO` of a held shared lock: how many hold it.
    Shared {
        holders: u32,
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

/// The most holders a state can have: the workload's shared keys have
/// fewer owners that may hold them at once (a state that would need more is
/// refused, so a workload that outgrew it fails loudly).
pub const MAX_HOLDERS: usize = 8;

/// One state of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The lock's mode while anyone holds it (`Exclusive` when nobody
    /// does: one state for a free key).
    mode: Mode,
    /// The holders by owner, then `None`s: one for an exclusive lock, up
    /// to its `LIMIT` for a shared one. (With a named constant for the
    /// length, rustc 1.95 fails with an internal error on the struct
    /// updates.)
    holders: [Option<Held>; 8],
    /// Every token granted on the key so far is at most this, except an
    /// unseen one, which is at least this (a grant whose reply was lost
    /// raises it by one: its token is above the old value). A new holder's
    /// token is above it.
    issued: u64,
    /// The waiters in order, then `None`s: at most 6 (the workload has
    /// fewer waiting clients).
    queue: [Option<Waiter>; 6],
    /// Waits granted or timed out and not yet answered (sorted).
    outcomes: [Option<(u32, Outcome)>; 6],
    /// The head of the queue can be admitted (the lock is free, or shared
    /// with room for a shared head, or held by the head's owner): it must
    /// be, by this moment (`u64::MAX`: it cannot be). Set when that became
    /// so, to the latest moment it can have ([`HANDOFF_LATE_NS`] after).
    serve_by: u64,
}

/// How long after the moment its head could first be admitted (a release's
/// reply, a lease's latest end, a waiter's timeout) a queue may still wait
/// to be served. A release serves the queue in the same command; a lease
/// end or a timeout is handled by the module's timer, armed for that
/// millisecond, whose firing a busy machine can delay: the allowance is for
/// that delay (the lease's own allowance is already in its latest end).
pub const HANDOFF_LATE_NS: u64 = 100_000_000;

impl Default for Key {
    fn default() -> Key {
        Key {
            mode: Mode::Exclusive,
            holders: [None; 8],
            issued: 0,
            queue: [None; 6],
            outcomes: [None; 6],
            serve_by: u64::MAX,
        }
    }
}

impl Key {
    /// Time passes until the step `[called, returned]` takes effect, from a
    /// state whose next step takes effect at `now` at the earliest: the
    /// states it may take effect in, each with the earliest moment it can.
    /// Meanwhile things may happen that no step of the history sent
    /// ([`Key::events`]), in any number, each at the earliest moment it
    /// can (from `now` on, before the step was sent too): a lease may end
    /// (if it can end before the step's return), the head of the queue be
    /// granted, a waiter time out. Each happens in a state still valid at
    /// its moment ([`Key::valid_at`]: one lease that must have ended
    /// before another thing happens ends first, and a head is served by
    /// its deadline); a state in which a lease must have ended by the
    /// step's moment, or the queue's head been served, is left out.
    fn advance(self, now: u64, called: u64, returned: u64) -> Vec<(Key, u64)> {
        if now.max(called) > returned {
            return Vec::new();
        }
        let mut seen: BTreeMap<Key, u64> = BTreeMap::from([(self, now)]);
        let mut todo = vec![(self, now)];
        while let Some((key, at)) = todo.pop() {
            for (next, next_at) in key.events(at, returned) {
                if next_at > returned || !key.valid_at(next_at) {
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
            .map(|(key, at)| (key, at.max(called)))
            .filter(|(key, at)| key.valid_at(*at))
            .collect()
    }

    /// No lease in it must have ended by `at`, nor its queue's head been
    /// served.
    fn valid_at(&self, at: u64) -> bool {
        self.held().all(|held| held.ends.by > at) && at <= self.serve_by
    }

    /// What may happen on its own from `at` on, before `returned`: each
    /// with the moment it happens at the earliest.
    fn events(self, at: u64, returned: u64) -> Vec<(Key, u64)> {
        let mut events = Vec::new();
        for held in self.held() {
            if held.ends.from <= returned {
                let key = self.without_holder(held.owner).settled(held.ends.by);
                events.push((key, at.max(held.ends.from)));
            }
        }
        if let Some(head) = self.waiter(0) {
            // The head is served when it can be admitted (the same
            // deadline holds for the next one, if it can be too: one
            // hand-off admits a run of shared waiters).
            if let Some(granted) = self.without(0).grant(head.wait, at, head.answer_by, true) {
                events.push((granted.settled(u64::MAX), at));
            }
        }
        for (i, waiter) in self.queue.iter().enumerate() {
            let Some(waiter) = waiter else { break };
            if waiter.timeout.from <= returned {
                if let Some(key) = self
                    .without(i)
                    .with_outcome(waiter.wait.id, Outcome::TimedOut)
                {
                    events.push((key.settled(waiter.answer_by), at.max(waiter.timeout.from)));
                }
            }
            // Its client is gone (the node was killed): it left the queue.
            if waiter.answer_by == u64::MAX {
                events.push((self.without(i).settled(u64::MAX), at));
            }
        }
        events
    }

    /// The holders.
    fn held(&self) -> impl Iterator<Item = Held> + '_ {
        self.holders.iter().map_while(|held| *held)
    }

    fn holder(&self, owner: Owner) -> Option<Held> {
        self.held().find(|held| held.owner == owner)
    }

    /// The key with `held` as its owner's hold (`None`: no room).
    fn with_holder(mut self, held: Held) -> Option<Key> {
        let slot = match self
            .holders
            .iter()
            .position(|slot| matches!(slot, Some(h) if h.owner == held.owner))
        {
            Some(i) => self.holders.get_mut(i)?,
            None => self.holders.iter_mut().find(|slot| slot.is_none())?,
        };
        *slot = Some(held);
        self.holders
            .sort_unstable_by_key(|slot| slot.map_or((1, 0), |h| (0, h.owner)));
        Some(self)
    }

    /// The key without `owner`'s hold (free, and exclusive, without any).
    fn without_holder(mut self, owner: Owner) -> Key {
        if let Some(i) = self
            .holders
            .iter()
            .position(|slot| matches!(slot, Some(h) if h.owner == owner))
        {
            if let Some(rest) = self.holders.get_mut(i..) {
                rest.rotate_left(1);
                if let Some(last) = rest.last_mut() {
                    *last = None;
                }
            }
        }
        if self.holders[0].is_none() {
            self.mode = Mode::Exclusive;
        }
        self
    }

    /// Whether `wait` (at the head of the queue) can be admitted now.
    fn admits(&self, wait: Wait) -> bool {
        self.admit(wait.owner, wait.mode, wait.ttl_ms, 0, 0, true)
            .is_some()
    }

    /// The key with its hand-off deadline brought up to date after a change
    /// that happened by `by` at the latest: if its head can be admitted, it
    /// must be by `by` + [`HANDOFF_LATE_NS`] (or by the deadline it already
    /// had); if not, there is none.
    fn settled(self, by: u64) -> Key {
        let serve_by = match self.waiter(0) {
            Some(head) if self.admits(head.wait) => {
                self.serve_by.min(by.saturating_add(HANDOFF_LATE_NS))
            }
            _ => u64::MAX,
        };
        Key { serve_by, ..self }
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

    /// `owner` asks for the lock in `mode` with a lease of `ttl_ms`, at a
    /// moment in `[at, returned]`: the key with its hold and the hold's
    /// token, or `None` if it is refused (nil). Its own hold in the same
    /// mode is re-entered (one more hold, the same token, the lease
    /// renewed); a free lock is a new one; a shared lock with the same
    /// `LIMIT` and room takes one more holder. A new holder's token is
    /// above every earlier one. Unless `head` (the head of the queue being
    /// served), a new holder also needs an empty queue (a newcomer never
    /// overtakes a waiter).
    fn admit(
        self,
        owner: Owner,
        mode: Mode,
        ttl_ms: u64,
        at: u64,
        returned: u64,
        head: bool,
    ) -> Option<(Key, Token)> {
        let ends = Ends::after(at, returned, ttl_ms);
        if let Some(held) = self.holder(owner) {
            // Re-entry, in the same mode only (the other mode is an error
            // the workload never provokes).
            if self.mode != mode {
                return None;
            }
            let key = self.with_holder(Held {
                holds: held.holds.saturating_add(1),
                ends,
                ..held
            })?;
            return Some((key, held.token));
        }
        if !head && self.waiter(0).is_some() {
            return None;
        }
        let holders = self.held().count();
        let room = match (self.mode, mode) {
            _ if holders == 0 => true,
            (Mode::Shared { limit: held }, Mode::Shared { limit }) if held == limit => {
                holders < limit.map_or(MAX_HOLDERS, usize::from)
            }
            _ => false,
        };
        if !room {
            return None;
        }
        let token = Token::Above(self.issued);
        let key = Key {
            mode,
            issued: self.issued.saturating_add(1),
            ..self
        }
        .with_holder(Held {
            owner,
            holds: 1,
            token,
            ends,
        })?;
        Some((key, token))
    }

    /// `wait` is granted at a moment in `[at, answer_by]` (as the head of
    /// the queue if `head`); `None` if it cannot be now (or if the outcome
    /// has no room).
    fn grant(self, wait: Wait, at: u64, answer_by: u64, head: bool) -> Option<Key> {
        let (key, token) = self.admit(wait.owner, wait.mode, wait.ttl_ms, at, answer_by, head)?;
        key.with_outcome(wait.id, Outcome::Granted(token))
    }

    /// The key with `owner`'s hold's token seen to be `token`.
    fn seen(self, owner: Owner, token: u64) -> Key {
        let key = match self.holder(owner) {
            Some(held) => self
                .with_holder(Held {
                    token: Token::Is(token),
                    ..held
                })
                .unwrap_or(self),
            None => self,
        };
        Key {
            issued: key.issued.max(token),
            ..key
        }
    }

    /// The states `cmd` can lead to when it replied `reply` (any reply when
    /// `None`, including having had no effect), taking effect at a moment
    /// in `[at, returned]`; none if it cannot have.
    fn next(self, cmd: Cmd, reply: Option<Reply>, at: u64, returned: u64) -> Vec<Key> {
        // A command that does not change the key and replies `expected`.
        let read = |expected: Reply| match reply {
            None => vec![self],
            Some(got) if got == expected => vec![self],
            Some(_) => Vec::new(),
        };
        match cmd {
            Cmd::Acquire {
                owner,
                ttl_ms,
                mode,
            } => {
                let Some((after, token)) = self.admit(owner, mode, ttl_ms, at, returned, false)
                else {
                    return read(Reply::Nil);
                };
                match reply {
                    None => vec![self, after],
                    // A new holder's token is above `issued`: once seen,
                    // `issued` is that token.
                    Some(Reply::Int(got)) if token.matches(got) => vec![Key {
                        issued: self.issued,
                        ..after
                    }
                    .seen(owner, got)],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Release { owner, all } => {
                let Some(held) = self.holder(owner) else {
                    return read(Reply::Nil);
                };
                let left = if all { 0 } else { held.holds.saturating_sub(1) };
                let after = if left > 0 {
                    let Some(after) = self.with_holder(Held {
                        holds: left,
                        ..held
                    }) else {
                        return Vec::new();
                    };
                    after
                } else {
                    self.without_holder(owner)
                };
                match reply {
                    None => vec![self, after],
                    Some(Reply::Int(n)) if n == u64::from(left) => vec![after],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Extend { owner, ttl_ms } => {
                let Some(held) = self.holder(owner) else {
                    return read(Reply::Int(0));
                };
                let Some(after) = self.with_holder(Held {
                    ends: Ends::after(at, returned, ttl_ms),
                    ..held
                }) else {
                    return Vec::new();
                };
                match reply {
                    None => vec![self, after],
                    Some(Reply::Int(1)) => vec![after],
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Fence { owner, at_least } => {
                let Some(held) = self.holder(owner) else {
                    return read(Reply::Nil);
                };
                let floor = at_least.unwrap_or(0);
                let token = held.token.raised(floor);
                let raised = |token: Token, issued: u64| {
                    self.with_holder(Held { token, ..held }).map(|key| Key {
                        issued: issued.max(floor),
                        ..key
                    })
                };
                match reply {
                    None => std::iter::once(self)
                        .chain(raised(token, self.issued))
                        .collect(),
                    Some(Reply::Int(got)) if token.matches(got) => {
                        raised(Token::Is(got), self.issued.max(got))
                            .into_iter()
                            .collect()
                    }
                    Some(_) => Vec::new(),
                }
            }
            Cmd::Enqueue { wait, answer_by } => {
                // Granted at once as a plain acquisition would be (never
                // ahead of the queue but for a re-entry), or queued.
                let granted = self.grant(wait, at, answer_by, false);
                let queued = || self.queued(wait, at, answer_by);
                match reply {
                    None => std::iter::once(self)
                        .chain(granted.or_else(queued))
                        .collect(),
                    Some(Reply::Nil) => granted.or_else(queued).into_iter().collect(),
                    // Seen blocked: queued, in a state that could not
                    // grant it at once (a lease that may have ended is
                    // taken as not yet ended here, by the states that
                    // keep it).
                    Some(Reply::Queued) if granted.is_none() => queued().into_iter().collect(),
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
                        let key = match after.holder(wait.owner) {
                            Some(held) if held.token == token => after.seen(wait.owner, got),
                            _ => Key {
                                issued: after.issued.max(got),
                                ..after
                            },
                        };
                        vec![key]
                    }
                    _ => Vec::new(),
                }
            }
            Cmd::Info => {
                let holders = self.held().count();
                match (self.mode, self.held().next(), reply) {
                    (_, _, None) => vec![self],
                    (_, None, Some(Reply::Nil)) => vec![self],
                    (
                        Mode::Exclusive,
                        Some(held),
                        Some(Reply::Holder {
                            owner,
                            holds,
                            token,
                        }),
                    ) if held.owner == owner
                        && held.holds == holds
                        && held.token.matches(token) =>
                    {
                        vec![self.seen(owner, token)]
                    }
                    (Mode::Shared { .. }, Some(_), Some(Reply::Shared { holders: n }))
                        if usize::try_from(n).is_ok_and(|n| n == holders) =>
                    {
                        vec![self]
                    }
                    _ => Vec::new(),
                }
            }
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
                    // Whatever it did, it did by its return.
                    let key = key.settled(timed.returned);
                    let earliest = next.entry(key).or_insert(at);
                    *earliest = (*earliest).min(at);
                }
            }
        }
        now = next;
    }
    now
}

thread_local! {
    /// The steps [`LockSpec::apply`] may still take on this thread (see
    /// [`with_budget`]), and whether it ran out.
    static BUDGET: std::cell::Cell<(u64, bool)> = const { std::cell::Cell::new((u64::MAX, false)) };
}

/// Runs `check` with at most `steps` applications of a step to one of the
/// key's possible states ([`LockSpec::apply`]) on this thread: past them every
/// application is refused, which ends the checker's search at once (with
/// "not linearizable"). Returns what `check` returned, and whether the
/// budget ran out: its answer is then no verdict, and the caller must not
/// take it for one either way; and how many steps it took. The bound is a
/// count, not a time: the same history gets the same answer on a fast
/// machine and under valgrind.
pub fn with_budget<T>(steps: u64, check: impl FnOnce() -> T) -> (T, u64, bool) {
    BUDGET.with(|budget| budget.set((steps, false)));
    let answer = check();
    let (left, ran_out) = BUDGET.with(|budget| budget.replace((u64::MAX, false)));
    (answer, steps.saturating_sub(left), ran_out)
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
        // Charged by the states the step is applied to (one application
        // may try many): a closer measure of the work than the calls.
        let cost = u64::try_from(keys.len()).unwrap_or(u64::MAX).max(1);
        let spent = BUDGET.with(|budget| {
            let (left, ran_out) = budget.get();
            let spent = ran_out || left < cost;
            budget.set((left.saturating_sub(cost), spent));
            spent
        });
        if spent {
            return (false, keys.clone());
        }
        let next = apply(timed, keys);
        if next.is_empty() {
            return (false, keys.clone());
        }
        (true, next)
    }
}
