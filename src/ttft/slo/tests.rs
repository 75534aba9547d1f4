use super::*;
use llamatap_policy::ttft::Estimate;

/// A bound of `ms` (a prediction of half of it, times 2); a member whose
/// bound is of high confidence is calibrated, one of low confidence not.
fn est(ms: f64, confidence: Confidence) -> Option<Bound> {
    let ratios = match confidence {
        Confidence::High => 20,
        Confidence::Low => 5,
    };
    with_ratios(ms, confidence, ratios)
}

fn with_ratios(ms: f64, confidence: Confidence, ratios: usize) -> Option<Bound> {
    Some(Bound {
        ttft_ms: ms,
        factor: 2.0,
        ratios,
        estimate: Estimate {
            ttft_ms: ms / 2.0,
            wait_ms: 0.0,
            prefill_ms: ms / 2.0,
            overhead_ms: 0.0,
            prompt_tokens: 100,
            ahead_tokens: 0,
            confidence,
        },
        confidence,
        floor_ms: None,
    })
}

/// `b` with a floor of `floor_ms`.
fn floored(b: Option<Bound>, floor_ms: f64) -> Option<Bound> {
    b.map(|b| Bound {
        floor_ms: Some(floor_ms),
        ..b
    })
}

#[test]
fn members_over_the_objective_are_left_out_while_one_meets_it() {
    let v = judge(
        300,
        &[
            (0, est(500.0, Confidence::High)),
            (1, est(200.0, Confidence::Low)),
        ],
    );
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![0] }));
    assert_eq!(v.unwrap().avoid(), &[0]);
    // Exactly at the objective meets it.
    let v = judge(300, &[(0, est(300.0, Confidence::High))]);
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![] }));
}

#[test]
fn a_member_without_data_is_not_refused() {
    let v = judge(300, &[(0, est(900.0, Confidence::High)), (3, None)]);
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![0] }));
}

#[test]
fn every_member_surely_over_it_is_a_refusal_naming_the_fastest() {
    let v = judge(
        300,
        &[
            (0, est(900.0, Confidence::High)),
            (2, est(450.0, Confidence::High)),
        ],
    );
    assert_eq!(v, Some(Verdict::Unattainable { best: (2, 450.0) }));
    assert!(v.unwrap().avoid().is_empty());
}

#[test]
fn a_low_confidence_miss_is_admitted_leaving_out_the_sure_misses() {
    let v = judge(
        300,
        &[
            (0, est(900.0, Confidence::High)),
            (1, est(450.0, Confidence::Low)),
            (2, est(700.0, Confidence::High)),
        ],
    );
    assert_eq!(
        v,
        Some(Verdict::Unsure {
            avoid: vec![0, 2],
            best_ms: 450.0
        })
    );
    // The unsure one may be the slower: it is kept, to go on learning.
    let v = judge(
        300,
        &[
            (0, est(400.0, Confidence::High)),
            (1, None),
            (2, est(900.0, Confidence::Low)),
        ],
    );
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![0, 2] }));
    let v = judge(
        300,
        &[
            (0, est(400.0, Confidence::High)),
            (2, est(900.0, Confidence::Low)),
        ],
    );
    assert_eq!(
        v,
        Some(Verdict::Unsure {
            avoid: vec![0],
            best_ms: 400.0
        })
    );
}

#[test]
fn the_bound_is_judged_not_the_bare_prediction() {
    // Predicted at 225 ms (within 300) but bounded at 450 ms: over.
    let b = est(450.0, Confidence::High);
    assert!(b.is_some_and(|b| b.estimate.ttft_ms <= 300.0));
    let v = judge(300, &[(0, b), (1, est(280.0, Confidence::High))]);
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![0] }));
    let v = judge(300, &[(0, b)]);
    assert_eq!(v, Some(Verdict::Unattainable { best: (0, 450.0) }));
}

#[test]
fn no_member_no_verdict() {
    assert_eq!(judge(300, &[]), None);
}

#[test]
fn the_header_wins_over_the_default_and_bad_values_are_refused() {
    assert_eq!(objective(None, None), Ok(None));
    assert_eq!(objective(None, Some(250)), Ok(Some(250)));
    assert_eq!(objective(Some(b"120"), Some(250)), Ok(Some(120)));
    assert_eq!(objective(Some(b" 120 "), None), Ok(Some(120)));
    // A fraction, as clients reading the header as a float send it: up
    // to the next whole millisecond.
    assert_eq!(objective(Some(b"250.0"), None), Ok(Some(250)));
    assert_eq!(objective(Some(b"1.5"), None), Ok(Some(2)));
    assert_eq!(objective(Some(b"0.2"), None), Ok(Some(1)));
    assert_eq!(objective(Some(b"3e2"), None), Ok(Some(300)));
    let bad: [&[u8]; 11] = [
        b"0",
        b"0.0",
        b"-5",
        b"-0.5",
        b"soon",
        b"\xff",
        b"99999999999",
        b"4294967295.5",
        b"NaN",
        b"inf",
        b"",
    ];
    for bad in bad {
        let e = objective(Some(bad), Some(250)).unwrap_err();
        assert!(e.contains("x-slo-ttft-ms"), "{e}");
    }
}

#[test]
fn a_calibrated_member_refuses_even_on_a_load_it_never_measured() {
    // Its prediction is of low confidence (a load never measured), but its
    // error is calibrated: over the objective, it is a refusal.
    let calibrated = with_ratios(450.0, Confidence::Low, MIN_RATIOS);
    let v = judge(300, &[(0, calibrated), (1, est(900.0, Confidence::High))]);
    assert_eq!(v, Some(Verdict::Unattainable { best: (0, 450.0) }));
    // One ratio short of calibrated: admitted, to go on learning.
    let short = with_ratios(450.0, Confidence::Low, MIN_RATIOS - 1);
    let v = judge(300, &[(0, short), (1, est(900.0, Confidence::High))]);
    assert_eq!(
        v,
        Some(Verdict::Unsure {
            avoid: vec![1],
            best_ms: 450.0
        })
    );
    // Within the objective, it meets it as any bound.
    let v = judge(500, &[(0, calibrated)]);
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![] }));
}

#[test]
fn an_objective_below_every_floor_is_refused_whatever_the_confidence() {
    let unsure = est(200.0, Confidence::Low);
    // Unsure bounds admit an objective over their floor...
    let v = judge(5, &[(0, floored(unsure, 4.0)), (1, floored(unsure, 3.0))]);
    assert!(matches!(v, Some(Verdict::Unsure { .. })), "{v:?}");
    // ...and refuse one below every floor, naming the lowest floor.
    let low = est(150.0, Confidence::Low);
    let v = judge(2, &[(0, floored(unsure, 4.0)), (1, floored(low, 3.0))]);
    assert_eq!(
        v,
        Some(Verdict::BelowFloor {
            best: (1, 150.0),
            floor_ms: 3.0
        })
    );
    assert!(v.unwrap().avoid().is_empty());
    // Even with a bare bound within it (a guess from one answer).
    let guess = est(1.0, Confidence::Low);
    let v = judge(2, &[(0, floored(guess, 3.0))]);
    assert!(matches!(v, Some(Verdict::BelowFloor { .. })), "{v:?}");
}

#[test]
fn a_member_without_a_floor_or_data_keeps_a_low_objective_admitted() {
    let unsure = est(200.0, Confidence::Low);
    // One member has no floor yet: admitted, leaving out the floored one
    // (the other goes on learning).
    let v = judge(2, &[(0, floored(unsure, 4.0)), (1, unsure)]);
    assert_eq!(
        v,
        Some(Verdict::Unsure {
            avoid: vec![0],
            best_ms: 200.0
        })
    );
    // One has no data: it may meet it.
    let v = judge(2, &[(0, floored(unsure, 4.0)), (1, None)]);
    assert_eq!(v, Some(Verdict::Meets { avoid: vec![0] }));
    // Below one floor, surely over the other's bound: a plain refusal.
    let sure = est(450.0, Confidence::High);
    let v = judge(300, &[(0, floored(unsure, 400.0)), (1, sure)]);
    assert_eq!(v, Some(Verdict::Unattainable { best: (0, 200.0) }));
}
