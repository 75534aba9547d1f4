//! Whether an answer can go on after a cut, read from the request and what
//! its client was sent: the stream's body kept for a continuation
//! ([`keep_body`]), the token ids its transcript keeps ([`transcript_ids`]),
//! and the pure plan of what comes next ([`plan_next`], [`can_move`]).
//!
//! Deliberately not here: acting on the plan (the forwarding loop's
//! `resume`), the plan itself ([`llamatap_wire::continuation`], pure).

use bytes::Bytes;

use super::context::{RequestCtx, Resume};
use llamatap_wire::continuation::{self as plan, Heard, Next, Shape};
use llamatap_wire::request::Route;

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
    match shape_of(ctx.asked.route)? {
        Shape::Native => Some(Shape::Native),
        s => memchr::memmem::find(body, b"\"logprobs\"").map(|_| s),
    }
}

/// Keeps the body of a stream that may be continued (a chat, completions
/// or native completion request; called when the request body is whole).
pub fn keep_body(ctx: &mut RequestCtx, enabled: bool, body: Bytes) {
    if enabled && shape_of(ctx.asked.route).is_some() && ctx.asked.request.stream == Some(true) {
        ctx.resume = Some(Box::new(Resume {
            body,
            ..Resume::default()
        }));
    }
}

/// The pure plan of the next attempt, for what the client has now.
pub fn plan_next(ctx: &RequestCtx) -> Next {
    let (Some(resume), Some(shape)) = (ctx.resume.as_deref(), shape_of(ctx.asked.route)) else {
        return Next::Refused("not_kept");
    };
    let Some(observer) = ctx.seen.observer.as_ref() else {
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

/// The answer can be continued from where its client is now (checked when
/// it is told to move, before its upstream is closed): not finished, and
/// not refused.
pub fn can_move(ctx: &RequestCtx) -> bool {
    let finished = ctx
        .seen
        .observer
        .as_ref()
        .is_some_and(|o| o.facts().done || !o.facts().finish_reasons.is_empty());
    !finished && !matches!(plan_next(ctx), Next::Refused(_))
}
