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
//! attempt lands in `logging`, or when another attempt replaces it. The
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
//! Each answer's first token is noted too: a copy of the list carries each
//! answer's time since it, from which the predictor reckons how far into
//! its answer it is.
//!
//! Deliberately not here: the tokens the answers have generated (they
//! would be counted per token; their time since the first token stands in),
//! predicting ([`super::Predictor`]), and the wait itself (the proxy's
//! `predict`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use llamatap_policy::ttft::{InFlight, MAX_SLOTS};
use tokio::sync::Notify;

use super::promise::Promise;
use super::window::Window;

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
        });
        Some(Boarded { member, id })
    }

    /// Runs `f` on `b`'s entry, if it is on the board; wakes the waiters
    /// when its promise ended.
    fn with(&self, b: Boarded, f: impl FnOnce(&mut Entry)) {
        let ended = {
            let Ok(mut by) = self.by_member.lock() else {
                return;
            };
            let Some(e) = by
                .get_mut(&b.member)
                .and_then(|m| m.list.iter_mut().find(|e| e.id == b.id))
            else {
                return;
            };
            f(e);
            e.flight.prefill_left == 0 && e.promise.take().is_some()
        };
        if ended {
            self.promised.fetch_sub(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
    }

    /// What `b` still has to prefill is now `prefill_left` tokens.
    pub fn prefill_left(&self, b: Boarded, prefill_left: u32) {
        self.with(b, |e| e.flight.prefill_left = prefill_left);
    }

    /// `b`'s prefill started `at` (its first progress event), with
    /// `tokens` to process.
    pub fn started(&self, b: Boarded, at: Instant, tokens: u32) {
        self.with(b, |e| e.window.start(at, tokens));
    }

    /// `b`'s first token came `at`: its prefill is over.
    pub fn prefilled(&self, b: Boarded, at: Instant) {
        self.with(b, |e| {
            e.flight.prefill_left = 0;
            e.window.end(at);
            e.first_token.get_or_insert(at);
        });
    }

    /// The prompt tokens the other answers on `b`'s member that started
    /// their prefill still have to prefill.
    pub fn beside(&self, b: Boarded) -> u32 {
        let Ok(by) = self.by_member.lock() else {
            return 0;
        };
        by.get(&b.member).map_or(0, |m| {
            m.list
                .iter()
                .filter(|e| e.id != b.id && e.window.started())
                .fold(0u32, |sum, e| sum.saturating_add(e.flight.prefill_left))
        })
    }

    /// The prompt tokens of other answers on `b`'s member processed during
    /// `b`'s prefill (pro rata, [`Window::tokens_during`]), once its
    /// prefill ended; `None` before, or without its start.
    pub fn overlap(&self, b: Boarded, now: Instant) -> Option<u32> {
        let by = self.by_member.lock().ok()?;
        let m = by.get(&b.member)?;
        let span = m.list.iter().find(|e| e.id == b.id)?.window.span()?;
        let others = m.list.iter().filter(|e| e.id != b.id).map(|e| &e.window);
        let tokens: f64 = others
            .chain(&m.landed)
            .map(|w| w.tokens_during(span, now))
            .sum();
        Some(tokens.round().min(f64::from(u32::MAX)) as u32)
    }

    /// `b`'s request is now known whole: its `max_tokens`, and, when given,
    /// its prompt tokens still to prefill and its promise (kept only with a
    /// prefill to come, and only if it had none).
    pub fn describe(
        &self,
        b: Boarded,
        max_tokens: Option<u32>,
        prefill_left: Option<u32>,
        promise: Option<Promise>,
    ) {
        self.with(b, |e| {
            e.flight.max_tokens = max_tokens.or(e.flight.max_tokens);
            if let Some(left) = prefill_left {
                e.flight.prefill_left = left;
            }
            if e.promise.is_none() && e.flight.prefill_left > 0 {
                if let Some(p) = promise {
                    e.promise = Some(p);
                    self.promised.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
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
            landed.is_some_and(|e| e.promise.is_some())
        };
        if ended {
            self.promised.fetch_sub(1, Ordering::Relaxed);
            self.changed.notify_waiters();
        }
    }

    /// Copies `member`'s answers, in boarding order (the first ones hold
    /// its slots), into `out`, each with its time since its first token;
    /// how many.
    pub fn of(&self, member: usize, out: &mut [InFlight]) -> usize {
        let now = Instant::now();
        let Ok(by) = self.by_member.lock() else {
            return 0;
        };
        let Some(m) = by.get(&member) else {
            return 0;
        };
        let n = m.list.len().min(out.len());
        for (o, e) in out.iter_mut().zip(&m.list) {
            *o = e.flight;
            let since = e
                .first_token
                .map_or(0, |t| now.saturating_duration_since(t).as_millis());
            o.decoding_ms = u32::try_from(since).unwrap_or(u32::MAX);
        }
        n
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
mod tests {
    use super::*;

    fn flight(prefill_left: u32) -> InFlight {
        InFlight {
            generated: 0,
            max_tokens: Some(64),
            prefill_left,
            decoding_ms: 0,
        }
    }

    #[test]
    fn answers_board_update_and_land_per_member() {
        let f = Flights::default();
        let a = f.board(0, flight(500), None).unwrap();
        let b = f.board(0, flight(300), None).unwrap();
        let c = f.board(1, flight(100), None).unwrap();
        let mut out = [InFlight::default(); 8];
        assert_eq!(f.of(0, &mut out), 2);
        assert_eq!((out[0].prefill_left, out[1].prefill_left), (500, 300));
        f.prefill_left(a, 0);
        assert_eq!(f.of(0, &mut out), 2);
        assert_eq!(out[0].prefill_left, 0);
        f.land(a);
        assert_eq!(f.of(0, &mut out), 1);
        assert_eq!(out[0].prefill_left, 300);
        f.land(b);
        f.land(b);
        assert_eq!(f.of(0, &mut out), 0);
        assert_eq!(f.of(1, &mut out), 1);
        f.land(c);
        assert!(f.by_member.lock().unwrap().is_empty());
        // Updating a landed answer does nothing.
        f.prefill_left(c, 7);
        assert_eq!(f.of(1, &mut out), 0);
    }

    #[test]
    fn a_member_holds_a_bounded_list_and_copies_fit_the_buffer() {
        let f = Flights::default();
        let boarded: Vec<_> = (0..MAX_PER_MEMBER + 3)
            .map(|i| f.board(2, flight(i as u32), None))
            .collect();
        assert_eq!(
            boarded.iter().filter(|b| b.is_some()).count(),
            MAX_PER_MEMBER
        );
        let mut small = [InFlight::default(); 4];
        assert_eq!(f.of(2, &mut small), 4);
        assert_eq!(small[3].prefill_left, 3);
    }

    fn promise(slo_ms: u64) -> Promise {
        let sent = Instant::now();
        Promise {
            sent,
            deadline: sent + std::time::Duration::from_millis(slo_ms),
            expected_ms: 600.0,
            factor: 1.0,
        }
    }

    #[test]
    fn a_later_prompt_is_held_by_the_promises_boarded_before_it_only() {
        let f = Flights::default();
        let now = Instant::now();
        let a = f.board(0, flight(500), Some(promise(60_000))).unwrap();
        let tight = promise(1000);
        let b = f.board(0, flight(400), Some(tight)).unwrap();
        let c = f.board(0, flight(300), None).unwrap();
        let other = f.board(1, flight(300), None).unwrap();
        assert!(f.promised());
        // c would break b's (600 + 500 > 1000), not a's; a is held by none.
        assert_eq!(f.held_by(c, 500.0, now), Some(tight.deadline));
        assert_eq!(f.held_by(c, 300.0, now), None);
        assert_eq!(f.held_by(a, 1e9, now), None);
        assert_eq!(f.held_by(other, 1e9, now), None);
        // b's first token came: its promise is kept, c is free.
        f.prefill_left(b, 0);
        assert_eq!(f.held_by(c, 500.0, now), None);
        assert_eq!(f.held_by(c, 1e9, now), Some(a.map_deadline(&f)));
        // A correction moves a's expectation.
        f.expect(a, 59_999.0);
        assert_eq!(f.held_by(c, 2.0, now), Some(a.map_deadline(&f)));
        f.land(a);
        assert_eq!(f.held_by(c, 1e9, now), None);
        assert!(!f.promised());
    }

    impl Boarded {
        fn map_deadline(&self, f: &Flights) -> Instant {
            let by = f.by_member.lock().unwrap();
            by[&self.member]
                .list
                .iter()
                .find(|e| e.id == self.id)
                .and_then(|e| e.promise)
                .unwrap()
                .deadline
        }
    }

    #[test]
    fn no_promise_without_a_prefill_and_each_counted_once() {
        let f = Flights::default();
        let done = f.board(0, flight(0), Some(promise(1000))).unwrap();
        assert!(!f.promised());
        let p = f.board(0, flight(10), Some(promise(1000))).unwrap();
        assert!(f.promised());
        f.prefill_left(p, 0);
        f.prefill_left(p, 0);
        f.land(p);
        assert!(!f.promised());
        // Known whole after its dispatch (one upstream): its prefill and
        // promise come then, once.
        f.describe(done, Some(8), Some(0), Some(promise(1000)));
        assert!(!f.promised());
        f.describe(done, Some(8), Some(300), Some(promise(1000)));
        f.describe(done, Some(8), Some(300), Some(promise(1000)));
        assert_eq!(f.promised.load(Ordering::Relaxed), 1);
        f.land(done);
        assert!(!f.promised());
        assert_eq!(f.promised.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_answer_counts_the_prompts_prefilled_beside_it_even_those_landed() {
        use std::time::Duration;
        let f = Flights::default();
        let t0 = Instant::now();
        let ms = |v: u64| t0 + Duration::from_millis(v);
        let long = f.board(0, flight(900), None).unwrap();
        let short = f.board(0, flight(100), None).unwrap();
        let late = f.board(0, flight(50), None).unwrap();
        let elsewhere = f.board(1, flight(70), None).unwrap();
        f.started(long, ms(0), 800);
        f.started(short, ms(100), 200);
        f.started(elsewhere, ms(0), 70);
        assert_eq!(f.beside(long), 100, "only the prefills started");
        f.prefill_left(short, 40);
        assert_eq!(f.beside(long), 40);
        // Not over yet, or never started: nothing to say.
        assert_eq!(f.overlap(long, ms(300)), None);
        assert_eq!(f.overlap(late, ms(300)), None);
        f.prefilled(short, ms(300));
        // The short answer lands before the long prefill ends: still counted.
        f.land(short);
        f.started(late, ms(350), 400);
        f.prefilled(long, ms(400));
        f.prefilled(elsewhere, ms(400));
        // All of short's 200, and a twentieth of late's 400 by t = 1350.
        assert_eq!(f.overlap(long, ms(1350)), Some(220));
        // Other members are not counted.
        assert_eq!(f.overlap(elsewhere, ms(1350)), Some(0));
        f.land(late);
        f.land(long);
        assert!(!f.by_member.lock().unwrap().contains_key(&0));
    }

    #[test]
    fn a_copy_carries_each_answers_time_since_its_first_token() {
        use std::time::Duration;
        let f = Flights::default();
        let a = f.board(0, flight(10), None).unwrap();
        let b = f.board(0, flight(10), None).unwrap();
        f.prefilled(a, Instant::now() - Duration::from_secs(2));
        let mut out = [InFlight::default(); 4];
        assert_eq!(f.of(0, &mut out), 2);
        assert!(out[0].decoding_ms >= 2000, "{:?}", out[0]);
        assert_eq!((out[1].decoding_ms, out[1].prefill_left), (0, 10));
        f.land(a);
        f.land(b);
    }

    #[test]
    fn a_member_keeps_a_bounded_number_of_landed_prefills() {
        let f = Flights::default();
        let keeper = f.board(3, flight(10), None).unwrap();
        for _ in 0..LANDED_KEPT + 5 {
            let b = f.board(3, flight(10), None).unwrap();
            f.started(b, Instant::now(), 10);
            f.land(b);
        }
        // One never started adds no window.
        let quiet = f.board(3, flight(10), None).unwrap();
        f.land(quiet);
        let by = f.by_member.lock().unwrap();
        assert_eq!(by[&3].landed.len(), LANDED_KEPT);
        drop(by);
        f.land(keeper);
    }

    #[tokio::test]
    async fn the_end_of_a_promise_wakes_the_waiters() {
        let f = Flights::default();
        let a = f.board(0, flight(10), Some(promise(60_000))).unwrap();
        let b = f.board(0, flight(10), Some(promise(60_000))).unwrap();
        // Waiters created before the change are woken by it.
        let first = f.changed().notified();
        f.prefill_left(a, 0);
        tokio::time::timeout(std::time::Duration::from_secs(30), first)
            .await
            .unwrap();
        let second = f.changed().notified();
        f.land(b);
        tokio::time::timeout(std::time::Duration::from_secs(30), second)
            .await
            .unwrap();
    }
}
