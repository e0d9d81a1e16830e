//! The sequential specification of one lock key: an exclusive, re-entrant
//! lock with fencing tokens, as `LOCK.ACQUIRE`, `LOCK.RELEASE [ALL]`,
//! `LOCK.EXTEND`, `LOCK.FENCE [ATLEAST n]` and `LOCK.INFO` define it, with
//! leases long enough never to end during a history (so time plays no
//! part).
//!
//! A step whose reply never came (the node was killed first) may or may not
//! have taken effect, and a grant's token is then unknown: the
//! specification is nondeterministic. It is made deterministic the usual
//! way, for `todc_utils`'s checker: the state is the set of every state the
//! key may be in ([`Keys`]), and a step is valid when at least one of them
//! allows it.

use std::collections::BTreeSet;

use todc_utils::specifications::Specification;

/// An owner, by number (`o0`, `o1`, ...).
pub type Owner = u8;

/// A command on the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmd {
    Acquire(Owner),
    Release { owner: Owner, all: bool },
    Extend(Owner),
    Fence { owner: Owner, at_least: Option<u64> },
    Info,
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
}

impl Key {
    /// The states `cmd` can lead to when it replied `reply` (any reply when
    /// `None`, including having had no effect); none if it cannot have.
    fn next(self, cmd: Cmd, reply: Option<Reply>) -> Vec<Key> {
        let mine = |owner: Owner| self.held.filter(|held| held.owner == owner);
        // A command that does not change the key and replies `expected`.
        let read = |expected: Reply| match reply {
            None => vec![self],
            Some(got) if got == expected => vec![self],
            Some(_) => Vec::new(),
        };
        match cmd {
            Cmd::Acquire(owner) => {
                let held = match (self.held, mine(owner)) {
                    // A new lock: a token above every earlier one.
                    (None, _) => Held {
                        owner,
                        holds: 1,
                        token: Token::Above(self.issued),
                    },
                    // A re-entry: one more hold, the same token.
                    (Some(_), Some(held)) => Held {
                        holds: held.holds.saturating_add(1),
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
                        },
                    ],
                    Some(Reply::Int(token)) if held.token.matches(token) => vec![Key {
                        held: Some(Held {
                            token: Token::Is(token),
                            ..held
                        }),
                        issued: self.issued.max(token),
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
            // Leases are not modelled: an extension changes nothing here.
            Cmd::Extend(owner) => read(Reply::Int(u64::from(mine(owner).is_some()))),
            Cmd::Fence { owner, at_least } => {
                let Some(held) = mine(owner) else {
                    return read(Reply::Nil);
                };
                let floor = at_least.unwrap_or(0);
                let token = held.token.raised(floor);
                let raised = |token: Token, issued: u64| Key {
                    held: Some(Held { token, ..held }),
                    issued: issued.max(floor),
                };
                match reply {
                    None => vec![self, raised(token, self.issued)],
                    Some(Reply::Int(got)) if token.matches(got) => {
                        vec![raised(Token::Is(got), self.issued.max(got))]
                    }
                    Some(_) => Vec::new(),
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
                    }]
                }
                _ => Vec::new(),
            },
        }
    }
}

/// Every state the key may be in.
pub type Keys = BTreeSet<Key>;

/// Applies `step` to every state in `keys`: the states it may lead to.
pub fn apply(step: &Step, keys: &Keys) -> Keys {
    let mut now = keys.clone();
    for &(cmd, reply) in step {
        now = now.iter().flat_map(|key| key.next(cmd, reply)).collect();
    }
    now
}

/// The specification for `todc_utils::WGLChecker`.
pub struct LockSpec;

impl Specification for LockSpec {
    type State = Keys;
    type Operation = Step;

    fn init() -> Keys {
        BTreeSet::from([Key::default()])
    }

    fn apply(step: &Step, keys: &Keys) -> (bool, Keys) {
        let next = apply(step, keys);
        if next.is_empty() {
            return (false, keys.clone());
        }
        (true, next)
    }
}
