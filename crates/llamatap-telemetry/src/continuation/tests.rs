//! The continuation counter: seeded, counted by reason and result.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

use super::*;

fn entry(reason: Reason, result: ContinuationResult) -> Continued {
    Continued {
        at: Duration::from_millis(900),
        reason,
        result,
        why: None,
        from: Some("a".into()),
        to: Some("b".into()),
        tokens_before: 40,
        reprefilled: Some(70),
        cached: Some(12),
        generated: Some(30),
        pause: Duration::from_millis(300),
    }
}

fn text(r: &Registry) -> String {
    let mut s = String::new();
    encode(&mut s, r).unwrap();
    s
}

#[test]
fn every_pair_is_seeded_and_each_continuation_counted() {
    let mut r = Registry::default();
    let m = ContinuationMetrics::register(&mut r);
    let t = text(&r);
    for reason in Reason::ALL {
        for result in ContinuationResult::ALL {
            let line = format!(
                "llamatap_continuations_total{{reason=\"{}\",result=\"{}\"}} 0",
                reason.as_str(),
                result.as_str()
            );
            assert!(t.contains(&line), "{line} missing:\n{t}");
        }
    }
    m.count(&[
        entry(Reason::UpstreamDied, ContinuationResult::Continued),
        entry(Reason::Stalled, ContinuationResult::Failed),
    ]);
    let t = text(&r);
    assert!(
        t.contains("llamatap_continuations_total{reason=\"upstream_died\",result=\"continued\"} 1")
    );
    assert!(t.contains("llamatap_continuations_total{reason=\"stalled\",result=\"failed\"} 1"));
    assert!(t.contains("llamatap_continuations_total{reason=\"stalled\",result=\"continued\"} 0"));
    for class in ["default", "batch"] {
        let line = format!("llamatap_preemptions_total{{class=\"{class}\"}} 0");
        assert!(t.contains(&line), "{line} missing:\n{t}");
    }
    m.preemptions
        .get_or_create(&PreemptionLabels { class: "batch" })
        .inc();
    assert!(text(&r).contains("llamatap_preemptions_total{class=\"batch\"} 1"));
}
