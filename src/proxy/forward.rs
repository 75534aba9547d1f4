//! The one forwarding loop of every request: attempts until the client
//! has its whole answer. Each attempt connects to the upstream the routing
//! picks ([`Steps::connect`], which fails over on a refused connect),
//! sends ([`send`]), reads the head, and moves the body chunk by chunk
//! ([`stream`]: observed, written to the client before the next is read,
//! the client watched for a hang-up and the upstream for a stall). How it
//! ended ([`attempt::Ending`]) decides the next ([`resume`]):
//!
//! - the client's request, as it came ([`Attempt::Request`]);
//! - the same request sent again whole to another member, when its
//!   upstream died before the answer's head (nothing reached the client);
//! - the rest of a cut or moved answer ([`Attempt::Rest`]): the target
//!   renders the conversation and generates the rest with `/completion`,
//!   and its events are rewritten into the client's stream
//!   ([`llamatap_wire::continuation::Rewriter`]), so the client sees one stream.
//!
//! Pingora accepts and parses the request, runs `request_filter` (guard,
//! tenant limits, routing, the queue, then this loop) and, after it,
//! `fail_to_proxy` and `logging`; it reads and writes the client's HTTP.
//! The upstream's HTTP/1 is [`crate::upstream::client`]'s, the connection
//! [`crate::upstream::spare`]'s connector. What shapes the request and
//! observes the response are the request's [`Steps`]; this loop calls no
//! hook and nothing here calls back into the proxy.
//!
//! What this path leaves out is Pingora's HTTP/1 proxy loop: two halves
//! joined by a channel, a batch vector per chunk, and a second poll of the
//! request's task for every chunk (the half that read it wakes the half
//! that writes it), which on one worker thread queues each chunk behind the
//! whole run queue.
//!
//! Upstream connections are never pooled (every request asks llama-server
//! for `Connection: close`, see [`super::request_head`]). `Expect:
//! 100-continue` is answered here (the upstream is not asked); an
//! `Upgrade` is not offered upstream (llama-server has no such route), so
//! the request is answered as a plain one.

mod attempt;
mod checks;
mod drain;
mod record;
mod resume;
mod send;
mod stream;

use bytes::Bytes;
use http::header;
use pingora::proxy::Session;
use pingora::{ErrorSource, ErrorType, Result};

use super::context::RequestCtx;
use super::{downstream, progress, Steps};
use attempt::{Attempt, Ending};
use llamatap_wire::continuation::{Rest, Rewriter};

/// Largest native event read from a continuation.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Forwards the request and its answer; `Ok` once the answer is complete.
/// An error goes to `fail_to_proxy` and `logging`.
pub async fn run(steps: &Steps, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    downstream::answer_continue(session, ctx).await?;
    drive(steps, session, ctx, Attempt::Request(None)).await
}

/// The rest of an answer whose copy the client was just sent (a replay
/// whose member died or drained, [`super::copied`]): the copy was cut
/// for `reason` (`cause`: what the client hears if it cannot go on), and
/// the same loop goes on from there. `ctx` holds the copy's request and
/// an observer that has read the whole copy.
pub async fn rest_of_copy(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    reason: llamatap_policy::answer::Reason,
    cause: Box<pingora::Error>,
) -> Result<()> {
    let next = Box::pin(resume::next(
        steps,
        session,
        ctx,
        Ending::Cut(reason, cause),
    ))
    .await;
    match next {
        Ok(Some(a)) => drive(steps, session, ctx, a).await,
        Ok(None) => Ok(()),
        Err(e) => {
            record::close(ctx, Some(&e));
            Err(e)
        }
    }
}

/// Attempts from `attempt` on, until the answer is whole or an error ends it.
async fn drive(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    mut attempt: Attempt,
) -> Result<()> {
    loop {
        let ending = match attempt {
            Attempt::Request(replay) => request(steps, session, ctx, replay).await,
            Attempt::Rest(rest) => Box::pin(rest_of(steps, session, ctx, rest)).await,
        };
        let next = match ending {
            Ok(ending) => Box::pin(resume::next(steps, session, ctx, ending)).await,
            Err(e) => Err(e),
        };
        match next {
            Ok(Some(a)) => attempt = a,
            Ok(None) => return Ok(()),
            Err(e) => {
                record::close(ctx, Some(&e));
                return Err(e);
            }
        }
    }
}

/// An attempt with the client's request: connect, send, the head to the
/// client, then the body.
async fn request(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    replay: Option<Bytes>,
) -> Result<Ending> {
    // The connect and the request are boxed: their futures are large and
    // over before the answer, which is what a held stream keeps.
    let (mut up, peer) = Box::pin(steps.connect(session, ctx)).await?;
    if session.req_header().method == http::Method::HEAD {
        up.head_request();
    }
    Box::pin(send::request(
        steps,
        session,
        &mut up,
        &peer,
        ctx,
        replay.as_ref(),
    ))
    .await?;
    drop(replay);
    let mut header = match send::read_header(session, &mut up, &peer).await {
        Ok(h) => h,
        // Its connection closes first (dropped with this attempt).
        Err(e) if e.esource() == &ErrorSource::Upstream => return Ok(Ending::BeforeHead(e)),
        Err(e) => return Err(e),
    };
    steps.upstream_response(&header, ctx);
    progress::watch(&steps.predictor, ctx, &mut header);
    // An HTTP/1.0-style answer (neither length nor chunks) is sent chunked,
    // so that the client connection can be kept, as Pingora does.
    let bodiless = matches!(header.status.as_u16(), 204 | 304);
    if !bodiless
        && !up.is_body_done()
        && !header.headers.contains_key(header::TRANSFER_ENCODING)
        && !header.headers.contains_key(header::CONTENT_LENGTH)
    {
        header.set_version(http::Version::HTTP_11);
        header.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    steps.downstream_response(&mut header, ctx)?;
    downstream::head(session, header, steps.config.client_write_timeout).await?;
    stream::body(steps, session, ctx, &mut up, &peer, None).await
}

/// An attempt at the rest of a cut answer: a target, its `/completion`
/// (after `/apply-template` when the plan needs it) while the client is
/// watched, then its events rewritten into the client's stream.
async fn rest_of(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    rest: Box<Rest>,
) -> Result<Ending> {
    let (mut up, peer) = match steps.connect(session, ctx).await {
        Ok(c) => c,
        Err(e) if e.esource() == &ErrorSource::Downstream => return Err(e),
        Err(e) if e.etype() == &ErrorType::ConnectNoRoute => {
            return Ok(Ending::Failed("no_upstream"))
        }
        Err(_) => return Ok(Ending::Failed("target_failed")),
    };
    record::targeted(steps, ctx);
    progress::forget(ctx);
    // The target renders and prefills while the client is watched: a
    // hang-up drops the target's connections at once (it cancels).
    let sent = {
        let ctx: &RequestCtx = ctx;
        let send = send::rest(steps, ctx, &mut up, &peer, &rest);
        tokio::select! {
            biased;
            r = send => r,
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                let e = r.err().unwrap_or_else(|| pingora::Error::new(ErrorType::ConnectionClosed));
                return Err(e.into_down());
            }
        }
    };
    if let Err(why) = sent {
        return Ok(Ending::Failed(why));
    }
    match send::read_header(session, &mut up, &peer).await {
        Ok(h) if h.status.as_u16() == 200 => {}
        Ok(_) => return Ok(Ending::Failed("target_refused")),
        Err(e) if e.esource() == &ErrorSource::Downstream => return Err(e),
        Err(_) => return Ok(Ending::Failed("target_failed")),
    }
    let rewrite = Box::new(Rewriter::new(rest.target.clone(), MAX_EVENT_BYTES));
    drop(rest);
    stream::body(steps, session, ctx, &mut up, &peer, Some(rewrite)).await
}

#[cfg(test)]
mod tests;
