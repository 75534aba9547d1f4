//! What an attempt's end leads to: the end of the request, or the next
//! attempt through the same loop. A stream whose llama-server dies, resets
//! or stalls mid-answer, whose member drains, or whose slot a more urgent
//! request takes, goes on from where its client is ([`next`]): the pure
//! plan of [`llamatap_wire::continuation`] says whether it can, ends it where it
//! is, or asks a target for the rest; an upstream that died before the
//! answer's head gets the request again, whole, on another member.
//!
//! Each continuation is opened here (the telemetry's [`Continued`], kept
//! by `record`) as its attempt is planned.
//!
//! Deliberately not here: connecting, sending and streaming (the loop's),
//! the checks the loop asks as it streams (`checks`), the JSON shapes and
//! the plan (pure, [`llamatap_wire::continuation`]), deciding which answer moves
//! ([`super::super::moves`], the queue).

use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::super::context::{Open, RequestCtx};
use super::super::continuable::plan_next;
use super::super::{admission, downstream, Steps};
use super::attempt::{Attempt, Ending};
use super::checks::{armed, elsewhere, member_name};
use super::record::{close, fail, failed, log, take_open};
use llamatap_policy::answer::{ContinuationResult, Reason};
use llamatap_telemetry::continuation::Continued;
use llamatap_wire::continuation::Next;

/// After an attempt ended as `ending`: the next attempt, or `None` when
/// the client has the whole answer. An error ends the request (the
/// client gets it, as an error event when the stream had started).
pub async fn next(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    ending: Ending,
) -> Result<Option<Attempt>> {
    match ending {
        Ending::Whole => {
            close(ctx, None);
            Ok(None)
        }
        Ending::BeforeHead(e) => match before_head(steps, ctx, &e) {
            Some(body) => Ok(Some(Attempt::Request(Some(body)))),
            None => Err(e),
        },
        Ending::Failed(why) => Err(failed(ctx, why)),
        Ending::Cut(reason, e) => {
            let cause = match take_open(ctx) {
                // A continuation cut before its first token failed: the
                // client gets the error of the cut it was to mend.
                Some(open) if !open.started => {
                    return Err(fail(
                        ctx,
                        *open,
                        ContinuationResult::Failed,
                        "target_failed",
                    ));
                }
                // It went on, then its own upstream failed: counted, and
                // the answer goes on again from where the client is now.
                Some(open) => {
                    log(ctx, open.entry);
                    e
                }
                None => e,
            };
            cut(steps, session, ctx, reason, cause).await
        }
    }
}

/// The answer was cut (`cause`) for `reason`: its upstream died or
/// stalled, its member drained, or its slot was taken (then it waits in
/// the queue first). The next attempt asks a target for the rest; `None`
/// when the client had all of it but its end, which is written here.
async fn cut(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    reason: Reason,
    cause: Box<Error>,
) -> Result<Option<Attempt>> {
    let cut = Instant::now();
    if !armed(steps, ctx) {
        // Continued as often as allowed: this cut ends the answer.
        return Err(cause);
    }
    let from = member_name(steps, ctx);
    let before = ctx
        .seen
        .observer
        .as_ref()
        .map_or(0, |o| o.facts().token_events);
    let mut open = Open {
        entry: Continued {
            at: cut.saturating_duration_since(ctx.asked.received),
            reason,
            result: ContinuationResult::Continued,
            why: None,
            from,
            to: None,
            tokens_before: before,
            reprefilled: None,
            pause: Duration::ZERO,
            cached: None,
            generated: None,
        },
        cut,
        cause,
        started: false,
    };
    if reason == Reason::Preempted {
        // Its slot went to a more urgent request: it waits at the head of
        // its class's queue (a hang-up ends it there).
        if let Some(r) = ctx.resume.as_deref_mut() {
            r.pauses += 1;
        }
        if let Some(held) = ctx.admission.as_deref_mut() {
            if let Err(e) = admission::requeue(session, held, &steps.admission).await {
                let _ = fail(ctx, open, ContinuationResult::Failed, "client_left");
                return Err(e);
            }
        }
    }
    let rest = match plan_next(ctx) {
        Next::Refused(why) => {
            return Err(fail(ctx, open, ContinuationResult::NotContinuable, why));
        }
        Next::End { tail, why } => {
            // Nothing is left to generate: the answer ends here.
            open.entry.why = Some(why);
            let b = Bytes::from(tail);
            steps.response_chunk(ctx, Some(&b), true);
            let wrote = downstream::body(session, b, true, steps.config.client_write_timeout).await;
            if let Err(e) = wrote {
                let _ = fail(ctx, open, ContinuationResult::Failed, "client_left");
                return Err(e);
            }
            ctx.seen.terminal_sent = true;
            log(ctx, open.entry);
            return Ok(None);
        }
        Next::Generate(rest) => rest,
    };
    open.entry.tokens_before = rest.target.tokens_before;
    // A paused answer may go on from the same member (the queue granted it
    // a slot); any other goes elsewhere.
    let paused = reason == Reason::Preempted;
    if !paused && !elsewhere(steps, ctx) {
        return Err(fail(
            ctx,
            open,
            ContinuationResult::Failed,
            "no_other_upstream",
        ));
    }
    if let Some(i) = ctx.attempt.member.filter(|_| !paused) {
        // The member that cut the answer is ejected (a drained one is on
        // its way out already); neither is chosen again.
        if matches!(reason, Reason::UpstreamDied | Reason::Stalled) {
            steps.fleet.eject(i);
            ctx.attempt.routed.ejected = true;
        }
        if !ctx.attempt.routed.tried.contains(&i) {
            ctx.attempt.routed.tried.push(i);
        }
    }
    if let Some(r) = ctx.resume.as_deref_mut() {
        r.open = Some(Box::new(open));
    }
    Ok(Some(Attempt::Rest(rest)))
}

/// The attempt's upstream closed or reset its connection before the
/// answer's head: nothing reached the client, so a continuable stream
/// starts again from zero tokens on another member, with the body it
/// sent. Returns that body when it does (the member is ejected and not
/// chosen again, and the continuation is counted); `None` when the error
/// stands (not an upstream's death, not continuable, continued as often as
/// allowed, its body not kept, or no other member).
fn before_head(steps: &Steps, ctx: &mut RequestCtx, e: &Error) -> Option<Bytes> {
    let died = e.esource() == &pingora::ErrorSource::Upstream
        && matches!(
            e.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError
        );
    if !died
        || ctx.asked.request.stream != Some(true)
        || !armed(steps, ctx)
        || !elsewhere(steps, ctx)
    {
        return None;
    }
    let body = ctx.resume.as_ref().map(|r| r.body.clone())?;
    if body.is_empty() {
        return None;
    }
    let from = member_name(steps, ctx);
    if let Some(i) = ctx.attempt.member {
        steps.fleet.eject(i);
        ctx.attempt.routed.ejected = true;
        if !ctx.attempt.routed.tried.contains(&i) {
            ctx.attempt.routed.tried.push(i);
        }
    }
    // The next attempt's head and first token count from the request's
    // arrival, as before.
    ctx.seen.upstream_headers = None;
    log(
        ctx,
        Continued {
            at: ctx.asked.received.elapsed(),
            reason: Reason::UpstreamDied,
            result: ContinuationResult::Continued,
            why: None,
            from,
            to: None,
            tokens_before: 0,
            reprefilled: None,
            pause: Duration::ZERO,
            cached: None,
            // The next attempt's own answer reports what it generated.
            generated: None,
        },
    );
    Some(body)
}
