//! The queue's entries and their handles: a slab addressed by
//! generation-checked [`Handle`]s. An entry that left leaves a stale handle
//! in its class's queues, skipped when met and compacted away once stale
//! handles outnumber live ones, so the queues stay bounded by what is
//! queued.
//!
//! Deliberately not here: which entry goes next (the scheduler's turns).

use std::time::Instant;

use super::{Class, Handle, Scheduler};

/// Stale handles a class may hold before compaction is considered.
pub(super) const COMPACT_MIN: usize = 64;

#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) class: usize,
    pub(super) tenant: usize,
    pub(super) at: Instant,
    pub(super) waker: T,
    /// A paused answer queued again ([`Scheduler::requeue`]): never
    /// displaced.
    pub(super) paused: bool,
}

#[derive(Debug)]
pub(super) struct Slot<T> {
    pub(super) generation: u32,
    pub(super) entry: Option<Entry<T>>,
}

impl<T> Scheduler<T> {
    /// Takes the entry `h` addresses out of the slab, if it is still there.
    pub(super) fn take(&mut self, h: Handle) -> Option<Entry<T>> {
        let s = self.slots.get_mut(h.index as usize)?;
        if s.generation != h.generation {
            return None;
        }
        let e = s.entry.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free_slots.push(h.index);
        Some(e)
    }
}

/// The entry `h` addresses, if it is still in the slab.
pub(super) fn live<T>(slots: &[Slot<T>], h: Handle) -> Option<&Entry<T>> {
    slots
        .get(h.index as usize)
        .filter(|s| s.generation == h.generation)
        .and_then(|s| s.entry.as_ref())
}

/// Drops the stale handles at the front of the class's arrivals, and every
/// stale handle of the class once they outnumber the live ones: whatever
/// reads the arrivals (or not), they stay bounded by what is queued.
pub(super) fn settle<T>(c: &mut Class, slots: &[Slot<T>]) {
    while let Some(h) = c.arrivals.front() {
        if live(slots, *h).is_some() {
            break;
        }
        c.arrivals.pop_front();
        c.stale = c.stale.saturating_sub(1);
    }
    if c.stale > COMPACT_MIN && c.stale > 2 * c.depth {
        compact(c, slots);
    }
}

/// Drops every stale handle of a class.
fn compact<T>(c: &mut Class, slots: &[Slot<T>]) {
    c.arrivals.retain(|h| live(slots, *h).is_some());
    let mut emptied = Vec::new();
    for (tenant, t) in c.tenants.iter_mut() {
        t.queue.retain(|h| live(slots, *h).is_some());
        if t.queue.is_empty() {
            emptied.push(*tenant);
        }
    }
    for tenant in emptied {
        c.tenants.remove(&tenant);
    }
    let tenants = &c.tenants;
    c.ring.retain(|t| tenants.contains_key(t));
    c.arrivals.shrink_to(c.depth.max(16));
    c.stale = 0;
}
