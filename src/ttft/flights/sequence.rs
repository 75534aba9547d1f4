//! Which prompts a member has not started yet, so that a later prompt can
//! be sent once the ones dispatched before it to that member have: an
//! entry awaits its start from its description (when its request asked
//! for progress events, has a prompt to prefill, and its member has sent
//! progress events before) until its first progress event, its first
//! token, or its landing, each of which wakes the waiters.
//!
//! Deliberately not here: the wait itself (the proxy's `sequence`), and
//! why it pays (llama-server takes the prompts that reach it between two
//! batches into the same batch: [`crate::proxy`]'s `sequence` module).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

use super::{Boarded, Flights};

/// Members whose progress events are remembered; a member numbered beyond
/// is never waited on.
const SEEN_MEMBERS: usize = 256;

/// The board's part in sequencing the prompts sent to a member.
#[derive(Debug, Default)]
pub(super) struct Sequencing {
    /// The members that have sent a progress event (one bit each).
    seen: [AtomicU64; SEEN_MEMBERS / 64],
    /// Entries awaiting their start.
    awaiting: AtomicUsize,
    /// Requests waiting for an earlier prompt's start.
    waiting: AtomicUsize,
    started: Notify,
}

impl Sequencing {
    /// `member` sends progress events.
    pub(super) fn saw(&self, member: usize) {
        if let Some(w) = self.seen.get(member / 64) {
            w.fetch_or(1 << (member % 64), Ordering::Relaxed);
        }
    }

    /// Whether `member` has sent progress events.
    pub(super) fn seen(&self, member: usize) -> bool {
        self.seen
            .get(member / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (member % 64)) != 0)
    }

    /// An entry now awaits its start.
    pub(super) fn awaits(&self) {
        self.awaiting.fetch_add(1, Ordering::SeqCst);
    }

    /// An entry no longer awaits its start: wakes the waiters, if any (read
    /// after the board's lock was released, which orders it after a
    /// waiter's look at the board).
    pub(super) fn stopped(&self) {
        self.awaiting.fetch_sub(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.started.notify_waiters();
        }
    }
}

/// One request waiting for the prompts sent before it to start; counted
/// while it lives, so that a start wakes it.
#[derive(Debug)]
pub struct Waiting<'a>(&'a Sequencing);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Waiting<'_> {
    /// Notified when a prompt on the board starts, gets its first token or
    /// lands (create it before the look at the board that it follows).
    pub fn started(&self) -> tokio::sync::futures::Notified<'_> {
        self.0.started.notified()
    }
}

impl Flights {
    /// Whether a prompt dispatched to `b`'s member before `b` awaits its
    /// start (one atomic load when none on the board does).
    pub fn unstarted_before(&self, b: Boarded) -> bool {
        if self.sequencing.awaiting.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let Ok(by) = self.by_member.lock() else {
            return false;
        };
        by.get(&b.member).is_some_and(|m| {
            m.list
                .iter()
                .take_while(|e| e.id != b.id)
                .any(|e| e.awaits_start)
        })
    }

    /// Counts a request as waiting for earlier prompts to start, until the
    /// guard drops.
    pub fn waiting(&self) -> Waiting<'_> {
        self.sequencing.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(&self.sequencing)
    }
}

#[cfg(test)]
mod tests;
