//! Turns between the tenants of a class: weighted round robin (a tenant of
//! weight `w` takes up to `w` dispatches per turn), arrival order within a
//! tenant, and the class's `tenant_reserve`, which keeps a tenant with a
//! request running from the fleet's last free slots.
//!
//! Deliberately not here: the order of classes and their reserves
//! ([`Scheduler::dispatch`]).

use super::handles::live;
use super::{Class, Handle, Scheduler};

impl<T> Scheduler<T> {
    /// The live handle at the head of the class's tenant whose turn it is,
    /// with `free` slots in the fleet: a tenant the class's
    /// `tenant_reserve` holds back loses its turn.
    pub(super) fn next_of(&mut self, ci: usize, free: u32) -> Option<Handle> {
        let slots = &self.slots;
        let c = self.classes.get_mut(ci)?;
        let mut passed = 0;
        while let Some(&tenant) = c.ring.front() {
            if holds_back(c, tenant, free) {
                passed += 1;
                if passed >= c.ring.len() {
                    return None;
                }
                c.ring.rotate_left(1);
                continue;
            }
            let Some(t) = c.tenants.get_mut(&tenant) else {
                c.ring.pop_front();
                continue;
            };
            // Drop stale handles at its head.
            while let Some(h) = t.queue.front() {
                if live(slots, *h).is_some() {
                    break;
                }
                t.queue.pop_front();
                c.stale = c.stale.saturating_sub(1);
            }
            let Some(h) = t.queue.pop_front() else {
                t.active = false;
                c.ring.pop_front();
                c.tenants.remove(&tenant);
                continue;
            };
            t.credit = t.credit.saturating_sub(1);
            t.live = t.live.saturating_sub(1);
            if t.queue.is_empty() {
                t.active = false;
                c.ring.pop_front();
                c.tenants.remove(&tenant);
            } else if t.credit == 0 {
                t.credit = t.weight;
                c.ring.rotate_left(1);
            }
            return Some(h);
        }
        None
    }
}

/// The class's `tenant_reserve` keeps `tenant` from the fleet's last free
/// slots: it has a request granted already, and `free` is within the
/// class's reserve plus its tenant reserve.
pub(super) fn holds_back(c: &Class, tenant: usize, free: u32) -> bool {
    let r = c.rules;
    r.tenant_reserve > 0
        && free <= r.reserve.saturating_add(r.tenant_reserve)
        && c.running.get(&tenant).is_some_and(|n| *n > 0)
}
