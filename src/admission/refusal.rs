//! What the queue refuses, and why: a priority header that names no class
//! (`400 invalid_priority`), a full queue or the tenant's share of one
//! (`503 queue_full`, `429 tenant_queue_full`), and a wait past the class's
//! `max_wait_ms` (`503 queue_timeout`). Each refusal records its facts on
//! the request's context and returns the answer as data ([`Refusal`]).
//!
//! Deliberately not here: writing the answer (the proxy's error writer,
//! which adds `traceresponse` and the OpenAI shape).

use std::time::Instant;

use crate::proxy::context::RequestCtx;
use crate::record::Outcome;
use crate::tenant::Priority;

/// A refusal of the queue, for the proxy to answer in the OpenAI shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// The JSON body's `type`.
    pub kind: &'static str,
    /// The JSON body's `code`.
    pub code: &'static str,
    /// The message.
    pub message: String,
    /// `Retry-After: 1` goes with it (every refusal but a bad header).
    pub retry_after: bool,
}

/// Refuses a request whose priority header (`header`) names no class:
/// `400` `invalid_priority`, naming the header, the value (bounded) and
/// the classes.
pub(super) fn invalid_priority(ctx: &mut RequestCtx, header: &str, value: &str) -> Refusal {
    let shown = crate::record::bounded(value, 64);
    let message = format!(
        "header {header}: {shown:?} is not a priority class; use interactive, default or batch"
    );
    ctx.ended = Some(Instant::now());
    ctx.failure = Some((Outcome::ClientError, "invalid_priority", message.clone()));
    Refusal {
        status: 400,
        kind: "invalid_request_error",
        code: "invalid_priority",
        message,
        retry_after: false,
    }
}

/// Refuses a request of `class` for `code` (`queue_full`,
/// `tenant_queue_full`, `queue_timeout`; `depth`: the class's
/// `max_depth`, named when full), with `Retry-After: 1`: `503` when the
/// queue is the cause (full, or the wait passed), `429` when it is the
/// tenant's own share of a full queue (its client's retries then back off
/// as from a rate limit).
pub(super) fn refused(
    ctx: &mut RequestCtx,
    class: Priority,
    code: &'static str,
    depth: Option<usize>,
) -> Refusal {
    let message = message(class, code, depth);
    ctx.ended = Some(Instant::now());
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.queued_now = false;
    }
    ctx.failure = Some((Outcome::Rejected, code, message.clone()));
    let own_share = code == "tenant_queue_full";
    Refusal {
        status: if own_share { 429 } else { 503 },
        kind: if own_share {
            "rate_limit_error"
        } else {
            "server_error"
        },
        code,
        message,
        retry_after: true,
    }
}

/// The message of a refusal of `class` for `code`.
fn message(class: Priority, code: &str, depth: Option<usize>) -> String {
    let class = class.as_str();
    match (code, depth) {
        ("queue_full", Some(d)) => {
            format!("the {class} queue is full ({d} requests wait); retry later")
        }
        ("queue_full", None) => format!("the {class} queue is full; retry later"),
        ("tenant_queue_full", _) => format!(
            "the {class} queue is full and this key holds more than its share of it; \
             retry later"
        ),
        _ => format!(
            "no upstream slot came free within the {class} class's max_wait_ms; retry later"
        ),
    }
}

#[cfg(test)]
mod tests;
