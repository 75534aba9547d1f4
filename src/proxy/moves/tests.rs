//! The registry: which answer a pre-emption pauses, telling once,
//! declining, leaving.

use std::time::{Duration, Instant};

use super::*;

fn answer(class: usize, pausable: bool, since: Instant) -> Answer {
    Answer {
        member: 0,
        model: None,
        class,
        pausable,
        since,
    }
}

#[test]
fn the_newest_pausable_answer_of_a_less_urgent_class_is_paused_once() {
    let moves = Moves::new();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(1);
    let latest = t0 + Duration::from_secs(2);
    let (old, new, urgent, fixed) = (
        Arc::new(Signal::default()),
        Arc::new(Signal::default()),
        Arc::new(Signal::default()),
        Arc::new(Signal::default()),
    );
    let _a = moves.register(answer(2, true, t0), old.clone());
    let _b = moves.register(answer(2, true, later), new.clone());
    // Newer, but of the waiter's own class, or not pausable.
    let _c = moves.register(answer(0, true, latest), urgent.clone());
    let _d = moves.register(answer(2, false, latest), fixed.clone());
    assert_eq!(moves.pausing(), 0);
    assert_eq!(moves.preempt(0, None), Some(2));
    assert_eq!(new.reason(), Some(Reason::Preempted));
    assert_eq!(old.reason(), None);
    assert_eq!(moves.pausing(), 1);
    // The next waiter takes the next one; then none is left.
    assert_eq!(moves.preempt(0, None), Some(2));
    assert_eq!(old.reason(), Some(Reason::Preempted));
    assert_eq!(moves.preempt(0, None), None);
    assert_eq!(urgent.reason(), None);
    assert_eq!(fixed.reason(), None);
    // A batch waiter pauses nothing of its own class.
    assert_eq!(moves.preempt(2, None), None);
}

#[test]
fn a_declined_or_finished_answer_is_not_counted_nor_told_again() {
    let moves = Moves::new();
    let t0 = Instant::now();
    let s = Arc::new(Signal::default());
    let r = moves.register(answer(2, true, t0), s.clone());
    assert_eq!(moves.preempt(1, None), Some(2));
    assert_eq!(moves.pausing(), 1);
    r.decline();
    assert_eq!(moves.pausing(), 0, "a declined answer frees no slot");
    assert_eq!(moves.preempt(1, None), None);
    drop(r);
    let s2 = Arc::new(Signal::default());
    let r2 = moves.register(answer(2, true, t0), s2.clone());
    assert_eq!(moves.preempt(1, None), Some(2));
    drop(r2);
    assert_eq!(moves.pausing(), 0, "an answer that left is not waited for");
}

#[tokio::test]
async fn a_told_answer_wakes_even_if_told_before_it_waits() {
    let s = Arc::new(Signal::default());
    let moves = Moves::new();
    let _r = moves.register(answer(2, true, Instant::now()), s.clone());
    assert_eq!(moves.preempt(0, None), Some(2));
    tokio::time::timeout(Duration::from_secs(5), s.told())
        .await
        .unwrap();
    assert_eq!(s.reason(), Some(Reason::Preempted));
}

#[test]
fn a_pause_for_elsewhere_takes_only_an_answer_on_an_upstream_that_fits() {
    let moves = Moves::new();
    let t0 = Instant::now();
    let (on_a, on_b) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
    let _a = moves.register(
        Answer {
            member: 0,
            ..answer(2, true, t0)
        },
        on_a.clone(),
    );
    // The newest runs on member 1, which the waiting request cannot take.
    let _b = moves.register(
        Answer {
            member: 1,
            ..answer(2, true, t0 + Duration::from_secs(1))
        },
        on_b.clone(),
    );
    assert_eq!(moves.preempt_where(0, |m| m == 0), Some(2));
    assert_eq!(on_a.reason(), Some(Reason::Preempted));
    assert_eq!(on_b.reason(), None);
    // None left that fits.
    assert_eq!(moves.preempt_where(0, |m| m == 0), None);
    assert_eq!(on_b.reason(), None);
}
