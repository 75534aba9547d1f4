//! Judging an attempt or a finished request: whether an answer shows the
//! upstream unwell (passive ejection), and the request's outcome and error
//! type for telemetry.
//!
//! Decisions only; the hooks act on them.

use pingora::{Error, ErrorSource, ErrorType};

use super::context::RequestCtx;
use super::errors;
use llamatap_telemetry::record::Outcome;
use llamatap_wire::request::Route;

/// Whether an answer shows the upstream itself unwell, so that it is
/// ejected for a while. llama-server answers many client mistakes with a
/// 5xx (501 for a feature it runs without: `/metrics` without `--metrics`,
/// embeddings, `/infill`; 500 for a prompt missing or an image it cannot
/// read), so a 500 or 501 never ejects. Its 503 means it is loading a model
/// (and, on `/slots?fail_on_no_slot`, that no slot is free): only a route
/// that does work counts it. 502 and 504 come from a proxy in front of it.
pub fn unwell_answer(status: u16, route: Route) -> bool {
    matches!(status, 502..=504) && route.operation_name().is_some()
}

/// The stream's terminal event was written to the client, with no in-band
/// error before it.
fn answered_whole(ctx: &RequestCtx) -> bool {
    let facts = ctx
        .stream_facts
        .as_deref()
        .or_else(|| ctx.observer.as_ref().map(|o| o.facts()));
    ctx.terminal_sent && facts.is_some_and(|f| f.done && f.error.is_none())
}

/// How a finished request ended, as `logging` records it and acts on it.
#[derive(Debug)]
pub struct Ending {
    /// The outcome label.
    pub outcome: Outcome,
    /// `error.type` and the message, for the record.
    pub error: Option<(&'static str, String)>,
    /// What failed, when a Pingora error ended the request: routing ejects
    /// the member on it ([`errors::Cause::ejects`]), never on the label.
    pub cause: Option<errors::Cause>,
}

/// Decides the outcome of a finished request.
pub fn outcome(e: Option<&Error>, ctx: &mut RequestCtx) -> Ending {
    let ending = |outcome, error| Ending {
        outcome,
        error,
        cause: None,
    };
    if e.is_none() {
        if let Some((o, code, msg)) = ctx.failure.take() {
            return ending(o, Some((code, msg)));
        }
    }
    if let Some(e) = e {
        // `fail_to_proxy` classified this same error (its failure, naming
        // the upstream, is the one kept); the cause is the error's.
        let f = errors::classify(e);
        let (o, code, msg) = ctx
            .failure
            .take()
            .unwrap_or_else(|| (f.outcome, f.code(), errors::message(&f, e)));
        if o == Outcome::ClientHangup && answered_whole(ctx) {
            // The client had the whole answer (its terminal event, with no
            // error before it) and closed before the body's last framing
            // bytes, as the OpenAI SDKs do after `[DONE]`: not a hang-up.
            return ending(Outcome::Ok, None);
        }
        return Ending {
            outcome: o,
            error: Some((code, msg)),
            cause: Some(f.cause),
        };
    }
    let facts = ctx
        .stream_facts
        .as_deref()
        .or_else(|| ctx.observer.as_ref().map(|o| o.facts()));
    let in_band = facts.and_then(|f| f.error.clone());
    let truncated = facts.is_some_and(|f| f.truncated());
    match ctx.status {
        Some(s) if s >= 500 => ending(
            Outcome::UpstreamError,
            Some(("http_5xx", format!("upstream answered {s}"))),
        ),
        Some(s) if s >= 400 => ending(Outcome::ClientError, None),
        _ => match (in_band, ctx.format()) {
            (Some(m), _) => ending(Outcome::UpstreamError, Some(("upstream_error_event", m))),
            (None, Some(format)) if truncated => ending(
                Outcome::UpstreamError,
                Some((
                    "upstream_truncated",
                    format!("the event stream ended without {}", format.terminal_event()),
                )),
            ),
            (None, _) => ending(Outcome::Ok, None),
        },
    }
}

/// Whether Pingora's error line about a request is left out: a client
/// hang-up is normal traffic, and a failed connect was logged once already,
/// naming the upstream ([`super::attempt::connect_failed`]).
pub fn quiet(ctx: &RequestCtx, error: &Error) -> bool {
    let hangup = error.esource() == &ErrorSource::Downstream
        && matches!(
            error.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
        );
    let connect = ctx.routed.ejected
        && matches!(
            error.etype(),
            ErrorType::ConnectRefused
                | ErrorType::ConnectTimedout
                | ErrorType::ConnectError
                | ErrorType::SocketError
        );
    hangup || connect
}

#[cfg(test)]
mod tests;
