//! The passive ejection in `logging`: decided on the failure's cause.

use super::*;

#[test]
fn a_member_is_ejected_on_an_ejecting_cause_once() {
    assert!(ejects(false, Some(Cause::UpstreamDisconnected)));
    assert!(ejects(false, Some(Cause::UpstreamTimeout)));
    assert!(ejects(false, Some(Cause::UpstreamUnreachable)));
    // Ejected already this attempt (a failed connect, an unwell answer).
    assert!(!ejects(true, Some(Cause::UpstreamDisconnected)));
    // No error ended the request, or one that says nothing of the upstream.
    assert!(!ejects(false, None));
    for cause in [
        Cause::ClientHangup,
        Cause::ClientTimeout,
        Cause::UpstreamConnectTimeout,
        Cause::UpstreamProtocol,
        Cause::UpstreamUnresolved,
        Cause::Proxy,
    ] {
        assert!(!ejects(false, Some(cause)), "{cause:?}");
    }
}
