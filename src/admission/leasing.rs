//! Shared slots in the proxy: the lease a routed request takes before it
//! connects ([`secure`]), and the task that keeps this replica's view of the
//! others current ([`SlotSync`]).
//!
//! A request granted a slot by this replica's queue is routed among the
//! upstreams its view shows free; its lease can still be refused when
//! another replica took that upstream's last slot since the view was read.
//! Then the view marks the upstream full and the request is routed again,
//! or, when no upstream has a free slot left, it waits at the head of its
//! class's queue ([`super::requeue`]) until one frees.
//!
//! Deliberately not here: the store side of leases ([`super::shared`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use pingora::proxy::Session;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::Result;

use super::shared::Acquired;
use super::Admission;
use crate::fleet::{Fleet, Member};
use crate::proxy::context::RequestCtx;
use crate::proxy::routing;
use crate::telemetry::queue::SlotLabels;
use crate::tenant::Priority;

/// The key of a member's leases: its address (the same at every replica).
fn key_of(m: &Member) -> String {
    m.address()
        .map_or_else(|| m.upstream.address.clone(), |a| a.to_string())
}

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
                    super::give_back(ctx);
                    super::requeue(session, ctx, admission).await?;
                }
                rerouted = Some(routing::choose(fleet, ctx)?);
            }
        }
    }
}

impl Admission {
    /// The slots of `member` before sharing: its `max_inflight`, else the
    /// queue's, else its `/slots` count (`None`: unknown).
    pub(super) fn slots_of(&self, member: &Member) -> Option<u32> {
        member
            .upstream
            .max_inflight
            .or(self.config.max_inflight)
            .or_else(|| member.total_slots())
    }

    /// One round of the shared view: heartbeat, what waits here, the
    /// leases; then grants what the new view frees, pauses an answer here
    /// for a more urgent request waiting elsewhere, and sets the gauges.
    pub async fn sync_shared(&self) {
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

    /// With shared slots, what waits here at class `class` changed: from
    /// a task of its own, a sync round (the store learns it); when `tell`
    /// (a request queued here), the other replicas are then told to read
    /// the view. Only for a class that another replica could act on (one
    /// with a less urgent class below it: it may hold slots back or pause
    /// an answer for it), and only when there is another replica. At most
    /// one such round per class is in flight; those asked meanwhile make
    /// one more round after it ([`super::coalesce`]), so a burst of queued
    /// requests never takes the store's connections from admission.
    pub(super) fn announce(self: &Arc<Self>, class: usize, tell: bool) {
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

    /// A request of a more urgent class waits at another replica while no
    /// slot is free: one answer running here, of a less urgent preemptible
    /// class, on an upstream that request could take (one serving a model
    /// it names), is told to pause (unless enough are pausing already).
    fn preempt_for_elsewhere(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let elsewhere = shared.elsewhere();
        let Some(class) = elsewhere.iter().position(|n| *n > 0) else {
            return;
        };
        if !self.config.preemptible.iter().skip(class + 1).any(|p| *p) {
            return;
        }
        let (free, here) = self.scheduler.lock().map_or((1, 0), |s| {
            (s.free(), (0..=class).map(|c| s.depth(c)).sum::<usize>())
        });
        let waiting = elsewhere
            .iter()
            .take(class + 1)
            .map(|n| *n as usize)
            .sum::<usize>()
            + here;
        if free == 0 && waiting > self.moves.pausing() {
            let wanted = shared.elsewhere_models();
            let Some(models) = wanted.get(class) else {
                return;
            };
            let several = self.fleet.serves_several_models();
            self.moves.preempt_where(class, |member| {
                !several || models.wanted_by(|m| self.fleet.member_serves(member, m))
            });
        }
    }
}

fn depth_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Reads the shared view every `queue.sync_ms` (shared slots only).
pub struct SlotSync {
    /// The queue whose slots are shared.
    pub admission: Arc<Admission>,
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
