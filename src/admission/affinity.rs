//! The bounded wait for the upstream holding a request's prefix
//! (`queue.affinity_wait_ms`), between its grant and its routing. Its
//! cost: while it waits, its grant keeps one slot of the fleet unused.
//!
//! Deliberately not here: finding that upstream (the fleet's prefix index,
//! [`Fleet::affine`]) and the routing that follows (the proxy's).

use super::{Admission, Fleet, Held};
use llamatap_policy::router::Chain;
use llamatap_telemetry::queue::AffinityLabels;

/// Before a dispatched request is routed: when `queue.affinity_wait_ms` is
/// set and the upstream holding the longest prefix of its prompt is full,
/// waits (at most that long) for a slot there, so that its prefill is
/// reused rather than recomputed elsewhere. Only the first routing of a
/// request waits (the caller's to know), and only under `prefix_affinity`
/// without a session key. The wait counts in the request's `queued`
/// moment; while it lasts, the request's grant keeps one slot of the fleet
/// unused (the cost). `chain`: the prompt's prefix chain.
pub async fn wait_for_affine(admission: &Admission, fleet: &Fleet, held: &mut Held, chain: &Chain) {
    let Some(limit) = admission.config.affinity_wait else {
        return;
    };
    let pending = held
        .ticket
        .as_ref()
        .is_some_and(|t| t.bound.is_none() && t.awaiting.is_none());
    if !pending {
        return;
    }
    let Some(target) = fleet.affine(held.model.as_deref(), chain) else {
        return;
    };
    // Free there now: routing takes it. Else its next free slot is kept
    // for this request while it waits.
    let free_now = admission.with(|s| {
        admission.refresh(s);
        let free = s
            .upstreams()
            .get(target)
            .is_none_or(|u| u.free() > u.awaited);
        if !free {
            s.await_slot(target);
        }
        free
    });
    if free_now.unwrap_or(true) {
        return;
    }
    if let Some(t) = held.ticket.as_mut() {
        t.awaiting = Some(target);
    }
    let freed_there = || {
        admission
            .with(|s| {
                admission.refresh(s);
                s.upstreams().get(target).is_some_and(|u| u.free() > 0)
            })
            .unwrap_or(false)
    };
    let deadline = tokio::time::Instant::now() + limit;
    let result = loop {
        let freed = admission.freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        if freed_there() {
            break "freed";
        }
        if !fleet.usable(target) {
            break "expired";
        }
        tokio::select! {
            () = &mut freed => {}
            () = tokio::time::sleep_until(deadline) => {
                break if freed_there() { "freed" } else { "expired" };
            }
        }
    };
    if result == "expired" {
        // It goes elsewhere: the slot it awaited is nobody's any more.
        let awaited = held.ticket.as_mut().and_then(|t| t.awaiting.take());
        if let Some(i) = awaited {
            admission.with(|s| s.unawait(i));
        }
    }
    if let Some(m) = &admission.metrics {
        m.affinity_waits
            .get_or_create(&AffinityLabels { result })
            .inc();
    }
    held.wait = Some(held.received.elapsed());
}
