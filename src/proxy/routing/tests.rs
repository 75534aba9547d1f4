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

fn one_member() -> Fleet {
    let o = crate::config::Overrides {
        upstreams: vec!["http://127.0.0.1:9000".into()],
        ..crate::config::Overrides::default()
    };
    let raw = crate::config::RawConfig::default();
    let f = Fleet::new(&crate::config::Config::from_raw(raw, &o).unwrap());
    for m in f.members() {
        m.set_address(m.upstream.address.parse().unwrap());
        m.set_health(Ok(()));
    }
    f
}

#[test]
fn an_answer_that_ended_upstream_leaves_the_members_load_once() {
    let f = one_member();
    let mut ctx = RequestCtx::new();
    choose(&f, &mut ctx).unwrap();
    let other = f.choose(None, &Chain::default(), None, &[]).unwrap();
    let load = || f.member(0).unwrap().in_flight();
    assert_eq!(load(), 2);
    // The answer's end was read: its slot is free before `logging`.
    answer_ended(&f, &mut ctx);
    answer_ended(&f, &mut ctx);
    assert_eq!(load(), 1);
    let rec = ctx.record("POST".into(), "/".into(), Outcome::Ok, None, None);
    let facts = finish(&f, &mut ctx, &rec, &End::Whole).expect("the member's facts");
    assert_eq!(facts.name, f.member(0).unwrap().upstream.name);
    assert_eq!(
        load(),
        1,
        "released once: the other request is still counted"
    );
    f.release(other.upstream);
    assert_eq!(load(), 0);
    // A next attempt after an early release does not release it again.
    let mut retried = RequestCtx::new();
    choose(&f, &mut retried).unwrap();
    answer_ended(&f, &mut retried);
    choose(&f, &mut retried).unwrap();
    assert_eq!(load(), 1);
}
