//! Tests of which prompts await their start, and of waking the requests
//! waiting for them.

use std::time::{Duration, Instant};

use super::super::tests::flight;
use super::super::Flights;

/// A board whose member 0 has sent progress events before.
fn seen() -> Flights {
    let f = Flights::default();
    let b = f.board(0, flight(10), None).unwrap();
    f.progressed(b, Instant::now(), (10, 10, 0));
    f.land(b);
    f
}

fn awaiting(f: &Flights) -> usize {
    f.sequencing
        .awaiting
        .load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn a_prompt_awaits_its_start_only_with_progress_on_a_member_that_sent_some() {
    let f = Flights::default();
    let a = f.board(0, flight(500), None).unwrap();
    let b = f.board(0, flight(500), None).unwrap();
    f.describe(a, Some(8), Some(500), None, true);
    assert!(
        !f.unstarted_before(b),
        "member 0 never sent a progress event"
    );
    f.land(a);
    f.land(b);

    let f = seen();
    let a = f.board(0, flight(500), None).unwrap();
    let b = f.board(0, flight(500), None).unwrap();
    let c = f.board(0, flight(500), None).unwrap();
    let elsewhere = f.board(1, flight(500), None).unwrap();
    f.describe(b, Some(8), Some(500), None, false);
    assert!(!f.unstarted_before(c), "b asked for no progress");
    f.describe(a, Some(8), Some(0), None, true);
    assert!(!f.unstarted_before(c), "a has nothing to prefill");
    f.describe(b, Some(8), Some(500), None, true);
    assert!(f.unstarted_before(c));
    assert!(!f.unstarted_before(b), "only the prompts dispatched before");
    assert!(!f.unstarted_before(a));
    assert!(!f.unstarted_before(elsewhere), "nor those of other members");
    assert_eq!(awaiting(&f), 1);
    f.describe(b, Some(8), Some(500), None, true);
    assert_eq!(awaiting(&f), 1, "counted once");
    f.describe(b, Some(8), Some(500), None, false);
    assert!(!f.unstarted_before(c));
    assert_eq!(awaiting(&f), 0);
    for x in [a, b, c, elsewhere] {
        f.land(x);
    }
}

#[test]
fn a_start_a_first_token_or_a_landing_ends_the_await() {
    let f = seen();
    let a = f.board(0, flight(500), None).unwrap();
    let b = f.board(0, flight(500), None).unwrap();
    let c = f.board(0, flight(500), None).unwrap();
    let later = f.board(0, flight(500), None).unwrap();
    for x in [a, b, c] {
        f.describe(x, Some(8), Some(500), None, true);
    }
    assert_eq!(awaiting(&f), 3);
    f.progressed(a, Instant::now(), (500, 500, 0));
    f.prefilled(b, Instant::now());
    assert!(f.unstarted_before(later), "c has not started");
    f.land(c);
    assert!(!f.unstarted_before(later));
    assert_eq!(awaiting(&f), 0);
    // Started or prefilled, a prompt described again awaits nothing.
    f.describe(a, Some(8), Some(400), None, true);
    f.describe(b, Some(8), Some(400), None, true);
    assert!(!f.unstarted_before(later));
    assert_eq!(awaiting(&f), 0);
    for x in [a, b, later] {
        f.land(x);
    }
}

#[tokio::test]
async fn a_start_wakes_the_requests_waiting_for_it() {
    let f = seen();
    let a = f.board(0, flight(500), None).unwrap();
    let b = f.board(0, flight(500), None).unwrap();
    f.describe(a, Some(8), Some(500), None, true);
    let waiting = f.waiting();
    // Created before the change, woken by it.
    let started = waiting.started();
    assert!(f.unstarted_before(b));
    f.progressed(a, Instant::now(), (500, 480, 0));
    tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .unwrap();
    assert!(!f.unstarted_before(b));
    drop(waiting);
    assert_eq!(
        f.sequencing
            .waiting
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    f.land(a);
    f.land(b);
}
