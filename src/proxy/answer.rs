//! How a request's answer ended: one typed value ([`End`]), settled once
//! in `logging` ([`settle`]) from the error that ended the request, the
//! failure an earlier hook kept and what the observer saw. Every decision
//! about a finished request follows from it, here and nowhere else: the
//! record's outcome and `error.type` ([`End::outcome`], [`End::error`]),
//! passive ejection of its member ([`End::ejects`]), and whether its
//! answer came, which the tenant's charge reads ([`End::answered`]).
//!
//! Deliberately not here: an attempt's end inside the forwarding loop,
//! which decides whether the answer goes on elsewhere (the loop's
//! `Ending`, [`super::forward`]); the counting of the charge
//! ([`super::charge`]).

use pingora::Error;

use super::context::RequestCtx;
use super::errors::{self, Cause};
use llamatap_telemetry::record::Outcome;
use llamatap_wire::llama::StreamFormat;

/// How a finished request's answer ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The client had the answer: it ended by its framing with no error
    /// status, error event or missing terminal event, or its terminal event
    /// was written before the client closed (as the OpenAI SDKs do after
    /// `[DONE]`, before the body's last framing bytes).
    Whole,
    /// llamatap answered the request itself, in a hook (a refusal of the
    /// guard, the tenant limits or the queue): the outcome, `error.type`
    /// and message it recorded then.
    Answered(Outcome, &'static str, String),
    /// The upstream answered an error status.
    Status(u16),
    /// The event stream carried an error event (its message).
    ErrorEvent(String),
    /// The event stream ended by its framing without its terminal event.
    Truncated(StreamFormat),
    /// An error ended it: what failed ([`Cause`]), and the outcome,
    /// `error.type` and message it is recorded with (those `fail_to_proxy`
    /// kept when it answered the client, naming the upstream).
    Failed {
        /// What failed.
        cause: Cause,
        /// The outcome label.
        outcome: Outcome,
        /// `error.type`.
        code: &'static str,
        /// The message.
        message: String,
    },
}

impl End {
    /// The record's outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            End::Whole => Outcome::Ok,
            End::Answered(o, ..) | End::Failed { outcome: o, .. } => *o,
            End::Status(s) if *s >= 500 => Outcome::UpstreamError,
            End::Status(_) => Outcome::ClientError,
            End::ErrorEvent(_) | End::Truncated(_) => Outcome::UpstreamError,
        }
    }

    /// The record's `error.type` and message.
    pub fn error(&self) -> Option<(&'static str, String)> {
        match self {
            End::Whole => None,
            End::Answered(_, code, message) => Some((code, message.clone())),
            End::Failed { code, message, .. } => Some((code, message.clone())),
            End::Status(s) if *s >= 500 => Some(("http_5xx", format!("upstream answered {s}"))),
            End::Status(_) => None,
            End::ErrorEvent(m) => Some(("upstream_error_event", m.clone())),
            End::Truncated(format) => Some((
                "upstream_truncated",
                format!("the event stream ended without {}", format.terminal_event()),
            )),
        }
    }

    /// Whether the request's member is ejected for a while (passive
    /// ejection): the upstream died or stopped answering under the request
    /// ([`Cause::ejects`]), and nothing ejected it already this attempt
    /// (`already`: a failed connect, an unwell answer). An error status or
    /// event is judged per attempt, not here.
    pub fn ejects(&self, already: bool) -> bool {
        !already && matches!(self, End::Failed { cause, .. } if cause.ejects())
    }

    /// Whether an answer came (it is charged even when nothing reported
    /// its prompt tokens): a whole answer with a 2xx `status`.
    pub fn answered(&self, status: Option<u16>) -> bool {
        *self == End::Whole && status.is_some_and(|s| (200..300).contains(&s))
    }

    /// What failed, when an error ended the request.
    pub fn cause(&self) -> Option<Cause> {
        match self {
            End::Failed { cause, .. } => Some(*cause),
            _ => None,
        }
    }
}

/// Settles how the request ended: `e`, the error that ended it, if any.
pub fn settle(e: Option<&Error>, ctx: &mut RequestCtx) -> End {
    if let Some(e) = e {
        // `fail_to_proxy` classified this same error (its failure, naming
        // the upstream, is the one kept); the cause is the error's.
        let f = errors::classify(e);
        let (outcome, code, message) = ctx
            .seen
            .failure
            .take()
            .unwrap_or_else(|| (f.outcome, f.code(), errors::message(&f, e)));
        if outcome == Outcome::ClientHangup && answered_whole(ctx) {
            return End::Whole;
        }
        return End::Failed {
            cause: f.cause,
            outcome,
            code,
            message,
        };
    }
    if let Some((outcome, code, message)) = ctx.seen.failure.take() {
        return End::Answered(outcome, code, message);
    }
    let facts = ctx
        .seen
        .stream_facts
        .as_deref()
        .or_else(|| ctx.seen.observer.as_ref().map(|o| o.facts()));
    match ctx.seen.status {
        Some(s) if s >= 400 => return End::Status(s),
        _ => {}
    }
    if let Some(m) = facts.and_then(|f| f.error.clone()) {
        return End::ErrorEvent(m);
    }
    match ctx.format() {
        Some(format) if facts.is_some_and(|f| f.truncated()) => End::Truncated(format),
        _ => End::Whole,
    }
}

/// The stream's terminal event was written to the client, with no in-band
/// error before it.
fn answered_whole(ctx: &RequestCtx) -> bool {
    let facts = ctx
        .seen
        .stream_facts
        .as_deref()
        .or_else(|| ctx.seen.observer.as_ref().map(|o| o.facts()));
    ctx.seen.terminal_sent && facts.is_some_and(|f| f.done && f.error.is_none())
}

#[cfg(test)]
mod tests;
