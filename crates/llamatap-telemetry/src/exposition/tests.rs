use super::Exposition::{self, Classic, OpenMetrics};

#[test]
fn prometheus_scrapers_get_openmetrics() {
    // Prometheus 2.x's Accept header.
    let prom2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Exposition::negotiate(Some(prom2)), OpenMetrics);
    // Prometheus 3.x with its default scrape protocols.
    let prom3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
    assert_eq!(Exposition::negotiate(Some(prom3)), OpenMetrics);
    assert_eq!(
        Exposition::negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
        OpenMetrics
    );
}

#[test]
fn everything_else_gets_the_classic_format() {
    for accept in [
        None,
        Some(""),
        Some("*/*"),
        Some("text/plain"),
        Some("text/*"),
        Some("text/plain;version=0.0.4"),
        // Asked for, but less than the classic format.
        Some("application/openmetrics-text;q=0.2,text/plain;q=0.9"),
        // Refused outright, or with a quality that is no number.
        Some("application/openmetrics-text;q=0"),
        Some("application/openmetrics-text;q=abc"),
        Some(",,;;"),
    ] {
        assert_eq!(Exposition::negotiate(accept), Classic, "{accept:?}");
    }
}

#[test]
fn a_tie_goes_to_openmetrics_because_it_was_named() {
    assert_eq!(
        Exposition::negotiate(Some("text/plain, application/openmetrics-text")),
        OpenMetrics
    );
}

#[test]
fn content_types_name_the_version() {
    assert!(Classic
        .content_type()
        .starts_with("text/plain; version=0.0.4"));
    assert!(OpenMetrics
        .content_type()
        .starts_with("application/openmetrics-text; version=1.0.0"));
}
