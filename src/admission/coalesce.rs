//! One round at a time: what bounds the store calls announcements make
//! (shared slots). A request that queues asks for a sync round and a
//! message to the other replicas; a burst of them must not take the
//! store's connections from tenant admission. So per replica and class at
//! most one round is in flight; what is asked while it runs is coalesced
//! into one more round after it (asked for a message by any of them: the
//! next round sends one).
//!
//! Deliberately not here: what a round does (the admission queue's
//! [`super::Admission::announce`]).

use std::sync::atomic::{AtomicBool, Ordering};

/// The rounds of one class (or one kind of announcement).
#[derive(Debug, Default)]
pub struct Coalesce {
    /// A round is in flight (its task runs).
    running: AtomicBool,
    /// A round was asked for since the running one took its ask.
    again: AtomicBool,
    /// One of those asks wants the other replicas told.
    tell: AtomicBool,
}

impl Coalesce {
    /// Asks for a round (`tell`: with a message to the others); true when
    /// the caller must start the task that runs rounds
    /// ([`Coalesce::next`] until it says none), false when the running
    /// task will take this ask.
    pub fn ask(&self, tell: bool) -> bool {
        if tell {
            self.tell.store(true, Ordering::SeqCst);
        }
        self.again.store(true, Ordering::SeqCst);
        !self.running.swap(true, Ordering::SeqCst)
    }

    /// The running task's next round: `Some(tell)`, or `None` when nothing
    /// was asked since its last one (the task then ends; the next ask
    /// starts another).
    pub fn next(&self) -> Option<bool> {
        loop {
            if self.again.swap(false, Ordering::SeqCst) {
                return Some(self.tell.swap(false, Ordering::SeqCst));
            }
            self.running.store(false, Ordering::SeqCst);
            // An ask between the swap above and the store saw a round in
            // flight and started nothing: take it, unless another task
            // started meanwhile.
            if !self.again.load(Ordering::SeqCst) || self.running.swap(true, Ordering::SeqCst) {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
