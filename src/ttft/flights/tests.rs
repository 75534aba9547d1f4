//! Tests of the board of answers in flight: boarding, updates and
//! landing, the bounded lists, promises, prefill windows and the time since
//! each first token, and the tokens each stream counted.

use super::*;

/// An answer on the board with `prefill_left` prompt tokens to prefill.
pub(super) fn flight(prefill_left: u32) -> InFlight {
    InFlight {
        generated: 0,
        max_tokens: Some(64),
        prefill_left,
        decoding_ms: 0,
        prefilling_ms: 0,
        prefill_context: 0,
    }
}

#[test]
fn answers_board_update_and_land_per_member() {
    let f = Flights::default();
    let a = f.board(0, flight(500), None).unwrap();
    let b = f.board(0, flight(300), None).unwrap();
    let c = f.board(1, flight(100), None).unwrap();
    let mut out = [InFlight::default(); 8];
    assert_eq!(f.of(0, &mut out), 2);
    assert_eq!((out[0].prefill_left, out[1].prefill_left), (500, 300));
    f.prefill_left(a, 0);
    assert_eq!(f.of(0, &mut out), 2);
    assert_eq!(out[0].prefill_left, 0);
    f.land(a);
    assert_eq!(f.of(0, &mut out), 1);
    assert_eq!(out[0].prefill_left, 300);
    f.land(b);
    f.land(b);
    assert_eq!(f.of(0, &mut out), 0);
    assert_eq!(f.of(1, &mut out), 1);
    f.land(c);
    assert!(f.by_member.lock().unwrap().is_empty());
    // Updating a landed answer does nothing.
    f.prefill_left(c, 7);
    assert_eq!(f.of(1, &mut out), 0);
}

#[test]
fn a_member_holds_a_bounded_list_and_copies_fit_the_buffer() {
    let f = Flights::default();
    let boarded: Vec<_> = (0..MAX_PER_MEMBER + 3)
        .map(|i| f.board(2, flight(i as u32), None))
        .collect();
    assert_eq!(
        boarded.iter().filter(|b| b.is_some()).count(),
        MAX_PER_MEMBER
    );
    let mut small = [InFlight::default(); 4];
    assert_eq!(f.of(2, &mut small), 4);
    assert_eq!(small[3].prefill_left, 3);
}

fn promise(slo_ms: u64) -> Promise {
    let sent = Instant::now();
    Promise {
        sent,
        deadline: sent + std::time::Duration::from_millis(slo_ms),
        expected_ms: 600.0,
        factor: 1.0,
    }
}

#[test]
fn a_later_prompt_is_held_by_the_promises_boarded_before_it_only() {
    let f = Flights::default();
    let now = Instant::now();
    let a = f.board(0, flight(500), Some(promise(60_000))).unwrap();
    let tight = promise(1000);
    let b = f.board(0, flight(400), Some(tight)).unwrap();
    let c = f.board(0, flight(300), None).unwrap();
    let other = f.board(1, flight(300), None).unwrap();
    assert!(f.promised());
    // c would break b's (600 + 500 > 1000), not a's; a is held by none.
    assert_eq!(f.held_by(c, 500.0, now), Some(tight.deadline));
    assert_eq!(f.held_by(c, 300.0, now), None);
    assert_eq!(f.held_by(a, 1e9, now), None);
    assert_eq!(f.held_by(other, 1e9, now), None);
    // b's first token came: its promise is kept, c is free.
    f.prefill_left(b, 0);
    assert_eq!(f.held_by(c, 500.0, now), None);
    assert_eq!(f.held_by(c, 1e9, now), Some(a.map_deadline(&f)));
    // A correction moves a's expectation.
    f.expect(a, 59_999.0);
    assert_eq!(f.held_by(c, 2.0, now), Some(a.map_deadline(&f)));
    f.land(a);
    assert_eq!(f.held_by(c, 1e9, now), None);
    assert!(!f.promised());
}

impl Boarded {
    fn map_deadline(&self, f: &Flights) -> Instant {
        let by = f.by_member.lock().unwrap();
        by[&self.member]
            .list
            .iter()
            .find(|e| e.id == self.id)
            .and_then(|e| e.promise)
            .unwrap()
            .deadline
    }
}

#[test]
fn no_promise_without_a_prefill_and_each_counted_once() {
    let f = Flights::default();
    let done = f.board(0, flight(0), Some(promise(1000))).unwrap();
    assert!(!f.promised());
    let p = f.board(0, flight(10), Some(promise(1000))).unwrap();
    assert!(f.promised());
    f.prefill_left(p, 0);
    f.prefill_left(p, 0);
    f.land(p);
    assert!(!f.promised());
    // Known whole after its dispatch (one upstream): its prefill and
    // promise come then, once.
    f.describe(done, Some(8), Some(0), Some(promise(1000)), false);
    assert!(!f.promised());
    f.describe(done, Some(8), Some(300), Some(promise(1000)), false);
    f.describe(done, Some(8), Some(300), Some(promise(1000)), false);
    assert_eq!(f.promised.load(Ordering::Relaxed), 1);
    f.land(done);
    assert!(!f.promised());
    assert_eq!(f.promised.load(Ordering::Relaxed), 0);
}

#[test]
fn an_answer_counts_the_prompts_prefilled_beside_it_even_those_landed() {
    use std::time::Duration;
    let f = Flights::default();
    let t0 = Instant::now();
    let ms = |v: u64| t0 + Duration::from_millis(v);
    let long = f.board(0, flight(900), None).unwrap();
    let short = f.board(0, flight(100), None).unwrap();
    let late = f.board(0, flight(50), None).unwrap();
    let elsewhere = f.board(1, flight(70), None).unwrap();
    assert_eq!(
        f.progressed(long, ms(0), (800, 800, 0)),
        0,
        "none beside started"
    );
    assert_eq!(f.progressed(short, ms(100), (200, 200, 0)), 800);
    f.progressed(elsewhere, ms(0), (70, 70, 0));
    assert_eq!(
        f.progressed(long, ms(150), (800, 700, 0)),
        200,
        "only the prefills started, on its own member"
    );
    assert_eq!(f.progressed(short, ms(200), (200, 40, 0)), 700);
    assert_eq!(f.progressed(long, ms(250), (800, 600, 0)), 40);
    assert_eq!(
        f.progressed(long, ms(260), (800, 0, 0)),
        0,
        "its own prompt done: the prompts beside no longer delay it"
    );
    // Not over yet, or never started: nothing to say.
    assert_eq!(f.overlap(long, ms(300)), None);
    assert_eq!(f.overlap(late, ms(300)), None);
    f.prefilled(short, ms(300));
    // The short answer lands before the long prefill ends: still counted.
    f.land(short);
    f.progressed(late, ms(350), (400, 400, 0));
    f.prefilled(long, ms(400));
    f.prefilled(elsewhere, ms(400));
    // All of short's 200, and a twentieth of late's 400 by t = 1350; it
    // started as it boarded: nothing before.
    let overlap = |during, before| Some(Overlap { during, before });
    assert_eq!(f.overlap(long, ms(1350)), overlap(220, 0));
    // Other members are not counted.
    assert_eq!(f.overlap(elsewhere, ms(1350)), overlap(0, 0));
    // Late boarded at the start and started at 350: 7/8 of long's 800 and
    // all of short's 200 went before, the rest of long's during.
    f.prefilled(late, ms(1350));
    assert_eq!(f.overlap(late, ms(1350)), overlap(100, 900));
    f.land(late);
    f.land(long);
    assert!(!f.by_member.lock().unwrap().contains_key(&0));
}

#[test]
fn a_copy_carries_each_answers_time_since_its_first_token() {
    use std::time::Duration;
    let f = Flights::default();
    let a = f.board(0, flight(10), None).unwrap();
    let b = f.board(0, flight(10), None).unwrap();
    f.prefilled(a, Instant::now() - Duration::from_secs(2));
    let mut out = [InFlight::default(); 4];
    assert_eq!(f.of(0, &mut out), 2);
    assert!(out[0].decoding_ms >= 2000, "{:?}", out[0]);
    assert_eq!((out[1].decoding_ms, out[1].prefill_left), (0, 10));
    f.land(a);
    f.land(b);
}

#[test]
fn a_copy_carries_each_prompts_time_on_what_it_has_left_and_what_it_follows() {
    use std::time::Duration;
    let f = Flights::default();
    let a = f.board(0, flight(900), None).unwrap();
    let b = f.board(0, flight(300), None).unwrap();
    let mut out = [InFlight::default(); 4];
    // Neither has started: no time on its prompt yet.
    f.of(0, &mut out);
    assert_eq!((out[0].prefilling_ms, out[1].prefilling_ms), (0, 0));
    // a's slot started 2 s ago with all 900 to do, b's just now.
    let then = Instant::now() - Duration::from_secs(2);
    f.progressed(a, then, (900, 900, 0));
    f.progressed(b, Instant::now(), (300, 300, 0));
    f.of(0, &mut out);
    assert!(out[0].prefilling_ms >= 2000, "{:?}", out[0]);
    assert!(out[1].prefilling_ms < 1000, "{:?}", out[1]);
    // A later event restarts the count on what it says is left.
    f.progressed(a, Instant::now(), (900, 400, 500));
    f.of(0, &mut out);
    assert_eq!((out[0].prefill_left, out[0].prefill_context), (400, 500));
    assert!(out[0].prefilling_ms < 1000, "{:?}", out[0]);
    // An estimate of what is left says nothing of the time on it; a
    // prompt done has none.
    f.prefill_left(b, 250);
    f.prefilled(a, Instant::now());
    f.of(0, &mut out);
    assert_eq!((out[0].prefilling_ms, out[1].prefilling_ms), (0, 0));
    f.land(a);
    f.land(b);
}

#[test]
fn a_copy_carries_the_tokens_each_answers_stream_counted() {
    let f = Flights::default();
    let a = f.board(0, flight(0), None).unwrap();
    let b = f.board(0, flight(0), None).unwrap();
    let tally = f.tally(a).unwrap();
    assert_eq!(tally, f.tally(a).unwrap(), "one tally per answer");
    assert_ne!(tally, f.tally(b).unwrap());
    tally.set(17);
    let mut out = [InFlight::default(); 4];
    assert_eq!(f.of(0, &mut out), 2);
    assert_eq!((out[0].generated, out[1].generated), (17, 0));
    tally.set(u64::MAX);
    f.of(0, &mut out);
    assert_eq!(out[0].generated, u32::MAX);
    f.land(a);
    assert_eq!(f.tally(a), None, "landed: off the board");
    f.land(b);
}

#[test]
fn a_member_keeps_a_bounded_number_of_landed_prefills() {
    let f = Flights::default();
    let keeper = f.board(3, flight(10), None).unwrap();
    for _ in 0..LANDED_KEPT + 5 {
        let b = f.board(3, flight(10), None).unwrap();
        f.progressed(b, Instant::now(), (10, 10, 0));
        f.land(b);
    }
    // One never started adds no window.
    let quiet = f.board(3, flight(10), None).unwrap();
    f.land(quiet);
    let by = f.by_member.lock().unwrap();
    assert_eq!(by[&3].landed.len(), LANDED_KEPT);
    drop(by);
    f.land(keeper);
}

#[tokio::test]
async fn the_end_of_a_promise_wakes_the_waiters() {
    let f = Flights::default();
    let a = f.board(0, flight(10), Some(promise(60_000))).unwrap();
    let b = f.board(0, flight(10), Some(promise(60_000))).unwrap();
    // Waiters created before the change are woken by it.
    let first = f.changed().notified();
    f.progressed(a, Instant::now(), (10, 4, 0));
    assert!(f.promised(), "its prefill is not over");
    f.progressed(a, Instant::now(), (10, 0, 0));
    tokio::time::timeout(std::time::Duration::from_secs(30), first)
        .await
        .unwrap();
    let second = f.changed().notified();
    f.land(b);
    tokio::time::timeout(std::time::Duration::from_secs(30), second)
        .await
        .unwrap();
}
