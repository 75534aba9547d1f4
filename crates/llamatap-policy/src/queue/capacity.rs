//! Capacity per upstream: each upstream's slots, the requests bound to it
//! and its up/down mark, and the requests granted but not bound yet
//! (pending), so that the fleet is never over-granted while the router
//! picks.
//!
//! Deliberately not here: reading capacities (`/slots`, `/props`: the
//! caller sets them) and choosing among open upstreams (the router).

use super::Scheduler;

/// Capacity and load of one upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamLoad {
    /// Slots; `None` when unknown (never limiting).
    pub capacity: Option<u32>,
    /// Requests bound to it.
    pub in_flight: u32,
    /// Whether it may take requests.
    pub up: bool,
    /// Granted requests waiting for a slot here (their prompt's prefix is
    /// here): its free slots go to them first.
    pub awaited: u32,
}

impl UpstreamLoad {
    /// Free slots (`u32::MAX` when the capacity is unknown); 0 when down.
    pub fn free(&self) -> u32 {
        if !self.up {
            return 0;
        }
        match self.capacity {
            Some(c) => c.saturating_sub(self.in_flight),
            None => u32::MAX,
        }
    }
}

impl<T> Scheduler<T> {
    /// Sets upstream `i`'s capacity (`None`: unknown) and whether it is up.
    pub fn set_upstream(&mut self, i: usize, capacity: Option<u32>, up: bool) {
        if let Some(u) = self.upstreams.get_mut(i) {
            u.capacity = capacity;
            u.up = up;
        }
    }

    /// Each upstream's capacity and load.
    pub fn upstreams(&self) -> &[UpstreamLoad] {
        &self.upstreams
    }

    /// Granted requests not bound to an upstream yet.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Free slots of the fleet, granted-but-unbound requests deducted.
    pub fn free(&self) -> u32 {
        self.upstreams
            .iter()
            .fold(0u32, |n, u| n.saturating_add(u.free()))
            .saturating_sub(self.pending)
    }

    /// The upstreams with a free slot that no request awaits: where a
    /// pending request may be bound.
    pub fn open_upstreams(&self) -> impl Iterator<Item = usize> + '_ {
        self.upstreams
            .iter()
            .enumerate()
            .filter(|(_, u)| u.free() > u.awaited)
            .map(|(i, _)| i)
    }

    /// A pending request waits for a slot on upstream `i`: the next one
    /// that frees there is left to it ([`Scheduler::open_upstreams`]).
    pub fn await_slot(&mut self, i: usize) {
        if let Some(u) = self.upstreams.get_mut(i) {
            u.awaited += 1;
        }
    }

    /// A request stopped waiting for a slot on `i` (it is routed now, or
    /// gave up).
    pub fn unawait(&mut self, i: usize) {
        if let Some(u) = self.upstreams.get_mut(i) {
            u.awaited = u.awaited.saturating_sub(1);
        }
    }

    /// A pending request was routed to upstream `i`.
    pub fn bind(&mut self, i: usize) {
        self.pending = self.pending.saturating_sub(1);
        if let Some(u) = self.upstreams.get_mut(i) {
            u.in_flight += 1;
        }
    }

    /// A request bound to `i` goes back to pending (its connect failed and
    /// another upstream is tried): its slot is kept for it.
    pub fn unbind(&mut self, i: usize) {
        if let Some(u) = self.upstreams.get_mut(i) {
            u.in_flight = u.in_flight.saturating_sub(1);
        }
        self.pending += 1;
    }

    /// A pending request ended without being bound.
    pub fn abandon(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }

    /// A request bound to `i` ended: its slot is free.
    pub fn release(&mut self, i: usize) {
        if let Some(u) = self.upstreams.get_mut(i) {
            u.in_flight = u.in_flight.saturating_sub(1);
        }
    }
}
