//! The scheduler under the admission's mutex: every change to it is
//! followed by a dispatch of what can go and an update of the queue gauges;
//! the upstreams' capacity and state are read from the fleet.
//!
//! Deliberately not here: the arithmetic ([`llamatap_policy::queue`]) and the waits
//! (the parent module).

use std::time::Instant;

use super::{Admission, Verdict, Waker};
use crate::fleet::Member;
use llamatap_policy::queue::Scheduler;
use llamatap_policy::tenant::Priority;
use llamatap_telemetry::queue::{ClassLabels, SlotLabels};

impl Admission {
    /// Runs `f` on the scheduler, then dispatches what can go and updates
    /// the gauges.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Scheduler<Waker>) -> R) -> Option<R> {
        let mut s = self.scheduler.lock().ok()?;
        let r = f(&mut s);
        self.pump(&mut s);
        Some(r)
    }

    /// Reads every upstream's capacity and state from the fleet (a free
    /// id, or a draining member, takes nothing).
    pub(super) fn refresh(&self, s: &mut Scheduler<Waker>) {
        let members = self.fleet.members();
        let any_usable = members.iter().any(|m| self.fleet.usable(m.id));
        let mut present = vec![false; self.fleet.capacity()];
        for m in &members {
            let slots = self.slots_of(m);
            let capacity = match &self.shared {
                Some(shared) => shared.capacity(m.id, slots),
                None => slots,
            };
            // When no upstream is usable every one is tried, as routing does.
            let up = !m.draining() && (!any_usable || self.fleet.usable(m.id));
            s.set_upstream(m.id, capacity, up);
            if let Some(p) = present.get_mut(m.id) {
                *p = true;
            }
        }
        for (i, _) in present.iter().enumerate().filter(|(_, p)| !**p) {
            s.set_upstream(i, Some(0), false);
        }
        if let Some(shared) = &self.shared {
            s.set_elsewhere(&shared.elsewhere());
        }
    }

    /// The slots of `member` before sharing: its `max_inflight`, else the
    /// queue's, else its `/slots` count (`None`: unknown).
    pub(super) fn slots_of(&self, member: &Member) -> Option<u32> {
        member
            .upstream
            .max_inflight
            .or(self.config.max_inflight)
            .or_else(|| member.total_slots())
    }

    /// Refuses the requests displaced from a full class, and grants slots
    /// while some are free and requests wait.
    fn pump(&self, s: &mut Scheduler<Waker>) {
        while let Some(d) = s.displaced() {
            // Its waiter answers `503` `queue_full`; one gone already (its
            // entry would have left the queue first) needs nothing.
            let _ = d.waker.send(Verdict::Displaced);
        }
        while let Some(d) = s.dispatch() {
            if d.waker.send(Verdict::Granted).is_err() {
                // Its waiter is gone: the slot goes to the next one.
                s.abandon();
                s.tenant_done(d.class, d.tenant);
            }
        }
        if let Some(m) = &self.metrics {
            for p in Priority::ALL {
                let class = ClassLabels { class: p.as_str() };
                let depth = s.depth(p as usize);
                m.depth
                    .get_or_create(&class)
                    .set(i64::try_from(depth).unwrap_or(i64::MAX));
                if depth == 0 {
                    m.oldest_wait.get_or_create(&class).set(0.0);
                }
            }
            let loads = s.upstreams();
            self.fleet.each_member(|member| {
                let Some(u) = loads.get(member.id) else {
                    return;
                };
                let l = SlotLabels {
                    upstream: member.upstream.name.clone(),
                };
                m.in_use.get_or_create(&l).set(i64::from(u.in_flight));
                m.capacity
                    .get_or_create(&l)
                    .set(u.capacity.map_or(-1, i64::from));
            });
        }
    }

    pub(super) fn oldest_waits(&self, s: &mut Scheduler<Waker>, now: Instant) {
        if let Some(m) = &self.metrics {
            for p in Priority::ALL {
                let w = s.oldest_wait(p as usize, now).unwrap_or_default();
                m.oldest_wait
                    .get_or_create(&ClassLabels { class: p.as_str() })
                    .set(w.as_secs_f64());
            }
        }
    }
}
