//! What an attempt's end leads to: the end of the request, or the next
//! attempt through the same loop. A stream whose llama-server dies, resets
//! or stalls mid-answer, whose member drains, or whose slot a more urgent
//! request takes, goes on from where its client is ([`next`]): the pure
//! plan of [`crate::continuation`] says whether it can, ends it where it
//! is, or asks a target for the rest; an upstream that died before the
//! answer's head gets the request again, whole, on another member.
//!
//! Each continuation is recorded here (the telemetry's [`Continued`]), as
//! its attempt starts, reaches the client and ends. The checks the stream
//! loop asks while it runs are here too: whether its answer can be cut and
//! continued ([`armed`]), moved ([`movable`], [`can_move`]), or handed to
//! another member ([`elsewhere`]).
//!
//! Deliberately not here: connecting, sending and streaming (the loop's),
//! the JSON shapes and the plan (pure, [`crate::continuation`]), deciding
//! which answer moves ([`super::super::moves`], the queue).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::super::context::{Open, RequestCtx, Resume};
use super::super::moves::{Answer, Registration, Signal};
use super::super::{admission, downstream, Steps};
use super::stream::Ending;
use super::Attempt;
use crate::continuation::{self as plan, Heard, Next, Shape, TargetCounts};
use crate::fleet::watch::HEALTH_TIMEOUT;
use crate::request::Route;
use crate::telemetry::continuation::{ContinuationResult, Continued, Reason, MAX_KEPT};

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

/// The request ends with `error` (or, `None`, its answer whole): the
/// continuation under way, if any, is recorded. One that had not reached
/// the client failed (its client left, when the error is the client's).
pub fn close(ctx: &mut RequestCtx, error: Option<&Error>) {
    let Some(open) = take_open(ctx) else {
        return;
    };
    if open.started || error.is_none() {
        log(ctx, open.entry);
    } else {
        let _ = fail(ctx, *open, ContinuationResult::Failed, "client_left");
    }
}

/// The continuation's target failed before its first token (`why`): the
/// error of the cut it was to mend.
fn failed(ctx: &mut RequestCtx, why: &'static str) -> Box<Error> {
    match take_open(ctx) {
        Some(open) => fail(ctx, *open, ContinuationResult::Failed, why),
        None => Error::explain(ErrorType::InternalError, "a continuation without its cut"),
    }
}

/// Records `open` as `result` for `why`; returns its cause.
fn fail(
    ctx: &mut RequestCtx,
    open: Open,
    result: ContinuationResult,
    why: &'static str,
) -> Box<Error> {
    let Open {
        mut entry,
        cut,
        cause,
        ..
    } = open;
    entry.result = result;
    entry.why = Some(why);
    entry.pause = cut.elapsed();
    log(ctx, entry);
    cause
}

fn take_open(ctx: &mut RequestCtx) -> Option<Box<Open>> {
    ctx.resume.as_deref_mut().and_then(|r| r.open.take())
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
    let before = ctx.observer.as_ref().map_or(0, |o| o.facts().token_events);
    let mut open = Open {
        entry: Continued {
            at: cut.saturating_duration_since(ctx.received),
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
        if let Err(e) = admission::requeue(session, ctx, &steps.admission).await {
            let _ = fail(ctx, open, ContinuationResult::Failed, "client_left");
            return Err(e);
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
            ctx.terminal_sent = true;
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
    if let Some(i) = ctx.member.filter(|_| !paused) {
        // The member that cut the answer is ejected (a drained one is on
        // its way out already); neither is chosen again.
        if matches!(reason, Reason::UpstreamDied | Reason::Stalled) {
            steps.fleet.eject(i);
            ctx.routed.ejected = true;
        }
        if !ctx.routed.tried.contains(&i) {
            ctx.routed.tried.push(i);
        }
    }
    if let Some(r) = ctx.resume.as_deref_mut() {
        r.open = Some(Box::new(open));
    }
    Ok(Some(Attempt::Rest(rest)))
}

/// The pure plan for what the client has now.
fn plan_next(ctx: &RequestCtx) -> Next {
    let (Some(resume), Some(shape)) = (ctx.resume.as_deref(), shape_of(ctx.route)) else {
        return Next::Refused("not_kept");
    };
    let Some(observer) = ctx.observer.as_ref() else {
        return Next::Refused("not_observed");
    };
    let Some(t) = observer.transcript() else {
        return Next::Refused("not_observed");
    };
    let facts = observer.facts();
    let heard = Heard {
        text: &t.text,
        ids: t.ids.as_deref(),
        token_events: facts.token_events,
        first_event: t.first_event.as_deref(),
        hidden: t.hidden,
        overflow: t.overflow,
        mid_event: observer.mid_event(),
        error: facts.error.is_some(),
        skipped_events: facts.skipped_events > 0,
        finished: facts.done || !facts.finish_reasons.is_empty(),
    };
    plan::next(shape, &resume.body, &heard)
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
    if !died || ctx.request.stream != Some(true) || !armed(steps, ctx) || !elsewhere(steps, ctx) {
        return None;
    }
    let body = ctx.resume.as_ref().map(|r| r.body.clone())?;
    if body.is_empty() {
        return None;
    }
    let from = member_name(steps, ctx);
    if let Some(i) = ctx.member {
        steps.fleet.eject(i);
        ctx.routed.ejected = true;
        if !ctx.routed.tried.contains(&i) {
            ctx.routed.tried.push(i);
        }
    }
    // The next attempt's head and first token count from the request's
    // arrival, as before.
    ctx.upstream_headers = None;
    log(
        ctx,
        Continued {
            at: ctx.received.elapsed(),
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

/// The continuation's target is chosen: its name goes on the record.
pub fn targeted(steps: &Steps, ctx: &mut RequestCtx) {
    let to = member_name(steps, ctx);
    if let Some(open) = ctx
        .resume
        .as_deref_mut()
        .and_then(|r| r.open.as_deref_mut())
    {
        open.entry.to = to;
    }
}

/// The continuation's first token reached the client: the pause ends.
pub fn started(ctx: &mut RequestCtx) {
    if let Some(open) = ctx
        .resume
        .as_deref_mut()
        .and_then(|r| r.open.as_deref_mut())
    {
        open.started = true;
        open.entry.pause = open.cut.elapsed();
    }
}

/// What the continuation's target reported of its work.
pub fn heard(ctx: &mut RequestCtx, counts: TargetCounts) {
    if let Some(open) = ctx
        .resume
        .as_deref_mut()
        .and_then(|r| r.open.as_deref_mut())
    {
        open.entry.reprefilled = counts.prompt_n;
        open.entry.cached = counts.cache_n;
        open.entry.generated = counts.predicted_n;
    }
}

/// The answer's member still answers its `/health` (within the health
/// checks' own limit, [`HEALTH_TIMEOUT`]): its silence is another request's
/// work, not a stall.
pub async fn member_alive(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(i) = ctx.member else {
        return false;
    };
    steps.fleet.answers_health(i, HEALTH_TIMEOUT).await
}

/// Whether `ctx` may be continued at all (checked before the cut is
/// handled): on, a stream whose body was kept, continuations left.
pub fn armed(steps: &Steps, ctx: &RequestCtx) -> bool {
    steps.config.continuation.enabled
        && ctx
            .resume
            .as_ref()
            .is_some_and(|r| r.count < steps.config.continuation.max_per_answer)
}

/// The answer could be told to move: drained (in a fleet) or paused (its
/// class is preemptible and its pauses are not spent).
pub fn movable(steps: &Steps, ctx: &RequestCtx) -> bool {
    steps.fleet.is_fleet() || pausable(steps, ctx)
}

/// Its class's answers may be paused, and its own pauses are not spent.
fn pausable(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(held) = ctx.admission.as_deref() else {
        return false;
    };
    let class = held.class as usize;
    held.ticket.is_some()
        && steps
            .config
            .queue
            .preemptible
            .get(class)
            .is_some_and(|p| *p)
        && ctx
            .resume
            .as_ref()
            .is_some_and(|r| r.pauses < steps.config.continuation.max_pauses)
}

/// The answer can be continued from where its client is now (checked when
/// it is told to move, before its upstream is closed): not finished, and
/// not refused.
pub fn can_move(ctx: &RequestCtx) -> bool {
    let finished = ctx
        .observer
        .as_ref()
        .is_some_and(|o| o.facts().done || !o.facts().finish_reasons.is_empty());
    !finished && !matches!(plan_next(ctx), Next::Refused(_))
}

/// Registers a movable answer past its first token.
pub fn register(steps: &Steps, ctx: &RequestCtx, signal: Arc<Signal>) -> Registration {
    let answer = Answer {
        member: ctx.member.unwrap_or(usize::MAX),
        model: ctx.request.model.clone(),
        class: ctx.admission.as_deref().map_or(0, |h| h.class as usize),
        pausable: pausable(steps, ctx),
        since: ctx.received,
    };
    steps.moves.register(answer, signal)
}

/// Another upstream could take the answer now.
pub fn elsewhere(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(i) = ctx.member else {
        return false;
    };
    steps.fleet.is_fleet()
        && steps
            .fleet
            .can_fail_over(ctx.request.model.as_deref(), i, &ctx.routed.tried)
}

fn log(ctx: &mut RequestCtx, entry: Continued) {
    if let Some(r) = ctx.resume.as_deref_mut() {
        if entry.result == ContinuationResult::Continued {
            r.count += 1;
        }
        if r.log.len() < MAX_KEPT {
            r.log.push(entry);
        }
    }
}

fn member_name(steps: &Steps, ctx: &RequestCtx) -> Option<String> {
    let i = ctx.member?;
    steps.fleet.member(i).map(|m| m.upstream.name.clone())
}

/// The continuation's shape for a route; `None`: not continued.
pub fn shape_of(route: Route) -> Option<Shape> {
    match route {
        Route::ChatCompletions => Some(Shape::Chat),
        Route::Completions => Some(Shape::Completions),
        Route::Completion => Some(Shape::Native),
        _ => None,
    }
}

/// The shape whose token ids the transcript keeps: a native stream's
/// always; a chat or completions stream's when the request may have asked
/// for `logprobs` (its events then carry them).
pub fn transcript_ids(ctx: &RequestCtx) -> Option<Shape> {
    let body = &ctx.resume.as_ref()?.body;
    match shape_of(ctx.route)? {
        Shape::Native => Some(Shape::Native),
        s => memchr::memmem::find(body, b"\"logprobs\"").map(|_| s),
    }
}

/// Keeps the body of a stream that may be continued (a chat, completions
/// or native completion request; called when the request body is whole).
pub fn keep_body(ctx: &mut RequestCtx, enabled: bool, body: Bytes) {
    if enabled && shape_of(ctx.route).is_some() && ctx.request.stream == Some(true) {
        ctx.resume = Some(Box::new(Resume {
            body,
            ..Resume::default()
        }));
    }
}
