//! What the forwarding loop asks of the fleet, the queue and the
//! configuration about the answer it streams: whether a cut can be
//! continued ([`armed`]), whether the answer can be told to move
//! ([`movable`], registered with [`register`]), whether another member
//! could take it ([`elsewhere`]), and whether a silent member still lives
//! ([`member_alive`]).
//!
//! Deliberately not here: what the client was sent ([`super::super::continuable`]),
//! acting on any of it (the loop and `resume`).

use std::sync::Arc;

use super::super::context::RequestCtx;
use super::super::moves::{Answer, Registration, Signal};
use super::super::Steps;
use crate::fleet::watch::HEALTH_TIMEOUT;

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

/// Registers a movable answer past its first token.
pub fn register(steps: &Steps, ctx: &RequestCtx, signal: Arc<Signal>) -> Registration {
    let answer = Answer {
        member: ctx.attempt.member.unwrap_or(usize::MAX),
        model: ctx.asked.request.model.clone(),
        class: ctx.admission.as_deref().map_or(0, |h| h.class as usize),
        pausable: pausable(steps, ctx),
        since: ctx.asked.received,
    };
    steps.moves.register(answer, signal)
}

/// Another upstream could take the answer now.
pub fn elsewhere(steps: &Steps, ctx: &RequestCtx) -> bool {
    // A replay's rest has no member yet (its copy's left, or is in
    // `tried`): any member will do.
    let i = ctx.attempt.member.unwrap_or(usize::MAX);
    steps.fleet.is_fleet()
        && steps.fleet.can_fail_over(
            ctx.asked.request.model.as_deref(),
            i,
            &ctx.attempt.routed.tried,
        )
}

/// The answer's member still answers its `/health` (within the health
/// checks' own limit, [`HEALTH_TIMEOUT`]): its silence is another request's
/// work, not a stall.
pub async fn member_alive(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(i) = ctx.attempt.member else {
        return false;
    };
    steps.fleet.answers_health(i, HEALTH_TIMEOUT).await
}

/// The name of the attempt's member, for the record (before a replay's
/// rest has one: the member its copy was cut on).
pub fn member_name(steps: &Steps, ctx: &RequestCtx) -> Option<String> {
    let Some(i) = ctx.attempt.member else {
        let claim = ctx.conversation.as_deref().filter(|c| c.rest)?;
        return claim.holder.clone();
    };
    steps.fleet.member(i).map(|m| m.upstream.name.clone())
}
