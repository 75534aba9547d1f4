//! `[continuation]` validation.

use super::*;

#[test]
fn defaults_and_bounds() {
    let d = continuation(RawContinuation::default()).unwrap();
    assert_eq!(d, Continuation::default());
    let off = continuation(RawContinuation {
        enabled: Some(false),
        stall_ms: Some(100),
        max_per_answer: Some(0),
        drain_after_ms: Some(0),
        max_pauses: Some(0),
    })
    .unwrap();
    assert!(!off.enabled);
    assert_eq!(off.stall, Duration::from_millis(100));
    for bad in [99, 600_001] {
        let e = continuation(RawContinuation {
            stall_ms: Some(bad),
            ..RawContinuation::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("continuation.stall_ms"), "{e}");
    }
    let e = continuation(RawContinuation {
        max_per_answer: Some(17),
        ..RawContinuation::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("continuation.max_per_answer"), "{e}");
    assert_eq!(off.drain_after, Duration::ZERO);
    assert_eq!(off.max_pauses, 0);
    assert_eq!(d.drain_after, Duration::from_secs(10));
    assert_eq!(d.max_pauses, 1);
    let e = continuation(RawContinuation {
        drain_after_ms: Some(3_600_001),
        ..RawContinuation::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("continuation.drain_after_ms"), "{e}");
    let e = continuation(RawContinuation {
        max_pauses: Some(17),
        ..RawContinuation::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("continuation.max_pauses"), "{e}");
}
