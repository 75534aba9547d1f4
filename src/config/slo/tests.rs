use super::*;
use crate::config::queue::RawClass;

fn key(name: &str, slo: Option<u64>) -> RawKey {
    RawKey {
        name: name.to_string(),
        ttft_slo_ms: slo,
        ..RawKey::default()
    }
}

#[test]
fn a_tenant_default_wins_over_its_class() {
    let mut queue = RawQueue::default();
    queue.classes.insert(
        "interactive".into(),
        RawClass {
            ttft_slo_ms: Some(300),
            ..RawClass::default()
        },
    );
    let keys = [key("a", Some(200)), key("b", None)];
    let s = slos(Some(&keys), &queue).unwrap();
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
    assert!(slos(None, &RawQueue::default()).unwrap().is_empty());
}

#[test]
fn out_of_range_objectives_are_one_line_errors() {
    for bad in [0, MAX_SLO_MS + 1] {
        let e = slos(Some(&[key("a", Some(bad))]), &RawQueue::default()).unwrap_err();
        let line = e.to_string();
        assert!(
            line.contains("auth.keys") && line.contains("ttft_slo_ms"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let mut queue = RawQueue::default();
        queue.classes.insert(
            "batch".into(),
            RawClass {
                ttft_slo_ms: Some(bad),
                ..RawClass::default()
            },
        );
        let e = slos(None, &queue).unwrap_err().to_string();
        assert!(
            e.contains("queue.classes.ttft_slo_ms") && e.contains("batch"),
            "{e}"
        );
    }
}
