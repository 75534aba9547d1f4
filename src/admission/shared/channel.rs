//! The messages between replicas (shared slots): a replica tells the
//! others on the Redis channel [`super::store::CHANGED`] to read the
//! view now (a request queued, a slot freed), and follows what they tell.
//! A slot-freed message is in flight at most once at a time (those asked
//! meanwhile make one more after it).
//!
//! A request queued here asks, from a task of its own, for a sync round and
//! then a message to the others ([`Admission::announce`]), one round per
//! class at a time.
//!
//! Deliberately not here: what a round reads (the view, [`super::Shared::sync`]).

use std::sync::Arc;

use super::Shared;
use crate::admission::Admission;
use llamatap_policy::tenant::Priority;

// === impl Shared ===

impl Shared {
    /// Resolves when another replica announced a change (or one was
    /// announced since the last call).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Tells the other replicas to read the view now (after this one's
    /// sync round wrote what waits here).
    pub async fn announce(&self) {
        if !self.is_shared() {
            return;
        }
        if let Err(e) = self.store.announce(&self.replica).await {
            self.fall_back(&e.to_string());
        }
    }

    /// Follows the other replicas' announcements, for as long as the sync
    /// task polls it: one subscription at a time, subscribed again (after
    /// ten sync intervals) when it breaks.
    pub async fn follow(&self) {
        use futures_util::StreamExt;
        loop {
            if let Ok(mut changes) = self.store.changes().await {
                while let Some(msg) = changes.next().await {
                    let from: String = msg.get_payload().unwrap_or_default();
                    if from != self.replica {
                        self.changed.notify_one();
                    }
                }
            }
            tokio::time::sleep(self.sync * 10).await;
        }
    }

    /// Tells the other replicas that a slot freed; while such a message is
    /// in flight, those asked meanwhile make one more after it.
    pub(super) async fn tell_freed(&self) {
        if !self.telling.ask(true) {
            return;
        }
        while self.telling.next().is_some() {
            if let Err(e) = self.store.announce(&self.replica).await {
                self.fall_back(&e.to_string());
            }
        }
    }
}

// === impl Admission ===

impl Admission {
    /// With shared slots, what waits here at class `class` changed: from
    /// a task of its own, a sync round (the store learns it); when `tell`
    /// (a request queued here), the other replicas are then told to read
    /// the view. Only for a class that another replica could act on (one
    /// with a less urgent class below it: it may hold slots back or pause
    /// an answer for it), and only when there is another replica. At most
    /// one such round per class is in flight; those asked meanwhile make
    /// one more round after it ([`crate::admission::coalesce`]), so a burst of queued
    /// requests never takes the store's connections from admission.
    pub(in crate::admission) fn announce(self: &Arc<Self>, class: usize, tell: bool) {
        let Some(shared) = self.shared.clone().filter(|s| s.is_shared()) else {
            return;
        };
        if class + 1 >= Priority::ALL.len() || shared.replicas() < 2 {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(rounds) = self.announcing.get(class) else {
            return;
        };
        if !rounds.ask(tell) {
            return;
        }
        let me = Arc::clone(self);
        rt.spawn(async move {
            let Some(rounds) = me.announcing.get(class) else {
                return;
            };
            while let Some(tell) = rounds.next() {
                me.sync_shared().await;
                if tell {
                    shared.announce().await;
                }
            }
        });
    }
}
