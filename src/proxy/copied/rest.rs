//! The rest of a cut copy, for the replay that finds it: the copy's bytes
//! from the replay's `from`, then the rest of the answer generated on
//! another member by the forwarding loop's continuation
//! ([`super::super::forward::rest_of_copy`]), so that the replaying
//! client gets one whole answer (one id, one finish, `[DONE]`).
//!
//! What the client heard is rebuilt from the whole copy: an observer
//! keeping its transcript reads it ([`super::super::bodies::watch_copy`]),
//! and the copy's kept request is the request continued. The claim keeps
//! the copy's bytes and the rest's, which replace the cut copy when the
//! replay ends ([`crate::conversations::Conversations::finish`]).
//!
//! Deliberately not here: deciding whether the rest may be taken (the
//! caller, [`super`]), the plan and the attempt (the loop's `resume`).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::super::context::{RequestCtx, Resume};
use super::super::{bodies, downstream, forward, Steps};
use llamatap_policy::answer::Reason;
use llamatap_policy::conversation::copies::{Copy, Kept};
use llamatap_wire::request;

/// Serves `copy` from `from`, then its rest from another member; `lost`:
/// why its member cannot (the client's error if the rest cannot come).
pub async fn serve(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    copy: &Copy,
    kept: &Kept,
    from: usize,
    lost: &str,
) -> Result<()> {
    ctx.asked.route = kept.route;
    ctx.asked.request = request::inspect_body(&kept.body);
    ctx.resume = Some(Box::new(Resume {
        body: Bytes::from(kept.body.clone()),
        ..Resume::default()
    }));
    if let Some(c) = ctx.conversation.as_deref_mut() {
        c.from_copy = true;
        c.rest = true;
        c.holder = Some(copy.member.clone());
        c.seen = copy.bytes.to_vec();
    }
    // Its member, if still in the fleet, is not chosen for the rest.
    let member = steps
        .fleet
        .members()
        .into_iter()
        .find(|m| m.upstream.name == copy.member && !m.gone());
    let reason = match &member {
        Some(m) if !m.draining() => Reason::UpstreamDied,
        _ => Reason::Drained,
    };
    if let Some(m) = member {
        ctx.attempt.routed.tried.push(m.id);
    }
    ctx.seen.status = Some(200);
    bodies::watch_copy(ctx, &copy.bytes, &steps.config, &steps.telemetry);
    let timeout = steps.config.client_write_timeout;
    let mut resp = ResponseHeader::build(200, Some(5))?;
    resp.insert_header("Content-Type", "text/event-stream")?;
    resp.insert_header("Transfer-Encoding", "chunked")?;
    steps.downstream_response(&mut resp, ctx)?;
    downstream::head(session, Box::new(resp), timeout).await?;
    let rest = copy.bytes.get(from..).unwrap_or(&[]);
    ctx.seen.response_bytes = rest.len() as u64;
    if !rest.is_empty() {
        let wrote = downstream::body(session, Bytes::copy_from_slice(rest), false, timeout);
        wrote.await?;
    }
    let cause = Error::explain(ErrorType::ConnectionClosed, lost.to_string()).into_up();
    forward::rest_of_copy(steps, session, ctx, reason, cause).await
}
