//! Shared slots (`queue.shared`): the replicas that use one Redis grant
//! the upstreams' slots as one queue would.
//!
//! - **Leases.** A request granted a slot here, once routed, leases that
//!   slot on its upstream in the store ([`store`]: a script
//!   that never lets the leases exceed the upstream's slots). A lease is
//!   renewed while the stream runs (every third of `queue.lease_ms`),
//!   removed when it ends, and expires on its own when its replica dies.
//! - **The view.** Every `queue.sync_ms` this replica sends its heartbeat
//!   and its queue's depth per class, and reads back the replicas alive,
//!   what waits in the others' queues, and the leases on each upstream.
//!   Its scheduler then counts each upstream's slots less those leased by
//!   other replicas, and keeps free slots for requests of more urgent
//!   classes waiting elsewhere (so a batch grant here honours an
//!   interactive request waiting at another replica; that one may also
//!   pause an answer running here, [`super::Admission::preempt_for_elsewhere`]).
//! - **Failure.** A store call that fails or times out (`auth.store.timeout_ms`)
//!   switches this replica to a static share: each upstream's slots divided
//!   by the replicas it last saw (at least one). No request fails because
//!   of it. The view keeps being asked for; when the store answers again,
//!   every lease this replica holds is written back (those that expired
//!   meanwhile too: their streams still run) and slots are shared again.
//!   Each change is logged once.
//!
//! Deliberately not here: the queue's arithmetic ([`crate::queue`]), the
//! store's protocol ([`crate::store`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::store::Store;
use store::{Models, SlotStore, SlotView};

mod channel;
pub mod store;

/// A slot leased (or, while the store is unreachable, counted here only).
#[derive(Debug)]
pub struct Lease {
    /// The upstream's key in the store (its address).
    key: String,
    /// The lease's id: this replica's id and a sequence number.
    id: String,
}

/// What [`Shared::acquire`] got.
#[derive(Debug)]
pub enum Acquired {
    /// The store granted the lease, or is unreachable (the lease is counted
    /// here and written to the store when it answers again).
    Leased(Lease),
    /// Every slot of the upstream is leased (another replica took the last
    /// one since the view was read).
    Full,
}

/// The replica's side of the shared slots.
pub struct Shared {
    store: SlotStore,
    /// This replica's id in the store.
    replica: String,
    lease_ms: u64,
    sync: Duration,
    next: AtomicU64,
    /// Slots are shared (the store answers); else the static share.
    shared: AtomicBool,
    state: Mutex<State>,
    /// Another replica asked for a sync round now.
    changed: Notify,
    /// Messages that a slot freed (one in flight at most).
    telling: super::coalesce::Coalesce,
}

/// One of this replica's leases.
struct Own {
    /// Its upstream's key.
    key: String,
    /// Its removal from the store is under way.
    releasing: bool,
    /// Its grant is under way (the store may count it already).
    acquiring: bool,
}

#[derive(Default)]
struct State {
    /// Per member id: slots leased by other replicas.
    others: Vec<u32>,
    /// This replica's leases, by id: still counted as its own while their
    /// removal is under way (the store may count them yet), never renewed
    /// then.
    own: HashMap<String, Own>,
    /// Replicas last seen (this one included).
    replicas: u32,
    /// Per class, requests waiting in other replicas' queues.
    elsewhere: [u32; 3],
    /// Per class, the models they wait for.
    elsewhere_models: [Models; 3],
    renewed: Option<Instant>,
    /// Since when the store answers again after a failure (slots are
    /// shared again once every replica had a sync round to write its
    /// leases back).
    healing: Option<Instant>,
}

impl Shared {
    /// Shared slots through `store`, with leases of `lease` and a view read
    /// every `sync`, for a fleet of up to `members` members.
    pub fn new(store: Arc<Store>, lease: Duration, sync: Duration, members: usize) -> Self {
        Shared {
            store: SlotStore::new(store),
            replica: replica_id(),
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            sync,
            next: AtomicU64::new(0),
            shared: AtomicBool::new(true),
            state: Mutex::new(State {
                others: vec![0; members],
                replicas: 1,
                ..State::default()
            }),
            changed: Notify::new(),
            telling: Default::default(),
        }
    }

    /// This replica's id in the store.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// How often the view is read.
    pub fn sync_every(&self) -> Duration {
        self.sync
    }

    /// Slots are shared now (else each replica uses its static share).
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// Replicas last seen, this one included.
    pub fn replicas(&self) -> u32 {
        self.state.lock().map_or(1, |s| s.replicas.max(1))
    }

    /// Slots leased by other replicas on member `id`, as last seen.
    pub fn others(&self, id: usize) -> u32 {
        self.state
            .lock()
            .map_or(0, |s| s.others.get(id).copied().unwrap_or(0))
    }

    /// The slots of member `id` this replica may use, of `slots` in all
    /// (`None`: unknown, never limiting): those not leased elsewhere while
    /// shared, else its static share (at least one).
    pub fn capacity(&self, id: usize, slots: Option<u32>) -> Option<u32> {
        let slots = slots?;
        if self.is_shared() {
            Some(slots.saturating_sub(self.others(id)))
        } else {
            Some((slots / self.replicas()).max(1))
        }
    }

    /// Per class, requests waiting in other replicas' queues (none counted
    /// while the store is unreachable).
    pub fn elsewhere(&self) -> [u32; 3] {
        if !self.is_shared() {
            return [0; 3];
        }
        self.state.lock().map_or([0; 3], |s| s.elsewhere)
    }

    /// Per class, the models requests waiting in other replicas' queues
    /// name (none while the store is unreachable).
    pub fn elsewhere_models(&self) -> [Models; 3] {
        if !self.is_shared() {
            return Default::default();
        }
        self.state
            .lock()
            .map_or_else(|_| Default::default(), |s| s.elsewhere_models.clone())
    }

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

    fn forget(&self, id: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.own.remove(id);
        }
    }

    /// One round of the heartbeat: sends this replica's `waiting` per
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
    fn fall_back(&self, why: &str) {
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

    /// One line for `/readyz`.
    pub fn status(&self) -> String {
        let n = self.replicas();
        if self.is_shared() {
            let replicas = if n == 1 { "replica" } else { "replicas" };
            format!("slots: shared by {n} {replicas} through the store")
        } else {
            format!("slots: static share, 1/{n} of each upstream (the store is unreachable)")
        }
    }
}

/// This replica's leases on the upstream keyed `key`.
fn own_on(own: &HashMap<String, Own>, key: &str) -> u32 {
    u32::try_from(own.values().filter(|o| o.key == key).count()).unwrap_or(u32::MAX)
}

/// A replica id unique among replicas: the host's name (a pod's name in
/// Kubernetes), the process id and the start time.
fn replica_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "llamatap".to_string());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}-{}-{nanos:x}", std::process::id())
}
