//! The admission queue: a request that does work waits for a slot
//! ([`wait`], in `request_filter`) until the scheduler ([`llamatap_policy::queue`])
//! grants it one; only then is it routed, among the upstreams with a free
//! slot ([`Ticket::route`], from the proxy's routing), so the routing
//! decision sees the fleet as it is at dispatch. The slot is released when
//! the request's [`Held`] state is dropped: in `logging` on every path, or
//! with the context.
//!
//! While a request waits, its client socket is watched (a hang-up leaves the
//! queue at once, counted in phase `queued`), its class's deadline runs (a
//! `503` with `Retry-After` when it passes), and every 100 ms the upstreams'
//! capacity is read again from the fleet (health, ejection, `/slots`). A
//! request displaced from its full class by another tenant's arrival (the
//! queue's tenant-share rule) is woken with that verdict and answered `503`
//! `queue_full`, as if the class had been full when it arrived. A refusal
//! comes back as a [`Refusal`]; the proxy writes it.
//!
//! Capacity per upstream: its `max_inflight`, else `queue.max_inflight`,
//! else the slot count of its last `/slots` answer, else unknown (never
//! limiting). Without `queue.shared`, each replica counts only its own
//! requests: with several replicas, `max_inflight` is each one's share of
//! an upstream's slots. With it, the replicas share every upstream's slots
//! through leases in the store ([`shared`]): a request routed to an
//! upstream leases its slot there before it connects ([`secure`]).
//!
//! Pre-emption: llama-server cannot pre-empt a running slot, so llamatap
//! does. A request that waits with no free slot, while a class less urgent
//! than its own is `preemptible`, tells one running answer of that class to
//! pause (through [`Pauses`]), unless enough are pausing already for the
//! requests waiting at its class or above. The paused answer gives its slot
//! back at once (the waiting request takes it), waits at the head of its
//! class's queue ([`requeue`]: never refused, no deadline), and continues.
//!
//! Files: the queue and a request's state here; `wait` (the
//! first wait), `requeue` (a paused answer's), `refusal`,
//! `scheduler` (the scheduler under its mutex, the gauges), `ticket` (a
//! granted slot), `affinity` (the bounded wait for the prefix's upstream),
//! `preempt`, `wanted` (the models waited for), `coalesce` (one
//! announcement round at a time), and [`shared`] (the slots shared with
//! other replicas, with their store scripts).
//!
//! What the rest of llamatap sees, a narrow interface of plain data: the
//! proxy's calls ([`wait`] with who asks, [`Asking`]; [`wait_for_affine`],
//! [`secure`], [`requeue`] and [`Held::give_back`] on the request's
//! [`Held`]; [`Ticket::route`] from its routing), the server's
//! ([`Admission::new`], [`Admission::slot_sync`]) and the admin page's
//! ([`SharedSlots`], a read-only [`SlotStatus`]), and a TTFT objective's
//! ([`Admission::queued_ahead`]). Nothing here reads the
//! proxy's request context or calls its routing: a lease refused elsewhere
//! answers [`Secured::Reroute`], and the proxy routes again.
//!
//! Deliberately not here: the arithmetic (pure, in [`llamatap_policy::queue`]),
//! which answer pauses (the proxy's registry of running answers), writing
//! an answer to the client (the proxy), and the store's connections
//! ([`crate::store`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pingora::http::RequestHeader;
use tokio::sync::{oneshot, Notify};

mod affinity;
mod coalesce;
mod preempt;
mod refusal;
mod requeue;
mod scheduler;
mod secure;
pub mod shared;
#[cfg(test)]
mod tests;
mod ticket;
mod wait;
mod wanted;

pub use affinity::wait_for_affine;
pub use preempt::Pauses;
pub use refusal::Refusal;
pub use requeue::requeue;
pub use secure::{secure, Secured};
pub use shared::{SharedSlots, SlotStatus, SlotSync};
pub use ticket::Ticket;
pub use wait::wait;

use crate::config::queue::Queue;
use crate::config::Config;
use crate::fleet::Fleet;
use llamatap_policy::queue::Scheduler;
use llamatap_policy::tenant::{Priority, TenantId, Tenants};
use llamatap_telemetry::queue::QueueMetrics;

/// How often a waiting request re-reads the fleet's capacity.
const REFRESH: Duration = Duration::from_millis(100);
/// The tenant key of requests without a named tenant.
const SHARED_TENANT: usize = usize::MAX;

/// What a queued request's waiter is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// A slot is granted: it goes on.
    Granted,
    /// Another tenant's arrival took its place in its full class.
    Displaced,
}

type Waker = oneshot::Sender<Verdict>;

/// The queue of this replica.
pub struct Admission {
    config: Queue,
    tenants: Tenants,
    fleet: Arc<Fleet>,
    metrics: Option<QueueMetrics>,
    scheduler: Mutex<Scheduler<Waker>>,
    /// Woken whenever a slot is released (waits for one upstream).
    freed: Notify,
    /// The answers that can be told to pause.
    moves: Arc<dyn Pauses>,
    /// The slots shared with other replicas (`queue.shared`).
    shared: Option<Arc<shared::Shared>>,
    /// Per class, requests granted a slot here whose lease is not taken
    /// yet: reported to the store as still waiting, so that no other
    /// replica takes the slot meant for them meanwhile.
    unleased: [std::sync::atomic::AtomicU32; 3],
    /// Per class, the models the requests queued here name.
    wanted: wanted::Wanted,
    /// Per class, the announcement rounds (one in flight at most).
    announcing: [coalesce::Coalesce; 3],
}

/// Who asks the queue for a slot: plain data the proxy reads off the
/// request.
#[derive(Clone, Copy, Debug)]
pub struct Asking<'a> {
    /// The request's tenant.
    pub tenant: TenantId,
    /// Its arrival (the queue's order and its deadline count from it).
    pub received: Instant,
    /// The model it names.
    pub model: Option<&'a str>,
}

/// A request's passage through the queue, kept in its context: data, and
/// the slot ([`Ticket`]) whose drop gives it back.
pub struct Held {
    /// Its class.
    pub class: Priority,
    /// Arrival to dispatch, once dispatched.
    pub wait: Option<Duration>,
    /// It waited (no slot was free at arrival).
    pub waited: bool,
    /// It is in the queue now.
    pub queued_now: bool,
    /// Its slot, once granted.
    pub ticket: Option<Ticket>,
    /// Its tenant's key and weight in the scheduler.
    who: (usize, u32),
    /// Its arrival.
    received: Instant,
    /// The model it named, for a second wait.
    model: Option<Box<str>>,
}

impl Held {
    /// A request of `class` asking as `asking` (`weight`: its tenant's).
    fn new(class: Priority, asking: &Asking<'_>, weight: u32) -> Self {
        Held {
            class,
            wait: None,
            waited: false,
            queued_now: false,
            ticket: None,
            who: (tenant_key(asking.tenant), weight),
            received: asking.received,
            model: asking.model.map(Box::from),
        }
    }

    /// Gives its slot back (a paused answer, before it waits again; an
    /// answer whose end was read upstream). Once only: without a slot, a
    /// no-op.
    pub fn give_back(&mut self) {
        drop(self.ticket.take());
    }

    /// A request of `class` granted a slot at once, as [`wait`] grants it
    /// when one is free (`None` when none is).
    #[cfg(test)]
    pub(crate) fn granted_at_once(
        admission: &Arc<Admission>,
        class: Priority,
        asking: &Asking<'_>,
    ) -> Option<Box<Held>> {
        let mut h = Box::new(Held::new(class, asking, 1));
        let who = (class as usize, h.who.0);
        let now = admission.with(|s| {
            admission.refresh(s);
            s.admit_now(who.0, who.1)
        });
        now.filter(|g| *g)?;
        h.ticket = Some(Ticket::new(admission, who));
        Some(h)
    }

    /// The request left the queue without a slot: its wait ends now.
    fn left(&mut self) {
        self.wait = Some(self.received.elapsed());
    }
}

impl Admission {
    /// The queue of `config` over `fleet`'s members, telling `moves` to
    /// pause answers for more urgent requests, sharing slots through
    /// `store` when `queue.shared` is on.
    pub fn new<P: Pauses + 'static>(
        config: &Config,
        fleet: Arc<Fleet>,
        metrics: Option<QueueMetrics>,
        moves: Arc<P>,
        store: Option<Arc<crate::store::Store>>,
    ) -> Arc<Self> {
        let scheduler = Scheduler::new(&config.queue.classes, fleet.capacity());
        let shared = store.filter(|_| config.queue.shared).map(|st| {
            Arc::new(shared::Shared::new(
                st,
                config.queue.lease,
                config.queue.sync,
                fleet.capacity(),
            ))
        });
        if let Some(m) = &metrics {
            // Seeded even with the queue off: the dashboards' queries show 0.
            m.seed(fleet.members().iter().map(|m| m.upstream.name.as_str()));
        }
        Arc::new(Admission {
            config: config.queue.clone(),
            tenants: config.tenants.clone(),
            fleet,
            metrics,
            scheduler: Mutex::new(scheduler),
            freed: Notify::new(),
            moves,
            shared,
            unleased: Default::default(),
            wanted: Default::default(),
            announcing: Default::default(),
        })
    }

    /// The state of the slots shared with other replicas, when
    /// `queue.shared` is on (for `/readyz`).
    pub fn shared_slots(&self) -> Option<SharedSlots> {
        self.shared.clone().map(SharedSlots::new)
    }

    /// The queue is on.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The requests queued here that a request of `class` naming `model`
    /// would wait behind (0 with the queue off): of its class or a more
    /// urgent one, naming its model or none, or naming any when it names
    /// none. For a TTFT objective's comparison.
    pub fn queued_ahead(&self, class: Priority, model: Option<&str>) -> u32 {
        if !self.config.enabled {
            return 0;
        }
        self.wanted.ahead(class as usize, model)
    }

    /// The class of a request: its key's, else `default`; lowered (never
    /// raised, unless trusted) by the configured header (its value read
    /// without regard to case). `Err` with the value when the header names
    /// no class (the request is refused: a misspelt class would otherwise
    /// pass unnoticed).
    pub fn class_of(&self, req: &RequestHeader, tenant: TenantId) -> Result<Priority, String> {
        let key = self.tenants.get(tenant).map(|t| t.priority);
        let header = match self
            .config
            .priority_header
            .as_deref()
            .and_then(|h| req.headers.get(h))
        {
            None => None,
            Some(v) => {
                let text = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
                match Priority::parse(&text.to_ascii_lowercase()) {
                    Some(p) => Some(p),
                    None => return Err(text),
                }
            }
        };
        Ok(llamatap_policy::queue::class(
            key,
            header,
            self.config.trust_priority_header,
        ))
    }
}

/// The tenant key of a request in the scheduler: its named tenant's
/// index, or one key shared by every anonymous request.
fn tenant_key(tenant: TenantId) -> usize {
    match tenant {
        TenantId::Named(i) => i,
        TenantId::Anonymous => SHARED_TENANT,
    }
}
