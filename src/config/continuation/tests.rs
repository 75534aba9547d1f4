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
}
