use super::*;

#[test]
fn a_body_over_the_limit_is_a_rejection_like_a_declared_one() {
    let e = too_large();
    let f = classify(&e);
    assert_eq!(
        (f.status, f.outcome, f.code(), f.kind),
        (
            413,
            Outcome::Rejected,
            "request_too_large",
            "invalid_request_error"
        )
    );
    assert_eq!(message(&f, &e), TOO_LARGE_MESSAGE);
}

#[test]
fn hidden_counts_are_a_400_rejection_naming_the_fix() {
    let e = counts_hidden();
    let f = classify(&e);
    assert_eq!(
        (f.status, f.outcome, f.code(), f.kind),
        (
            400,
            Outcome::Rejected,
            "response_fields_hide_usage",
            "invalid_request_error"
        )
    );
    assert_eq!(message(&f, &e), COUNTS_HIDDEN_MESSAGE);
    assert!(COUNTS_HIDDEN_MESSAGE.contains("\"timings\""));
}

#[test]
fn an_unresolved_upstream_is_a_502_naming_it() {
    let e = unresolved("llama.internal:8081");
    let f = classify(&e);
    assert_eq!(
        (f.status, f.outcome, f.code(), f.kind),
        (
            502,
            Outcome::UpstreamError,
            "upstream_unresolved",
            "upstream_error"
        )
    );
    assert!(message_naming(&f, &e, None).ends_with("llama.internal:8081"));
    // The client hears no host name.
    assert!(!message(&f, &e).contains("llama.internal"));
}

#[test]
fn an_upstream_failure_names_the_upstream() {
    let e = Error::explain(ErrorType::ConnectRefused, "refused").into_up();
    let f = classify(&e);
    assert_eq!(
        message_naming(&f, &e, Some("gpu-a")),
        "cannot connect to upstream llama-server gpu-a (ConnectRefused)"
    );
    let client = Error::explain(ErrorType::ReadTimedout, "slow").into_down();
    let f = classify(&client);
    assert_eq!(
        message_naming(&f, &client, Some("gpu-a")),
        message(&f, &client)
    );
}

#[test]
fn every_cause_keeps_its_label() {
    // The labels are `error.type` on the record, the span, the access line
    // and the metrics: a rename would break dashboards.
    let labels: Vec<&str> = Cause::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        labels,
        [
            "http_status",
            "request_too_large",
            "response_fields_hide_usage",
            "client_hangup",
            "client_timeout",
            "bad_request",
            "upstream_connect_timeout",
            "upstream_timeout",
            "upstream_unresolved",
            "upstream_unreachable",
            "upstream_disconnected",
            "upstream_protocol_error",
            "upstream_error",
            "proxy_error",
        ]
    );
}

#[test]
fn only_an_upstream_that_died_or_stopped_answering_ejects() {
    let ejecting: Vec<Cause> = Cause::ALL.into_iter().filter(|c| c.ejects()).collect();
    assert_eq!(
        ejecting,
        [
            Cause::UpstreamTimeout,
            Cause::UpstreamUnreachable,
            Cause::UpstreamDisconnected
        ]
    );
    let up = |t: ErrorType| classify(&Error::explain(t, "x").into_up());
    let down = |t: ErrorType| classify(&Error::explain(t, "x").into_down());
    for (f, cause, ejects) in [
        (
            up(ErrorType::ConnectionClosed),
            Cause::UpstreamDisconnected,
            true,
        ),
        (up(ErrorType::ReadError), Cause::UpstreamDisconnected, true),
        (up(ErrorType::ReadTimedout), Cause::UpstreamTimeout, true),
        (
            up(ErrorType::ConnectRefused),
            Cause::UpstreamUnreachable,
            true,
        ),
        // Ejected at the connect, where it timed out.
        (
            up(ErrorType::ConnectTimedout),
            Cause::UpstreamConnectTimeout,
            false,
        ),
        (
            up(ErrorType::InvalidHTTPHeader),
            Cause::UpstreamProtocol,
            false,
        ),
        (up(ErrorType::InternalError), Cause::Upstream, false),
        (
            classify(&unresolved("llama.internal:8081")),
            Cause::UpstreamUnresolved,
            false,
        ),
        // The client's side never ejects a member, whatever the error type.
        (
            down(ErrorType::ConnectionClosed),
            Cause::ClientHangup,
            false,
        ),
        (down(ErrorType::ReadTimedout), Cause::ClientTimeout, false),
        (classify(&too_large()), Cause::RequestTooLarge, false),
    ] {
        assert_eq!(f.cause, cause, "{f:?}");
        assert_eq!(f.cause.ejects(), ejects, "{f:?}");
        assert_eq!(f.code(), cause.as_str());
    }
}
