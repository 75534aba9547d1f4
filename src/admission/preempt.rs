//! Pre-emption: llama-server cannot pre-empt a running slot, so the queue
//! tells one running answer of a less urgent preemptible class to pause
//! when a more urgent request waits with no free slot, here
//! ([`Admission::preempt_for`]) or, with shared slots, at another replica
//! ([`Admission::preempt_for_elsewhere`]). Enough answers pausing already
//! for the requests waiting means none more is told.
//!
//! Deliberately not here: which answer pauses and how it is told (the
//! registry of running answers, the proxy's `moves::Moves`, seen here only
//! through [`Pauses`]), and the pause itself (the answer gives its slot
//! back and waits again, [`super::requeue`](fn@super::requeue)).

use super::Admission;

/// What the queue asks of the answers running here: how many are told to
/// pause and not gone yet, and to tell one more. The registry of running
/// answers implements it.
pub trait Pauses: Send + Sync {
    /// Answers told to pause that have not left yet (their slots are about
    /// to free).
    fn pausing(&self) -> usize;

    /// Tells the newest pausable answer of a class less urgent than `class`
    /// (naming `model`, when given) to pause, if there is one.
    fn pause(&self, class: usize, model: Option<&str>);

    /// Tells the newest pausable answer of a class less urgent than
    /// `class`, streaming from a member for which `takes(member)` holds, to
    /// pause, if there is one.
    fn pause_where(&self, class: usize, takes: &dyn Fn(usize) -> bool);
}

impl Admission {
    /// A request of class `class` (naming `model`) waits with no free
    /// slot: tells one running answer of a less urgent preemptible class to
    /// pause, unless as many are pausing as requests wait at `class` or
    /// above.
    pub(super) fn preempt_for(&self, class: usize, model: Option<&str>) {
        let below = self.config.preemptible.iter().skip(class + 1).any(|p| *p);
        if !below {
            return;
        }
        // Read only: nothing changed, so no dispatch or gauge update.
        let waiting = self
            .scheduler
            .lock()
            .map_or(0, |s| (0..=class).map(|c| s.depth(c)).sum::<usize>());
        if waiting > self.moves.pausing() {
            let model = model.filter(|_| self.fleet.serves_several_models());
            self.moves.pause(class, model);
        }
    }

    /// A request of a more urgent class waits at another replica while no
    /// slot is free: one answer running here, of a less urgent preemptible
    /// class, on an upstream that request could take (one serving a model
    /// it names), is told to pause (unless enough are pausing already).
    pub(super) fn preempt_for_elsewhere(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let elsewhere = shared.elsewhere();
        let Some(class) = elsewhere.iter().position(|n| *n > 0) else {
            return;
        };
        if !self.config.preemptible.iter().skip(class + 1).any(|p| *p) {
            return;
        }
        let (free, here) = self.scheduler.lock().map_or((1, 0), |s| {
            (s.free(), (0..=class).map(|c| s.depth(c)).sum::<usize>())
        });
        let waiting = elsewhere
            .iter()
            .take(class + 1)
            .map(|n| *n as usize)
            .sum::<usize>()
            + here;
        if free == 0 && waiting > self.moves.pausing() {
            let wanted = shared.elsewhere_models();
            let Some(models) = wanted.get(class) else {
                return;
            };
            let several = self.fleet.serves_several_models();
            self.moves.pause_where(class, &|member| {
                !several || models.wanted_by(|m| self.fleet.member_serves(member, m))
            });
        }
    }
}
