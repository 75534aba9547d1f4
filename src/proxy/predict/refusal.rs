//! What a refusal before dispatch says of the prediction: the 503
//! `ttft_slo_unattainable` of an objective no member is predicted to meet,
//! and the fastest member's prediction on a refusal of the admission
//! queue.
//!
//! Deliberately not here: the verdict ([`crate::ttft::slo`]), the queue's
//! refusal itself (`crate::admission`), and writing the answer
//! (`proxy::reply`).

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::super::context::RequestCtx;
use super::super::reply::{write_error_with, ErrorReply, PREDICTED_HEADER};
use super::{class, reused, serving_behind};
use crate::admission::Admission;
use crate::fleet::Fleet;
use crate::ttft::{self, Predicted, Predictor};
use llamatap_telemetry::record::Outcome;

/// 503 `ttft_slo_unattainable`: the fastest member's prediction and bound
/// in the message (and the lowest floor, when the objective is below
/// every member's), its prediction in the header, `Retry-After` the
/// bound's excess in whole seconds (at least 1), and `x-should-retry:
/// false`.
pub(super) async fn refuse(
    session: &mut Session,
    ctx: &mut RequestCtx,
    slo_ms: u32,
    (predicted_ms, bound_ms): (Option<f64>, f64),
    floor_ms: Option<f64>,
) {
    let bound = ttft::round_ms(bound_ms);
    let best = predicted_ms.map_or(bound, ttft::round_ms);
    let message = match floor_ms {
        None => format!(
            "no upstream is predicted to send the first token within {slo_ms} ms (x-slo-ttft-ms); \
             the fastest is predicted at {best} ms, at most {bound} ms with its recent error"
        ),
        Some(floor) => format!(
            "no upstream can send the first token within {slo_ms} ms (x-slo-ttft-ms): \
             each takes at least {} ms (half its fastest decode step and overhead seen); \
             the fastest is predicted at {best} ms",
            floor_text(floor)
        ),
    };
    ctx.seen.ended = Some(std::time::Instant::now());
    ctx.seen.failure = Some((Outcome::Rejected, "ttft_slo_unattainable", message.clone()));
    let excess = bound.saturating_sub(u64::from(slo_ms));
    let retry = excess.div_ceil(1000).max(1);
    // The OpenAI SDKs retry a 503 on their own, after `Retry-After`: the
    // caller who set an objective would learn of the refusal seconds
    // late. `x-should-retry: false` tells them not to; `Retry-After` stays
    // for a client that chooses to.
    let extra = [
        ("retry-after", retry.to_string()),
        (PREDICTED_HEADER, best.to_string()),
        ("x-should-retry", "false".to_string()),
    ];
    let reply = ErrorReply {
        status: 503,
        kind: "unavailable_error",
        code: "ttft_slo_unattainable",
        message: &message,
    };
    write_error_with(session, ctx, reply, &extra).await;
}

/// `floor_ms` for the message, rounded down: to a hundredth of a
/// millisecond under 10 ms (a floor is often a few), else whole.
fn floor_text(floor_ms: f64) -> String {
    if floor_ms < 10.0 {
        format!("{:.2}", (floor_ms * 100.0).floor() / 100.0)
    } else {
        format!("{}", floor_ms.floor())
    }
}

/// A request the admission queue refused (full, or its wait over): the
/// fastest serving member's prediction behind the requests queued ahead
/// of it (spread over the members, as [`super::admit`] spreads them), for the
/// refusal's header and record. Nothing when it was predicted already or
/// uses no slot.
pub fn queue_refused(
    req: &RequestHeader,
    ctx: &mut RequestCtx,
    (predictor, fleet): (&Predictor, &Fleet),
    admission: &Admission,
) {
    if !ctx.asked.route.uses_slot() || ctx.attempt.routed.ttft.predicted.is_some() {
        return;
    }
    let model = ctx.asked.request.model.as_deref();
    let class = class(admission, req, ctx);
    let (serving, queued) = serving_behind(fleet, admission, class, model);
    let chain = &ctx.attempt.routed.chain;
    let bytes = ctx.attempt.routed.ttft.prompt_bytes;
    let fastest = serving
        .into_iter()
        .map(|m| {
            let sizes = (bytes, reused(predictor, fleet, m, chain));
            predictor.predict_excluding(fleet, m, model, sizes, (0, queued))
        })
        .min_by(|a, b| {
            let ms = |p: &Predicted| p.prediction.ttft_ms().unwrap_or(f64::INFINITY);
            ms(a).total_cmp(&ms(b))
        });
    ctx.attempt.routed.ttft.predicted = fastest;
}
