//! A paused answer's slot: given back at once
//! ([`Held::give_back`](super::Held::give_back), the request waiting for
//! it takes it), then waited for again at the head of its
//! class's queue ([`requeue`]: never refused, no deadline, its client's
//! socket watched for a hang-up).
//!
//! Deliberately not here: the first wait ([`super::wait`](mod@super::wait))
//! and telling an answer to pause ([`super::preempt`]).

use std::sync::Arc;

use pingora::proxy::Session;
use pingora::Result;
use tokio::sync::oneshot;

use super::wait::Waiting;
use super::{Admission, Held, Ticket, Verdict, REFRESH};
use llamatap_policy::queue::Arrival;

/// A paused answer waits again, at the head of its class's queue, for a
/// slot (no deadline: it held one); `Err` when its client hung up.
pub async fn requeue(
    session: &mut Session,
    held: &mut Held,
    admission: &Arc<Admission>,
) -> Result<()> {
    let ci = held.class as usize;
    let (tenant, weight) = held.who;
    let arrival = Arrival {
        class: ci,
        tenant,
        weight,
        at: held.received,
    };
    let (tx, rx) = oneshot::channel();
    let Some(Ok(handle)) = admission.with(|s| s.requeue(arrival, tx)) else {
        return Err(pingora::Error::explain(
            pingora::ErrorType::InternalError,
            "the admission queue is unavailable",
        ));
    };
    held.queued_now = true;
    let want = admission.wanted.hold(ci, held.model.as_deref());
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
    held.queued_now = false;
    held.ticket = Some(Ticket::new(admission, (ci, tenant)));
    Ok(())
}
