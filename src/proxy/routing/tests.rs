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

#[test]
fn an_answer_that_ended_upstream_gives_its_queue_slot_to_the_next_request() {
    use crate::admission::{Admission, Asking, Held};
    use llamatap_policy::tenant::{Priority, TenantId};
    let o = crate::config::Overrides {
        upstreams: vec!["http://127.0.0.1:9000".into()],
        ..crate::config::Overrides::default()
    };
    let raw = crate::config::RawConfig::default();
    let mut config = crate::config::Config::from_raw(raw, &o).unwrap();
    config.queue.enabled = true;
    config.queue.max_inflight = Some(1);
    let f = std::sync::Arc::new(Fleet::new(&config));
    for m in f.members() {
        m.set_address(m.upstream.address.parse().unwrap());
        m.set_health(Ok(()));
    }
    let moves = crate::proxy::moves::Moves::new();
    let adm = Admission::new(&config, std::sync::Arc::clone(&f), None, moves, None);
    let asking = Asking {
        tenant: TenantId::Anonymous,
        received: std::time::Instant::now(),
        model: None,
    };
    let class = Priority::Interactive;
    let mut ctx = RequestCtx::new();
    ctx.admission = Held::granted_at_once(&adm, class, &asking);
    assert!(ctx.admission.is_some(), "the only slot is free");
    choose(&f, &mut ctx).unwrap();
    assert!(
        Held::granted_at_once(&adm, class, &asking).is_none(),
        "a second request waits while the answer streams"
    );
    // Its end is read upstream: the next request goes at once, before the
    // client has the last bytes.
    answer_ended(&f, &mut ctx);
    let next = Held::granted_at_once(&adm, class, &asking);
    assert!(next.is_some(), "the slot was given back");
    assert!(
        Held::granted_at_once(&adm, class, &asking).is_none(),
        "given back once: the next request holds it"
    );
    answer_ended(&f, &mut ctx);
    let rec = ctx.record("POST".into(), "/".into(), Outcome::Ok, None, None);
    finish(&f, &mut ctx, &rec, &End::Whole).expect("the member's facts");
    drop(ctx);
    assert!(
        Held::granted_at_once(&adm, class, &asking).is_none(),
        "`logging` and the context's drop give nothing back twice"
    );
}
