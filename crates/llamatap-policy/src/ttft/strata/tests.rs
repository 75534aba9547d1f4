//! Tests of the bound by kind of load: the split, the pooled fallback while
//! a kind is short of ratios, a burst that no longer sets the bound of the
//! idle requests after it, ratios forgotten once stale, and probes.

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

#[test]
fn a_probe_is_due_only_after_ten_seconds_without_a_ratio_or_probe() {
    let mut c = Calibration::default();
    for _ in 0..20 {
        c.push(Stratum::Alone, 1.1, 100);
    }
    assert!(!c.claim_probe(100 + PROBE_AFTER_S - 1));
    assert!(c.claim_probe(100 + PROBE_AFTER_S));
    // One at a time: the next is due ten seconds after this one.
    assert!(!c.claim_probe(100 + PROBE_AFTER_S));
    assert!(!c.claim_probe(99 + 2 * PROBE_AFTER_S));
    assert!(c.claim_probe(100 + 2 * PROBE_AFTER_S));
    // A ratio of either kind puts it off again.
    c.push(Stratum::Shared, 1.2, 125);
    assert!(!c.claim_probe(125 + PROBE_AFTER_S - 1));
    assert!(c.claim_probe(125 + PROBE_AFTER_S));
    // A clock that went back claims nothing.
    assert!(!c.claim_probe(0));
}

#[test]
fn each_faster_probe_takes_a_slow_ratios_place() {
    // The warm-up's slow spell: two ratios of 1.52 and 1.50 among 1.1s.
    let mut c = Calibration::default();
    for _ in 0..30 {
        c.push(Stratum::Alone, 1.1, 100);
    }
    c.push(Stratum::Alone, 1.52, 100);
    c.push(Stratum::Alone, 1.5, 100);
    let factor = |c: &Calibration, now| c.factor(Stratum::Alone, now).map(|f| f.0 as f32);
    assert_eq!(factor(&c, 100), Some(1.52));
    c.push_probe(Stratum::Alone, 1.0, 110);
    assert_eq!(factor(&c, 110), Some(1.5));
    assert_eq!(c.len(110), 32);
    c.push_probe(Stratum::Alone, 1.05, 120);
    assert_eq!(factor(&c, 120), Some(1.1));
    // A probe as slow as the worst is one more ratio: it changes nothing
    // of what refused.
    c.push_probe(Stratum::Alone, 1.6, 130);
    assert_eq!(factor(&c, 130), Some(1.6));
    assert_eq!(c.len(130), 33);
    // Not a ratio: ignored, and no ratio came.
    c.push_probe(Stratum::Alone, f64::NAN, 131);
    c.push_probe(Stratum::Alone, 0.0, 131);
    assert_eq!(c.len(131), 33);
    // The slow probe doubled the wait for the next.
    assert!(!c.claim_probe(129 + 2 * PROBE_AFTER_S));
    assert!(c.claim_probe(130 + 2 * PROBE_AFTER_S));
}

#[test]
fn probes_as_slow_as_the_spell_back_off_and_a_faster_one_or_a_ratio_resets_the_wait() {
    let mut c = Calibration::default();
    for _ in 0..30 {
        c.push(Stratum::Alone, 1.1, 0);
    }
    c.push(Stratum::Alone, 3.0, 0);
    let mut now = 0;
    let mut gaps = Vec::new();
    for _ in 0..8 {
        let claimed = (now + 1..now + 1000).find(|&t| c.claim_probe(t));
        let at = claimed.expect("a probe is claimed within 1000 s");
        gaps.push(at - now);
        now = at + 1;
        c.push_probe(Stratum::Alone, 3.5, now);
    }
    assert_eq!(gaps[0], PROBE_AFTER_S);
    assert_eq!(gaps[1..], [20, 40, 80, 160, 160, 160, 160]);
    assert_eq!(c.probe_gap_s(), PROBE_GAP_MAX_S);
    // A probe that came in faster: back to ten seconds.
    assert!(c.claim_probe(now + PROBE_GAP_MAX_S));
    now += PROBE_GAP_MAX_S;
    c.push_probe(Stratum::Alone, 1.0, now);
    assert_eq!(c.probe_gap_s(), PROBE_AFTER_S);
    assert!(c.claim_probe(now + PROBE_AFTER_S));
    // As does a ratio of an answer admitted on its bound.
    c.push_probe(Stratum::Alone, 9.0, now + PROBE_AFTER_S);
    assert_eq!(c.probe_gap_s(), 2 * PROBE_AFTER_S);
    c.push(Stratum::Shared, 1.0, now + PROBE_AFTER_S);
    assert_eq!(c.probe_gap_s(), PROBE_AFTER_S);
}

#[test]
fn a_probe_of_a_kind_short_of_ratios_replaces_the_pooled_largest() {
    let mut c = Calibration::default();
    for _ in 0..MIN_RATIOS {
        c.push(Stratum::Alone, 1.1, 100);
    }
    c.push(Stratum::Alone, 2.0, 100);
    for r in [1.2, 1.3] {
        c.push(Stratum::Shared, r, 100);
    }
    assert_eq!(c.factor(Stratum::Shared, 100).map(|f| f.0), Some(2.0));
    c.push_probe(Stratum::Shared, 1.0, 110);
    let shared = c.factor(Stratum::Shared, 110).map(|f| f.0 as f32);
    assert_eq!(shared, Some(1.3));
    // The alone kind's own bound lost the slow ratio too.
    let alone = c.factor(Stratum::Alone, 110).map(|f| f.0 as f32);
    assert_eq!(alone, Some(1.1));
}
