use super::*;
use crate::config::{Overrides, RawConfig};
use llamatap_policy::tenant::window::LimitKind;

fn limiter(toml: &str) -> Limiter {
    let raw = RawConfig::from_toml(toml).unwrap();
    let config = Config::from_raw(raw, &Overrides::default()).unwrap();
    Limiter::new(&config, prometheus_client::metrics::gauge::Gauge::default())
}

const TENANTS: &str = r#"
[auth]
api_keys = ["flat-key-0001"]
[[auth.keys]]
name = "limited"
key = "limited-key-01"
requests_per_minute = 2
max_concurrent = 1
[[auth.keys]]
name = "free"
key = "free-key-0001"
"#;

fn admitted(a: Admission) -> (Quota, Option<InFlight>) {
    match a {
        Admission::Admitted(q, s) => (q, s),
        other => panic!("not admitted: {other:?}"),
    }
}

#[tokio::test]
async fn a_slot_is_held_until_dropped_and_refusals_hold_none() {
    let l = limiter(TENANTS);
    let (q, slot) = admitted(l.admit(TenantId::Named(0)).await);
    assert!(slot.is_some());
    assert_eq!(q.requests.unwrap().remaining, 1);
    for _ in 0..3 {
        match l.admit(TenantId::Named(0)).await {
            Admission::Refused(r) => assert_eq!(r.limit, LimitKind::Concurrency),
            other => panic!("{other:?}"),
        }
    }
    drop(slot);
    // The window allows one more request; then the requests limit speaks.
    let (_, slot) = admitted(l.admit(TenantId::Named(0)).await);
    drop(slot);
    match l.admit(TenantId::Named(0)).await {
        Admission::Refused(r) => {
            assert_eq!(r.limit, LimitKind::Requests);
            assert!(r.retry_after_ms.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn unlimited_tenants_hold_nothing() {
    let l = limiter(TENANTS);
    for id in [TenantId::Named(1), TenantId::Anonymous] {
        for _ in 0..100 {
            let (q, slot) = admitted(l.admit(id).await);
            assert_eq!(q, Quota::default());
            assert!(slot.is_none());
        }
    }
}

/// A store address nothing listens on: connections are refused at once.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn an_unreachable_store_follows_on_error() {
    let port = closed_port();
    let allow = limiter(&format!(
        "{TENANTS}[auth.store]\nurl = \"redis://127.0.0.1:{port}\"\n"
    ));
    // Fail open: this process's own counts decide.
    let (q, _) = admitted(allow.admit(TenantId::Named(0)).await);
    assert_eq!(q.requests.unwrap().remaining, 1);
    let deny = limiter(&format!(
        "{TENANTS}[auth.store]\nurl = \"redis://127.0.0.1:{port}\"\non_error = \"deny\"\n"
    ));
    assert!(matches!(
        deny.admit(TenantId::Named(0)).await,
        Admission::StoreDown
    ));
    // A tenant without a per-minute limit never asks the store.
    admitted(deny.admit(TenantId::Named(1)).await);
}

#[tokio::test]
async fn a_reply_that_is_not_resp_follows_on_error_and_never_panics() {
    use crate::store::standin::{Answer, StandIn, Step};
    // A first character of two bytes in UTF-8, where a type byte belongs.
    let s = StandIn::start(|st: &Step<'_>| match st.args[0].as_str() {
        "INCR" => Answer::Bytes("é12\r\n".as_bytes().to_vec()),
        _ => Answer::Normal,
    })
    .await;
    let store = |on_error: &str| {
        format!(
            "{TENANTS}[auth.store]\nurl = \"{}\"\ntimeout_ms = 2000\non_error = \"{on_error}\"\n",
            s.url()
        )
    };
    let deny = limiter(&store("deny"));
    for _ in 0..3 {
        assert!(matches!(
            deny.admit(TenantId::Named(0)).await,
            Admission::StoreDown
        ));
    }
    // Fail open: this process's own counts decide.
    let allow = limiter(&store("allow"));
    let (q, _) = admitted(allow.admit(TenantId::Named(0)).await);
    assert_eq!(q.requests.unwrap().remaining, 1);
}
