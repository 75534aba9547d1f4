//! The fixed lists and their label values.

use std::collections::HashSet;

use super::*;

#[test]
fn every_reason_has_its_own_label() {
    let labels: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        ["upstream_died", "stalled", "drained", "preempted"],
        "label values are metric series: they do not change"
    );
    assert_eq!(
        labels.iter().collect::<HashSet<_>>().len(),
        Reason::ALL.len()
    );
}

#[test]
fn every_result_has_its_own_label() {
    let labels: Vec<&str> = ContinuationResult::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, ["continued", "not_continuable", "failed"]);
    assert_eq!(
        labels.iter().collect::<HashSet<_>>().len(),
        ContinuationResult::ALL.len()
    );
}
