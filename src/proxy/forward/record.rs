//! The record of each continuation as it goes: opened at the cut (by
//! `resume`), its target named, its first token and the target's counts
//! noted, and logged once its attempt ends ([`close`]) or fails.
//!
//! Deliberately not here: deciding anything (`resume`), the telemetry it
//! feeds ([`llamatap_telemetry::continuation`]).

use pingora::{Error, ErrorType};

use super::super::context::{Open, RequestCtx};
use super::super::Steps;
use super::checks::member_name;
use llamatap_policy::answer::ContinuationResult;
use llamatap_telemetry::continuation::{Continued, MAX_KEPT};
use llamatap_wire::continuation::TargetCounts;

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
pub fn failed(ctx: &mut RequestCtx, why: &'static str) -> Box<Error> {
    match take_open(ctx) {
        Some(open) => fail(ctx, *open, ContinuationResult::Failed, why),
        None => Error::explain(ErrorType::InternalError, "a continuation without its cut"),
    }
}

/// Records `open` as `result` for `why`; returns its cause.
pub fn fail(
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

/// The continuation under way, taken off the request.
pub fn take_open(ctx: &mut RequestCtx) -> Option<Box<Open>> {
    ctx.resume.as_deref_mut().and_then(|r| r.open.take())
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

/// Records a continuation (counted when it continued).
pub fn log(ctx: &mut RequestCtx, entry: Continued) {
    if let Some(r) = ctx.resume.as_deref_mut() {
        if entry.result == ContinuationResult::Continued {
            r.count += 1;
        }
        if r.log.len() < MAX_KEPT {
            r.log.push(entry);
        }
    }
}
