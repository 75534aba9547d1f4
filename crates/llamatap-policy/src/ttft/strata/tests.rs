//! Tests of the bound by kind of load: the split, the pooled fallback while
//! a kind is short of ratios, a burst that no longer sets the bound of the
//! idle requests after it, and ratios forgotten once stale.

use super::*;
use crate::ttft::WINDOW;

fn estimate(ttft_ms: f64) -> Estimate {
    Estimate::prefill_only(ttft_ms, Confidence::High)
}

fn load(busy: u32, queue_ahead: u32) -> Load<'static> {
    Load {
        slots: 2,
        busy,
        queue_ahead,
        in_flight: &[],
    }
}

#[test]
fn the_kind_is_alone_only_with_nothing_beside_or_ahead() {
    assert_eq!(Stratum::of(&load(0, 0)), Stratum::Alone);
    assert_eq!(Stratum::of(&load(1, 0)), Stratum::Shared);
    assert_eq!(Stratum::of(&load(0, 1)), Stratum::Shared);
    assert_eq!(Stratum::of(&load(2, 3)), Stratum::Shared);
}

#[test]
fn a_burst_under_load_no_longer_sets_the_idle_requests_bound() {
    let mut c = Calibration::default();
    for _ in 0..40 {
        c.push(Stratum::Alone, 1.1, 0);
    }
    // A burst: answers beside others came three times later than predicted.
    for _ in 0..20 {
        c.push(Stratum::Shared, 3.0, 0);
    }
    let alone = c.bound(estimate(100.0), Stratum::Alone, 0);
    assert!((alone.factor - 1.1).abs() < 1e-6, "{alone:?}");
    assert_eq!((alone.ratios, alone.confidence), (40, Confidence::High));
    let shared = c.bound(estimate(100.0), Stratum::Shared, 0);
    assert!((shared.factor - 3.0).abs() < 1e-6, "{shared:?}");
    assert_eq!((shared.ratios, shared.confidence), (20, Confidence::High));
}

#[test]
fn a_kind_short_of_ratios_takes_both_pooled() {
    let mut c = Calibration::default();
    for _ in 0..MIN_RATIOS {
        c.push(Stratum::Alone, 1.2, 0);
    }
    // Three ratios under load: too few for a bound of their own.
    for r in [1.5, 2.5, 1.4] {
        c.push(Stratum::Shared, r, 0);
    }
    let b = c.bound(estimate(200.0), Stratum::Shared, 0);
    assert!((b.factor - 2.5).abs() < 1e-6, "{b:?}");
    assert_eq!(b.ratios, MIN_RATIOS + 3);
    // So a member calibrated alone can refuse at a load it never met.
    assert_eq!(b.confidence, Confidence::High);
    assert!((b.ttft_ms - 500.0).abs() < 1e-6);
    // With none at all: the bare prediction, of low confidence.
    let none = Calibration::default().bound(estimate(200.0), Stratum::Alone, 0);
    assert_eq!((none.factor, none.ratios), (1.0, 0));
    assert_eq!(none.confidence, Confidence::Low);
}

#[test]
fn pooled_is_the_conformal_rank_over_both_rings() {
    let mut c = Calibration::default();
    // 2 × 128 held: the rank ⌈257 × 0.99⌉ = 255 of 256, the second largest.
    for i in 0..WINDOW {
        c.push(Stratum::Alone, 1.0 + i as f64 / 1000.0, 0);
        c.push(Stratum::Shared, 2.0 + i as f64 / 1000.0, 0);
    }
    let held = |k| c.of(k, 0).map_or(&[][..], Ratios::held);
    let pooled = quantile_of(&[held(Stratum::Alone), held(Stratum::Shared)], COVERAGE);
    assert!(
        pooled.is_some_and(|q| (q - (2.0 + 126.0 / 1000.0)).abs() < 1e-6),
        "{pooled:?}"
    );
    assert_eq!(c.len(0), 2 * WINDOW);
    assert_eq!(c.factor(Stratum::Alone, 0).map(|f| f.1), Some(WINDOW));
    assert!(quantile_of(&[&[], &[]], COVERAGE).is_none());
}

#[test]
fn a_kind_without_a_ratio_for_five_minutes_is_forgotten() {
    // Every request refused since a slow spell: no ratio came, so the bound
    // would refuse for ever; five minutes on, it is unsure and admits.
    let mut c = Calibration::default();
    for _ in 0..20 {
        c.push(Stratum::Alone, 3.0, 100);
    }
    let sure = c.bound(estimate(100.0), Stratum::Alone, 100 + MAX_AGE_S);
    assert_eq!((sure.factor, sure.confidence), (3.0, Confidence::High));
    let stale = c.bound(estimate(100.0), Stratum::Alone, 101 + MAX_AGE_S);
    assert_eq!((stale.factor, stale.ratios), (1.0, 0));
    assert_eq!(stale.confidence, Confidence::Low);
    assert_eq!(c.len(101 + MAX_AGE_S), 0);
    // The next ratio starts the kind anew: the stale ones are not mixed in.
    c.push(Stratum::Alone, 1.1, 500);
    assert_eq!(c.factor(Stratum::Alone, 500), Some((1.1f32 as f64, 1)));
    // A clock that went back counts as fresh.
    assert_eq!(c.len(0), 1);
}
