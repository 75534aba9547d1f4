//! The sync round of the shared slots: every `queue.sync_ms` (and when
//! another replica asks), this replica sends its heartbeat with what waits
//! here, reads back the view (the replicas alive, what waits at the others,
//! the leases on each upstream), renews its leases when due, and switches
//! between shared and static slots as the store answers or not. Then its
//! scheduler takes in the new view ([`SlotSync`] runs the rounds).
//!
//! Deliberately not here: the script and its encoding ([`super::store`]),
//! a request's own lease ([`super::lease`]), and the messages between
//! replicas ([`super::channel`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::lease::own_on;
use super::store::{Models, SlotView};
use super::{key_of, Shared};
use crate::admission::Admission;
use llamatap_policy::tenant::Priority;
use llamatap_telemetry::queue::SlotLabels;

// === impl Shared ===

impl Shared {
    /// class and the `models` they wait for, reads the view of `upstreams`
    /// (member id, key), renews the leases when due; switches between
    /// shared and static as the store answers or not.
    pub async fn sync(
        &self,
        waiting: [u32; 3],
        models: &[Models; 3],
        upstreams: &[(usize, String)],
    ) {
        let keys: Vec<String> = upstreams.iter().map(|(_, k)| k.clone()).collect();
        let view = self
            .store
            .sync(&self.replica, self.lease_ms, waiting, models, &keys)
            .await;
        let view = match view {
            Ok(v) => v,
            Err(e) => return self.fall_back(&e.to_string()),
        };
        let due = self.state.lock().is_ok_and(|s| {
            !self.is_shared()
                || s.renewed
                    .is_none_or(|at| at.elapsed() >= Duration::from_millis(self.lease_ms / 3))
        });
        if due {
            if let Err(e) = self.renew().await {
                return self.fall_back(&e.to_string());
            }
        }
        self.apply(&view, upstreams);
        if !self.is_shared() && !self.healed() {
            return;
        }
        if !self.shared.swap(true, Ordering::Relaxed) {
            tracing::info!(
                replicas = view.replicas,
                "shared slots: the store answers again; slots are shared by {} replicas",
                view.replicas
            );
        }
    }

    /// After a failure, the store has answered for two sync rounds: every
    /// replica has written its leases back, so the counts are whole again
    /// (sharing earlier would let this replica take slots another still
    /// holds on its static share).
    fn healed(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        match s.healing {
            Some(since) if since.elapsed() >= self.sync * 2 => {
                s.healing = None;
                true
            }
            Some(_) => false,
            None => {
                s.healing = Some(Instant::now());
                false
            }
        }
    }

    /// Writes every lease of this replica back with a new expiry.
    async fn renew(&self) -> Result<(), crate::store::StoreError> {
        let grouped = self.state.lock().map_or_else(
            |_| Vec::new(),
            |s| {
                let mut by: HashMap<&str, Vec<String>> = HashMap::new();
                for (id, o) in s.own.iter().filter(|(_, o)| !o.releasing && !o.acquiring) {
                    by.entry(o.key.as_str()).or_default().push(id.clone());
                }
                by.into_iter()
                    .map(|(k, ids)| (k.to_string(), ids))
                    .collect::<Vec<_>>()
            },
        );
        self.store.renew(&grouped, self.lease_ms).await?;
        if let Ok(mut s) = self.state.lock() {
            s.renewed = Some(Instant::now());
        }
        Ok(())
    }

    /// Takes in a view: replicas, what waits elsewhere, and per upstream
    /// the leases not this replica's.
    fn apply(&self, view: &SlotView, upstreams: &[(usize, String)]) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.replicas = view.replicas.max(1);
        s.elsewhere = view.waiting;
        s.elsewhere_models = view.models.clone();
        for ((id, key), held) in upstreams.iter().zip(&view.leases) {
            let own = own_on(&s.own, key);
            if let Some(o) = s.others.get_mut(*id) {
                *o = held.saturating_sub(own);
            }
        }
    }

    /// The store failed: the static share from now on (logged once).
    pub(super) fn fall_back(&self, why: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.healing = None;
        }
        if self.shared.swap(false, Ordering::Relaxed) {
            let n = self.replicas();
            tracing::warn!(
                replicas = n,
                "shared slots: the store is unreachable ({why}); each upstream's slots are now \
                 divided by the {n} replicas last seen, until it answers again"
            );
        }
    }
}

// === impl Admission ===

impl Admission {
    /// One round of the shared view: heartbeat, what waits here, the
    /// leases; then grants what the new view frees, pauses an answer here
    /// for a more urgent request waiting elsewhere, and sets the gauges.
    pub(in crate::admission) async fn sync_shared(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let waiting = self.scheduler.lock().map_or([0; 3], |s| {
            Priority::ALL.map(|p| {
                let granted = self
                    .unleased
                    .get(p as usize)
                    .map_or(0, |n| n.load(Ordering::Relaxed));
                depth_u32(s.depth(p as usize)).saturating_add(granted)
            })
        });
        let models = self.wanted.models();
        let members = self.fleet.members();
        let upstreams: Vec<(usize, String)> = members.iter().map(|m| (m.id, key_of(m))).collect();
        shared.sync(waiting, &models, &upstreams).await;
        self.with(|s| self.refresh(s));
        self.preempt_for_elsewhere();
        if let Some(m) = &self.metrics {
            m.replicas.set(i64::from(shared.replicas()));
            m.shared.set(i64::from(shared.is_shared()));
            for member in &members {
                m.elsewhere
                    .get_or_create(&SlotLabels {
                        upstream: member.upstream.name.clone(),
                    })
                    .set(i64::from(shared.others(member.id)));
            }
        }
    }

    /// The background service that runs the sync rounds, when slots are
    /// shared (`queue.shared` with a store); `None` otherwise.
    pub fn slot_sync(self: &Arc<Self>) -> Option<SlotSync> {
        self.shared.as_ref().map(|_| SlotSync {
            admission: Arc::clone(self),
        })
    }
}

fn depth_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

// === impl SlotSync ===

/// Reads the shared view every `queue.sync_ms` (shared slots only), and
/// when another replica asks; from [`Admission::slot_sync`].
pub struct SlotSync {
    /// The queue whose slots are shared.
    admission: Arc<Admission>,
}

#[async_trait]
impl BackgroundService for SlotSync {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(every) = self.admission.shared.as_ref().map(|s| s.sync_every()) else {
            return;
        };
        let Some(shared) = self.admission.shared.clone() else {
            return;
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let follow = shared.follow();
        tokio::pin!(follow);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                () = &mut follow => {}
                _ = tick.tick() => self.admission.sync_shared().await,
                () = shared.changed() => self.admission.sync_shared().await,
            }
        }
    }
}
