use super::*;
use crate::admission::{Asking, Held};
use llamatap_policy::tenant::TenantId;

fn held(class: Priority) -> Held {
    let asking = Asking {
        tenant: TenantId::Anonymous,
        received: std::time::Instant::now(),
        model: None,
    };
    let mut h = Held::new(class, &asking, 1);
    h.waited = true;
    h.queued_now = true;
    h
}

#[test]
fn a_full_queue_is_a_503_naming_its_depth_and_leaves_the_queue() {
    let mut h = held(Priority::Batch);
    let r = refused(&mut h, Refused::Full, Some(8));
    assert_eq!(
        r,
        Refusal {
            status: 503,
            kind: "server_error",
            code: "queue_full",
            message: "the batch queue is full (8 requests wait); retry later".to_string(),
            retry_after: true,
            outcome: Outcome::Rejected,
        }
    );
    assert!(!h.queued_now, "it left the queue");
}

#[test]
fn the_tenant_s_own_share_is_a_429_and_a_timeout_names_max_wait() {
    let r = refused(&mut held(Priority::Default), Refused::TenantShare, None);
    assert_eq!(
        (r.status, r.kind, r.retry_after),
        (429, "rate_limit_error", true)
    );
    assert!(
        r.message.contains("holds more than its share"),
        "{}",
        r.message
    );
    let r = refused(&mut held(Priority::Interactive), Refused::Timeout, None);
    assert_eq!((r.status, r.code), (503, "queue_timeout"));
    assert_eq!(
        r.message,
        "no upstream slot came free within the interactive class's max_wait_ms; retry later"
    );
    let r = refused(&mut held(Priority::Batch), Refused::Full, None);
    assert_eq!(r.message, "the batch queue is full; retry later");
}

#[test]
fn a_bad_priority_header_is_a_client_error_without_retry_after() {
    let r = invalid_priority("x-priority", &"urgent".repeat(20));
    assert_eq!(
        (r.status, r.kind, r.code, r.retry_after),
        (400, "invalid_request_error", "invalid_priority", false)
    );
    assert!(
        r.message.starts_with("header x-priority: \"urgent"),
        "{}",
        r.message
    );
    assert!(
        r.message.len() < 64 + 100,
        "the value is bounded: {}",
        r.message
    );
    assert_eq!(r.outcome, Outcome::ClientError);
}

#[test]
fn the_labels_are_the_metrics_reasons() {
    for (why, label) in [
        (Refused::Full, "queue_full"),
        (Refused::TenantShare, "tenant_queue_full"),
        (Refused::Timeout, "queue_timeout"),
    ] {
        assert_eq!(why.as_str(), label);
        assert!(llamatap_telemetry::queue::REFUSAL_REASONS.contains(&label));
    }
}
