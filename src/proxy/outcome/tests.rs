//! A finished request's ending: its label for the record and its typed
//! cause for the decisions.

use pingora::{Error, ErrorType};

use super::*;
use crate::proxy::errors::Cause;

#[test]
fn an_upstream_that_died_ends_the_request_with_an_ejecting_cause() {
    let e = Error::explain(ErrorType::ConnectionClosed, "reset").into_up();
    let mut ctx = RequestCtx::new();
    let end = outcome(Some(&e), &mut ctx);
    assert_eq!(end.outcome, Outcome::UpstreamError);
    assert_eq!(end.cause, Some(Cause::UpstreamDisconnected));
    assert!(end.cause.is_some_and(Cause::ejects));
    // The label stays what telemetry has always recorded.
    assert_eq!(end.error.map(|(t, _)| t), Some("upstream_disconnected"));
}

#[test]
fn the_failure_fail_to_proxy_kept_gives_the_message_and_the_error_the_cause() {
    let e = Error::explain(ErrorType::ReadTimedout, "slow").into_up();
    let mut ctx = RequestCtx::new();
    let f = errors::classify(&e);
    let named = errors::message_naming(&f, &e, Some("gpu-a"));
    ctx.failure = Some((f.outcome, f.code(), named.clone()));
    let end = outcome(Some(&e), &mut ctx);
    assert_eq!(end.error, Some(("upstream_timeout", named)));
    assert_eq!(end.cause, Some(Cause::UpstreamTimeout));
}

#[test]
fn a_request_no_error_ended_has_no_cause() {
    // A refusal llamatap answered itself.
    let mut ctx = RequestCtx::new();
    ctx.failure = Some((Outcome::Rejected, "queue_full", "full".into()));
    let end = outcome(None, &mut ctx);
    assert_eq!(end.outcome, Outcome::Rejected);
    assert_eq!(end.cause, None);
    // An upstream's 5xx: an unwell answer is judged per attempt
    // (`unwell_answer`), not here.
    let mut ctx = RequestCtx::new();
    ctx.status = Some(502);
    let end = outcome(None, &mut ctx);
    assert_eq!(end.outcome, Outcome::UpstreamError);
    assert_eq!(end.error.map(|(t, _)| t), Some("http_5xx"));
    assert_eq!(end.cause, None);
}

#[test]
fn a_client_hang_up_ejects_nothing() {
    let e = Error::explain(ErrorType::ConnectionClosed, "gone").into_down();
    let end = outcome(Some(&e), &mut RequestCtx::new());
    assert_eq!(end.outcome, Outcome::ClientHangup);
    assert_eq!(end.cause, Some(Cause::ClientHangup));
    assert!(!end.cause.is_some_and(Cause::ejects));
}
