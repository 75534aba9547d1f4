//! The end of an attempt's TTFT life: it lands from the board of answers
//! in flight (when its body's end is read upstream, else in `logging`),
//! its record gets its [`TtftFacts`], and the book learns from its
//! `timings`.
//!
//! Deliberately not here: the prediction at dispatch and its header (the
//! parent module), reading progress events (`progress`).

use crate::fleet::Fleet;
use crate::proxy::context::RequestCtx;
use crate::ttft::{self, Finished, Predicted, Predictor};
use llamatap_policy::ttft::{Confidence, Prediction, Timings};
use llamatap_telemetry::record::{Outcome, RequestRecord, TtftFacts};

/// The attempt's answer ended (upstream, or in `logging`): it lands from
/// the board of answers in flight, with the prompt tokens of others that
/// went through its prefill's batches and before it, and its slot in the
/// view of its member's slots is free.
pub fn landed(predictor: &Predictor, ctx: &mut RequestCtx) {
    let plan = &mut ctx.attempt.routed.ttft;
    let tally = plan.tally.take();
    if let Some((m, s)) = plan.slot.take() {
        // Its slot holds its prompt and its answer: their tokens by the
        // answer's timings when read, else the tokens its stream counted.
        let facts = ctx.seen.observer.as_ref().map(|o| o.facts());
        let timings = facts.and_then(|f| f.timings.as_ref());
        let prompt = timings.map_or(0, |t| t.prompt_n.unwrap_or(0) + t.cache_n.unwrap_or(0));
        let counted = tally.map_or(0, |t| u64::from(t.get()));
        let answer = timings.and_then(|t| t.predicted_n).unwrap_or(counted);
        predictor.slots.release(m, s, (prompt, answer));
    }
    if let Some(b) = plan.flight.take() {
        let flights = &predictor.flights;
        plan.prefill_beside = flights.overlap(b, std::time::Instant::now());
        flights.land(b);
    }
}

/// The record's [`TtftFacts`], and the book learns from the answer.
pub fn finish(
    (predictor, fleet): (&Predictor, &Fleet),
    ctx: &mut RequestCtx,
    rec: &mut RequestRecord,
) {
    landed(predictor, ctx);
    let plan = std::mem::take(&mut ctx.attempt.routed.ttft);
    let beside = plan.prefill_beside;
    let Some(p) = plan.predicted else {
        return;
    };
    let dispatched = p.sent.checked_duration_since(ctx.asked.received);
    // Predicted and never sent: refused before dispatch (its objective,
    // or the queue).
    let refused = ctx.attempt.count == 0;
    rec.ttft = Some(TtftFacts {
        predicted_ms: p.ms(),
        confidence: confidence(&p),
        slo_ms: plan.slo_ms,
        dispatched: if refused { None } else { dispatched },
        corrected_ms: plan.corrected_ms,
        progress_events: plan.progress_events,
        made_room: plan.made_room,
        probe: plan.probe,
        floor_us: plan.floor_ms.map(|f| ttft::round_ms(f * 1000.0)),
        held_ms: plan.held.map(whole_ms),
        sequenced_ms: plan.sequenced.map(whole_ms),
        prefill_beside_tokens: beside.map(|o| o.during),
        predicted_wait_ms: match p.prediction {
            Prediction::Estimate(e) => Some(ttft::round_ms(e.wait_ms)),
            Prediction::NoData => None,
        },
        slot_started_ms: plan
            .slot_started
            .and_then(|s| s.checked_duration_since(p.sent))
            .map(whole_ms),
    });
    if refused || rec.outcome != Outcome::Ok {
        return;
    }
    let Some(t) = rec.timings.as_ref() else {
        return;
    };
    let n = |v: Option<u64>| v.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX));
    let done = Finished {
        timings: Timings {
            prompt_n: n(t.prompt_n),
            prompt_ms: t.prompt_ms.unwrap_or(0.0),
            cache_n: n(t.cache_n),
            predicted_n: n(t.predicted_n),
            predicted_ms: t.predicted_ms.unwrap_or(0.0),
        },
        max_tokens: rec
            .request
            .max_tokens
            .map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
        ttft: rec
            .first_token_any
            .zip(dispatched)
            .and_then(|(f, d)| f.checked_sub(d)),
        prefill_others: beside.map_or(0, |o| o.during),
        prefill_before: beside.map_or(0, |o| o.before),
        probe: plan.probe,
    };
    predictor.learn(fleet, &p, &done);
}

/// `d` in whole milliseconds, as the record carries them.
fn whole_ms(d: std::time::Duration) -> u64 {
    ttft::round_ms(d.as_secs_f64() * 1000.0)
}

fn confidence(p: &Predicted) -> &'static str {
    match p.confidence() {
        Some(Confidence::High) => "high",
        Some(Confidence::Low) => "low",
        None => "none",
    }
}
