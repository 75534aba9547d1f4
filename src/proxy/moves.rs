//! Answers that can be moved while they stream: every continuable answer
//! past its first token is registered here with its member, model and
//! class, so that something outside its request can tell it to move.
//!
//! Two things do:
//! - **drain** ([`DrainWatch`]): a member whose address left its name's DNS
//!   answer, or that is ejected, for `continuation.drain_after_ms` in a
//!   row, has its answers told to move (each only while another member
//!   could take it);
//! - **pre-emption** ([`Moves::preempt`], from the admission queue): a
//!   request of a more urgent class that waits with no free slot tells one
//!   running answer of a `preemptible` class to pause. The one paused is
//!   the newest answer (latest arrival): it has the fewest tokens sent, so
//!   the least to prefill again, and the most of its answer still to come,
//!   so its pause costs its client the smallest share of the wait. An answer
//!   is paused at most `continuation.max_pauses` times.
//!
//! A told answer's forwarding loop closes its upstream connection (the
//! llama-server cancels) and continues ([`super::continuation`]). It may
//! decline (its answer cannot be continued in meaning); it is then not
//! told again.
//!
//! Deliberately not here: what moving does (the continuation), and which
//! request waits (the queue).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::fleet::Fleet;
use llamatap_policy::answer::Reason;

/// What tells one answer to move.
#[derive(Debug, Default)]
pub struct Signal {
    notify: Notify,
    /// 0: not told; else [`code`] of the reason.
    reason: AtomicU8,
}

impl Signal {
    /// Resolves once the answer is told to move (at once if it was told
    /// before this was polled).
    pub fn told(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Why it was told, if it was.
    pub fn reason(&self) -> Option<Reason> {
        match self.reason.load(Ordering::Acquire) {
            1 => Some(Reason::Drained),
            2 => Some(Reason::Preempted),
            _ => None,
        }
    }

    /// Tells it, once: `false` when it was told already.
    fn tell(&self, reason: Reason) -> bool {
        let told = self
            .reason
            .compare_exchange(0, code(reason), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if told {
            self.notify.notify_one();
        }
        told
    }
}

fn code(reason: Reason) -> u8 {
    match reason {
        Reason::Preempted => 2,
        _ => 1,
    }
}

/// What the registry knows of one answer.
#[derive(Debug)]
struct Running {
    member: usize,
    model: Option<String>,
    class: usize,
    /// Its class is preemptible and it may be paused again.
    pausable: bool,
    /// The answer's arrival.
    since: Instant,
    /// It declined a move: not told again.
    declined: bool,
    signal: Arc<Signal>,
}

/// The answers that can be moved now.
#[derive(Debug, Default)]
pub struct Moves {
    running: Mutex<HashMap<u64, Running>>,
    next: AtomicU64,
}

/// An answer's place in the registry; it leaves when this is dropped.
#[derive(Debug)]
pub struct Registration {
    moves: Arc<Moves>,
    id: u64,
}

/// What [`Moves::register`] records.
#[derive(Debug)]
pub struct Answer {
    /// The member it streams from.
    pub member: usize,
    /// The model it names.
    pub model: Option<String>,
    /// Its class index (0: most urgent).
    pub class: usize,
    /// Its class is preemptible and its pauses are not spent.
    pub pausable: bool,
    /// Its arrival.
    pub since: Instant,
}

impl Moves {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Moves::default())
    }

    /// Registers `answer`, told through `signal`.
    pub fn register(self: &Arc<Self>, answer: Answer, signal: Arc<Signal>) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.running.lock() {
            r.insert(
                id,
                Running {
                    member: answer.member,
                    model: answer.model,
                    class: answer.class,
                    pausable: answer.pausable,
                    since: answer.since,
                    declined: false,
                    signal,
                },
            );
        }
        Registration {
            moves: Arc::clone(self),
            id,
        }
    }

    /// Answers told to pause that have not left yet (their slots are about
    /// to free).
    pub fn pausing(&self) -> usize {
        self.running.lock().map_or(0, |r| {
            r.values()
                .filter(|a| !a.declined && a.signal.reason() == Some(Reason::Preempted))
                .count()
        })
    }

    /// Tells the newest pausable answer of a class less urgent than
    /// `class` (naming `model`, when given) to pause; its class index, or
    /// `None` when there is none.
    pub fn preempt(&self, class: usize, model: Option<&str>) -> Option<usize> {
        self.pick(class, |a| {
            model.is_none_or(|m| a.model.as_deref() == Some(m))
        })
    }

    /// Tells the newest pausable answer of a class less urgent than
    /// `class`, streaming from a member for which `takes(member)` holds,
    /// to pause; its class index, or `None` when there is none.
    pub fn preempt_where(&self, class: usize, takes: impl Fn(usize) -> bool) -> Option<usize> {
        self.pick(class, |a| takes(a.member))
    }

    fn pick(&self, class: usize, fits: impl Fn(&Running) -> bool) -> Option<usize> {
        let r = self.running.lock().ok()?;
        let victim = r
            .values()
            .filter(|a| {
                a.pausable
                    && !a.declined
                    && a.class > class
                    && a.signal.reason().is_none()
                    && fits(a)
            })
            .max_by_key(|a| a.since)?;
        victim
            .signal
            .tell(Reason::Preempted)
            .then_some(victim.class)
    }

    /// Tells every answer on a member that has drained for `after` to move,
    /// while another member could take it; how many were told.
    pub fn drain(&self, fleet: &Fleet, after: Duration) -> usize {
        let Ok(r) = self.running.lock() else {
            return 0;
        };
        let mut told = 0;
        let mut away: HashMap<usize, bool> = HashMap::new();
        for a in r.values().filter(|a| !a.declined) {
            let gone = *away
                .entry(a.member)
                .or_insert_with(|| fleet.away_for(a.member).is_some_and(|d| d >= after));
            if gone
                && fleet.can_fail_over(a.model.as_deref(), a.member, &[])
                && a.signal.tell(Reason::Drained)
            {
                told += 1;
            }
        }
        told
    }
}

impl Registration {
    /// The answer cannot move after all: it is not told again.
    pub fn decline(&self) {
        if let Ok(mut r) = self.moves.running.lock() {
            if let Some(a) = r.get_mut(&self.id) {
                a.declined = true;
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut r) = self.moves.running.lock() {
            r.remove(&self.id);
        }
    }
}

/// How often draining members are looked at, at most.
const DRAIN_TICK_MAX: Duration = Duration::from_millis(500);
/// How often, at least.
const DRAIN_TICK_MIN: Duration = Duration::from_millis(50);

/// Tells answers on drained members to move, every quarter of
/// `drain_after` (between 50 and 500 ms).
pub struct DrainWatch {
    /// The registry.
    pub moves: Arc<Moves>,
    /// The fleet whose members drain.
    pub fleet: Arc<Fleet>,
    /// `continuation.drain_after_ms`.
    pub after: Duration,
}

#[async_trait]
impl BackgroundService for DrainWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let tick = (self.after / 4).clamp(DRAIN_TICK_MIN, DRAIN_TICK_MAX);
        let mut every = tokio::time::interval(tick);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = every.tick() => {
                    let n = self.moves.drain(&self.fleet, self.after);
                    if n > 0 {
                        tracing::info!(answers = n, "moving answers off draining upstreams");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

// === impl Pauses ===

/// The admission queue's view of the running answers: pre-emption.
impl crate::admission::Pauses for Moves {
    fn pausing(&self) -> usize {
        Moves::pausing(self)
    }

    fn pause(&self, class: usize, model: Option<&str>) {
        let _ = Moves::preempt(self, class, model);
    }

    fn pause_where(&self, class: usize, takes: &dyn Fn(usize) -> bool) {
        let _ = Moves::preempt_where(self, class, takes);
    }
}
