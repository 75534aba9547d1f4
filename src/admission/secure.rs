//! The lease a routed request takes before it connects ([`secure`]),
//! shared slots only.
//!
//! A request granted a slot by this replica's queue is routed among the
//! upstreams its view shows free; its lease can still be refused when
//! another replica took that upstream's last slot since the view was read.
//! Then the view marks the upstream full and the request is to be routed
//! again ([`Secured::Reroute`]); when no upstream has a free slot left, it
//! first waits at the head of its class's queue
//! ([`requeue`](fn@super::requeue)) until one frees.
//!
//! Deliberately not here: the lease in the store ([`super::shared`]) and
//! the routing decision (the proxy's, which calls this again after it).

use std::sync::Arc;

use pingora::proxy::Session;
use pingora::Result;

use super::shared::{key_of, Acquired};
use super::{requeue, Admission, Held};
use crate::fleet::Fleet;

/// What [`secure`] leaves the request with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secured {
    /// Its routed upstream's slot is its own (leased, or no lease is
    /// needed): it connects there.
    Kept,
    /// That slot went to another replica: route it again, then secure it
    /// again.
    Reroute,
}

/// With shared slots, leases the slot of the request's routed upstream
/// (`held`) before it connects. `Err` when its client hung up while it
/// waited again.
pub async fn secure(
    session: &mut Session,
    held: &mut Held,
    admission: &Arc<Admission>,
    fleet: &Fleet,
) -> Result<Secured> {
    let Some(shared) = admission.shared.clone() else {
        return Ok(Secured::Kept);
    };
    let Some(ticket) = held.ticket.as_mut() else {
        return Ok(Secured::Kept);
    };
    let Some(i) = ticket.bound.filter(|_| ticket.lease.is_none()) else {
        return Ok(Secured::Kept);
    };
    let Some(member) = fleet.member(i) else {
        return Ok(Secured::Kept);
    };
    let slots = admission.slots_of(&member);
    let asked = std::time::Instant::now();
    // Timed only when it asks the store (not on the static share).
    let timed = admission.metrics.as_ref().filter(|_| shared.is_shared());
    let acquired = shared.acquire(i, &key_of(&member), slots).await;
    if let Some(m) = timed {
        m.lease_duration.observe(asked.elapsed().as_secs_f64());
    }
    match acquired {
        Acquired::Leased(lease) => {
            ticket.leased(lease);
            // The store learns it waits no more: a replica keeping a
            // slot back for it would otherwise wait for the next round.
            if held.waited {
                admission.announce(held.class as usize, false);
            }
            Ok(Secured::Kept)
        }
        Acquired::Full => {
            if let Some(m) = &admission.metrics {
                m.lease_conflicts.inc();
            }
            // The view was stale: read it now, then route again.
            admission.sync_shared().await;
            let open = admission
                .with(|s| {
                    admission.refresh(s);
                    s.open_upstreams().any(|u| u != i)
                })
                .unwrap_or(false);
            if !open {
                held.give_back();
                requeue(session, held, admission).await?;
            }
            Ok(Secured::Reroute)
        }
    }
}
