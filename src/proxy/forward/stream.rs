//! The answer's body, for every attempt alike: each upstream chunk is read,
//! handed to the observer and written to the client before the next is
//! read (a continuation's chunks rewritten into the client's format
//! first), while the same `select` watches the client for a hang-up, the
//! upstream for a stall, and the answer's signal for the word to move.
//!
//! An attempt ends as an [`Ending`]: the client has the whole answer, or
//! the answer was cut (a reset, a stall, a move) with a typed cause. What
//! happens next is `resume`'s.
//!
//! Deliberately not here: sending the request (`send`), deciding what a
//! cut leads to (`resume`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};
use tokio::sync::futures::Notified;

use super::super::context::RequestCtx;
use super::super::continuable;
use super::super::moves::{Registration, Signal};
use super::super::{downstream, predict, progress, routing, Steps};
use super::attempt::Ending;
use super::{checks, drain, record};
use crate::upstream::client::Exchange;
use llamatap_policy::answer::Reason;
use llamatap_wire::continuation::Rewriter;

/// Moves the answer's body from `up` to the client; `rewrite` turns a
/// continuation's native events into the client's stream. An answer that
/// can be continued ends in [`Ending::Cut`] when cut; any other cut is an
/// error.
pub async fn body(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    up: &mut Exchange,
    peer: &HttpPeer,
    mut rewrite: Option<Box<Rewriter>>,
) -> Result<Ending> {
    let client_timeout = steps.config.client_write_timeout;
    let mut end = up.is_body_done();
    if end {
        if rewrite.is_some() {
            return Ok(Ending::Cut(Reason::UpstreamDied, ended()));
        }
        // A bodiless answer: its end is all the client gets.
        upstream_done(steps, ctx);
        steps.response_chunk(ctx, None, true);
        downstream::body(session, Bytes::new(), true, client_timeout).await?;
        return Ok(Ending::Whole);
    }
    // The read timeout restarts with every chunk; the timer is moved only
    // when it fires, not per chunk (and once when a continuable answer's
    // first token makes `continuation.stall_ms` its limit: only while
    // another upstream could take the answer, since a stall cut with
    // nowhere to go would only lose it).
    // Whether another upstream could take the answer is asked at most once
    // per `stall_ms` (it reads the fleet's members), not per chunk.
    // A continuable answer that could be moved (a fleet's members drain; a
    // preemptible class's answers pause) is registered once it has its
    // first token, and listens for the word to move. A continuation's cuts
    // always go to `resume`, which records them.
    let continuable = checks::armed(steps, ctx) && ctx.seen.observer.is_some();
    let armed = continuable || rewrite.is_some();
    let signal = (continuable && checks::movable(steps, ctx)).then(|| Arc::new(Signal::default()));
    let mut told = signal.as_deref().map(|s| Box::pin(s.told()));
    let mut registration: Option<Registration> = None;
    let read_limit = peer.options.read_timeout.unwrap_or(Duration::MAX);
    let stall_ms = steps.config.continuation.stall;
    let mut timeout = read_limit;
    let mut last = Instant::now();
    let mut next_ask = last;
    // This attempt has sent the client a token.
    let mut tokens = rewrite.is_none() && has_tokens(ctx);
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
                Err(e) if armed => return Ok(Ending::Cut(Reason::UpstreamDied, e)),
                Err(e) => return Err(e),
            },
            () = told_to_move(&mut told) => {
                let reason = signal.as_deref().and_then(Signal::reason);
                match (reason, continuable::can_move(ctx)) {
                    (Some(reason), true) => {
                        if reason == Reason::Preempted {
                            // The slot frees now, while the answer is still
                            // counted among those pausing: the waiting
                            // request takes it, and no second answer pauses
                            // for it.
                            if let Some(h) = ctx.admission.as_deref_mut() {
                                h.give_back();
                            }
                        }
                        return Ok(Ending::Cut(reason, moved(reason)));
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
                if let Err(e) = r {
                    // Boxed: the drain's future is large and rare, and
                    // every held stream's future would carry its size.
                    let drain = drain::after_hangup(steps, ctx, up, peer, e.into_down());
                    return Err(Box::pin(drain).await);
                }
                continue;
            }
            () = &mut stall => {
                let now = Instant::now();
                if last.checked_add(timeout).is_some_and(|d| now >= d) {
                    // A silence of `stall_ms` on a member that still answers
                    // its `/health` is a member busy with another request
                    // (a long prefill holds every slot's next token), not a
                    // stall: the answer waits on, up to the read timeout.
                    if armed
                        && timeout == stall_ms
                        && last.checked_add(read_limit).is_some_and(|d| now < d)
                        // Boxed: the probe's future is large, and every
                        // held stream's future would carry its size.
                        && Box::pin(checks::member_alive(steps, ctx)).await
                    {
                        let _in = ctx.seen.log_span.enter();
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
                        return Ok(Ending::Cut(Reason::Stalled, e));
                    }
                    return Err(e);
                }
                stall.as_mut().reset(deadline(last, timeout));
                continue;
            }
        };
        last = Instant::now();
        match rewrite.as_deref_mut() {
            // A body that ends by its framing (the terminal chunk, its
            // `Content-Length`, or the close of a body delimited by it) is
            // the end of the answer, whatever its last event says: a client
            // can trim that event (`response_fields`), or make it larger
            // than the observer reads. Only a read error (a reset, a
            // framing error, a close before the framing's end) is a cut,
            // above.
            None => {
                // Progress events the client did not ask for go before
                // anything sees the chunk: the copies, the counts and the
                // client all get the client's stream.
                let chunk = progress::filter(&steps.predictor, ctx, chunk, end);
                if end {
                    upstream_done(steps, ctx);
                }
                steps.response_chunk(ctx, chunk.as_ref(), end);
                predict::counted(ctx);
                let b = chunk.unwrap_or_default();
                if !b.is_empty() || end {
                    if let Err(e) = downstream::body(session, b, end, client_timeout).await {
                        let drain = drain::after_hangup(steps, ctx, up, peer, e);
                        return Err(Box::pin(drain).await);
                    }
                }
                ctx.seen.terminal_sent |= terminal_seen(ctx);
                if !tokens && has_tokens(ctx) {
                    tokens = true;
                    progress::first_token(&steps.predictor, ctx);
                }
            }
            // A continuation's stream is llamatap's own request: it ends
            // with its last event, and a body that ends before it was cut.
            Some(r) => {
                let mut out = Vec::new();
                let done = chunk.as_ref().is_some_and(|c| r.feed(c, &mut out));
                if done {
                    record::heard(ctx, r.counts());
                    upstream_done(steps, ctx);
                }
                if !out.is_empty() || done {
                    if !tokens {
                        tokens = true;
                        record::started(ctx);
                    }
                    let b = Bytes::from(out);
                    steps.response_chunk(ctx, Some(&b), done);
                    // The client's stream, the tokens before the cut
                    // included: its `max_tokens` is the whole answer's.
                    predict::counted(ctx);
                    downstream::body(session, b, done, client_timeout).await?;
                }
                if done {
                    ctx.seen.terminal_sent = true;
                    return Ok(Ending::Whole);
                }
                if end {
                    return Ok(Ending::Cut(Reason::UpstreamDied, ended()));
                }
            }
        }
        if registration.is_none() && tokens {
            if let Some(s) = signal.as_ref() {
                registration = Some(checks::register(steps, ctx, Arc::clone(s)));
            }
        }
        if armed && timeout != stall_ms && last >= next_ask && tokens {
            if checks::elsewhere(steps, ctx) {
                timeout = stall_ms;
                stall.as_mut().reset(deadline(last, timeout));
            } else {
                next_ask = last + stall_ms;
            }
        }
    }
    Ok(Ending::Whole)
}

/// The upstream's answer is over (its body's end read): its slot is free
/// before the client has the last bytes, so the board of answers in
/// flight, the member's load and the admission queue drop it now, not in
/// `logging`: a request the client sends on that end is not predicted,
/// routed or queued behind it. The board goes first: the queue's slot,
/// given back last, may dispatch a request at once.
fn upstream_done(steps: &Steps, ctx: &mut RequestCtx) {
    predict::landed(&steps.predictor, ctx);
    routing::answer_ended(&steps.fleet, ctx);
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

/// A continuation's upstream ended its body before its last event.
fn ended() -> Box<Error> {
    Error::explain(
        ErrorType::ConnectionClosed,
        "the continuation's upstream ended before its last event",
    )
    .into_up()
}

/// The client has had a token of the answer.
fn has_tokens(ctx: &RequestCtx) -> bool {
    ctx.seen
        .observer
        .as_ref()
        .is_some_and(|o| o.facts().token_events > 0)
}

/// The stream's terminal event went through the observer.
fn terminal_seen(ctx: &RequestCtx) -> bool {
    ctx.seen
        .stream_facts
        .as_deref()
        .or_else(|| ctx.seen.observer.as_ref().map(|o| o.facts()))
        .is_some_and(|f| f.done)
}

/// `from + timeout` as a Tokio instant, far in the future when it overflows.
fn deadline(from: Instant, timeout: Duration) -> tokio::time::Instant {
    let far = Duration::from_secs(86_400 * 365);
    tokio::time::Instant::from_std(from + timeout.min(far))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_deadline_is_far_away() {
        let now = Instant::now();
        assert!(deadline(now, Duration::MAX) > tokio::time::Instant::from_std(now));
    }
}
