//! The answers in flight on each member, as the predictor needs them: each
//! dispatched attempt's prompt tokens still to prefill, and its
//! `max_tokens`, so that a request predicted beside them counts the
//! prompts ahead of it in the member's batches; and, for an attempt with a
//! TTFT objective, its [`Promise`], so that a later prompt does not push
//! its first token past it ([`Flights::held_by`]).
//!
//! An attempt boards at dispatch with its prefill estimated from its own
//! prediction (streamed answers only: their progress events and first token
//! say when the prefill is over); each progress event sets what is left; the
//! first token, or a head with no progress to come, sets it to 0; the
//! attempt lands when its body's end is read upstream, else in `logging`
//! (a cut or failed answer), or when another attempt replaces it. The
//! lock is held for one of these steps (a short scan of one member's
//! list), never across an await; nothing here runs per token. A promise's
//! prefill ending, or its attempt landing, wakes the requests waiting on
//! it ([`Flights::changed`]).
//!
//! Each attempt's prefill [`Window`] (its first progress event to its
//! first token) is kept on its entry, and for a few landed answers beyond
//! (a short answer can land before a long prefill beside it ends), so that
//! an answer landing can say how many tokens of other prompts went through
//! its batches ([`Flights::overlap`]).
//!
//! Each answer's first token is noted too, and each entry shares a
//! [`Tally`] with its request, which sets the tokens its stream has
//! counted after each chunk (an atomic store, no lock): a copy of the list
//! carries each answer's count, or, when it is not counted (an answer not
//! streamed), its time since its first token, from which the predictor
//! reckons how far into its answer it is.
//!
//! The copy and the overlap are read in `read.rs`.
//!
//! Deliberately not here: counting the tokens (the stream's observer),
//! predicting ([`super::Predictor`]), and the wait itself (the proxy's
//! `predict`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use llamatap_policy::ttft::{InFlight, MAX_SLOTS};
use tokio::sync::Notify;

use super::promise::Promise;
use super::tally::Tally;
use super::window::Window;
pub use read::Overlap;
use sequence::Sequencing;

mod read;
mod sequence;

/// Most answers kept per member: those beyond are not in its slots.
const MAX_PER_MEMBER: usize = 4 * MAX_SLOTS;
/// Prefill windows of landed answers kept per member.
const LANDED_KEPT: usize = 16;

/// One attempt on the board: its member and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boarded {
    /// The member.
    pub member: usize,
    id: u64,
}

/// One answer on a member's list.
#[derive(Debug)]
struct Entry {
    id: u64,
    flight: InFlight,
    promise: Option<Promise>,
    window: Window,
    /// When its first token came.
    first_token: Option<Instant>,
    /// The tokens its stream has counted.
    tally: Tally,
    /// When it boarded (its dispatch).
    boarded: Instant,
    /// When a progress event last set `prefill_left`: its slot has been
    /// on those tokens since.
    left_since: Option<Instant>,
    /// Its first progress event is to come, and a later prompt to its
    /// member waits for it ([`Flights::unstarted_before`]).
    awaits_start: bool,
}

/// One member's answers, in boarding order, and the prefill windows of
/// those landed while others were on the board (newest last). Dropped
/// when its last answer lands: a landed prefill ended before any later
/// answer boarded.
#[derive(Debug, Default)]
struct Board {
    list: Vec<Entry>,
    landed: VecDeque<Window>,
}

/// The board of answers in flight, per member.
#[derive(Debug, Default)]
pub struct Flights {
    by_member: Mutex<HashMap<usize, Board>>,
    next: AtomicU64,
    /// Answers on the board with a promise, their prefill not over.
    promised: AtomicUsize,
    changed: Notify,
    sequencing: Sequencing,
}

impl Flights {
    /// `flight` boards `member`, with the objective it was admitted with;
    /// `None` when the member's list is full.
    pub fn board(
        &self,
        member: usize,
        flight: InFlight,
        promise: Option<Promise>,
    ) -> Option<Boarded> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut by = self.by_member.lock().ok()?;
        let list = &mut by.entry(member).or_default().list;
        if list.len() >= MAX_PER_MEMBER {
            return None;
        }
        let promise = promise.filter(|_| flight.prefill_left > 0);
        if promise.is_some() {
            self.promised.fetch_add(1, Ordering::Relaxed);
        }
        list.push(Entry {
            id,
            flight,
            promise,
            window: Window::default(),
            first_token: None,
            tally: Tally::default(),
            awaits_start: false,
            boarded: Instant::now(),
            left_since: None,
        });
        Some(Boarded { member, id })
    }

    /// The tally `b`'s stream sets its generated tokens in, if it is on
    /// the board.
    pub fn tally(&self, b: Boarded) -> Option<Tally> {
        let by = self.by_member.lock().ok()?;
        by.get(&b.member)?
            .list
            .iter()
            .find(|e| e.id == b.id)
            .map(|e| e.tally.clone())
    }

    /// Runs `f` on `b`'s member's list and the place of `b`'s entry in it,
    /// if it is on the board (`None` if not); wakes the waiters when its
    /// promise ended.
    fn with_list<R>(&self, b: Boarded, f: impl FnOnce(&mut [Entry], usize) -> R) -> Option<R> {
        let (r, ended) = {
            let mut by = self.by_member.lock().ok()?;
            let list = &mut by.get_mut(&b.member)?.list;
            let i = list.iter().position(|e| e.id == b.id)?;
            let r = f(list, i);
            let ended = list
                .get_mut(i)
                .is_some_and(|e| e.flight.prefill_left == 0 && e.promise.take().is_some());
            (r, ended)
        };
        if ended {
            self.promised.fetch_sub(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
        Some(r)
    }

    /// Runs `f` on `b`'s entry, if it is on the board; wakes the waiters
    /// when its promise ended.
    fn with(&self, b: Boarded, f: impl FnOnce(&mut Entry)) {
        self.with_list(b, |list, i| list.get_mut(i).map(f));
    }

    /// A progress event of `b`'s, under one lock: its prefill started `at`
    /// (kept from the first event) with `tokens` to process, `left` are
    /// still to prefill, after `context` in its slot (cached or done).
    /// Returns the prompt tokens the other answers on its member that
    /// started their prefill still have to prefill while its own are not
    /// done (then 0: the next batch brings its first token, and the
    /// prompts beside no longer delay it).
    pub fn progressed(
        &self,
        b: Boarded,
        at: Instant,
        (tokens, left, context): (u32, u32, u32),
    ) -> u32 {
        self.sequencing.saw(b.member);
        let (beside, started) = self
            .with_list(b, |list, i| {
                let started = list.get_mut(i).is_some_and(|e| {
                    e.window.start(at, tokens);
                    e.flight.prefill_left = left;
                    e.flight.prefill_context = context;
                    e.left_since = Some(at);
                    std::mem::take(&mut e.awaits_start)
                });
                if left == 0 {
                    return (0, started);
                }
                let beside = list
                    .iter()
                    .filter(|e| e.id != b.id && e.window.started())
                    .fold(0u32, |sum, e| sum.saturating_add(e.flight.prefill_left));
                (beside, started)
            })
            .unwrap_or_default();
        if started {
            self.sequencing.stopped();
        }
        beside
    }

    /// What `b` still has to prefill is now `prefill_left` tokens (an
    /// estimate: its time on them is not known).
    pub fn prefill_left(&self, b: Boarded, prefill_left: u32) {
        self.with(b, |e| {
            e.flight.prefill_left = prefill_left;
            e.left_since = None;
        });
    }

    /// `b`'s first token came `at`: its prefill is over.
    pub fn prefilled(&self, b: Boarded, at: Instant) {
        let awaited = self.with_list(b, |list, i| {
            list.get_mut(i).is_some_and(|e| {
                e.flight.prefill_left = 0;
                e.window.end(at);
                e.first_token.get_or_insert(at);
                std::mem::take(&mut e.awaits_start)
            })
        });
        if awaited == Some(true) {
            self.sequencing.stopped();
        }
    }

    /// `b`'s request is now known whole: its `max_tokens`, and, when given,
    /// its prompt tokens still to prefill and its promise (kept only with a
    /// prefill to come, and only if it had none). With `progress` (it asked
    /// for progress events, and its member has sent them before) and a
    /// prefill to come, later prompts to its member wait for its start.
    pub fn describe(
        &self,
        b: Boarded,
        max_tokens: Option<u32>,
        prefill_left: Option<u32>,
        promise: Option<Promise>,
        progress: bool,
    ) {
        let progress = progress && self.sequencing.seen(b.member);
        let changed = self.with_list(b, |list, i| {
            let Some(e) = list.get_mut(i) else {
                return (false, false);
            };
            e.flight.max_tokens = max_tokens.or(e.flight.max_tokens);
            if let Some(left) = prefill_left {
                e.flight.prefill_left = left;
                e.left_since = None;
            }
            if e.promise.is_none() && e.flight.prefill_left > 0 {
                if let Some(p) = promise {
                    e.promise = Some(p);
                    self.promised.fetch_add(1, Ordering::Relaxed);
                }
            }
            let was = e.awaits_start;
            e.awaits_start = progress
                && e.flight.prefill_left > 0
                && !e.window.started()
                && e.first_token.is_none();
            (was, e.awaits_start)
        });
        match changed {
            Some((false, true)) => self.sequencing.awaits(),
            Some((true, false)) => self.sequencing.stopped(),
            _ => {}
        }
    }

    /// `b`'s promise now expects its first token `expected_ms` after it
    /// was sent (a correction by its progress).
    pub fn expect(&self, b: Boarded, expected_ms: f64) {
        self.with(b, |e| {
            if let Some(p) = e.promise.as_mut() {
                p.expected_ms = expected_ms;
            }
        });
    }

    /// `b` is over.
    pub fn land(&self, b: Boarded) {
        let ended = {
            let Ok(mut by) = self.by_member.lock() else {
                return;
            };
            let Some(m) = by.get_mut(&b.member) else {
                return;
            };
            let landed = m
                .list
                .iter()
                .position(|e| e.id == b.id)
                .map(|at| m.list.remove(at));
            if m.list.is_empty() {
                by.remove(&b.member);
            } else if let Some(mut w) = landed.as_ref().map(|e| e.window) {
                if w.started() {
                    // One that never saw its first token ended here.
                    w.end(Instant::now());
                    if m.landed.len() >= LANDED_KEPT {
                        m.landed.pop_front();
                    }
                    m.landed.push_back(w);
                }
            }
            landed.map(|e| (e.promise.is_some(), e.awaits_start))
        };
        let Some((ended, awaited)) = ended else {
            return;
        };
        if ended {
            self.promised.fetch_sub(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
        if awaited {
            self.sequencing.stopped();
        }
    }

    /// Whether any answer on the board holds a promise (a load, nothing
    /// locked: the common case without objectives costs this only).
    pub fn promised(&self) -> bool {
        self.promised.load(Ordering::Relaxed) > 0
    }

    /// The latest deadline among the promises, boarded on `b`'s member
    /// before it, that a prefill of `delay_ms` would break at `now`
    /// ([`Promise::broken_by`]); `None` when it breaks none.
    pub fn held_by(&self, b: Boarded, delay_ms: f64, now: Instant) -> Option<Instant> {
        let by = self.by_member.lock().ok()?;
        by.get(&b.member)?
            .list
            .iter()
            .take_while(|e| e.id != b.id)
            .filter_map(|e| e.promise.filter(|p| p.broken_by(delay_ms, now)))
            .map(|p| p.deadline)
            .max()
    }

    /// Notified when a promise's prefill ends or its answer lands.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }
}

#[cfg(test)]
mod tests;
