//! Tests of the board as the predictor reads it: the started prefills
//! drained at their pace, one after another.

use std::time::{Duration, Instant};

use super::super::tests::flight;
use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_started_prefill_drains_at_its_pace() {
    let t = Instant::now();
    let at = |n| t + ms(n);
    // 1,000 tokens at 1 ms a token, reported at 0.
    let one = (t, 1000, 1.0);
    assert_eq!(left_now(one, None, t).0, 1000);
    assert_eq!(left_now(one, None, at(400)).0, 600);
    assert_eq!(left_now(one, None, at(999)).0, 1);
    // Past its prediction it counts 0 (its first token will say).
    assert_eq!(left_now(one, None, at(1500)).0, 0);
    assert_eq!(left_now(one, None, t).1, at(1000));
    // A report later than now leaves it whole.
    assert_eq!(left_now((at(10), 1000, 1.0), None, t).0, 1000);
}

#[test]
fn prefills_reported_together_drain_one_after_another() {
    let t = Instant::now();
    let at = |n| t + ms(n);
    // Two prompts of 500 tokens reported at once: a batch of both takes
    // as long as the two one after the other.
    let (a, free) = left_now((t, 500, 1.0), None, at(700));
    let (b, _) = left_now((t, 500, 1.0), Some(free), at(700));
    assert_eq!((a, b), (0, 300));
    // One reported after the first finished starts at its report.
    let (_, free) = left_now((t, 100, 1.0), None, at(700));
    assert_eq!(left_now((at(600), 400, 2.0), Some(free), at(700)).0, 350);
}

#[test]
fn the_board_reads_started_prefills_drained() {
    let f = Flights::default();
    let long = f.board(0, flight(1000), None).unwrap();
    let unpaced = f.board(0, flight(800), None).unwrap();
    let waiting = f.board(0, flight(300), None).unwrap();
    f.paced(long, 1.0);
    f.paced(waiting, 1.0);
    let Some(ago) = Instant::now().checked_sub(ms(400)) else {
        return;
    };
    // Started 400 ms ago at 1 ms a token; one with no pace; one queued.
    f.progressed(long, ago, 1000, 1000);
    f.progressed(unpaced, ago, 800, 800);
    let mut out = [InFlight::default(); MAX_SLOTS];
    assert_eq!(f.of(0, &mut out), 3);
    // At most 600 left; a stalled test thread only drains it further.
    assert!(out[0].prefill_left <= 600, "{:?}", out[0]);
    assert_eq!(out[1].prefill_left, 800, "no pace: as reported");
    assert_eq!(out[2].prefill_left, 300, "not started: whole");
    // Its first token: over.
    f.prefilled(long, Instant::now());
    f.of(0, &mut out);
    assert_eq!(out[0].prefill_left, 0);
}
