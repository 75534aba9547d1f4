use super::*;
use crate::config::queue::{queue, RawClass, RawQueue};

fn key(name: &str, slo: Option<u64>) -> RawKey {
    RawKey {
        name: name.to_string(),
        ttft_slo_ms: slo,
        ..RawKey::default()
    }
}

fn class(name: &str, slo: u64) -> RawQueue {
    let mut raw = RawQueue::default();
    raw.classes.insert(
        name.into(),
        RawClass {
            ttft_slo_ms: Some(slo),
            ..RawClass::default()
        },
    );
    raw
}

#[test]
fn a_tenant_default_wins_over_its_class() {
    let keys = [key("a", Some(200)), key("b", None)];
    let q = queue(class("interactive", 300))
        .unwrap()
        .with_tenant_slos(tenants(Some(&keys)).unwrap());
    let s = &q.slo;
    assert_eq!(
        s.default_for(TenantId::Named(0), Priority::Interactive),
        Some(200)
    );
    assert_eq!(
        s.default_for(TenantId::Named(1), Priority::Interactive),
        Some(300)
    );
    assert_eq!(s.default_for(TenantId::Named(1), Priority::Batch), None);
    assert_eq!(
        s.default_for(TenantId::Anonymous, Priority::Interactive),
        Some(300)
    );
    assert!(!s.is_empty());
    assert!(queue(RawQueue::default()).unwrap().slo.is_empty());
}

#[test]
fn out_of_range_objectives_are_one_line_errors() {
    for bad in [0, MAX_SLO_MS + 1] {
        let line = tenants(Some(&[key("a", Some(bad))]))
            .unwrap_err()
            .to_string();
        assert!(
            line.contains("auth.keys") && line.contains("ttft_slo_ms"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let e = queue(class("batch", bad)).unwrap_err().to_string();
        assert!(
            e.contains("queue.classes.ttft_slo_ms") && e.contains("batch"),
            "{e}"
        );
    }
}
