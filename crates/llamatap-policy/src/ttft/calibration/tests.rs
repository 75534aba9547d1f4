//! Tests of the calibrated bound: the ring, the conformal rank, the
//! confidence, and (property) the coverage on exchangeable ratios and the
//! bound's order against a sorted reference.

use super::*;
use proptest::prelude::*;

fn of(ratios: &[f64]) -> Ratios {
    let mut r = Ratios::default();
    for &x in ratios {
        r.push(x);
    }
    r
}

/// The reference: the rank taken from a sorted copy.
fn reference(held: &[f64], coverage: f64) -> f64 {
    let mut v = held.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = (((n + 1) as f64 * coverage).ceil() as usize).clamp(1, n);
    v[rank - 1]
}

#[test]
fn empty_has_no_quantile_and_a_factor_of_one() {
    let r = Ratios::default();
    assert!(r.is_empty());
    assert_eq!(r.quantile(COVERAGE), None);
    let b = r.bound(Estimate::prefill_only(200.0, Confidence::High));
    assert_eq!(b.factor, 1.0);
    assert_eq!(b.ttft_ms, 200.0);
    assert_eq!(b.ratios, 0);
    assert_eq!(b.confidence, Confidence::Low);
}

#[test]
fn invalid_ratios_are_ignored_and_wild_ones_clamped() {
    let r = of(&[f64::NAN, f64::INFINITY, -1.0, 0.0, f64::NEG_INFINITY]);
    assert!(r.is_empty());
    let r = of(&[1e9]);
    assert_eq!(r.quantile(0.5), Some(64.0));
    let r = of(&[1e-9]);
    assert_eq!(r.quantile(0.5), Some(1.0 / 64.0));
}

#[test]
fn fewer_than_ninety_nine_give_the_largest() {
    let held: Vec<f64> = (1..=50).map(|i| f64::from(i) / 10.0).collect();
    let r = of(&held);
    assert_eq!(r.len(), 50);
    assert_eq!(r.quantile(COVERAGE), Some(5.0));
}

#[test]
fn the_rank_is_the_conformal_one() {
    // 128 ratios 1..=128: rank ⌈129 · 0.99⌉ = 128 → the largest; at 0.9,
    // ⌈116.1⌉ = 117; at 0.5, ⌈64.5⌉ = 65.
    let held: Vec<f64> = (1..=128).map(f64::from).collect();
    let r = of(&held);
    assert_eq!(r.quantile(0.99), Some(64.0)); // clamped to the limit
    let held: Vec<f64> = (1..=128).map(|i| f64::from(i) / 100.0).collect();
    let r = of(&held);
    assert_eq!(r.quantile(0.99).map(|q| (q * 100.0).round()), Some(128.0));
    assert_eq!(r.quantile(0.9).map(|q| (q * 100.0).round()), Some(117.0));
    assert_eq!(r.quantile(0.5).map(|q| (q * 100.0).round()), Some(65.0));
    // The smallest, 0.01, was taken in as 1/64.
    assert_eq!(r.quantile(0.0).map(|q| (q * 100.0).round()), Some(2.0));
    assert_eq!(r.quantile(7.0).map(|q| (q * 100.0).round()), Some(128.0));
}

#[test]
fn the_window_forgets_the_oldest() {
    // A slow period, then WINDOW fast answers: the slow ones are gone.
    let mut r = of(&[3.0; 10]);
    assert_eq!(r.quantile(COVERAGE), Some(3.0));
    for _ in 0..WINDOW - 1 {
        r.push(1.0);
    }
    assert_eq!(r.len(), WINDOW);
    assert_eq!(r.quantile(COVERAGE), Some(3.0), "one slow ratio is left");
    r.push(1.0);
    assert_eq!(r.len(), WINDOW);
    assert_eq!(r.quantile(COVERAGE), Some(1.0));
}

#[test]
fn confidence_needs_the_minimum_and_a_sure_prediction() {
    let mut r = Ratios::default();
    for i in 0..MIN_RATIOS {
        let b = r.bound(Estimate::prefill_only(100.0, Confidence::High));
        assert_eq!(b.confidence, Confidence::Low, "after {i}");
        r.push(1.5);
    }
    let b = r.bound(Estimate::prefill_only(100.0, Confidence::High));
    assert_eq!(b.confidence, Confidence::High);
    assert_eq!(b.factor, 1.5);
    assert_eq!(b.ttft_ms, 150.0);
    assert_eq!(b.ratios, MIN_RATIOS);
    assert_eq!(b.estimate.ttft_ms, 100.0);
    let b = r.bound(Estimate::prefill_only(100.0, Confidence::Low));
    assert_eq!(b.confidence, Confidence::Low);
}

#[test]
fn a_factor_below_one_lowers_the_bound() {
    let r = of(&[0.5; 40]);
    let b = r.bound(Estimate::prefill_only(100.0, Confidence::High));
    assert_eq!(b.ttft_ms, 50.0);
}

#[test]
fn coverage_on_a_seeded_stream() {
    // Log-normal ratios (scatter 0.3): after a full window, the share of
    // the next ratios within the bound is about COVERAGE or more.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(45);
    let mut draw = || {
        let u: f64 = rng.random_range(1e-9..1.0);
        let v: f64 = rng.random_range(0.0..1.0);
        let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
        (0.3 * z).exp()
    };
    let mut r = Ratios::default();
    for _ in 0..WINDOW {
        r.push(draw());
    }
    let (mut within, trials) = (0, 20_000);
    for _ in 0..trials {
        let next = draw();
        if next <= r.quantile(COVERAGE).unwrap() {
            within += 1;
        }
        r.push(next);
    }
    let share = f64::from(within) / f64::from(trials);
    assert!(share >= 0.985, "coverage {share}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The quantile is the reference's rank over the last WINDOW ratios;
    /// the bound is finite, at least the prediction times the smallest
    /// ratio held, at most times the largest.
    #[test]
    fn quantile_matches_a_sorted_reference(
        ratios in proptest::collection::vec(0.02f64..50.0, 1..300),
        coverage in 0.0f64..=1.0,
        predicted in 0.0f64..100_000.0,
    ) {
        let r = of(&ratios);
        let tail: Vec<f64> = ratios
            .iter()
            .skip(ratios.len().saturating_sub(WINDOW))
            .map(|&x| f64::from(x as f32))
            .collect();
        prop_assert_eq!(r.len(), tail.len());
        prop_assert_eq!(r.quantile(coverage), Some(reference(&tail, coverage)));
        let b = r.bound(Estimate::prefill_only(predicted, Confidence::High));
        prop_assert!(b.ttft_ms.is_finite() && b.ttft_ms >= 0.0);
        let lo = tail.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = tail.iter().copied().fold(0.0, f64::max);
        prop_assert!(b.ttft_ms >= predicted * lo - 1e-9);
        prop_assert!(b.ttft_ms <= predicted * hi + 1e-9);
        prop_assert_eq!(
            b.confidence == Confidence::High,
            tail.len() >= MIN_RATIOS
        );
    }

    /// A higher coverage never gives a lower quantile.
    #[test]
    fn monotone_in_coverage(
        ratios in proptest::collection::vec(0.02f64..50.0, 1..200),
        a in 0.0f64..=1.0,
        b in 0.0f64..=1.0,
    ) {
        let r = of(&ratios);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(r.quantile(lo) <= r.quantile(hi));
    }
}
