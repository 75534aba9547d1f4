//! Properties of the predictor over arbitrary histories: predictions are
//! finite and non-negative whatever was observed (NaN, infinities, zeros,
//! huge values included), non-decreasing in the prompt's size and in the busy
//! slots, and converge on any member's rates.

use super::*;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Any float, the awkward ones often.
fn any_ms() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..100_000.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(-1.0),
        1 => Just(0.0),
        1 => Just(1e300),
    ]
}

fn any_observation() -> impl Strategy<Value = Observation> {
    (
        (0u32..5000, any_ms(), 0u32..5000, 0u32..2000, any_ms()),
        0u32..20,
        proptest::option::of(0u64..1_000_000),
        proptest::option::of(any_ms()),
        proptest::option::of(any_ms()),
    )
        .prop_map(
            |((prompt_n, prompt_ms, cache_n, predicted_n, predicted_ms), busy, bytes, ttft, s)| {
                Observation {
                    timings: Timings {
                        prompt_n,
                        prompt_ms,
                        cache_n,
                        predicted_n,
                        predicted_ms,
                    },
                    busy_others: busy,
                    prefill_others: busy * 7,
                    prefill_before: 0,
                    beside_at_dispatch: 0,
                    max_tokens: Some(64),
                    prompt_bytes: bytes,
                    ttft_ms: ttft,
                    started_ms: s,
                    process: 0,
                    predicted_uncached: busy % 2 == 0,
                }
            },
        )
}

/// A plausible observation (positive, finite) of a random member.
fn sane_observation() -> impl Strategy<Value = Observation> {
    (1u32..3000, 0u32..3000, 0u32..8, 0.5f64..1.5, 1u32..200).prop_map(
        |(new, cached, busy, noise, answer)| {
            let m = Member::cpu();
            let mut o = m.observation(new, cached, busy, noise);
            o.timings.predicted_n = answer;
            o
        },
    )
}

fn book_of(history: &[Observation]) -> TtftBook<u8> {
    let mut book = TtftBook::new(2);
    for o in history {
        book.observe(&0, o);
    }
    book
}

/// The prediction for a prompt of `tokens` with one of `slots` busy with
/// `busy`.
fn beside_one(book: &TtftBook<u8>, busy: InFlight, slots: u32, tokens: u32) -> Option<f64> {
    let in_flight = [busy];
    let load = Load {
        slots,
        busy: 1,
        queue_ahead: 0,
        in_flight: &in_flight,
    };
    let q = Query {
        prompt: PromptSize::Tokens(tokens),
        cached: PromptSize::Tokens(0),
        load,
    };
    book.predict(&0, &q).ttft_ms()
}

fn check_finite(p: Prediction) -> Result<(), TestCaseError> {
    if let Prediction::Estimate(e) = p {
        for v in [e.ttft_ms, e.wait_ms, e.prefill_ms, e.overhead_ms] {
            prop_assert!(v.is_finite() && v >= 0.0, "{e:?}");
        }
        let sum = e.wait_ms + e.prefill_ms + e.overhead_ms;
        prop_assert!((e.ttft_ms - sum).abs() <= 1e-9 * sum.max(1.0), "{e:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn never_negative_or_nan(
        history in proptest::collection::vec(any_observation(), 0..40),
        tokens in 0u32..100_000,
        bytes in 0u64..10_000_000,
        cached in 0u32..100_000,
        slots in 0u32..100,
        busy in 0u32..100,
        queue in 0u32..1000,
        generated in 0u32..5000,
        progress in (0u32..5000, 0u32..5000, 0u32..5000, 0u64..100_000),
        since in any_ms(),
    ) {
        let book = book_of(&history);
        let flights = vec![InFlight { generated, max_tokens: Some(generated / 2), prefill_left: generated, decoding_ms: generated.saturating_mul(997), prefilling_ms: generated.saturating_mul(13), prefill_context: generated }; busy as usize];
        let load = Load { slots, busy, queue_ahead: queue, in_flight: &flights };
        for prompt in [PromptSize::Tokens(tokens), PromptSize::Bytes(bytes)] {
            let q = Query { prompt, cached: PromptSize::Tokens(cached), load };
            check_finite(book.predict(&0, &q))?;
        }
        let (total, cache, processed, time_ms) = progress;
        let p = Progress { total, cache, processed, time_ms };
        check_finite(book.correct(&0, &p, since, busy, generated))?;
    }

    #[test]
    fn a_busy_slot_further_along_delays_no_more(
        history in proptest::collection::vec(sane_observation(), 1..40),
        decoding in (0u32..600_000, 0u32..600_000),
        prefilling in (0u32..5_000, 0u32..5_000),
        slots in 1u32..4,
        max_tokens in proptest::option::of(1u32..2000),
        prefill_left in 0u32..4000,
        prefill_context in 0u32..4000,
        tokens in 1u32..4000,
    ) {
        let book = book_of(&history);
        // Longer since its first token, or longer at its prefill.
        let at = |decoding_ms: u32, prefilling_ms: u32| {
            let busy = InFlight {
                max_tokens, prefill_left, decoding_ms, prefilling_ms, prefill_context,
                ..InFlight::default()
            };
            beside_one(&book, busy, slots, tokens)
        };
        let ((a, b), (c, d)) = (decoding, prefilling);
        for (early, late) in [
            (at(a.min(b), c), at(a.max(b), c)),
            (at(a, c.min(d)), at(a, c.max(d))),
        ] {
            if let (Some(early), Some(late)) = (early, late) {
                prop_assert!(late <= early * (1.0 + 1e-12) + 1e-6, "{early} then {late}");
            }
        }
    }

    #[test]
    fn monotone_in_prompt_size(
        history in proptest::collection::vec(sane_observation(), 1..40),
        a in 1u32..20_000,
        b in 1u32..20_000,
        cached in 0u32..3000,
        busy in 0u32..8,
    ) {
        let book = book_of(&history);
        let (small, large) = (a.min(b), a.max(b));
        let load = Load { slots: 8, busy, queue_ahead: 0, in_flight: &[] };
        let at = |n: u32| book.predict(&0, &Query {
            prompt: PromptSize::Tokens(n), cached: PromptSize::Tokens(cached), load,
        }).ttft_ms();
        let (s, l) = (at(small).unwrap(), at(large).unwrap());
        prop_assert!(s <= l * (1.0 + 1e-12), "{small}: {s} > {large}: {l}");
        let by_bytes = |n: u64| book.predict(&0, &Query {
            prompt: PromptSize::Bytes(n), cached: PromptSize::Bytes(cached.into()), load,
        }).ttft_ms();
        let (s, l) = (by_bytes(small.into()).unwrap(), by_bytes(large.into()).unwrap());
        prop_assert!(s <= l * (1.0 + 1e-12));
    }

    #[test]
    fn monotone_in_busy_slots(
        history in proptest::collection::vec(sane_observation(), 1..40),
        tokens in 1u32..5000,
        slots in 1u32..16,
        a in 0u32..16,
        b in 0u32..16,
        queue in 0u32..4,
        generated in 0u32..100,
        prefill_left in 0u32..2000,
    ) {
        let book = book_of(&history);
        let flights = [InFlight { generated, max_tokens: None, prefill_left, decoding_ms: 0, prefilling_ms: 0, prefill_context: 0 }; 16];
        let at = |busy: u32| book.predict(&0, &Query {
            prompt: PromptSize::Tokens(tokens),
            cached: PromptSize::Tokens(0),
            load: Load { slots, busy, queue_ahead: queue, in_flight: &flights },
        }).ttft_ms();
        let (few, many) = (a.min(b), a.max(b));
        if let (Some(x), Some(y)) = (at(few), at(many)) {
            prop_assert!(x <= y * (1.0 + 1e-12), "{few}: {x} > {many}: {y}");
        }
    }

    #[test]
    fn converges_on_any_member(
        fixed in 0.0f64..50.0,
        per_token in 0.005f64..5.0,
        per_ctx in 0.0f64..0.001,
        overhead in 0.0f64..100.0,
        seed in any::<u64>(),
    ) {
        let m = Member { fixed, per_token, per_ctx, per_cached: 0.0, bend: 0.2, decode: 3.0, overhead };
        let book = {
            let mut book = TtftBook::new(1);
            let mut rng = StdRng::seed_from_u64(seed);
            for _ in 0..60 {
                let new = rng.random_range(10..2000);
                let cached = rng.random_range(0..1000);
                book.observe(&0u8, &m.observation(new, cached, 0, 1.0));
            }
            book
        };
        for (new, cached) in [(50, 0), (500, 500), (1500, 100)] {
            let want = m.ttft(new, cached, 0);
            let got = book.predict(&0, &idle(new + cached, cached)).ttft_ms().unwrap();
            prop_assert!(rel_err(got, want) < 0.02, "{new}/{cached}: {got} vs {want}");
        }
    }
}
