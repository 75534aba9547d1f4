//! A finished request's end: its label for the record and the decisions
//! that follow from it.

use pingora::{Error, ErrorType};

use super::*;

#[test]
fn an_upstream_that_died_ends_the_request_with_an_ejecting_cause() {
    let e = Error::explain(ErrorType::ConnectionClosed, "reset").into_up();
    let mut ctx = RequestCtx::new();
    let end = settle(Some(&e), &mut ctx);
    assert_eq!(end.outcome(), Outcome::UpstreamError);
    assert_eq!(end.cause(), Some(Cause::UpstreamDisconnected));
    assert!(end.ejects(false));
    assert!(!end.ejects(true), "ejected once only");
    // The label stays what telemetry has always recorded.
    assert_eq!(end.error().map(|(t, _)| t), Some("upstream_disconnected"));
}

#[test]
fn the_failure_fail_to_proxy_kept_gives_the_message_and_the_error_the_cause() {
    let e = Error::explain(ErrorType::ReadTimedout, "slow").into_up();
    let mut ctx = RequestCtx::new();
    let f = errors::classify(&e);
    let named = errors::message_naming(&f, &e, Some("gpu-a"));
    ctx.seen.failure = Some((f.outcome, f.code(), named.clone()));
    let end = settle(Some(&e), &mut ctx);
    assert_eq!(end.error(), Some(("upstream_timeout", named)));
    assert_eq!(end.cause(), Some(Cause::UpstreamTimeout));
}

#[test]
fn a_request_no_error_ended_has_no_cause() {
    // A refusal llamatap answered itself.
    let mut ctx = RequestCtx::new();
    ctx.seen.failure = Some((Outcome::Rejected, "queue_full", "full".into()));
    let end = settle(None, &mut ctx);
    assert_eq!(end.outcome(), Outcome::Rejected);
    assert_eq!(end.cause(), None);
    assert!(!end.ejects(false));
    // An upstream's 5xx: an unwell answer is judged per attempt
    // (`unwell_answer`), not here.
    let mut ctx = RequestCtx::new();
    ctx.seen.status = Some(502);
    let end = settle(None, &mut ctx);
    assert_eq!(end.outcome(), Outcome::UpstreamError);
    assert_eq!(end.error().map(|(t, _)| t), Some("http_5xx"));
    assert_eq!(end.cause(), None);
    assert!(!end.ejects(false));
}

#[test]
fn a_client_hang_up_ejects_nothing() {
    let e = Error::explain(ErrorType::ConnectionClosed, "gone").into_down();
    let end = settle(Some(&e), &mut RequestCtx::new());
    assert_eq!(end.outcome(), Outcome::ClientHangup);
    assert_eq!(end.cause(), Some(Cause::ClientHangup));
    assert!(!end.ejects(false));
}

#[test]
fn only_a_whole_2xx_answer_counts_as_answered() {
    assert!(End::Whole.answered(Some(200)));
    assert!(!End::Whole.answered(Some(304)));
    assert!(!End::Whole.answered(None));
    assert!(!End::Status(503).answered(Some(503)));
    assert!(!End::Truncated(StreamFormat::OpenAiChat).answered(Some(200)));
    let e = Error::explain(ErrorType::ConnectionClosed, "reset").into_up();
    assert!(!settle(Some(&e), &mut RequestCtx::new()).answered(Some(200)));
}

#[test]
fn each_end_has_one_outcome_and_label() {
    let cases = [
        (End::Whole, Outcome::Ok, None),
        (End::Status(404), Outcome::ClientError, None),
        (End::Status(500), Outcome::UpstreamError, Some("http_5xx")),
        (
            End::ErrorEvent("boom".into()),
            Outcome::UpstreamError,
            Some("upstream_error_event"),
        ),
        (
            End::Truncated(StreamFormat::Native),
            Outcome::UpstreamError,
            Some("upstream_truncated"),
        ),
        (
            End::Answered(Outcome::Rejected, "queue_full", "full".into()),
            Outcome::Rejected,
            Some("queue_full"),
        ),
    ];
    for (end, outcome, label) in cases {
        assert_eq!(end.outcome(), outcome, "{end:?}");
        assert_eq!(end.error().map(|(t, _)| t), label, "{end:?}");
        assert!(!end.ejects(false), "{end:?}");
    }
}
