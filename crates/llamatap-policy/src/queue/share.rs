//! The tenant-share rule of a full class: what happens to a request that
//! arrives when its class already holds `max_depth` requests, so that one
//! tenant's flood cannot take the whole class.
//!
//! The shares are counted among the tenants with requests queued in the
//! class plus the arriving request's tenant: a tenant of weight `w` has the
//! share `max(1, ⌊max_depth × w / Σ w⌋)`; it is over its share when it holds
//! more queued requests than that.
//!
//! - The arriving tenant holds fewer than its share, and another tenant is
//!   over its own: the arrival takes the place of the newest queued request
//!   of the tenant most over its share (the most requests beyond it; on a
//!   tie, the lowest tenant key). That request leaves the queue displaced,
//!   refused as if the class had been full at its arrival.
//! - The arriving tenant holds at least its share, and other tenants wait
//!   in the class: it is refused for its own share ([`Refusal::TenantShare`]).
//! - Otherwise (a lone tenant, or nobody over a share) it is refused because
//!   the class is full ([`Refusal::Full`]).
//!
//! A paused answer queued again ([`Scheduler::requeue`]: an answer that
//! gave its slot to a more urgent request and waits to continue) is never
//! displaced: it counts towards its tenant's queued requests, but the
//! request displaced is the newest of that tenant's others, and a tenant
//! holding only paused answers is passed over for the next most over its
//! share. When no tenant over its share has a request other than paused
//! answers, the arrival is refused because the class is full
//! ([`Refusal::Full`]).
//!
//! So a refusal always falls on a tenant at or over its share, or on nobody
//! while nobody over one can give up a request. A request admitted by displacing another never
//! takes its tenant over its share, so the displaced tenant cannot displace
//! it back in turn: a full class settles instead of churning.
//!
//! Deliberately not here: waking the displaced request's waiter (the
//! caller takes it from [`Scheduler::displaced`] and refuses it).

use super::{live, settle, Arrival, Class, Handle, Refusal, Scheduler};

#[cfg(test)]
mod tests;

/// A queued request displaced from its full class by another tenant's
/// arrival (the tenant-share rule): its waiter is to be refused as if the
/// class had been full when it arrived.
#[derive(Debug, PartialEq, Eq)]
pub struct Displaced<T> {
    /// Its address in the queue (stale now).
    pub handle: Handle,
    /// What wakes its waiter.
    pub waker: T,
    /// Its class index.
    pub class: usize,
    /// Its tenant key.
    pub tenant: usize,
}

/// What a full class does with an arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AtFull {
    /// Displace the newest queued request of this tenant, then queue it.
    Displace(usize),
    /// Refuse it.
    Refuse(Refusal),
}

impl<T> Scheduler<T> {
    /// Takes the next request displaced from a full class (the tenant-share
    /// rule of [`Scheduler::enqueue`]); its waiter is to be refused. The
    /// caller takes them after every enqueue.
    pub fn displaced(&mut self) -> Option<Displaced<T>> {
        self.displaced.pop_front()
    }

    /// Makes room for `a` in its class: nothing to do below `max_depth`;
    /// at it, displaces a request by the rule of the module doc, or tells
    /// why `a` is refused.
    pub(super) fn make_room(&mut self, a: &Arrival) -> Result<(), Refusal> {
        let Some(c) = self.classes.get(a.class) else {
            return Err(Refusal::Full);
        };
        let Some(m) = c.rules.max_depth.filter(|m| c.depth >= *m) else {
            return Ok(());
        };
        match at_full(c, a, m) {
            AtFull::Refuse(refusal) => Err(refusal),
            AtFull::Displace(tenant) if self.displace(a.class, tenant) => Ok(()),
            AtFull::Displace(_) => Err(Refusal::Full),
        }
    }

    /// Takes the newest queued request of `tenant` in class `ci` that is
    /// not a paused answer out, to [`Scheduler::displaced`]; false when it
    /// has none.
    fn displace(&mut self, ci: usize, tenant: usize) -> bool {
        let slots = &self.slots;
        let Some(c) = self.classes.get_mut(ci) else {
            return false;
        };
        let Some(t) = c.tenants.get_mut(&tenant) else {
            return false;
        };
        // Drop stale handles at its tail.
        while let Some(h) = t.queue.back() {
            if live(slots, *h).is_some() {
                break;
            }
            t.queue.pop_back();
            c.stale = c.stale.saturating_sub(1);
        }
        // Paused answers are queued at its head: the newest other request
        // is found from the tail.
        let Some(at) = t
            .queue
            .iter()
            .rposition(|h| live(slots, *h).is_some_and(|e| !e.paused))
        else {
            return false;
        };
        let Some(h) = t.queue.remove(at) else {
            return false;
        };
        t.live = t.live.saturating_sub(1);
        let Some(e) = self.take(h) else {
            return false;
        };
        if let Some(c) = self.classes.get_mut(ci) {
            c.depth = c.depth.saturating_sub(1);
            // Its handle in the arrivals is stale now.
            c.stale += 1;
            settle(c, &self.slots);
        }
        self.displaced.push_back(Displaced {
            handle: h,
            waker: e.waker,
            class: ci,
            tenant: e.tenant,
        });
        true
    }
}

/// The rule of the module doc, for `a` arriving at class `c` holding
/// `max_depth` requests.
fn at_full(c: &Class, a: &Arrival, max_depth: usize) -> AtFull {
    let weight = u64::from(a.weight.max(1));
    let queued = || {
        c.tenants
            .iter()
            .filter(|(id, t)| **id != a.tenant && t.live > 0)
    };
    let others = queued().fold(0u64, |sum, (_, t)| sum + u64::from(t.weight.max(1)));
    if others == 0 {
        return AtFull::Refuse(Refusal::Full);
    }
    let total = weight + others;
    let mine = c.tenants.get(&a.tenant).map_or(0, |t| t.live);
    if mine >= share(max_depth, weight, total) {
        return AtFull::Refuse(Refusal::TenantShare);
    }
    let victim = queued()
        // Paused answers are never displaced: a tenant holding only those
        // is no victim.
        .filter(|(_, t)| t.live > t.paused)
        .filter_map(|(id, t)| {
            let excess = t
                .live
                .checked_sub(share(max_depth, u64::from(t.weight.max(1)), total))?;
            (excess > 0).then_some((excess, *id))
        })
        .max_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    match victim {
        Some((_, id)) => AtFull::Displace(id),
        None => AtFull::Refuse(Refusal::Full),
    }
}

/// A tenant's share of `max_depth`: `max(1, ⌊max_depth × weight / total⌋)`.
fn share(max_depth: usize, weight: u64, total: u64) -> usize {
    let s = (max_depth as u64).saturating_mul(weight) / total.max(1);
    usize::try_from(s).unwrap_or(usize::MAX).max(1)
}
