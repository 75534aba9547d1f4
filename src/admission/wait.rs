//! The wait for a slot, in `request_filter` ([`wait`]): a request that
//! does work is granted a slot at once when one is free for its class and
//! tenant; else it queues, and waits until the scheduler grants it one, its
//! class's deadline passes, another tenant's arrival displaces it, or its
//! client hangs up. [`Waiting`] takes a still-queued entry out whichever way
//! the wait ends.
//!
//! Deliberately not here: the grant itself (the scheduler, [`super::scheduler`]),
//! the answers to a refusal ([`super::refusal`]: the proxy writes them), and
//! a paused answer's second wait ([`super::requeue`](mod@super::requeue)).

use std::sync::Arc;
use std::time::Instant;

use pingora::proxy::Session;
use pingora::Result;
use tokio::sync::oneshot;

use super::refusal::{invalid_priority, refused, Refusal, Refused};
use super::{wanted, Admission, Asking, Held, Ticket, Verdict, REFRESH};
use crate::replay;
use llamatap_policy::queue::{Arrival, Handle};

/// Takes a still-queued entry out when the waiting future ends for any
/// reason (hang-up, deadline, the connection's task dropped).
/// A grant that arrived in between (the entry was dispatched, not removed)
/// is given back, so the slot goes to the next request.
pub(super) struct Waiting<'a> {
    pub(super) admission: &'a Admission,
    /// Its class index and tenant key.
    pub(super) who: (usize, usize),
    pub(super) handle: Option<Handle>,
    pub(super) granted: oneshot::Receiver<Verdict>,
    /// Its model, told to the other replicas while it waits.
    pub(super) _want: wanted::Want<'a>,
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

/// Waits for a slot, in `request_filter`, for a request that uses one.
/// `Ok(None)`: go on, the slot is in `held`; `Ok(Some(refusal))`: the
/// request is refused (the caller records and answers it); `Err`: the
/// client hung up while queued. Whichever way it ends, `held` says how
/// long the request waited.
pub async fn wait(
    session: &mut Session,
    asking: Asking<'_>,
    held: &mut Option<Box<Held>>,
    admission: &Arc<Admission>,
) -> Result<Option<Refusal>> {
    if !admission.enabled() || session.req_header().method != http::Method::POST {
        return Ok(None);
    }
    let class = match admission.class_of(session.req_header(), asking.tenant) {
        Ok(c) => c,
        Err(value) => {
            let header = admission.config.priority_header.as_deref().unwrap_or("");
            return Ok(Some(invalid_priority(header, &value)));
        }
    };
    let ci = class as usize;
    let rules = admission
        .config
        .classes
        .get(ci)
        .copied()
        .unwrap_or_default();
    let arrived = asking.received;
    let weight = admission.tenants.get(asking.tenant).map_or(1, |t| t.weight);
    let h = held.insert(Box::new(Held::new(class, &asking, weight)));
    let who = (ci, h.who.0);
    let now = admission.with(|s| {
        admission.refresh(s);
        s.admit_now(ci, who.1)
    });
    if now.unwrap_or(true) {
        h.wait = Some(arrived.elapsed());
        h.ticket = Some(Ticket::new(admission, who));
        return Ok(None);
    }
    h.waited = true;
    h.queued_now = true;
    let watch = watchable(session).await?;
    let (tx, rx) = oneshot::channel();
    let arrival = Arrival {
        class: ci,
        tenant: who.1,
        weight,
        at: arrived,
    };
    let handle = match admission.with(|s| s.enqueue(arrival, tx)) {
        Some(Ok(h)) => h,
        Some(Err((refusal, _))) => {
            return Ok(Some(refused(h, refusal.into(), rules.max_depth)));
        }
        None => return Ok(Some(refused(h, Refused::Full, rules.max_depth))),
    };
    // With shared slots, the other replicas learn at once that a request
    // waits here.
    let want = admission.wanted.hold(ci, asking.model);
    admission.announce(ci, true);
    admission.preempt_for(ci, asking.model);
    let waiting = Waiting {
        admission,
        who,
        handle: Some(handle),
        granted: rx,
        _want: want,
    };
    let deadline = rules
        .max_wait
        .map(|w| tokio::time::Instant::from_std(arrived + w));
    let verdict = until_verdict(session, waiting, deadline, watch, asking.model).await;
    match verdict {
        Ok(Some(Verdict::Granted)) => {}
        Err(e) => {
            h.left();
            return Err(e);
        }
        Ok(Some(Verdict::Displaced)) => {
            h.left();
            return Ok(Some(refused(h, Refused::Full, rules.max_depth)));
        }
        Ok(None) => {
            h.left();
            return Ok(Some(refused(h, Refused::Timeout, None)));
        }
    }
    h.queued_now = false;
    h.wait = Some(arrived.elapsed());
    h.ticket = Some(Ticket::new(admission, who));
    Ok(None)
}

/// Whether the client's socket can be watched for a hang-up while the
/// request waits: its body read first (within Pingora's replay buffer).
/// Only when nothing was read ahead yet (routing reads ahead in a fleet):
/// a second read could outgrow the replay buffer, and the start of the
/// body would be lost. A body still unread is forwarded from the socket.
async fn watchable(session: &mut Session) -> Result<bool> {
    let unread = session
        .as_ref()
        .get_retry_buffer()
        .is_none_or(|b| b.is_empty());
    Ok(!session
        .req_header()
        .headers
        .contains_key(http::header::EXPECT)
        && (session.is_body_done()
            || (unread && {
                let _ = replay::read_ahead(session, replay::LIMIT).await?;
                session.is_body_done()
            })))
}

/// The waiting loop of a queued request: its verdict, or `None` when its
/// class's `deadline` passed first; `Err` when its client hung up (watched
/// only when `watch`). Every [`REFRESH`] the fleet's capacity is read again
/// and, with no slot free, an answer of a less urgent class may be told to
/// pause for it (`model`: what it names).
async fn until_verdict(
    session: &mut Session,
    mut waiting: Waiting<'_>,
    deadline: Option<tokio::time::Instant>,
    watch: bool,
    model: Option<&str>,
) -> Result<Option<Verdict>> {
    let admission = waiting.admission;
    let class = waiting.who.0;
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let verdict = loop {
        tokio::select! {
            biased;
            r = &mut waiting.granted => break r.ok(),
            () = sleep_until(deadline) => {
                let handle = waiting.handle.take();
                let removed = handle.and_then(|h| admission.with(|s| s.remove(h)).flatten());
                // Dispatched (or displaced) at the last moment: that stands.
                break match removed {
                    Some(_) => None,
                    None => waiting.granted.try_recv().ok(),
                };
            }
            r = session.as_downstream_mut().read_body_or_idle(true), if watch => {
                if let Err(e) = r {
                    drop(waiting);
                    return Err(e.into_down());
                }
            }
            _ = tick.tick() => {
                admission.with(|s| {
                    admission.refresh(s);
                    admission.oldest_waits(s, Instant::now());
                });
                admission.preempt_for(class, model);
            }
        }
    };
    waiting.handle = None;
    Ok(verdict)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
