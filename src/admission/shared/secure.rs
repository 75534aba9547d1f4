//! The lease a routed request takes before it connects ([`secure`]),
//! shared slots only.
//!
//! A request granted a slot by this replica's queue is routed among the
//! upstreams its view shows free; its lease can still be refused when
//! another replica took that upstream's last slot since the view was read.
//! Then the view marks the upstream full and the request is routed again,
//! or, when no upstream has a free slot left, it waits at the head of its
//! class's queue ([`crate::admission::requeue`](fn@crate::admission::requeue)) until one frees.
//!
//! Deliberately not here: the lease in the store ([`super::lease`]) and the
//! routing decision (the proxy's [`crate::proxy::choose_upstream`], called
//! back here).

use std::net::SocketAddr;
use std::sync::Arc;

use pingora::proxy::Session;
use pingora::Result;

use super::{key_of, Acquired};
use crate::admission::{give_back, requeue, Admission};
use crate::fleet::Fleet;
use crate::proxy::choose_upstream;
use crate::proxy::context::RequestCtx;

/// With shared slots, leases the slot of the request's routed upstream
/// before it connects; `Some(address)` when it had to be routed again
/// (that upstream's last slot went to another replica). `Err` when its
/// client hung up while it waited again.
pub async fn secure(
    session: &mut Session,
    ctx: &mut RequestCtx,
    admission: &Arc<Admission>,
    fleet: &Fleet,
) -> Result<Option<SocketAddr>> {
    let Some(shared) = admission.shared.clone() else {
        return Ok(None);
    };
    let mut rerouted = None;
    loop {
        let Some(ticket) = ctx.admission.as_deref_mut().and_then(|h| h.ticket.as_mut()) else {
            return Ok(rerouted);
        };
        let Some(i) = ticket.bound.filter(|_| ticket.lease.is_none()) else {
            return Ok(rerouted);
        };
        let Some(member) = fleet.member(i) else {
            return Ok(rerouted);
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
                if let Some(h) = ctx.admission.as_deref().filter(|h| h.waited) {
                    admission.announce(h.class as usize, false);
                }
                return Ok(rerouted);
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
                    give_back(ctx);
                    requeue(session, ctx, admission).await?;
                }
                rerouted = Some(choose_upstream(fleet, ctx)?);
            }
        }
    }
}
