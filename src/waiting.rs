//! Server-side waiting (`LOCK.ACQUIRE … WAIT`): the caller is blocked inside
//! Redis in a per-key FIFO queue and handed the lock the moment it is free,
//! on release, on lease end, or when the key is deleted. The queue order
//! lives in the core crate; this file blocks, unblocks and replies.
//!
//! Every blocked client is unblocked exactly once through
//! `RedisModule_UnblockClient`: by a grant, by our own wait timeout, or from
//! the disconnect and `CLIENT UNBLOCK` callbacks, as the modules API asks.
//! Clients are blocked without a Redis-side timeout: when Redis timed a
//! client out in the same event-loop turn as our grant unblocked it, Redis
//! 7.0 dropped the grant's reply (the client held a lock it never heard of)
//! and could crash later. Our timer ends waits instead.

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use redis_lock_core::filing::{self, Surfaced};
use redis_lock_core::firing;
use redis_lock_core::handoff::{self, Rules, Stopped};
use redis_lock_core::ops;
use redis_lock_core::{Clock, Slot};
use redis_module::raw;

use crate::config;
use crate::effects::{self, Target};
use crate::ffi::blocked::{self, Client};
use crate::ffi::key::LockKey;
use crate::ffi::{self, Ctx, RString};
use crate::guard;
use crate::recovery;
use crate::state::{with_state, KeyId, ModuleState, CLOCK};
use crate::timer;
use crate::waiter::{Grant, Waiter};

/// The answer when the module state is borrowed further up the stack (a
/// callback re-entered from inside one of our own steps).
const STATE_BUSY: &str = "ERR internal error: state busy";

/// What the blocked client is told when it is unblocked.
enum Answer {
    Token(Grant),
    Error(String),
    TimedOut,
}

/// Blocks the calling client in `key`'s queue with its `request`. The
/// caller has checked that blocking is allowed here (`wait::then`).
pub fn block(ctx: Ctx, id: KeyId, request: &ops::Request, timeout_ms: u64) -> c_int {
    // No Redis-side timeout (see the module docs above); the timeout
    // callback still serves `CLIENT UNBLOCK`.
    let callbacks = blocked::Callbacks {
        reply: on_reply,
        timeout: on_timeout,
        free: free_answer,
        disconnect: on_disconnect,
    };
    let Some(client) = blocked::block(ctx, &callbacks) else {
        return ffi::reply_error(ctx, "ERR could not block the client");
    };
    let queued = with_state(|state| {
        let timeout = (timeout_ms > 0).then(|| {
            let deadline = CLOCK.monotonic_ms().saturating_add(timeout_ms);
            state.wait_deadlines.insert(deadline, client as usize)
        });
        let place = state.waiters.push(
            id.clone(),
            Waiter {
                client,
                owner: request.owner.into(),
                ttl_ms: request.ttl_ms,
                mode: request.mode,
                limit: request.limit,
                timeout,
            },
        );
        state.blocked.insert(client as usize, (id, place));
        state.node.stats.waits += 1;
        state.waits_for_recovery |= recovery::refusal(CLOCK.monotonic_ms()).is_some();
        timer::arm(state);
    });
    // Never a blocked client outside every queue: nobody would answer it.
    if queued.is_none() {
        unblock(client, Answer::Error(STATE_BUSY.into()));
    }
    raw::REDISMODULE_OK as c_int
}

/// Hands a lock that may have come free to the head of its queue, by the
/// core's rules (`redis_lock_core::handoff`): the hand-off, the removal of
/// the answered waiters from the module's books and the filing of the
/// granted holds happen in one state borrow; then the change is committed,
/// each grant propagated and announced, and each waiter answered.
pub fn grant_waiters(target: &Target, key: &mut LockKey) {
    // Every release comes here: nobody waiting anywhere is the O(1) common
    // case, checked before the key's name is copied and hashed.
    if with_state(|state| state.waiters.is_empty()).unwrap_or(true) {
        return;
    }
    let id = target.id();
    let Some(Some(handed)) = with_state(|state| {
        if !state.waiters.has_waiters(&id) {
            return None;
        }
        let limits = config::limits();
        let rules = Rules {
            window: ops::Window::of(recovery::refusal(target.now.monotonic_ms)),
            max_ttl_ms: limits.max_ttl_ms,
            max_owner_bytes: limits.max_owner_bytes,
            max_holders: limits.max_holders,
        };
        let handed = handoff::serve(
            &mut state.node,
            key,
            &target.now,
            &mut state.waiters,
            &id,
            rules,
        );
        for (waiter, _) in &handed.answered {
            state.blocked.remove(&(waiter.client as usize));
            if let Some(entry) = waiter.timeout {
                state.wait_deadlines.remove(entry);
            }
        }
        for (owner, change) in handed.to_file() {
            effects::file(state, key, owner, change, || id.clone());
        }
        if handed.stopped == Stopped::Recovering {
            // The timer serves the queues when the window ends.
            state.waits_for_recovery = true;
            timer::arm(state);
        }
        Some(handed)
    }) else {
        return;
    };
    key.commit();
    let shared = key.lock().and_then(|lock| lock.shared_limit());
    for (waiter, answer) in handed.answered {
        match answer {
            handoff::Answer::Granted { holder, .. } => {
                let effect = effects::Effect::of(target, &holder, shared);
                effects::announce(target, &waiter.owner, effect, c"lock.acquire");
                let grant = Grant {
                    key: id.clone(),
                    owner: waiter.owner,
                    token: holder.token(),
                    deadline: holder.deadline(),
                    delivered: Cell::new(false),
                };
                unblock(waiter.client, Answer::Token(grant));
            }
            handoff::Answer::Refused(message) => unblock(waiter.client, Answer::Error(message)),
        }
    }
}

/// The answer to the waiters of a key whose slot this node no longer serves.
const NOT_SERVED_HERE: &str = "TRYAGAIN the lock's hash slot is being migrated or is served by another node: retry the command (it is redirected to the node that serves the key)";

/// Answers every waiter of `id` with `message`.
fn answer_all(id: &KeyId, message: &str) {
    while let Some(Some(waiter)) = with_state(|state| {
        let waiter = state.waiters.pop_front(id)?;
        state.blocked.remove(&(waiter.client as usize));
        Some(waiter)
    }) {
        answer(&waiter, Answer::Error(message.to_string()));
    }
}

/// Settles `key` in `db` from a timer: ends its lease if it is over and
/// serves its waiters if it is free (after a `DEL`, a `FLUSHDB` or anything
/// else that removed a lock outside our commands). With `entry`, only if the
/// lock there still carries that expiry entry: otherwise the entry was stale
/// (the lock was renamed away or replaced, and its successor has its own).
pub fn settle_by_name(ctx: Ctx, id: &KeyId, entry: Option<u64>) {
    let (db, key) = (id.db(), id.name());
    if !ffi::select_db(ctx, db) {
        return;
    }
    let Some(name) = ffi::OwnedString::new(ctx, key) else {
        return;
    };
    // Only an entry whose lease is over settles the key: a stale one is
    // dropped, and a lease that grew since it was filed is filed again
    // (`filing::on_surfaced`), before anything else can return early.
    if let Some(entry) = entry {
        let Some(mut lock_key) = open_settled(ctx, &name, id) else {
            return;
        };
        let now = CLOCK.monotonic_ms();
        let surfaced = with_state(|state| {
            let lock = lock_key.lock()?;
            let surfaced =
                filing::on_surfaced(&mut state.deadlines, lock, entry, now, || id.clone());
            if surfaced == Surfaced::Refiled {
                timer::arm(state);
            }
            Some(surfaced)
        })
        .flatten();
        if surfaced != Some(Surfaced::Ended) {
            return;
        }
        // Closed before the slot check below: its `EXISTS` may expire or
        // delete the key, which must not happen under an open key.
        drop(lock_key);
    }
    // A grant from a timer bypasses the cluster's MOVED/ASK checks: in a
    // slot this node does not serve now (migrated away, or the key already
    // moved to the importing node), the waiters are told to retry, and the
    // retried command is redirected to the node that serves the key.
    if !ffi::serves_key(ctx, name.as_ptr()) {
        answer_all(id, NOT_SERVED_HERE);
        return;
    }
    // Opened after the check, so what it reads is what the keyspace holds
    // now.
    let Some(mut lock_key) = open_settled(ctx, &name, id) else {
        return;
    };
    let target = Target::new(ctx, name.as_ptr(), db, key);
    settle(&target, &mut lock_key);
}

/// Opens `name` for settling. A key of another type: nobody can get this
/// lock now. Its waiters keep waiting (within their timeouts) and the name
/// is looked at again later: the value may go without an event the module
/// hears of.
fn open_settled(ctx: Ctx, name: &ffi::OwnedString, id: &KeyId) -> Option<LockKey> {
    let opened = LockKey::open_untouched(ctx, name.as_ptr(), true);
    if opened.is_err() {
        with_state(|state| {
            if state.waiters.has_waiters(id) {
                state.behind_foreign.insert(id.clone());
                timer::arm(state);
            }
        });
    }
    opened.ok()
}

/// Commits what `change` did to `key`. A change that freed the lock or a
/// hold of it is followed by serving the queue (`grant_waiters` or
/// `settle`, by the caller): its deletion leaves no grant for the timer.
pub fn commit(key: &mut LockKey, change: ops::Change) {
    match change {
        ops::Change::Deleted { .. } | ops::Change::Left { .. } => key.commit_then_serve(),
        _ => key.commit(),
    }
}

/// Ends a lock whose lease is over (announcing it), then serves the queue.
/// Every path that may find a free lock calls this first.
pub fn settle(target: &Target, key: &mut LockKey) {
    // A key that held nothing has no lease to end (most acquires).
    if key.opened_empty() {
        grant_waiters(target, key);
        return;
    }
    let ended = with_state(|state| {
        let ended = ops::expire_if_due(&mut state.node, key, &target.now)?;
        // Holders that left a lock others hold drop their entries now;
        // a removed key drops them as it is unlinked.
        if let ops::Ended::Holders(gone) = &ended {
            for (_, entry) in gone {
                timer::remove_lease(state, *entry);
            }
            crate::stats::holders_counted(-i64::try_from(gone.len()).unwrap_or(0));
        }
        Some(ended)
    })
    .flatten();
    match ended {
        Some(ops::Ended::Lock { .. }) => {
            // The waiters are served below.
            key.commit_then_serve();
            effects::expired(target);
        }
        Some(ops::Ended::Holders(gone)) => {
            for (owner, _) in gone {
                effects::left(target, &owner, c"lock.expire");
            }
        }
        None => {}
    }
    grant_waiters(target, key);
}

fn unblock(client: Client, answer: Answer) {
    blocked::unblock(client, Some(answer));
}

/// Answers a waiter already taken off its queue, and drops its timeout.
fn answer(waiter: &Waiter, answer: Answer) {
    if let Some(entry) = waiter.timeout {
        with_state(|state| state.wait_deadlines.remove(entry));
    }
    unblock(waiter.client, answer);
}

/// Removes a blocked client from its queue and the timeout index. When it
/// was the head with others behind it, the timer serves the queue (its
/// next firing, at once): the new head may be grantable now (a reader
/// behind a writer that timed out, compatible with the readers holding the
/// lock), and no release may come to serve it.
fn forget(state: &mut ModuleState, client: Client) -> Option<Waiter> {
    let (id, place) = state.blocked.remove(&(client as usize))?;
    let (waiter, serve_again) = state.waiters.leave(&id, place)?;
    if let Some(entry) = waiter.timeout {
        state.wait_deadlines.remove(entry);
    }
    if serve_again {
        state.pending_grants.insert(id);
        timer::arm(state);
    }
    Some(waiter)
}

/// Ends the waits whose timeout has passed: nil, and no trace in the queue.
/// `batch` at a time, for at most `budget`; the timer fires again at once
/// for the rest.
pub fn end_due_waits(batch: usize, budget: std::time::Duration) {
    let started = std::time::Instant::now();
    firing::bounded(
        budget,
        || started.elapsed(),
        || {
            let now = CLOCK.monotonic_ms();
            let Some(due) =
                with_state(|state| state.wait_deadlines.next_due_batch(now, batch)).flatten()
            else {
                return false;
            };
            for (_, address) in due {
                let ended = with_state(|state| {
                    let client = address as Client;
                    let waiter = forget(state, client)?;
                    state.node.stats.wait_timeouts += 1;
                    Some(waiter.client)
                });
                if let Some(Some(client)) = ended {
                    unblock(client, Answer::TimedOut);
                }
            }
            true
        },
    );
}

/// How many wait for `id`.
pub fn waiting(id: &KeyId) -> usize {
    with_state(|state| state.waiters.len(id)).unwrap_or(0)
}

/// The grant's reply, in the unblocked client's context.
extern "C" fn on_reply(ctx: Ctx, _argv: *mut RString, _argc: c_int) -> c_int {
    guard::command(ctx, "LOCK.ACQUIRE WAIT reply", || {
        blocked::with_answer(ctx, |answer: Option<&Answer>| match answer {
            Some(Answer::Token(grant)) if still_held(ctx, grant) => {
                grant.delivered.set(true);
                ffi::reply_integer(ctx, grant.token)
            }
            Some(Answer::Token(grant)) if CLOCK.monotonic_ms() >= grant.deadline => {
                ffi::reply_error(ctx, LEASE_ENDED_BEFORE_REPLY)
            }
            Some(Answer::Token(_)) => ffi::reply_error(ctx, GONE_BEFORE_REPLY),
            Some(Answer::Error(message)) => ffi::reply_error(ctx, message),
            Some(Answer::TimedOut) | None => ffi::reply_null(ctx),
        })
    })
}

/// The reply to a waiter whose lock was evicted or deleted between its
/// grant and the reply (the same event-loop turn): never a dead token.
const GONE_BEFORE_REPLY: &str =
    "ERR the lock granted to this waiter was removed before the reply (evicted or deleted): acquire again";

/// The reply to a waiter whose granted lease ended before the reply went
/// out (a ttl shorter than the server's delay in that turn): never a dead
/// token, and a reason the caller can act on.
const LEASE_ENDED_BEFORE_REPLY: &str =
    "ERR the lease granted to this waiter ended before the reply: acquire again (with a longer ttl-ms)";

/// Whether the waiter's grant still stands as the reply goes out: the lock
/// is there, live, with the granted owner and token. The reply runs in the
/// waiter's context, whose database is the one it waited in.
fn still_held(ctx: Ctx, grant: &Grant) -> bool {
    if ffi::selected_db(ctx) != grant.key.db() {
        return true;
    }
    let Some(name) = ffi::OwnedString::new(ctx, grant.key.name()) else {
        return true;
    };
    let Ok(mut key) = LockKey::open_untouched(ctx, name.as_ptr(), false) else {
        return false;
    };
    ops::token_of(&mut key, &redis_lock_core::Now::of(&CLOCK), &grant.owner) == Some(grant.token)
}

/// `CLIENT UNBLOCK … TIMEOUT` (Redis never times our clients out itself):
/// nil, and no trace in the queue.
extern "C" fn on_timeout(ctx: Ctx, _argv: *mut RString, _argc: c_int) -> c_int {
    guard::command(ctx, "LOCK.ACQUIRE WAIT timeout", || {
        let client = blocked::handle(ctx);
        // Unblocked only if still queued: a client already granted was
        // unblocked by the grant, and a second unblock frees it twice.
        if with_state(|state| forget(state, client).is_some()) == Some(true) {
            with_state(|state| state.node.stats.wait_timeouts += 1);
            blocked::unblock::<Answer>(client, None);
        }
        ffi::reply_null(ctx)
    })
}

/// The waiting client went away (or `CLIENT UNBLOCK … ERROR`, or Redis
/// unblocked it on demotion). Redis calls this even when a grant in the same
/// event-loop turn already unblocked it: then it is no longer queued, must
/// not be unblocked again (Redis would free it twice), and its grant is
/// taken back when its answer is freed undelivered (see [`free_answer`]).
extern "C" fn on_disconnect(ctx: Ctx, client: Client) {
    guard::callback(ctx, "LOCK.ACQUIRE WAIT disconnect", (), || {
        if with_state(|state| forget(state, client).is_some()) == Some(true) {
            blocked::unblock::<Answer>(client, None);
        }
    });
}

/// Frees an answer after its reply, or instead of it when the client went
/// away first: an undelivered grant is handed to the timer to take back.
extern "C" fn free_answer(ctx: Ctx, answer: *mut c_void) {
    guard::callback(ctx, "LOCK.ACQUIRE WAIT free", (), || {
        if let Some(Answer::Token(grant)) = blocked::take_answer::<Answer>(answer) {
            if !grant.delivered.get() {
                with_state(|state| {
                    state.undelivered.push(grant);
                    timer::arm(state);
                });
            }
        }
    });
}

/// Takes back a grant whose reply never reached its waiter (one hold, if
/// the owner still holds it with that token) and serves the next waiter.
pub fn revoke_undelivered(ctx: Ctx, grant: &Grant) {
    let (db, key) = (grant.key.db(), grant.key.name());
    if !ffi::select_db(ctx, db) {
        return;
    }
    let Some(name) = ffi::OwnedString::new(ctx, key) else {
        return;
    };
    let Ok(mut lock_key) = LockKey::open_untouched(ctx, name.as_ptr(), true) else {
        return;
    };
    let target = Target::new(ctx, name.as_ptr(), db, key);
    let Some(outcome) = with_state(|state| {
        let outcome = ops::revoke(
            &mut state.node,
            &mut lock_key,
            &target.now,
            &grant.owner,
            grant.token,
        );
        effects::file(state, &mut lock_key, &grant.owner, outcome.change, || {
            target.id()
        });
        outcome
    }) else {
        return;
    };
    commit(&mut lock_key, outcome.change);
    match outcome.change {
        ops::Change::Deleted { .. } => {
            effects::deleted(&target, c"lock.release");
            settle(&target, &mut lock_key);
        }
        ops::Change::Left { .. } => {
            effects::left(&target, &grant.owner, c"lock.release");
            settle(&target, &mut lock_key);
        }
        change => effects::stored(
            &target,
            &mut lock_key,
            &grant.owner,
            change,
            c"lock.release",
        ),
    }
}
