//! What the queue refuses, and why: a priority header that names no class
//! (`400 invalid_priority`), a full queue or the tenant's share of one
//! (`503 queue_full`, `429 tenant_queue_full`), and a wait past the class's
//! `max_wait_ms` (`503 queue_timeout`). Each refusal is data ([`Refusal`]):
//! the answer, and the outcome the request is recorded with.
//!
//! Deliberately not here: recording and writing the answer (the proxy's
//! error writer, which adds `traceresponse` and the OpenAI shape).

use super::Held;
use llamatap_policy::tenant::Priority;
use llamatap_telemetry::record::Outcome;

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
    /// The request's outcome (`error.type` is the `code`).
    pub outcome: Outcome,
}

/// Refuses a request whose priority header (`header`) names no class:
/// `400` `invalid_priority`, naming the header, the value (bounded) and
/// the classes.
pub(super) fn invalid_priority(header: &str, value: &str) -> Refusal {
    let shown = llamatap_telemetry::record::bounded(value, 64);
    let message = format!(
        "header {header}: {shown:?} is not a priority class; use interactive, default or batch"
    );
    Refusal {
        status: 400,
        kind: "invalid_request_error",
        code: "invalid_priority",
        message,
        retry_after: false,
        outcome: Outcome::ClientError,
    }
}

/// Why the queue refused a request: it decides the answer, and its label
/// is the request's `error.type` (what `llamatap_queue_refused_total`
/// counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The class's queue is full, or the request was displaced from it.
    Full,
    /// The class's queue is full and this tenant holds more than its share
    /// of it.
    TenantShare,
    /// No slot came free within the class's `max_wait_ms`.
    Timeout,
}

impl Refused {
    /// The label: `error.type` and the JSON body's `code`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "queue_full",
            Refused::TenantShare => "tenant_queue_full",
            Refused::Timeout => "queue_timeout",
        }
    }

    /// The status and the JSON body's `type`: `429` when the cause is the
    /// tenant's own share (its client's retries then back off as from a
    /// rate limit), else `503`.
    fn status(self) -> (u16, &'static str) {
        match self {
            Refused::TenantShare => (429, "rate_limit_error"),
            Refused::Full | Refused::Timeout => (503, "server_error"),
        }
    }
}

impl From<llamatap_policy::queue::Refusal> for Refused {
    fn from(r: llamatap_policy::queue::Refusal) -> Self {
        match r {
            llamatap_policy::queue::Refusal::Full => Refused::Full,
            llamatap_policy::queue::Refusal::TenantShare => Refused::TenantShare,
        }
    }
}

/// Refuses the request `held` for `why` (`depth`: its class's
/// `max_depth`, named when full), with `Retry-After: 1`; it leaves the
/// queue.
pub(super) fn refused(held: &mut Held, why: Refused, depth: Option<usize>) -> Refusal {
    let message = message(held.class, why, depth);
    held.queued_now = false;
    let (status, kind) = why.status();
    Refusal {
        status,
        kind,
        code: why.as_str(),
        message,
        retry_after: true,
        outcome: Outcome::Rejected,
    }
}

/// The message of a refusal of `class` for `why`.
fn message(class: Priority, why: Refused, depth: Option<usize>) -> String {
    let class = class.as_str();
    match (why, depth) {
        (Refused::Full, Some(d)) => {
            format!("the {class} queue is full ({d} requests wait); retry later")
        }
        (Refused::Full, None) => format!("the {class} queue is full; retry later"),
        (Refused::TenantShare, _) => format!(
            "the {class} queue is full and this key holds more than its share of it; \
             retry later"
        ),
        (Refused::Timeout, _) => format!(
            "no upstream slot came free within the {class} class's max_wait_ms; retry later"
        ),
    }
}

#[cfg(test)]
mod tests;
