//! Shared slots (`queue.shared`): the replicas that use one Redis grant
//! the upstreams' slots as one queue would.
//!
//! - **Leases** (`lease`). A request granted a slot here, once routed,
//!   leases that slot on its upstream in the store ([`store`]: a script
//!   that never lets the leases exceed the upstream's slots) before it
//!   connects (the queue's `secure`). A lease is renewed while the stream runs
//!   (every third of `queue.lease_ms`), removed when it ends, and expires
//!   on its own when its replica dies.
//! - **The view** (`sync`). Every `queue.sync_ms` this replica sends its
//!   heartbeat and its queue's depth per class, and reads back the
//!   replicas alive, what waits in the others' queues, and the leases on
//!   each upstream. Its scheduler then counts each upstream's slots less
//!   those leased by other replicas, and keeps free slots for requests of
//!   more urgent classes waiting elsewhere (so a batch grant here honours
//!   an interactive request waiting at another replica; that one may also
//!   pause an answer running here, the queue's `preempt`). A
//!   replica tells the others to read the view at once when a request
//!   queues or a slot frees (`channel`).
//! - **Failure.** A store call that fails or times out (`auth.store.timeout_ms`)
//!   switches this replica to a static share: each upstream's slots divided
//!   by the replicas it last saw (at least one). No request fails because
//!   of it. The view keeps being asked for; when the store answers again,
//!   every lease this replica holds is written back (those that expired
//!   meanwhile too: their streams still run) and slots are shared again.
//!   Each change is logged once.
//!
//! Outside the admission queue, only [`SharedSlots`] (the state, for
//! `/readyz`) and [`store`] (the scripts, for the tests against a real
//! Redis) are seen.
//!
//! Deliberately not here: the queue's arithmetic ([`llamatap_policy::queue`]), the
//! store's connections ([`crate::store`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::fleet::Member;
use crate::store::Store;
use store::{Models, SlotStore};

mod channel;
mod lease;
pub mod store;
mod sync;
#[cfg(test)]
mod tests;

pub(crate) use lease::{Acquired, Lease};
pub use sync::SlotSync;

/// A read-only handle on the shared slots' state, for the admin page.
#[derive(Clone)]
pub struct SharedSlots {
    shared: Arc<Shared>,
}

impl SharedSlots {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        SharedSlots { shared }
    }

    /// The state now.
    pub fn status(&self) -> SlotStatus {
        SlotStatus {
            shared: self.shared.is_shared(),
            replicas: self.shared.replicas(),
        }
    }
}

/// The shared slots' state at one moment; shown as its line in `/readyz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotStatus {
    /// Slots are shared through the store (else each replica uses its
    /// static share: the store is unreachable).
    pub shared: bool,
    /// Replicas last seen, this one included (at least one).
    pub replicas: u32,
}

impl fmt::Display for SlotStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.replicas;
        if self.shared {
            let replicas = if n == 1 { "replica" } else { "replicas" };
            write!(f, "slots: shared by {n} {replicas} through the store")
        } else {
            write!(
                f,
                "slots: static share, 1/{n} of each upstream (the store is unreachable)"
            )
        }
    }
}

// === impl Shared ===

/// The replica's side of the shared slots.
pub(crate) struct Shared {
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
}

/// The key of a member's leases: its address (the same at every replica).
pub(super) fn key_of(m: &Member) -> String {
    m.address()
        .map_or_else(|| m.upstream.address.clone(), |a| a.to_string())
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
