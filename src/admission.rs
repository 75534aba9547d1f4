//! The admission queue in the proxy hooks: a request that does work waits
//! here, in `request_filter`, until the scheduler ([`crate::queue`]) grants
//! it a slot; only then is it routed, among the upstreams with a free slot
//! ([`Ticket::route`], from `routing::choose`), so the routing decision
//! sees the fleet as it is at dispatch. The slot is released when the
//! request's [`Held`] state is dropped: in `logging` on every path, or with
//! the context.
//!
//! While a request waits, its client socket is watched (a hang-up leaves the
//! queue at once, counted in phase `queued`), its class's deadline runs (a
//! `503` with `Retry-After` when it passes), and every 100 ms the upstreams'
//! capacity is read again from the fleet (health, ejection, `/slots`). A
//! request displaced from its full class by another tenant's arrival (the
//! queue's tenant-share rule) is woken with that verdict and answered `503`
//! `queue_full`, as if the class had been full when it arrived.
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
//! pause ([`crate::proxy::moves`]), unless enough are pausing already for the
//! requests waiting at its class or above. The paused answer gives its slot
//! back at once (the waiting request takes it), waits at the head of its
//! class's queue ([`requeue`]: never refused, no deadline), and continues.
//!
//! Deliberately not here: the arithmetic (pure, in [`crate::queue`]), and
//! which answer pauses ([`crate::proxy::moves`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pingora::http::RequestHeader;
use pingora::proxy::Session;
use pingora::Result;
use tokio::sync::{oneshot, Notify};

mod affinity;
mod coalesce;
mod preempt;
mod scheduler;
pub mod shared;
#[cfg(test)]
mod tests;
mod ticket;
mod wanted;

pub use affinity::wait_for_affine;
pub use shared::{secure, SharedSlots, SlotStatus, SlotSync};
pub use ticket::Ticket;

use crate::config::queue::Queue;
use crate::config::Config;
use crate::fleet::Fleet;
use crate::proxy::context::RequestCtx;
use crate::proxy::moves::Moves;
use crate::proxy::reply::{write_error_with, ErrorReply};
use crate::queue::{Arrival, Refusal, Scheduler};
use crate::record::Outcome;
use crate::telemetry::queue::QueueMetrics;
use crate::tenant::{Priority, TenantId, Tenants};

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
    moves: Arc<Moves>,
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

/// A request's passage through the queue, kept in its context.
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
}

/// Takes a still-queued entry out when the waiting future ends for any
/// reason (hang-up, deadline, the connection's task dropped).
/// A grant that arrived in between (the entry was dispatched, not removed)
/// is given back, so the slot goes to the next request.
struct Waiting<'a> {
    admission: &'a Admission,
    /// Its class index and tenant key.
    who: (usize, usize),
    handle: Option<crate::queue::Handle>,
    granted: oneshot::Receiver<Verdict>,
    /// Its model, told to the other replicas while it waits.
    _want: wanted::Want<'a>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let granted = &mut self.granted;
            let (class, tenant) = self.who;
            self.admission.with(|s| {
                if s.remove(h).is_none() && granted.try_recv() == Ok(Verdict::Granted) {
                    s.abandon();
                    s.tenant_done(class, tenant);
                }
            });
        }
    }
}

impl Admission {
    /// The queue of `config` over `fleet`'s members.
    pub fn new(
        config: &Config,
        fleet: Arc<Fleet>,
        metrics: Option<QueueMetrics>,
        moves: Arc<Moves>,
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
        Ok(crate::queue::class(
            key,
            header,
            self.config.trust_priority_header,
        ))
    }
}

/// Waits for a slot, in `request_filter`. `Ok(true)`: llamatap answered
/// (a refusal); `Ok(false)`: go on, the slot is in `ctx.admission`; `Err`:
/// the client hung up while queued.
pub async fn wait(
    session: &mut Session,
    ctx: &mut RequestCtx,
    admission: &Arc<Admission>,
) -> Result<bool> {
    if !admission.enabled()
        || !ctx.route.uses_slot()
        || session.req_header().method != http::Method::POST
    {
        return Ok(false);
    }
    let class = match admission.class_of(session.req_header(), ctx.tenant) {
        Ok(c) => c,
        Err(value) => {
            refuse_priority(session, ctx, admission, &value).await;
            return Ok(true);
        }
    };
    let ci = class as usize;
    let rules = admission
        .config
        .classes
        .get(ci)
        .copied()
        .unwrap_or_default();
    let arrived = ctx.received;
    let mut held = Box::new(Held {
        class,
        wait: None,
        waited: false,
        queued_now: false,
        ticket: None,
    });
    let tenant = match ctx.tenant {
        TenantId::Named(i) => i,
        TenantId::Anonymous => SHARED_TENANT,
    };
    let now = admission.with(|s| {
        admission.refresh(s);
        s.admit_now(ci, tenant)
    });
    if now.unwrap_or(true) {
        held.wait = Some(arrived.elapsed());
        held.ticket = Some(Ticket::new(admission, (ci, tenant)));
        ctx.admission = Some(held);
        return Ok(false);
    }
    held.waited = true;
    held.queued_now = true;
    // Read the body first (within Pingora's replay buffer), so that the
    // socket can be watched for a hang-up while the request waits. Only
    // when nothing was read ahead yet (routing reads ahead in a fleet): a
    // second read could outgrow the replay buffer, and the start of the
    // body would be lost. A body still unread is forwarded from the socket.
    let unread = session
        .as_ref()
        .get_retry_buffer()
        .is_none_or(|b| b.is_empty());
    let watch = !session
        .req_header()
        .headers
        .contains_key(http::header::EXPECT)
        && (session.is_body_done()
            || (unread && {
                let _ = crate::replay::read_ahead(session, crate::replay::LIMIT).await?;
                session.is_body_done()
            }));
    let (tx, rx) = oneshot::channel();
    let weight = admission.tenants.get(ctx.tenant).map_or(1, |t| t.weight);
    let arrival = Arrival {
        class: ci,
        tenant,
        weight,
        at: arrived,
    };
    let queued = admission.with(|s| s.enqueue(arrival, tx));
    let handle = match queued {
        Some(Ok(h)) => h,
        Some(Err((refusal, _))) => {
            ctx.admission = Some(held);
            let code = match refusal {
                Refusal::Full => "queue_full",
                Refusal::TenantShare => "tenant_queue_full",
            };
            refuse(session, ctx, class, code, rules.max_depth).await;
            return Ok(true);
        }
        None => {
            ctx.admission = Some(held);
            refuse(session, ctx, class, "queue_full", rules.max_depth).await;
            return Ok(true);
        }
    };
    ctx.admission = Some(held);
    // With shared slots, the other replicas learn at once that a request
    // waits here.
    let model = ctx.request.model.clone();
    let want = admission.wanted.hold(ci, model.as_deref());
    admission.announce(ci, true);
    admission.preempt_for(ci, model.as_deref());
    let mut waiting = Waiting {
        admission,
        who: (ci, tenant),
        handle: Some(handle),
        granted: rx,
        _want: want,
    };
    let deadline = rules
        .max_wait
        .map(|w| tokio::time::Instant::from_std(arrived + w));
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let verdict = loop {
        tokio::select! {
            biased;
            r = &mut waiting.granted => break r.ok(),
            () = sleep_until(deadline) => {
                waiting.handle = None;
                let removed = admission.with(|s| s.remove(handle)).flatten();
                // Dispatched (or displaced) at the last moment: that stands.
                break match removed {
                    Some(_) => None,
                    None => waiting.granted.try_recv().ok(),
                };
            }
            r = session.as_downstream_mut().read_body_or_idle(true), if watch => {
                if let Err(e) = r {
                    drop(waiting);
                    mark_left(ctx);
                    return Err(e.into_down());
                }
            }
            _ = tick.tick() => {
                admission.with(|s| {
                    admission.refresh(s);
                    admission.oldest_waits(s, Instant::now());
                });
                admission.preempt_for(ci, model.as_deref());
            }
        }
    };
    waiting.handle = None;
    drop(waiting);
    match verdict {
        Some(Verdict::Granted) => {}
        Some(Verdict::Displaced) => {
            mark_left(ctx);
            refuse(session, ctx, class, "queue_full", rules.max_depth).await;
            return Ok(true);
        }
        None => {
            mark_left(ctx);
            refuse(session, ctx, class, "queue_timeout", None).await;
            return Ok(true);
        }
    }
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.queued_now = false;
        h.wait = Some(arrived.elapsed());
        h.ticket = Some(Ticket::new(admission, (ci, tenant)));
    }
    Ok(false)
}

/// A paused answer gives its slot back (the next request is dispatched).
pub fn give_back(ctx: &mut RequestCtx) {
    if let Some(h) = ctx.admission.as_deref_mut() {
        drop(h.ticket.take());
    }
}

/// A paused answer waits again, at the head of its class's queue, for a
/// slot (no deadline: it held one); `Err` when its client hung up.
pub async fn requeue(
    session: &mut Session,
    ctx: &mut RequestCtx,
    admission: &Arc<Admission>,
) -> Result<()> {
    let Some(class) = ctx.admission.as_deref().map(|h| h.class) else {
        return Ok(());
    };
    let ci = class as usize;
    let tenant = match ctx.tenant {
        TenantId::Named(i) => i,
        TenantId::Anonymous => SHARED_TENANT,
    };
    let weight = admission.tenants.get(ctx.tenant).map_or(1, |t| t.weight);
    let arrival = Arrival {
        class: ci,
        tenant,
        weight,
        at: ctx.received,
    };
    let (tx, rx) = oneshot::channel();
    let Some(Ok(handle)) = admission.with(|s| s.requeue(arrival, tx)) else {
        return Err(pingora::Error::explain(
            pingora::ErrorType::InternalError,
            "the admission queue is unavailable",
        ));
    };
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.queued_now = true;
    }
    let want = admission.wanted.hold(ci, ctx.request.model.as_deref());
    admission.announce(ci, true);
    let mut waiting = Waiting {
        admission,
        who: (ci, tenant),
        handle: Some(handle),
        granted: rx,
        _want: want,
    };
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            r = &mut waiting.granted => match r {
                Ok(Verdict::Granted) => break,
                // Never displaced (the tenant-share rule passes paused
                // answers over); a dropped sender means the queue is gone.
                _ => return Err(pingora::Error::explain(
                    pingora::ErrorType::InternalError,
                    "the admission queue dropped a paused answer",
                )),
            },
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                if let Err(e) = r {
                    return Err(e.into_down());
                }
            }
            _ = tick.tick() => {
                admission.with(|s| admission.refresh(s));
            }
        }
    }
    waiting.handle = None;
    drop(waiting);
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.queued_now = false;
        h.ticket = Some(Ticket::new(admission, (ci, tenant)));
    }
    Ok(())
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The request left the queue without a slot: its wait ends now.
fn mark_left(ctx: &mut RequestCtx) {
    let since = ctx.received.elapsed();
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.wait = Some(since);
    }
}

/// Refuses a request whose priority header names no class: `400`
/// `invalid_priority`, naming the header, the value (bounded) and the
/// classes.
async fn refuse_priority(
    session: &mut Session,
    ctx: &mut RequestCtx,
    admission: &Admission,
    value: &str,
) {
    let header = admission.config.priority_header.as_deref().unwrap_or("");
    let shown = crate::record::bounded(value, 64);
    let message = format!(
        "header {header}: {shown:?} is not a priority class; use interactive, default or batch"
    );
    ctx.ended = Some(Instant::now());
    ctx.failure = Some((Outcome::ClientError, "invalid_priority", message.clone()));
    let reply = ErrorReply {
        status: 400,
        kind: "invalid_request_error",
        code: "invalid_priority",
        message: &message,
    };
    write_error_with(session, ctx, reply, &[]).await;
}

/// Answers a refusal of the queue in the OpenAI shape, with
/// `Retry-After: 1`: `503` when the queue is the cause (full, or the wait
/// passed), `429` when it is the tenant's own share of a full queue (its
/// client's retries then back off as from a rate limit).
async fn refuse(
    session: &mut Session,
    ctx: &mut RequestCtx,
    class: Priority,
    code: &'static str,
    depth: Option<usize>,
) {
    let class = class.as_str();
    let message = match (code, depth) {
        ("queue_full", Some(d)) => {
            format!("the {class} queue is full ({d} requests wait); retry later")
        }
        ("queue_full", None) => format!("the {class} queue is full; retry later"),
        ("tenant_queue_full", _) => format!(
            "the {class} queue is full and this key holds more than its share of it; \
             retry later"
        ),
        _ => format!(
            "no upstream slot came free within the {class} class's max_wait_ms; retry later"
        ),
    };
    ctx.ended = Some(Instant::now());
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.queued_now = false;
    }
    ctx.failure = Some((Outcome::Rejected, code, message.clone()));
    let own_share = code == "tenant_queue_full";
    let reply = ErrorReply {
        status: if own_share { 429 } else { 503 },
        kind: if own_share {
            "rate_limit_error"
        } else {
            "server_error"
        },
        code,
        message: &message,
    };
    write_error_with(session, ctx, reply, &[("retry-after", "1".to_string())]).await;
}
