//! The messages between replicas (shared slots): a replica tells the
//! others on the Redis channel [`super::store::CHANGED`] to read the
//! view now (a request queued, a slot freed), and follows what they tell.
//! A slot-freed message is in flight at most once at a time (those asked
//! meanwhile make one more after it).
//!
//! Deliberately not here: what a round reads (the view, [`super::Shared::sync`]).

use super::Shared;

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
