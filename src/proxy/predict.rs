//! The TTFT prediction in the proxy hooks ([`crate::ttft`]): the objective
//! and its verdict before the queue, the prediction at each dispatch, its
//! header, and what `logging` records and teaches.
//!
//! - [`admit`] (in `request_filter`, routes that use a slot): reads the
//!   objective (`x-slo-ttft-ms`, else the tenant's or class's
//!   `ttft_slo_ms`); with one, bounds each serving member's prediction
//!   (with the admission queue's requests ahead of it, and its recent
//!   error) and either leaves out those bounded over it, makes room by
//!   pausing one answer of a less urgent preemptible class where that
//!   would meet it, admits it as a probe of a member's error (when that
//!   error alone puts the member over it, and the member taught none for
//!   ten seconds or more; also when the member was only left out), or
//!   refuses at once (503, `ttft_slo_unattainable`); below every member's
//!   floor, it refuses without either.
//! - [`steer`] (every attempt, without an objective): the members
//!   predicted far slower than the fastest, to leave out.
//! - [`dispatched`] (in [`super::Steps::peer`], every attempt): the
//!   prediction for the member chosen, and the attempt on the board of
//!   answers in flight, with its objective's promise ([`super::promises`];
//!   [`described`] when its body is read later, [`prefilling`] as its
//!   prefill goes).
//! - [`queue_refused`] (a refusal of the admission queue): the fastest
//!   member's prediction, behind the queue.
//! - [`head`] (the client's response head, and llamatap's own error
//!   answers): `x-llamatap-predicted-ttft-ms`.
//! - [`landed`] (the answer's end read upstream) and [`finish`] (in
//!   `logging`), in [`learn`]: off the board, the record's TTFT facts, and
//!   the book learns from the answer's `timings`.
//!
//! Nothing here runs per streamed chunk. Deliberately not here: how a
//! paused answer moves ([`super::moves`], the continuation), and reading
//! progress events ([`super::progress`]).

use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::Result;

use super::context::RequestCtx;
use super::moves::Moves;
use super::promises;
use super::reply::{write_error, ErrorReply};
use crate::admission::Admission;
use crate::config::slo::Slos;
use crate::fleet::Fleet;
use crate::ttft::{self, slo, Predicted, Predictor};
use llamatap_policy::router::Chain;
use llamatap_policy::tenant::Priority;
use llamatap_policy::ttft::{Bound, Confidence, InFlight};
use llamatap_telemetry::record::Outcome;

mod learn;
mod refusal;
mod room;
pub use learn::{finish, landed};
pub use refusal::queue_refused;
use refusal::refuse;
use room::{make_room, probe, Room};

/// The request header carrying a TTFT objective, milliseconds (a fraction
/// is rounded up: [`slo::objective`]).
pub const SLO_HEADER: &str = "x-slo-ttft-ms";

/// Reads the request's objective and judges it; `Ok(true)` when llamatap
/// answered (a malformed header, or an objective no member is predicted
/// to meet).
pub async fn admit(
    session: &mut Session,
    ctx: &mut RequestCtx,
    (predictor, fleet, moves): (&Predictor, &Fleet, &Moves),
    slos: &Slos,
    admission: &Admission,
) -> Result<bool> {
    if !ctx.asked.route.uses_slot() {
        return Ok(false);
    }
    let req = session.req_header();
    let body_bytes = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let class = class(admission, req, ctx);
    let plan = &mut ctx.attempt.routed.ttft;
    plan.prompt_bytes = ttft::prompt_bytes(&ctx.attempt.routed.chain, body_bytes);
    let default = if slos.is_empty() {
        None
    } else {
        slos.default_for(ctx.who.tenant, class)
    };
    let header = req.headers.get(SLO_HEADER).map(|v| v.as_bytes());
    let slo_ms = match slo::objective(header, default) {
        Ok(Some(ms)) => ms,
        Ok(None) => return Ok(false),
        Err(message) => {
            ctx.seen.ended = Some(std::time::Instant::now());
            ctx.seen.failure = Some((Outcome::ClientError, "invalid_ttft_slo", message.clone()));
            let reply = ErrorReply {
                status: 400,
                kind: "invalid_request_error",
                code: "invalid_ttft_slo",
                message: &message,
            };
            write_error(session, ctx, reply).await;
            return Ok(true);
        }
    };
    plan.slo_ms = Some(slo_ms);
    fleet.read_slots();
    let model = ctx.asked.request.model.as_deref();
    let chain = &ctx.attempt.routed.chain;
    let bytes = plan.prompt_bytes;
    let (serving, queued) = serving_behind(fleet, admission, class, model);
    let members: Vec<(usize, Option<Bound>)> = serving
        .into_iter()
        .map(|m| {
            let sizes = (bytes, reused(predictor, fleet, m, chain));
            (m, predictor.bound(fleet, m, model, sizes, (queued, false)))
        })
        .collect();
    // Every member but the one chosen is left out.
    let all_but = |m| {
        members
            .iter()
            .map(|&(o, _)| o)
            .filter(|&o| o != m)
            .collect()
    };
    match slo::judge(slo_ms, &members) {
        None => Ok(false),
        Some(slo::Verdict::Unattainable { best: (member, ms) }) => {
            let room = Room {
                slo_ms,
                class: class as usize,
                model,
                queued,
            };
            let sizes = |m| (bytes, reused(predictor, fleet, m, chain));
            if let Some(m) = make_room(predictor, fleet, moves, &room, &members, sizes) {
                plan.avoid = all_but(m);
                plan.made_room = true;
                return Ok(false);
            }
            if let Some(m) = probe((predictor, fleet), model, slo_ms, &members) {
                plan.avoid = all_but(m);
                plan.probe = true;
                return Ok(false);
            }
            let sizes = sizes(member);
            let predicted = predictor.predict(fleet, member, model, sizes, false);
            plan.predicted = Some(predicted);
            refuse(
                session,
                ctx,
                slo_ms,
                (predicted.prediction.ttft_ms(), ms),
                None,
            )
            .await;
            Ok(true)
        }
        Some(slo::Verdict::BelowFloor {
            best: (member, ms),
            floor_ms,
        }) => {
            let sizes = (bytes, reused(predictor, fleet, member, chain));
            let predicted = predictor.predict(fleet, member, model, sizes, false);
            plan.predicted = Some(predicted);
            plan.floor_ms = Some(floor_ms);
            let at = (predicted.prediction.ttft_ms(), ms);
            refuse(session, ctx, slo_ms, at, Some(floor_ms)).await;
            Ok(true)
        }
        Some(v) => {
            // A member left out while another meets it is probed too, or
            // nothing would show that it recovered.
            let left_out: Vec<(usize, Option<Bound>)> = members
                .iter()
                .filter(|(m, _)| v.avoid().contains(m))
                .copied()
                .collect();
            if let Some(m) = probe((predictor, fleet), model, slo_ms, &left_out) {
                plan.avoid = all_but(m);
                plan.probe = true;
            } else {
                plan.avoid = v.avoid().to_vec();
            }
            Ok(false)
        }
    }
}

/// The prediction for the attempt's member, just chosen (and counted in
/// its in-flight load).
pub fn dispatched(predictor: &Predictor, fleet: &Fleet, ctx: &mut RequestCtx) {
    let Some(member) = ctx.attempt.member else {
        return;
    };
    if !ctx.asked.route.uses_slot() {
        return;
    }
    // What the member will reuse of what the router thinks it holds, and
    // the slot the prompt takes in its view (the attempt it replaces, if
    // any, gives its own back).
    let chain = &ctx.attempt.routed.chain;
    let cached = predictor
        .slots
        .reused(fleet, member, chain, cached_at_choice(ctx));
    let slot = predictor.slots.take(fleet, member, chain);
    let plan = &mut ctx.attempt.routed.ttft;
    if let Some((m, s)) = std::mem::replace(&mut plan.slot, slot.map(|s| (member, s))) {
        predictor.slots.release(m, s, (0, 0));
    }
    // Itself, and on its first attempt the answer told to pause for it.
    let excluded = 1 + u32::from(plan.made_room && ctx.attempt.count == 1);
    // A probe measures the member it was sent to: an attempt after a
    // failed one (most likely elsewhere) is none.
    plan.probe &= ctx.attempt.count == 1;
    let predicted = predictor.predict_excluding(
        fleet,
        member,
        ctx.asked.request.model.as_deref(),
        (plan.prompt_bytes, cached),
        (excluded, 0),
    );
    plan.predicted = Some(predicted);
    // On the board of answers in flight, for the requests predicted beside
    // it: a streamed answer with its prefill to come (its progress and
    // first token will say when it is over); any other as prefilled.
    if let Some(previous) = plan.flight.take() {
        predictor.flights.land(previous);
    }
    plan.prefill_beside = None;
    let flight = InFlight {
        generated: 0,
        max_tokens: max_tokens(ctx),
        prefill_left: streamed_prefill(ctx, &predicted, cached),
        ..InFlight::default()
    };
    let promise = promises::promise(predictor, ctx, &predicted);
    let boarded = predictor.flights.board(member, flight, promise);
    let plan = &mut ctx.attempt.routed.ttft;
    plan.tally = boarded.and_then(|b| predictor.flights.tally(b));
    plan.flight = boarded;
}

/// The request's class in the admission queue (its key's, else
/// `default`, as the queue reads it).
fn class(admission: &Admission, req: &RequestHeader, ctx: &RequestCtx) -> Priority {
    admission
        .class_of(req, ctx.who.tenant)
        .unwrap_or(Priority::Default)
}

/// The members serving `model`, and the admission queue's requests a
/// request of `class` would wait behind, spread over them (rounded up: a
/// bound errs late).
fn serving_behind(
    fleet: &Fleet,
    admission: &Admission,
    class: Priority,
    model: Option<&str>,
) -> (Vec<usize>, u32) {
    let serving = fleet.servers(model);
    let spread = u32::try_from(serving.len()).unwrap_or(u32::MAX).max(1);
    let queued = admission.queued_ahead(class, model).div_ceil(spread);
    (serving, queued)
}

/// The bytes of `chain` member `m` will reuse before routing: what the
/// affinity book says it holds, less what its slots lost
/// ([`ttft::Slots`]).
fn reused(predictor: &Predictor, fleet: &Fleet, m: usize, chain: &Chain) -> u64 {
    let held = fleet.cached_bytes(m, chain);
    predictor.slots.reused(fleet, m, chain, held)
}

/// The bytes of the prompt the chosen member likely holds: the router's
/// own estimate at its choice (the chain is in the member's index now, so
/// a second look would find all of it).
fn cached_at_choice(ctx: &RequestCtx) -> u64 {
    ctx.attempt
        .routed
        .decision
        .map_or(0, |d| d.prediction.bytes)
}

/// The request's `max_tokens`, when its body was read.
fn max_tokens(ctx: &RequestCtx) -> Option<u32> {
    let m = ctx.asked.request.max_tokens?;
    Some(u32::try_from(m).unwrap_or(u32::MAX))
}

/// A streamed request's prompt tokens to prefill at dispatch (its
/// progress and first token will say when the prefill is over); 0 for any
/// other, whose prefill's end nothing reports.
fn streamed_prefill(ctx: &RequestCtx, predicted: &Predicted, cached: u64) -> u32 {
    if ctx.asked.request.stream == Some(true) {
        ttft::new_tokens(predicted, cached)
    } else {
        0
    }
}

/// The request's body was read whole after its dispatch (with one
/// upstream nothing reads it before): its `max_tokens` and, streamed, its
/// prompt to prefill go on the board, and with `sequence` (`[ttft]
/// sequence_prompts`) whether later prompts wait for its start.
pub fn described(predictor: &Predictor, ctx: &RequestCtx, sequence: bool) {
    let plan = &ctx.attempt.routed.ttft;
    let (Some(b), Some(p)) = (plan.flight, plan.predicted.as_ref()) else {
        return;
    };
    let left = streamed_prefill(ctx, p, p.cached_bytes);
    let promise = promises::promise(predictor, ctx, p);
    predictor.flights.describe(
        b,
        max_tokens(ctx),
        Some(left),
        promise,
        sequence && ctx.attempt.progress.asked,
    );
}

/// The attempt's prompt is prefilled, or no progress of it will be read
/// (`prefill_left` 0), or `prefill_left` tokens of it are left.
pub fn prefilling(predictor: &Predictor, ctx: &RequestCtx, prefill_left: u32) {
    if let Some(b) = ctx.attempt.routed.ttft.flight {
        predictor.flights.prefill_left(b, prefill_left);
    }
}

/// Without an objective, and with `[routing] ttft_steer_percent` set:
/// the members predicted much slower than the fastest, to leave out of
/// this attempt's routing ([`ttft::steer`]).
pub fn steer(predictor: &Predictor, fleet: &Fleet, ctx: &mut RequestCtx, percent: Option<u32>) {
    let plan = &mut ctx.attempt.routed.ttft;
    plan.steered.clear();
    let Some(percent) = percent else {
        return;
    };
    if plan.slo_ms.is_some() || !ctx.asked.route.uses_slot() || ctx.who.session.is_some() {
        return;
    }
    let model = ctx.asked.request.model.as_deref();
    let members = fleet.servers(model);
    if members.len() < 2 {
        return;
    }
    let chain = &ctx.attempt.routed.chain;
    let bytes = plan.prompt_bytes;
    let predicted: Vec<(usize, llamatap_policy::ttft::Prediction)> = members
        .into_iter()
        .map(|m| {
            let sizes = (bytes, reused(predictor, fleet, m, chain));
            (
                m,
                predictor.predict(fleet, m, model, sizes, false).prediction,
            )
        })
        .collect();
    plan.steered = ttft::steer::slower(percent, &predicted);
}

/// `x-llamatap-predicted-ttft-ms` on the client's head, when predicted (as
/// on llamatap's own error answers: [`super::reply::predicted`]).
pub fn head(resp: &mut ResponseHeader, ctx: &RequestCtx) -> Result<()> {
    super::reply::predicted(resp, ctx)
}

/// After a chunk of the answer: the tokens its stream has counted, for the
/// requests predicted beside it (one atomic store; nothing when the
/// attempt is not on the board or its answer is not observed).
pub fn counted(ctx: &RequestCtx) {
    let tally = ctx.attempt.routed.ttft.tally.as_ref();
    if let (Some(t), Some(o)) = (tally, ctx.seen.observer.as_ref()) {
        t.set(o.facts().token_events);
    }
}
