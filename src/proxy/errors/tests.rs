use super::*;

#[test]
fn a_body_over_the_limit_is_a_rejection_like_a_declared_one() {
    let e = too_large();
    let f = classify(&e);
    assert_eq!(
        (f.status, f.outcome, f.code, f.kind),
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
        (f.status, f.outcome, f.code, f.kind),
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
        (f.status, f.outcome, f.code, f.kind),
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
