//! A request's lease on one upstream slot (shared slots): taken in the
//! store by a script that never lets the leases exceed the upstream's
//! slots, counted as this replica's from the moment it is asked for, and
//! given back when the stream ends (the other replicas are told when a
//! request waits at one of them).
//!
//! Deliberately not here: when a request leases (before it connects,
//! [`super::secure`](fn@super::secure)), renewing the leases (the sync round, [`super::sync`]),
//! and the script itself ([`super::store`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Own, Shared};

/// A slot leased (or, while the store is unreachable, counted here only).
#[derive(Debug)]
pub(crate) struct Lease {
    /// The upstream's key in the store (its address).
    key: String,
    /// The lease's id: this replica's id and a sequence number.
    id: String,
}

/// What [`Shared::acquire`] got.
#[derive(Debug)]
pub(crate) enum Acquired {
    /// The store granted the lease, or is unreachable (the lease is counted
    /// here and written to the store when it answers again).
    Leased(Lease),
    /// Every slot of the upstream is leased (another replica took the last
    /// one since the view was read).
    Full,
}

impl Shared {
    /// Leases one of member `id`'s `slots` slots (`None`: unknown, not
    /// limiting) on the upstream keyed `key`.
    pub async fn acquire(&self, id: usize, key: &str, slots: Option<u32>) -> Acquired {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let lease = Lease {
            key: key.to_string(),
            id: format!("{}:{n}", self.replica),
        };
        // This replica's from the start: a view read while the grant is
        // under way would otherwise count it as another replica's.
        let shared = self.is_shared();
        if let Ok(mut s) = self.state.lock() {
            let own = Own {
                key: lease.key.clone(),
                releasing: false,
                acquiring: shared,
            };
            s.own.insert(lease.id.clone(), own);
        }
        if !shared {
            return Acquired::Leased(lease);
        }
        let cap = slots.unwrap_or(u32::MAX);
        let answer = self.store.acquire(key, &lease.id, cap, self.lease_ms).await;
        let Ok(mut s) = self.state.lock() else {
            return Acquired::Leased(lease);
        };
        match answer {
            Ok((granted, held)) => {
                if granted {
                    if let Some(o) = s.own.get_mut(&lease.id) {
                        o.acquiring = false;
                    }
                } else {
                    s.own.remove(&lease.id);
                }
                let own = own_on(&s.own, key);
                if let Some(o) = s.others.get_mut(id) {
                    *o = held.saturating_sub(own);
                }
                if !granted {
                    return Acquired::Full;
                }
            }
            Err(e) => {
                // Kept as this replica's: written to the store when it
                // answers again (it may hold it already).
                if let Some(o) = s.own.get_mut(&lease.id) {
                    o.acquiring = false;
                }
                drop(s);
                self.fall_back(&e.to_string());
            }
        }
        Acquired::Leased(lease)
    }

    /// The stream of `lease` ended: its slot is free for every replica.
    pub fn release(self: &Arc<Self>, lease: Lease) {
        let rt = tokio::runtime::Handle::try_current().ok();
        let Some(rt) = rt.filter(|_| self.is_shared()) else {
            // Written back only while shared; it expires on its own.
            self.forget(&lease.id);
            return;
        };
        // Counted as this replica's until the store dropped it: counted as
        // another's meanwhile, it would look like a slot taken elsewhere.
        if let Ok(mut s) = self.state.lock() {
            if let Some(o) = s.own.get_mut(&lease.id) {
                o.releasing = true;
            }
        }
        let me = Arc::clone(self);
        let waited_for = self.elsewhere().iter().any(|n| *n > 0);
        rt.spawn(async move {
            let removed = me.store.release(&lease.key, &lease.id).await;
            me.forget(&lease.id);
            match removed {
                // A request waits at another replica: it may take the slot.
                Ok(()) if waited_for => me.tell_freed().await,
                Ok(()) => {}
                Err(e) => me.fall_back(&e.to_string()),
            }
        });
    }

    /// Forgets lease `id` (removed from the store, or never written there).
    fn forget(&self, id: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.own.remove(id);
        }
    }
}

/// This replica's leases on the upstream keyed `key`.
pub(super) fn own_on(own: &HashMap<String, Own>, key: &str) -> u32 {
    u32::try_from(own.values().filter(|o| o.key == key).count()).unwrap_or(u32::MAX)
}
