//! The floor under a member's TTFT (`member/floor.rs`): half the fastest
//! decode step and least overhead seen, never rising, the member's own.

use super::*;

/// `key`'s floor, through its bound on a short idle prompt.
fn floor(book: &TtftBook<u32>, key: u32) -> Option<f64> {
    book.bound(&key, &idle(10, 0), 0).and_then(|b| b.floor_ms)
}

/// An answer of `answered` tokens decoded in `decode_ms`, its prompt
/// prefilled in `prompt_ms`, and its TTFT when it was streamed.
fn answer(answered: u32, decode_ms: f64, prompt_ms: f64, ttft_ms: Option<f64>) -> Observation {
    Observation {
        timings: Timings {
            prompt_n: 20,
            prompt_ms,
            cache_n: 0,
            predicted_n: answered,
            predicted_ms: decode_ms,
        },
        ttft_ms,
        ..Observation::default()
    }
}

#[test]
fn the_floor_is_half_the_fastest_step_and_least_overhead_seen() {
    let mut book = TtftBook::new(8);
    assert_eq!(floor(&book, 0), None, "no data, no bound");
    // Not streamed: a step of 2 ms, no overhead known.
    book.observe(&0, &answer(8, 16.0, 30.0, None));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * 2.0));
    // Streamed: 12 ms outside its prefill of 30.
    book.observe(&0, &answer(8, 24.0, 30.0, Some(42.0)));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * (2.0 + 12.0)));
    // Slower answers never raise it; a faster step lowers it.
    book.observe(&0, &answer(8, 400.0, 300.0, Some(900.0)));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * (2.0 + 12.0)));
    book.observe(&0, &answer(10, 15.0, 30.0, Some(40.0)));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * (1.5 + 10.0)));
}

#[test]
fn what_teaches_no_floor() {
    let mut book = TtftBook::new(8);
    // One token answered: no step; a TTFT under its prefill: overhead 0.
    book.observe(&0, &answer(1, 5.0, 30.0, Some(20.0)));
    assert_eq!(floor(&book, 0), Some(0.0));
    let mut book = TtftBook::new(8);
    for bad in [f64::NAN, f64::INFINITY, 0.0, -3.0] {
        book.observe(&0, &answer(8, bad, 30.0, Some(f64::NAN)));
    }
    let bound = book.bound(&0, &idle(10, 0), 0).unwrap();
    assert_eq!(bound.floor_ms, None);
}

#[test]
fn a_new_member_does_not_take_its_peers_floor() {
    // The peer decodes at 5 ms a token; the new member at 0.5.
    let m = Member::cpu();
    let mut book = trained(&m, 20, 0.0, 5);
    let peer = floor(&book, 0).unwrap();
    assert!(peer > 2.0, "{peer}");
    book.observe_among(&1, &answer(8, 4.0, 10.0, None), |_| true);
    assert_eq!(floor(&book, 1), Some(FLOOR_SHARE * 0.5));
}

#[test]
fn no_prefill_is_predicted_shorter_than_the_fastest_step() {
    let mut book = TtftBook::new(8);
    // A prefill of 0.1 ms a token; a decode step of 5 ms.
    for new in [100, 400, 200, 800] {
        let mut obs = answer(8, 40.0, f64::from(new) * 0.1, None);
        obs.timings.prompt_n = new;
        book.observe(&0, &obs);
    }
    // Cached to its last token: the curve says well under a step.
    let e = estimate(book.predict(&0, &idle(801, 800)));
    assert!((e.prefill_ms - 5.0).abs() < 1e-9, "{e:?}");
    // Long prompts are the curve's.
    let e = estimate(book.predict(&0, &idle(1000, 0)));
    assert!(e.prefill_ms > 50.0, "{e:?}");
}

#[test]
fn a_new_process_starts_a_new_floor() {
    let mut book = TtftBook::new(8);
    let of = |process, decode_ms| Observation {
        process,
        ..answer(8, decode_ms, 30.0, None)
    };
    book.observe(&0, &of(1, 16.0));
    book.renew_floor(&0, 1);
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * 2.0));
    // Restarted (on faster hardware, maybe): nothing known of its floor,
    // while its rates stand.
    book.renew_floor(&0, 2);
    assert_eq!(floor(&book, 0), None);
    assert!(book.bound(&0, &idle(10, 0), 0).is_some());
    book.observe(&0, &of(2, 8.0));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * 1.0));
    // An answer of a process newer than the floor's empties it first.
    book.observe(&0, &of(3, 40.0));
    assert_eq!(floor(&book, 0), Some(FLOOR_SHARE * 5.0));
}
