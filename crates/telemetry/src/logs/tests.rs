use super::*;

#[test]
fn only_connect_retries_are_dropped() {
    assert!(is_connect_retry(
        "Fail to proxy: Upstream ConnectRefused context: Fail to connect to addr: 127.0.0.1:2, \
         scheme: HTTP cause: Connection refused, tries: 1, retry: true, GET /v1/models, Host: h"
    ));
    for kept in [
        // The request's final line.
        "Fail to proxy: Upstream ConnectRefused context: Fail to connect to addr: 127.0.0.1:2, \
         status: 502, tries: 2, retry: false, GET /v1/models, Host: h",
        "Fail to filter request: Upstream ConnectRefused context: Fail to connect to addr: a:1, \
         status: 502, POST /v1/chat/completions, Host: h",
        // A reused connection that had closed, retried.
        "Fail to proxy: Upstream ConnectionClosed context: Connection closed, tries: 1, \
         retry: true, GET /v1/models, Host: h",
    ] {
        assert!(!is_connect_retry(kept), "{kept}");
    }
}

#[test]
fn pingora_server_lines_are_quiet_unless_asked_for() {
    for spec in [None, Some("info"), Some("debug,llamatap=trace")] {
        let f = filter(spec).to_string();
        assert!(f.contains(QUIET_PINGORA_SERVER), "{spec:?}: {f}");
    }
    let f = filter(Some("info,pingora_core::server=info")).to_string();
    assert!(!f.contains(QUIET_PINGORA_SERVER), "{f}");
    assert!(filter(None).to_string().contains("llamatap=info"));
}
