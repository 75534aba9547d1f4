//! Prompts reach a member in the order llamatap dispatched them to it: an
//! attempt whose member has a prompt dispatched before it that has not
//! started yet (no progress event, no first token) waits, just before its
//! request is written upstream, until that prompt starts, at most
//! [`MAX_WAIT`] (`[ttft] sequence_prompts`, off by default: it trades
//! the later prompt's time for the earlier one's, and measured so in
//! `docs/ttft-slo.md`).
//!
//! Why: llama-server takes every task that reached it between two batches
//! into the next batch. Two prompts sent a millisecond apart to a member
//! with free slots either share their batches, so that the first one's
//! first token comes only after both prompts are prefilled, or the second
//! misses the first's batch and waits for its whole prefill; which of the
//! two happens is a matter of microseconds, and no prediction can tell.
//! Sent once the first has started, the second always waits for the first's
//! batch: the first is prefilled alone, as predicted, and the second's
//! first token comes after both prefills, as it often would anyway, though
//! two batches one after the other take longer on a CPU than one of both.
//!
//! Only prompts that asked for progress events, on a member that has sent
//! them before, are waited for (the board's [`Flights::unstarted_before`]);
//! with none such on the board the look is one atomic load. Deliberately
//! not here: which prompts await their start (the board), keeping the
//! objectives of answers already admitted ([`super::promises`]).
//!
//! [`Flights::unstarted_before`]: crate::ttft::Flights::unstarted_before

use std::time::{Duration, Instant};

use super::context::RequestCtx;
use super::Steps;

/// The longest an attempt waits for the prompts before it to start: a
/// slot takes a prompt within milliseconds when one is free, and when none
/// is, the attempt would queue behind them in llama-server anyway.
pub const MAX_WAIT: Duration = Duration::from_millis(50);

/// Waits, when `[ttft] sequence_prompts` is on, while a prompt dispatched
/// before the attempt to its member has not started, at most [`MAX_WAIT`];
/// the wait is added to the attempt's plan (`sequenced`).
pub async fn wait(steps: &Steps, ctx: &mut RequestCtx) {
    if !steps.config.ttft.sequence_prompts {
        return;
    }
    let Some(b) = ctx.attempt.routed.ttft.flight else {
        return;
    };
    let flights = &steps.predictor.flights;
    if !flights.unstarted_before(b) {
        return;
    }
    let start = Instant::now();
    let until = tokio::time::Instant::from_std(start + MAX_WAIT);
    {
        let waiting = flights.waiting();
        loop {
            // Registered before the look, so that no start is missed between.
            let started = waiting.started();
            if !flights.unstarted_before(b) {
                break;
            }
            if tokio::time::timeout_at(until, started).await.is_err() {
                break;
            }
        }
    }
    let plan = &mut ctx.attempt.routed.ttft;
    plan.sequenced = Some(plan.sequenced.unwrap_or_default() + start.elapsed());
}
