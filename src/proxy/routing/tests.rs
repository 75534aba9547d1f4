//! The passive ejection in `logging`: decided by how the request ended
//! ([`End::ejects`]), on the failure's cause.

use super::*;
use crate::proxy::errors::Cause;
use llamatap_telemetry::record::Outcome;

fn failed(cause: Cause) -> End {
    End::Failed {
        cause,
        outcome: Outcome::UpstreamError,
        code: cause.as_str(),
        message: String::new(),
    }
}

#[test]
fn a_member_is_ejected_on_an_ejecting_cause_once() {
    assert!(failed(Cause::UpstreamDisconnected).ejects(false));
    assert!(failed(Cause::UpstreamTimeout).ejects(false));
    assert!(failed(Cause::UpstreamUnreachable).ejects(false));
    // Ejected already this attempt (a failed connect, an unwell answer).
    assert!(!failed(Cause::UpstreamDisconnected).ejects(true));
    // No error ended the request, or one that says nothing of the upstream.
    assert!(!End::Whole.ejects(false));
    assert!(!End::Status(502).ejects(false));
    for cause in [
        Cause::ClientHangup,
        Cause::ClientTimeout,
        Cause::UpstreamConnectTimeout,
        Cause::UpstreamProtocol,
        Cause::UpstreamUnresolved,
        Cause::Proxy,
    ] {
        assert!(!failed(cause).ejects(false), "{cause:?}");
    }
}
