//! The forwarding loop of every request: one task connects to the upstream
//! the routing picks, sends the request, reads each upstream chunk, hands it
//! to the observer and writes it to the client before it reads the next,
//! and the same `select` watches the client socket for a hang-up and the
//! upstream for a stall.
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
//! for `Connection: close`, see [`super::request_head`]), and a request is
//! never sent again once its connection is made: only a failed connect
//! fails over to another upstream. `Expect: 100-continue` is answered here
//! (the upstream is not asked); an `Upgrade` is not offered upstream
//! (llama-server has no such route), so the request is answered as a plain
//! one.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};

use tokio::sync::futures::Notified;

use super::context::RequestCtx;
use super::moves::{Registration, Signal};
use super::{continuation, downstream, Steps};
use crate::telemetry::continuation::Reason;
use crate::upstream::client::Exchange;

/// Forwards the request and its answer; `Ok` once the answer is complete.
/// An error goes to `fail_to_proxy` and `logging`.
pub async fn run(steps: &Steps, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    answer_continue(session, ctx).await?;
    // The body again, for an attempt after an upstream that died before
    // its answer's head (nothing reached the client).
    let mut replay: Option<Bytes> = None;
    let (mut up, peer, header) = loop {
        // The connect and the request are boxed: their futures are large and
        // over before the answer, which is what a held stream keeps.
        let (mut up, peer) = Box::pin(steps.connect(session, ctx)).await?;
        if session.req_header().method == http::Method::HEAD {
            up.head_request();
        }
        Box::pin(send_request(
            steps,
            session,
            &mut up,
            &peer,
            ctx,
            replay.as_ref(),
        ))
        .await?;
        match read_header(session, &mut up, &peer).await {
            Ok(header) => break (up, peer, header),
            Err(e) => match continuation::before_head(steps, ctx, &e) {
                // Its connection closes first; the request goes to another.
                Some(body) => replay = Some(body),
                None => return Err(e),
            },
        }
    };
    drop(replay);
    let Some((reason, cause)) = respond(steps, session, &mut up, header, &peer, ctx).await? else {
        return Ok(());
    };
    // The answer was cut, or told to move: its upstream connection closes
    // first (a llama-server still generating cancels), then it continues.
    // A continuation's future is boxed: it is large, and every held
    // stream's future would otherwise carry its size.
    drop(up);
    Box::pin(continuation::resume(steps, session, ctx, reason, cause)).await
}

/// An answer cut mid-stream, why, and what cut it: the forwarding loop
/// hands it to [`continuation::resume`].
type Cut = Option<(Reason, Box<Error>)>;

/// Answers `Expect: 100-continue` (once) when the client still has a body
/// to send: a client that waits for the `100` before sending it would
/// otherwise stall, and the upstream that could send one is not chosen yet
/// (the upstream is not asked again, see [`super::request_head`]).
pub(super) async fn answer_continue(session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    let expects = session
        .req_header()
        .headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
    if !expects || ctx.continue_sent || session.as_mut().is_body_empty() {
        return Ok(());
    }
    session
        .as_downstream_mut()
        .write_continue_response()
        .await
        .map_err(|e| e.into_down())?;
    ctx.continue_sent = true;
    Ok(())
}

/// Writes the request head (shaped by [`Steps::upstream_request`]) and the
/// body (each chunk through [`Steps::request_chunk`], which enforces the body
/// limit), or `replay`, the whole body read by an earlier attempt.
/// The head goes out with the first body chunk, a body read whole with it
/// in one write.
async fn send_request(
    steps: &Steps,
    session: &mut Session,
    up: &mut Exchange,
    peer: &HttpPeer,
    ctx: &mut RequestCtx,
    replay: Option<&Bytes>,
) -> Result<()> {
    let mut req = session.req_header().clone();
    req.set_version(http::Version::HTTP_11);
    strip_hop_by_hop(&mut req);
    steps.upstream_request(&mut req, ctx)?;
    if let Some(body) = replay {
        // The whole body is known: its length frames it.
        req.remove_header(&header::TRANSFER_ENCODING);
        req.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    } else if !session.as_mut().is_body_empty()
        && !req.headers.contains_key(header::CONTENT_LENGTH)
        && !req.headers.contains_key(header::TRANSFER_ENCODING)
    {
        req.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    let chunked = req.headers.contains_key(header::TRANSFER_ENCODING);
    let mut out = http_req_header_to_wire(&req).ok_or_else(|| {
        Error::explain(ErrorType::InvalidHTTPHeader, "invalid request target").into_down()
    })?;
    drop(req);
    let timeout = peer.options.write_timeout;
    if let Some(body) = replay {
        ctx.request_bytes = body.len() as u64;
        out.put_slice(body);
        return up.write(&out, timeout).await;
    }
    // The part of the body read before routing (fleets only) is in Pingora's
    // replay buffer; the rest is read here. A buffer that outgrew its limit
    // has lost the body's start: refused, never forwarded without it.
    if session.as_ref().retry_buffer_truncated() {
        return Error::e_explain(
            ErrorType::InternalError,
            "the request body read ahead outgrew what can be replayed",
        );
    }
    let mut pending = session
        .as_ref()
        .get_retry_buffer()
        .filter(|b| !b.is_empty());
    loop {
        let chunk = match pending.take() {
            Some(b) => Some(b),
            None if session.as_mut().is_body_done() => None,
            None => session
                .as_mut()
                .read_request_body()
                .await
                .map_err(|e| e.into_down())?,
        };
        let end = chunk.is_none() || session.as_mut().is_body_done();
        steps.request_chunk(ctx, chunk.as_ref(), end)?;
        if let Some(b) = chunk.filter(|b| !b.is_empty()) {
            if chunked {
                out.put_slice(format!("{:x}\r\n", b.len()).as_bytes());
                out.put_slice(&b);
                out.put_slice(b"\r\n");
            } else if out.is_empty() {
                // Past the first chunk a body goes out as it is, uncopied.
                up.write(&b, timeout).await?;
            } else {
                out.put_slice(&b);
            }
        }
        if end && chunked {
            out.put_slice(b"0\r\n\r\n");
        }
        if !out.is_empty() {
            up.write(&out, timeout).await?;
            out.clear();
        }
        if end {
            return Ok(());
        }
    }
}

/// Reads the final response head (informational ones are skipped), while
/// watching the client: a hang-up now drops the upstream connection at once.
async fn read_header(
    session: &mut Session,
    up: &mut Exchange,
    peer: &HttpPeer,
) -> Result<Box<ResponseHeader>> {
    let timeout = peer.options.read_timeout;
    loop {
        let header = tokio::select! {
            biased;
            r = up.read_header(timeout) => r?,
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                r.map_err(|e| e.into_down())?;
                continue;
            }
        };
        if !header.status.is_informational() {
            return Ok(header);
        }
    }
}

/// Sends the head downstream and moves the body chunk by chunk; `Some`
/// when a continuable answer was cut or told to move.
async fn respond(
    steps: &Steps,
    session: &mut Session,
    up: &mut Exchange,
    mut header: Box<ResponseHeader>,
    peer: &HttpPeer,
    ctx: &mut RequestCtx,
) -> Result<Cut> {
    let mut end = up.is_body_done();
    let bodiless_answer = end;
    steps.upstream_response(&header, ctx);
    // An HTTP/1.0-style answer (neither length nor chunks) is sent chunked,
    // so that the client connection can be kept, as Pingora does.
    let bodiless = matches!(header.status.as_u16(), 204 | 304);
    if !bodiless
        && !end
        && !header.headers.contains_key(header::TRANSFER_ENCODING)
        && !header.headers.contains_key(header::CONTENT_LENGTH)
    {
        header.set_version(http::Version::HTTP_11);
        header.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    steps.downstream_response(&mut header, ctx)?;
    let client_timeout = steps.config.client_write_timeout;
    downstream::head(session, header, client_timeout).await?;

    // The read timeout restarts with every chunk; the timer is moved only
    // when it fires, not per chunk (and once when a continuable answer's
    // first token makes `continuation.stall_ms` its limit: only while
    // another upstream could take the answer, since a stall cut with
    // nowhere to go would only lose it).
    // Whether another upstream could take the answer is asked at most once
    // per `stall_ms` (it reads the fleet's members), not per chunk.
    // A continuable answer that could be moved (a fleet's members drain; a
    // preemptible class's answers pause) is registered once it has its
    // first token, and listens for the word to move.
    let armed = continuation::armed(steps, ctx) && ctx.observer.is_some();
    let signal = (armed && continuation::movable(steps, ctx)).then(|| Arc::new(Signal::default()));
    let mut told = signal.as_deref().map(|s| Box::pin(s.told()));
    let mut registration: Option<Registration> = None;
    let mut timeout = peer.options.read_timeout.unwrap_or(Duration::MAX);
    let mut last = Instant::now();
    let mut next_ask = last;
    let stall = tokio::time::sleep_until(deadline(last, timeout));
    tokio::pin!(stall);
    while !end {
        let chunk = tokio::select! {
            biased;
            r = up.read_body() => match r {
                Ok(chunk) => {
                    end = chunk.is_none() || up.is_body_done();
                    chunk
                }
                Err(e) if armed => return Ok(Some((Reason::UpstreamDied, e))),
                Err(e) => return Err(e),
            },
            () = told_to_move(&mut told) => {
                let reason = signal.as_deref().and_then(Signal::reason);
                match (reason, continuation::can_move(ctx)) {
                    (Some(reason), true) => {
                        if reason == Reason::Preempted {
                            // The slot frees now, while the answer is still
                            // counted among those pausing: the waiting
                            // request takes it, and no second answer pauses
                            // for it.
                            crate::admission::give_back(ctx);
                        }
                        return Ok(Some((reason, moved(reason))));
                    }
                    _ => {
                        if let Some(r) = &registration {
                            r.decline();
                        }
                        told = None;
                        continue;
                    }
                }
            }
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                r.map_err(|e| e.into_down())?;
                continue;
            }
            () = &mut stall => {
                let now = Instant::now();
                if last.checked_add(timeout).is_some_and(|d| now >= d) {
                    // A silence of `stall_ms` on a member that still answers
                    // its `/health` is a member busy with another request
                    // (a long prefill holds every slot's next token), not a
                    // stall: the answer waits on, up to the read timeout.
                    let stall_ms = steps.config.continuation.stall;
                    let read_limit = peer.options.read_timeout.unwrap_or(Duration::MAX);
                    if armed
                        && timeout == stall_ms
                        && last.checked_add(read_limit).is_some_and(|d| now < d)
                        // Boxed: the probe's future is large, and every
                        // held stream's future would carry its size.
                        && Box::pin(continuation::member_alive(steps, ctx)).await
                    {
                        let _in = ctx.log_span.enter();
                        tracing::debug!("silent for stall_ms on a member that answers /health: waiting on");
                        stall.as_mut().reset(deadline(Instant::now(), stall_ms));
                        continue;
                    }
                    let e = Error::explain(
                        ErrorType::ReadTimedout,
                        "reading the response body (timeout)",
                    )
                    .into_up();
                    if armed {
                        return Ok(Some((Reason::Stalled, e)));
                    }
                    return Err(e);
                }
                stall.as_mut().reset(deadline(last, timeout));
                continue;
            }
        };
        last = Instant::now();
        // A body that ends by its framing (the terminal chunk, its
        // `Content-Length`, or the close of a body delimited by it) is the
        // end of the answer, whatever its last event says: a client can
        // trim that event (`response_fields`), or make it larger than the
        // observer reads. Only a read error (a reset, a framing error, a
        // close before the framing's end) is a cut, above.
        steps.response_chunk(ctx, chunk.as_ref(), end);
        if let Some(b) = chunk.filter(|b| !b.is_empty()) {
            downstream::body(session, b, end, client_timeout).await?;
            ctx.terminal_sent |= ctx.observer.as_ref().is_some_and(|o| o.facts().done);
        } else if end {
            downstream::body(session, Bytes::new(), true, client_timeout).await?;
        }
        if registration.is_none() {
            if let Some(s) = signal.as_ref().filter(|_| has_tokens(ctx)) {
                registration = Some(continuation::register(steps, ctx, Arc::clone(s)));
            }
        }
        let stall_ms = steps.config.continuation.stall;
        if armed && timeout != stall_ms && last >= next_ask && has_tokens(ctx) {
            if continuation::elsewhere(steps, ctx) {
                timeout = stall_ms;
                stall.as_mut().reset(deadline(last, timeout));
            } else {
                next_ask = last + stall_ms;
            }
        }
    }
    if bodiless_answer {
        // The loop never ran: end the body here.
        steps.response_chunk(ctx, None, true);
        downstream::body(session, Bytes::new(), true, client_timeout).await?;
    }
    Ok(None)
}

/// Resolves when the answer is told to move; never without a signal.
async fn told_to_move(told: &mut Option<Pin<Box<Notified<'_>>>>) {
    match told {
        Some(n) => n.as_mut().await,
        None => std::future::pending().await,
    }
}

/// What ends an answer's exchange with its upstream when it is told to
/// move (the client sees it only if the answer cannot go on).
fn moved(reason: Reason) -> Box<Error> {
    let why = match reason {
        Reason::Preempted => "the answer's slot was taken by a more urgent request",
        _ => "the answer's upstream drained",
    };
    Error::explain(ErrorType::ConnectionClosed, why).into_up()
}

/// The client has had a token of the answer.
fn has_tokens(ctx: &RequestCtx) -> bool {
    ctx.observer
        .as_ref()
        .is_some_and(|o| o.facts().token_events > 0)
}

/// `from + timeout` as a Tokio instant, far in the future when it overflows.
fn deadline(from: Instant, timeout: Duration) -> tokio::time::Instant {
    let far = Duration::from_secs(86_400 * 365);
    tokio::time::Instant::from_std(from + timeout.min(far))
}

/// Removes the hop-by-hop headers and those the client's `Connection` names,
/// as Pingora's default request policy does.
fn strip_hop_by_hop(req: &mut RequestHeader) {
    let nominated: Vec<String> = req
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for name in nominated {
        req.remove_header(name.as_str());
    }
    for name in [
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "connection",
        "upgrade",
        "http2-settings",
    ] {
        req.remove_header(name);
    }
}

#[cfg(test)]
mod tests;
