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
    // A copy cut inside an event is served, and continued, from its last
    // whole event, unless the replay's `from` is past it.
    let bytes = match whole_events(&copy.bytes) {
        n if n >= from => copy.bytes.get(..n).unwrap_or(&[]),
        _ => copy.bytes.as_slice(),
    };
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
        c.seen = bytes.to_vec();
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
    bodies::watch_copy(ctx, bytes, &steps.config, &steps.telemetry);
    let timeout = steps.config.client_write_timeout;
    let mut resp = ResponseHeader::build(200, Some(5))?;
    resp.insert_header("Content-Type", "text/event-stream")?;
    resp.insert_header("Transfer-Encoding", "chunked")?;
    steps.downstream_response(&mut resp, ctx)?;
    downstream::head(session, Box::new(resp), timeout).await?;
    let rest = bytes.get(from..).unwrap_or(&[]);
    ctx.seen.response_bytes = rest.len() as u64;
    if !rest.is_empty() {
        let wrote = downstream::body(session, Bytes::copy_from_slice(rest), false, timeout);
        wrote.await?;
    }
    let cause = Error::explain(ErrorType::ConnectionClosed, lost.to_string()).into_up();
    forward::rest_of_copy(steps, session, ctx, reason, cause).await
}

/// The length of `bytes` up to the end of its last whole event.
fn whole_events(bytes: &[u8]) -> usize {
    memchr::memmem::rfind(bytes, b"\n\n").map_or(0, |i| i + 2)
}

#[cfg(test)]
mod tests {
    use super::whole_events;

    #[test]
    fn a_copy_cut_inside_an_event_goes_on_from_its_last_whole_event() {
        let copy = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: {\"c\"";
        assert_eq!(whole_events(copy), 30);
        assert_eq!(
            &copy[..whole_events(copy)],
            b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n"
        );
        assert_eq!(whole_events(&copy[..30]), 30);
        assert_eq!(whole_events(b"data: {"), 0);
        for cut in 0..copy.len() {
            let n = whole_events(&copy[..cut]);
            assert!(
                n <= cut && (n == 0 || copy[..n].ends_with(b"\n\n")),
                "{cut}"
            );
        }
    }
}
