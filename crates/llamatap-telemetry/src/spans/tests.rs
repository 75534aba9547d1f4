//! Span times as a viewer shows them.

use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::whole_micros;

/// How Jaeger shows a span and an event: start and event times in whole
/// microseconds (truncated), the duration in whole microseconds
/// (truncated), the end as start plus duration.
fn shown(start: SystemTime, event: SystemTime, end: SystemTime) -> (u128, u128) {
    let us = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros()
    };
    let duration = end.duration_since(start).unwrap().as_micros();
    (us(event), us(start) + duration)
}

#[test]
fn an_event_at_the_spans_end_was_shown_after_it_before_rounding() {
    // Start at .600 µs, event and end at 10.400 µs: 10 µs against 0 + 9.
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let start = base + Duration::from_nanos(600);
    let end = base + Duration::from_nanos(10_400);
    let (event, shown_end) = shown(start, end, end);
    assert!(event > shown_end, "the viewer's arithmetic, unrounded");
    let (event, shown_end) = shown(whole_micros(start), whole_micros(end), whole_micros(end));
    assert!(event <= shown_end);
}

proptest! {
    #[test]
    fn every_event_within_its_span_is_shown_within_it(
        start_ns in 0u64..10_000_000,
        event_after in 0u64..1_000_000,
        end_after_event in 0u64..1_000_000,
    ) {
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let start = base + Duration::from_nanos(start_ns);
        let event = start + Duration::from_nanos(event_after);
        let end = event + Duration::from_nanos(end_after_event);
        let (e, shown_end) = shown(whole_micros(start), whole_micros(event), whole_micros(end));
        prop_assert!(e <= shown_end);
        prop_assert!(whole_micros(start) <= whole_micros(event));
    }
}
