//! Keeping the TTFT objectives already admitted: an attempt with an
//! objective goes on the board of answers in flight with its [`Promise`];
//! a later attempt whose prompt would push such an answer's first token
//! past its objective waits, after its member is chosen and before it is
//! sent, until that answer's prefill ends (its first token, or its
//! landing), at most until the promise's deadline.
//!
//! - [`promise`] (at dispatch): the promise of a streamed attempt with an
//!   objective and a prediction.
//! - [`keep`] (in [`super::Steps::peer`], every attempt): the wait. With
//!   no promise on the board (always so with `[ttft] keep_promises` off)
//!   it costs one atomic load; only the promises
//!   boarded before the attempt hold it, so two waiting attempts never
//!   wait on each other.
//!
//! The waiting attempt's own prediction counted the prompts ahead of it,
//! so its wait was mostly predicted; it is predicted again after the wait.
//! Deliberately not here: the arithmetic ([`Promise::broken_by`]) and the
//! board ([`crate::ttft::Flights`]). A client that hangs up while its
//! request waits is noticed when the request is sent.

use std::time::{Duration, Instant};

use super::context::RequestCtx;
use crate::ttft::{Predicted, Predictor, Promise};
use llamatap_policy::ttft::Prediction;

/// The promise of an attempt sent now, predicted as `predicted`: with
/// `[ttft] keep_promises`, an objective, streamed (its first token says
/// when its prefill is over) and a prediction to judge by; else `None`.
pub fn promise(predictor: &Predictor, ctx: &RequestCtx, predicted: &Predicted) -> Option<Promise> {
    if !predictor.keeps_promises {
        return None;
    }
    let slo_ms = ctx.attempt.routed.ttft.slo_ms?;
    if ctx.asked.request.stream != Some(true) {
        return None;
    }
    let expected_ms = predicted.prediction.ttft_ms()?;
    Some(Promise {
        sent: predicted.sent,
        deadline: ctx.asked.received + Duration::from_millis(u64::from(slo_ms)),
        expected_ms,
        factor: predictor.factor(&predicted.key, predicted.stratum),
    })
}

/// Waits while the attempt's prompt would break a promise boarded before
/// it on its member; how long it waited (`None`: not at all).
pub async fn keep(predictor: &Predictor, ctx: &RequestCtx) -> Option<Duration> {
    let flights = &predictor.flights;
    if !flights.promised() {
        return None;
    }
    let plan = &ctx.attempt.routed.ttft;
    let b = plan.flight?;
    // What its prompt adds to the batches of a prompt beside it.
    let delay_ms = match plan.predicted.as_ref()?.prediction {
        Prediction::Estimate(e) => e.prefill_ms,
        Prediction::NoData => return None,
    };
    let start = Instant::now();
    let mut held = false;
    loop {
        // Registered before the look, so that no end is missed between.
        let changed = flights.changed().notified();
        let Some(until) = flights.held_by(b, delay_ms, Instant::now()) else {
            break;
        };
        held = true;
        let _ = tokio::time::timeout_at(until.into(), changed).await;
    }
    held.then(|| start.elapsed())
}
