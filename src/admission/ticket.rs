//! A granted slot ([`Ticket`]): pending until routed, then bound to the
//! upstream chosen among those with a free slot; moved on a retry, and
//! released (the next request dispatched) when dropped.
//!
//! Deliberately not here: choosing the upstream (the router, through the
//! `choose` callback) and waiting for the grant ([`super::wait`](fn@super::wait)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Admission;

/// A granted slot: pending until routed, then bound to one upstream.
/// Dropping it frees the slot and dispatches the next request.
pub struct Ticket {
    pub(super) admission: Arc<Admission>,
    /// Its class index and tenant key, for the scheduler's count of each
    /// tenant's granted requests.
    pub(super) who: (usize, usize),
    /// The upstream it is bound to, once routed.
    pub(super) bound: Option<usize>,
    /// The upstream whose next free slot it awaits (`queue.affinity_wait_ms`).
    pub(super) awaiting: Option<usize>,
    /// Its lease on the bound upstream (shared slots).
    pub(super) lease: Option<super::shared::Lease>,
    /// Counted among the granted requests not leased yet (shared slots).
    pub(super) unleased: bool,
}

impl Ticket {
    /// A slot granted to a request of `who` (class index, tenant key);
    /// with shared slots, counted as not leased until it is.
    pub(super) fn new(admission: &Arc<Admission>, who: (usize, usize)) -> Self {
        let unleased = admission.shared.is_some();
        if let Some(n) = admission.unleased.get(who.0).filter(|_| unleased) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        Ticket {
            admission: Arc::clone(admission),
            who,
            bound: None,
            awaiting: None,
            lease: None,
            unleased,
        }
    }

    /// Its lease is taken: no longer counted as waiting.
    pub(super) fn leased(&mut self, lease: super::shared::Lease) {
        self.lease = Some(lease);
        self.uncount();
    }

    fn uncount(&mut self) {
        if std::mem::take(&mut self.unleased) {
            if let Some(n) = self.admission.unleased.get(self.who.0) {
                n.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Routes the request among the upstreams with a free slot: `choose`
    /// gets the upstreams to leave out (full or down) and returns the one
    /// chosen, which the slot is then bound to. A retry after a failed
    /// connect moves the slot to the new choice. When every upstream with a
    /// free slot is left out (capacity changed since the grant), `choose`
    /// is asked again without that filter: the request goes on rather than
    /// fail.
    pub fn route<T, E>(
        &mut self,
        mut choose: impl FnMut(&[usize]) -> std::result::Result<T, E>,
        upstream_of: impl Fn(&T) -> usize,
    ) -> std::result::Result<T, E> {
        let adm = Arc::clone(&self.admission);
        let Ok(mut s) = adm.scheduler.lock() else {
            return choose(&[]);
        };
        if let Some(previous) = self.bound.take() {
            s.unbind(previous);
        }
        // A lease is for one upstream: routed again, it is taken anew.
        if let (Some(lease), Some(shared)) = (self.lease.take(), &adm.shared) {
            shared.release(lease);
        }
        // The slot it awaited is its own now.
        if let Some(awaited) = self.awaiting.take() {
            s.unawait(awaited);
        }
        adm.refresh(&mut s);
        let open: Vec<usize> = s.open_upstreams().collect();
        let full: Vec<usize> = (0..s.upstreams().len())
            .filter(|i| !open.contains(i))
            .collect();
        let chosen = match choose(&full) {
            Ok(c) => Ok(c),
            Err(_) if !full.is_empty() => choose(&[]),
            Err(e) => Err(e),
        };
        if let Ok(c) = &chosen {
            let i = upstream_of(c);
            s.bind(i);
            self.bound = Some(i);
        }
        chosen
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let bound = self.bound.take();
        let awaiting = self.awaiting.take();
        self.uncount();
        let (class, tenant) = self.who;
        if let (Some(lease), Some(shared)) = (self.lease.take(), &self.admission.shared) {
            shared.release(lease);
        }
        self.admission.with(|s| {
            s.tenant_done(class, tenant);
            if let Some(i) = awaiting {
                s.unawait(i);
            }
            match bound {
                Some(i) => s.release(i),
                None => s.abandon(),
            }
        });
        if bound.is_some() {
            self.admission.freed.notify_waiters();
        }
    }
}
