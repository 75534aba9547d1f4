//! Tests of the TTFT predictor: no invention before data, convergence on
//! synthetic members, the busy-slot bend, adaptation, outliers, the queue,
//! bytes, the mid-prefill correction and the bounded table. Property tests
//! are in `tests/proptests.rs`, the cached prefix's costs in
//! `tests/cache.rs`, a prompt sized by its chat chain in `tests/frame.rs`,
//! the wait beside decoding slots in `tests/step.rs`, a new member's start
//! from a peer in `tests/prior.rs`, the floor under a TTFT in
//! `tests/floor.rs`.

mod cache;
mod drain;
mod floor;
mod frame;
mod prior;
mod proptests;
mod step;

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A synthetic member: the truth the predictor should learn.
#[derive(Clone, Copy)]
pub(super) struct Member {
    /// Fixed prefill ms.
    pub fixed: f64,
    /// Prefill ms per token on an idle member.
    pub per_token: f64,
    /// ms per token per cached-context token (attention).
    pub per_ctx: f64,
    /// ms per cached token, once per prefill (the KV cache read).
    pub per_cached: f64,
    /// Extra prefill factor per other busy slot.
    pub bend: f64,
    /// Decode ms per token, idle.
    pub decode: f64,
    /// Overhead outside prompt_ms.
    pub overhead: f64,
}

impl Member {
    pub fn cpu() -> Self {
        Member {
            fixed: 8.0,
            per_token: 0.4,
            per_ctx: 0.0001,
            per_cached: 0.0,
            bend: 0.25,
            decode: 5.0,
            overhead: 12.0,
        }
    }

    pub fn prefill(&self, new: u32, cached: u32, busy: u32) -> f64 {
        let (n, c) = (f64::from(new), f64::from(cached));
        (self.fixed + n * self.per_token + self.per_ctx * n * (c + n / 2.0) + self.per_cached * c)
            * (1.0 + self.bend * f64::from(busy))
    }

    /// A finished request, with multiplicative noise `noise` (1 = none).
    pub fn observation(&self, new: u32, cached: u32, busy: u32, noise: f64) -> Observation {
        let prompt_ms = self.prefill(new, cached, busy) * noise;
        Observation {
            timings: Timings {
                prompt_n: new,
                prompt_ms,
                cache_n: cached,
                predicted_n: 64,
                predicted_ms: 64.0 * self.decode * (1.0 + 0.1 * f64::from(busy)) * noise,
            },
            busy_others: busy,
            prefill_others: 0,
            prefill_before: 0,
            beside_at_dispatch: 0,
            max_tokens: Some(64),
            prompt_bytes: Some(u64::from(new + cached) * 3),
            ttft_ms: (busy == 0).then_some(prompt_ms + self.overhead),
            started_ms: (busy == 0).then_some(self.overhead * 0.75),
            process: 0,
            predicted_uncached: cached == 0,
        }
    }

    /// The true TTFT with a free slot.
    pub fn ttft(&self, new: u32, cached: u32, busy: u32) -> f64 {
        self.prefill(new, cached, busy) + self.overhead
    }
}

pub(super) fn idle(tokens: u32, cached: u32) -> Query<'static> {
    Query {
        prompt: PromptSize::Tokens(tokens),
        cached: PromptSize::Tokens(cached),
        load: Load {
            slots: 4,
            busy: 0,
            queue_ahead: 0,
            in_flight: &[],
        },
    }
}

fn busy_query(tokens: u32, busy: u32) -> Query<'static> {
    Query {
        load: Load {
            busy,
            ..idle(tokens, 0).load
        },
        ..idle(tokens, 0)
    }
}

pub(super) fn estimate(p: Prediction) -> Estimate {
    match p {
        Prediction::Estimate(e) => e,
        Prediction::NoData => panic!("expected an estimate"),
    }
}

fn rel_err(got: f64, want: f64) -> f64 {
    (got - want).abs() / want
}

/// A member trained on `n` idle prefills of random sizes and caches, with
/// ±`noise` multiplicative noise, and on busy ones up to 3 others.
pub(super) fn trained(m: &Member, n: usize, noise: f64, seed: u64) -> TtftBook<u32> {
    let mut book = TtftBook::new(4);
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..n {
        let new = rng.random_range(20..1500);
        let cached = if i % 3 == 0 {
            rng.random_range(0..1500)
        } else {
            0
        };
        let busy = if i % 4 == 3 {
            rng.random_range(1..4)
        } else {
            0
        };
        let f = 1.0 + rng.random_range(-noise..=noise);
        book.observe(&0, &m.observation(new, cached, busy, f));
    }
    book
}

#[test]
fn says_no_data_before_any_prefill_was_seen() {
    let book: TtftBook<u32> = TtftBook::new(4);
    assert_eq!(book.predict(&0, &idle(100, 0)), Prediction::NoData);
    assert_eq!(
        book.correct(&0, &Progress::default(), 5.0, 0, 0),
        Prediction::NoData
    );
    assert!(book.learned(&0).is_none());
    // An answer without a prefill (everything cached but nothing timed)
    // teaches no curve either.
    let mut book = TtftBook::new(4);
    let mut o = Member::cpu().observation(100, 0, 0, 1.0);
    o.timings.prompt_n = 0;
    book.observe(&0, &o);
    assert_eq!(book.predict(&0, &idle(100, 0)), Prediction::NoData);
}

#[test]
fn one_observation_gives_a_low_confidence_estimate() {
    let m = Member::cpu();
    let mut book = TtftBook::new(4);
    book.observe(&7, &m.observation(500, 0, 0, 1.0));
    let e = estimate(book.predict(&7, &idle(500, 0)));
    assert_eq!(e.confidence, Confidence::Low);
    // The prefill; not yet the overhead (the first request is a cold start).
    assert_eq!(e.overhead_ms, 0.0);
    assert!(rel_err(e.ttft_ms, m.prefill(500, 0, 0)) < 0.01, "{e:?}");
    // Another key knows nothing.
    assert_eq!(book.predict(&8, &idle(500, 0)), Prediction::NoData);
}

#[test]
fn converges_on_a_synthetic_member() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.05, 1);
    for (tokens, cached) in [
        (64, 0),
        (300, 0),
        (1000, 0),
        (1800, 0),
        (1200, 1000),
        (900, 600),
    ] {
        let e = estimate(book.predict(&0, &idle(tokens, cached)));
        let want = m.ttft(tokens - cached, cached, 0);
        assert!(
            rel_err(e.ttft_ms, want) < 0.06,
            "{tokens}/{cached}: {} vs {want}",
            e.ttft_ms
        );
        assert_eq!(e.confidence, Confidence::High);
        assert_eq!(e.wait_ms, 0.0);
    }
    let l = book.learned(&0).unwrap();
    assert!(rel_err(l.prefill_ms_per_1k_tokens, 400.0) < 0.1, "{l:?}");
    assert!(rel_err(l.overhead_ms.unwrap(), 12.0) < 0.02, "{l:?}");
    assert!(rel_err(l.bytes_per_token.unwrap(), 3.0) < 1e-9, "{l:?}");
}

#[test]
fn learns_how_the_prefill_bends_with_busy_slots() {
    let m = Member::cpu();
    let book = trained(&m, 300, 0.03, 2);
    for busy in 1..=3 {
        let e = estimate(book.predict(&0, &busy_query(800, busy)));
        let want = m.ttft(800, 0, busy);
        // The overhead is learned idle; the bend multiplies the prefill only.
        assert!(
            rel_err(e.ttft_ms, want) < 0.08,
            "busy {busy}: {e:?} vs {want}"
        );
        assert_eq!(e.confidence, Confidence::High);
    }
    // Never measured: extrapolated upwards, and said to be.
    let at3 = estimate(book.predict(&0, &busy_query(800, 3)));
    let at6 = estimate(book.predict(
        &0,
        &Query {
            load: Load {
                slots: 8,
                ..busy_query(800, 6).load
            },
            ..busy_query(800, 6)
        },
    ));
    assert!(at6.ttft_ms > at3.ttft_ms);
    assert_eq!(at6.confidence, Confidence::Low);
    let l = book.learned(&0).unwrap();
    assert!(rel_err(l.prefill_bend[2], 1.5) < 0.08, "{l:?}");
}

#[test]
fn adapts_after_the_rate_changes() {
    let slow = Member::cpu();
    let fast = Member {
        per_token: slow.per_token / 2.5,
        fixed: 4.0,
        ..slow
    };
    let mut book = trained(&slow, 100, 0.05, 3);
    let mut rng = StdRng::seed_from_u64(4);
    let want = fast.ttft(1000, 0, 0);
    let mut errors = Vec::new();
    for _ in 1..=12 {
        let new = rng.random_range(100..1500);
        let f = 1.0 + rng.random_range(-0.05..=0.05);
        book.observe(&0, &fast.observation(new, 0, 0, f));
        errors.push(rel_err(
            book.predict(&0, &idle(1000, 0)).ttft_ms().unwrap(),
            want,
        ));
    }
    // Decay alone would still hold three quarters of the old rate after six
    // requests (0.95⁶ of the weight); the level follows within a few, and
    // stays close while the curve's shape catches up.
    assert!(errors[3] < 0.25, "{errors:?}");
    assert!(errors[5..].iter().all(|e| *e < 0.12), "{errors:?}");
    // And back (a restart on the old hardware).
    for _ in 0..8 {
        let new = rng.random_range(100..1500);
        book.observe(&0, &slow.observation(new, 0, 0, 1.0));
    }
    let e = estimate(book.predict(&0, &idle(1000, 0)));
    assert!(rel_err(e.ttft_ms, slow.ttft(1000, 0, 0)) < 0.1, "{e:?}");
}

#[test]
fn one_outlier_moves_the_prediction_little() {
    let m = Member::cpu();
    let mut book = trained(&m, 100, 0.02, 5);
    let before = estimate(book.predict(&0, &idle(700, 0))).ttft_ms;
    // A request stuck behind something the caller did not see: 50 times.
    book.observe(&0, &m.observation(700, 0, 0, 50.0));
    let after = estimate(book.predict(&0, &idle(700, 0))).ttft_ms;
    assert!(rel_err(after, before) < 0.35, "{before} -> {after}");
    // A few normal ones later it is as before.
    let mut rng = StdRng::seed_from_u64(6);
    for _ in 0..10 {
        book.observe(&0, &m.observation(rng.random_range(100..1500), 0, 0, 1.0));
    }
    let healed = estimate(book.predict(&0, &idle(700, 0))).ttft_ms;
    assert!(rel_err(healed, m.ttft(700, 0, 0)) < 0.05, "{healed}");
}

#[test]
fn a_slow_first_request_does_not_set_the_overhead() {
    let m = Member::cpu();
    let mut book = TtftBook::new(4);
    // A llama-server's first request: 400 ms before its prefill started
    // (a cold start), then requests at its usual 12 ms.
    let mut slow = m.observation(600, 0, 0, 1.0);
    slow.ttft_ms = slow.ttft_ms.map(|t| t + 388.0);
    slow.started_ms = Some(395.0);
    book.observe(&0, &slow);
    assert_eq!(book.learned(&0).unwrap().overhead_ms, None, "a cold start");
    book.observe(&0, &m.observation(500, 0, 0, 1.0));
    let l = book.learned(&0).unwrap();
    assert!(rel_err(l.overhead_ms.unwrap(), 12.0) < 0.02, "{l:?}");
    // A slow one while the mean has little weight moves it a long way
    // (to about 82 ms: the typical value of 12 and 400, the newer weighing
    // more); the next usual one starts it anew.
    book.observe(&0, &slow);
    assert!(book.learned(&0).unwrap().overhead_ms.unwrap() > 60.0);
    book.observe(&0, &m.observation(700, 0, 0, 1.0));
    let l = book.learned(&0).unwrap();
    assert!(rel_err(l.overhead_ms.unwrap(), 12.0) < 0.02, "{l:?}");
    // Once it has weight, a slow request is clipped (to 3 × 12 + 20 ms)
    // and moves the typical value, to about 20 ms.
    book.observe(&0, &m.observation(700, 0, 0, 1.0));
    book.observe(&0, &m.observation(300, 0, 0, 1.0));
    book.observe(&0, &slow);
    let over = book.learned(&0).unwrap().overhead_ms.unwrap();
    assert!((17.0..25.0).contains(&over), "{over}");
}

#[test]
fn prompts_that_went_ahead_do_not_set_the_overhead() {
    let m = Member::cpu();
    let mut book = TtftBook::new(4);
    book.observe(&0, &m.observation(500, 0, 0, 1.0));
    // Sent to an idle member, so its TTFT counts; two prompts sent a
    // moment later went first, and their 1,081 tokens took 1,050 ms of it.
    let mut overtaken = m.observation(731, 8, 0, 1.0);
    overtaken.ttft_ms = overtaken.ttft_ms.map(|t| t + 1050.0);
    overtaken.started_ms = Some(1050.0);
    overtaken.prefill_before = 1081;
    book.observe(&0, &overtaken);
    assert_eq!(book.learned(&0).unwrap().overhead_ms, None, "{overtaken:?}");
    book.observe(&0, &m.observation(300, 0, 0, 1.0));
    let l = book.learned(&0).unwrap();
    assert!(rel_err(l.overhead_ms.unwrap(), 12.0) < 0.02, "{l:?}");
}

#[test]
fn garbage_observations_are_ignored() {
    let m = Member::cpu();
    let mut book = trained(&m, 50, 0.0, 7);
    let before = book.predict(&0, &idle(700, 0));
    for ms in [f64::NAN, f64::INFINITY, -5.0, f64::NEG_INFINITY] {
        let mut o = m.observation(700, 0, 0, 1.0);
        o.timings.prompt_ms = ms;
        o.timings.predicted_ms = ms;
        o.ttft_ms = Some(ms);
        o.started_ms = Some(ms);
        book.observe(&0, &o);
    }
    let after = book.predict(&0, &idle(700, 0));
    let (b, a) = (before.ttft_ms().unwrap(), after.ttft_ms().unwrap());
    assert!(a.is_finite() && rel_err(a, b) < 1e-9, "{b} -> {a}");
}

#[test]
fn a_cached_prefix_shortens_the_prefill_and_a_full_hit_costs_one_token() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.02, 8);
    let cold = estimate(book.predict(&0, &idle(1500, 0))).ttft_ms;
    let warm = estimate(book.predict(&0, &idle(1500, 1400))).ttft_ms;
    assert!(warm < cold / 5.0, "{cold} vs {warm}");
    // A cache estimate beyond the prompt: one token is still processed.
    let over = estimate(book.predict(&0, &idle(1500, 9999)));
    let full = estimate(book.predict(&0, &idle(1500, 1499)));
    assert_eq!(over, full);
    assert!(over.prefill_ms > 0.0);
}

#[test]
fn a_prompt_known_by_bytes_uses_learned_bytes_per_token() {
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    let mut o = m.observation(500, 0, 0, 1.0);
    o.prompt_bytes = None;
    book.observe(&0, &o);
    let q = Query {
        prompt: PromptSize::Bytes(4001),
        ..idle(0, 0)
    };
    // Before any bytes were seen: 4 bytes per token, low confidence.
    let e = estimate(book.predict(&0, &q));
    assert_eq!(e.prompt_tokens, 1001);
    assert_eq!(e.confidence, Confidence::Low);
    for _ in 0..5 {
        book.observe(&0, &m.observation(500, 0, 0, 1.0));
    }
    // Prompts of one size (1,500 bytes, 500 tokens): of the 125 tokens
    // beyond 4 bytes a token, 32 are taken as the template's, so the
    // text is 1,500 bytes for 468 tokens.
    let e = estimate(book.predict(&0, &q));
    assert_eq!(e.prompt_tokens, 1281);
    assert_eq!(e.confidence, Confidence::High);
}

#[test]
fn a_full_member_waits_for_the_first_slot_to_free() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.0, 9);
    let decode_full = {
        let l = book.learned(&0).unwrap();
        l.decode_ms_per_token.unwrap()
    };
    assert!(rel_err(decode_full, 5.0) < 0.05, "{decode_full}");
    let flights = [
        InFlight {
            generated: 10,
            max_tokens: Some(64),
            prefill_left: 0,
            decoding_ms: 0,
            prefilling_ms: 0,
            prefill_context: 0,
        },
        InFlight {
            generated: 60,
            max_tokens: Some(64),
            prefill_left: 0,
            decoding_ms: 0,
            prefilling_ms: 0,
            prefill_context: 0,
        },
    ];
    let full = Query {
        load: Load {
            slots: 2,
            busy: 2,
            queue_ahead: 0,
            in_flight: &flights,
        },
        ..idle(400, 0)
    };
    let e = estimate(book.predict(&0, &full));
    // The second answer has 4 tokens left, at the decode rate with both
    // slots busy (the learned bend at one other).
    assert!(
        e.wait_ms > 4.0 * decode_full && e.wait_ms < 4.0 * decode_full * 1.5,
        "{e:?}"
    );
    // One request queued ahead takes that slot: wait for the other one.
    let behind = Query {
        load: Load {
            queue_ahead: 1,
            ..full.load
        },
        ..full
    };
    let later = estimate(book.predict(&0, &behind));
    assert!(later.wait_ms > 50.0 * decode_full, "{later:?}");
    // Three ahead with two slots: a whole service more than one ahead.
    let far = Query {
        load: Load {
            queue_ahead: 3,
            ..full.load
        },
        ..full
    };
    assert!(estimate(book.predict(&0, &far)).wait_ms > later.wait_ms);
    // A free slot and one queued ahead: it takes the free slot; we wait.
    let one_free = Query {
        load: Load {
            busy: 1,
            queue_ahead: 1,
            ..full.load
        },
        ..full
    };
    assert!(estimate(book.predict(&0, &one_free)).wait_ms > 0.0);
}

#[test]
fn no_decode_rate_no_wait_estimate() {
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    let mut o = m.observation(500, 0, 0, 1.0);
    o.timings.predicted_n = 0;
    book.observe(&0, &o);
    let full = Query {
        load: Load {
            slots: 1,
            busy: 1,
            queue_ahead: 0,
            in_flight: &[],
        },
        ..idle(400, 0)
    };
    assert_eq!(book.predict(&0, &full), Prediction::NoData);
    // With a free slot it is fine.
    assert!(book.predict(&0, &idle(400, 0)).ttft_ms().is_some());
}

#[test]
fn progress_corrects_the_prediction() {
    let m = Member::cpu();
    let book = trained(&m, 200, 0.0, 10);
    // The 0% event after 300 ms in a queue, with 200 of 1000 tokens cached
    // (the affinity book had guessed none).
    let start = Progress {
        total: 1000,
        cache: 200,
        processed: 200,
        time_ms: 0,
    };
    let e = estimate(book.correct(&0, &start, 300.0, 0, 0));
    let tail = 12.0 * 0.25;
    let want = 300.0 + m.prefill(800, 200, 0) + tail;
    assert!(rel_err(e.ttft_ms, want) < 0.03, "{e:?} vs {want}");
    assert!(rel_err(e.wait_ms, 300.0) < 1e-9);
    // Half way, running twice as slow as learned: the rest is slower too.
    let half = m.prefill(400, 200, 0) - m.fixed;
    let slow = Progress {
        processed: 600,
        time_ms: (2.0 * half) as u64,
        ..start
    };
    let on_time = Progress {
        time_ms: half as u64,
        ..slow
    };
    let since = 300.0 + 2.0 * half;
    let slow_e = estimate(book.correct(&0, &slow, since, 0, 0));
    let on_e = estimate(book.correct(&0, &on_time, since, 0, 0));
    // What is left of the prefill is scaled by the speed measured so far
    // (trusted in part: 400 of 800 tokens done).
    let (slow_left, on_left) = (slow_e.ttft_ms - since, on_e.ttft_ms - since);
    assert!(slow_left > on_left * 1.4, "{slow_e:?} {on_e:?}");
    assert!(slow_left < on_left * 2.0, "{slow_e:?} {on_e:?}");
    // Done: only the tail is left.
    let done = Progress {
        processed: 1000,
        time_ms: 400,
        ..start
    };
    let d = estimate(book.correct(&0, &done, 800.0, 0, 0));
    assert!(rel_err(d.ttft_ms, 800.0 + tail) < 0.01, "{d:?}");
}

#[test]
fn the_table_is_bounded_and_evicts_the_stalest_key() {
    let m = Member::cpu();
    let mut book = TtftBook::new(3);
    for key in 0..3u32 {
        book.observe(&key, &m.observation(100, 0, 0, 1.0));
    }
    // Key 0 is refreshed; key 1 is now the stalest.
    book.observe(&0, &m.observation(100, 0, 0, 1.0));
    book.observe(&3, &m.observation(100, 0, 0, 1.0));
    assert_eq!(book.len(), 3);
    assert!(book.learned(&1).is_none());
    for key in [0, 2, 3] {
        assert!(book.learned(&key).is_some(), "{key}");
    }
    book.forget(&0);
    assert_eq!(book.len(), 2);
    assert_eq!(book.predict(&0, &idle(100, 0)), Prediction::NoData);
    assert!(book.learned(&3).is_some() && book.learned(&2).is_some());
    assert!(TtftBook::<u32>::new(0).is_empty());
}

#[test]
fn members_of_different_hardware_learn_apart() {
    let cpu = Member::cpu();
    let gpu = Member {
        per_token: 0.02,
        fixed: 2.0,
        per_ctx: 0.0,
        per_cached: 0.0,
        bend: 0.05,
        decode: 1.0,
        overhead: 3.0,
    };
    let mut book = TtftBook::new(4);
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..100 {
        let new = rng.random_range(20..1500);
        book.observe(&1, &cpu.observation(new, 0, 0, 1.0));
        book.observe(&2, &gpu.observation(new, 0, 0, 1.0));
    }
    for (key, m) in [(1, cpu), (2, gpu)] {
        let e = estimate(book.predict(&key, &idle(1000, 0)));
        assert!(
            rel_err(e.ttft_ms, m.ttft(1000, 0, 0)) < 0.03,
            "{key}: {e:?}"
        );
    }
}

#[test]
fn a_prompt_prefilling_beside_shares_the_batches() {
    let m = Member::cpu();
    let flights = [InFlight {
        generated: 0,
        max_tokens: Some(64),
        prefill_left: 900,
        decoding_ms: 0,
        prefilling_ms: 0,
        prefill_context: 0,
    }];
    let beside = Query {
        load: Load {
            in_flight: &flights,
            ..busy_query(300, 1).load
        },
        ..busy_query(300, 1)
    };
    // Requests sent beside a prefill of 900 tokens, all of which went
    // through their batches (their slot came second): prompt_ms covers both.
    let taught_as = |share: f64, waited: bool| {
        let mut book = trained(&m, 200, 0.0, 12);
        for _ in 0..8 {
            let others = (900.0 * share) as u32;
            let mut o = m.observation(300, 0, 1, 1.0);
            if waited {
                // Its prompt missed their batch: its slot started after.
                o.prefill_before = others;
            } else {
                o.timings.prompt_ms = m.prefill(300 + others, 0, 1);
                o.prefill_others = others;
            }
            o.beside_at_dispatch = 900;
            book.observe(&0, &o);
        }
        book
    };
    let taught = |share: f64| taught_as(share, false);
    let all = taught(1.0);
    let e = estimate(all.predict(&0, &beside));
    let want = m.prefill(1200, 0, 1) + m.overhead;
    assert!(rel_err(e.ttft_ms, want) < 0.1, "{e:?} vs {want}");
    // Waiting for their batches before its own prefill started teaches
    // the same share: its first token waited for all of them either way.
    let w = estimate(taught_as(1.0, true).predict(&0, &beside));
    assert!(rel_err(w.ttft_ms, e.ttft_ms) < 0.05, "{w:?} vs {e:?}");
    // The part of the others' prefill is a wait; this prompt's own part is
    // what the curve adds beyond it.
    assert!(e.wait_ms > e.prefill_ms, "{e:?}");
    // Learning from such requests teaches the share and keeps the curve
    // and the bend.
    let l = all.learned(&0).unwrap();
    assert!(rel_err(l.prefill_bend[1], 1.25) < 0.05, "{l:?}");
    // When none of it went through (their slot came first, or they were
    // done), the prediction is that of the prompt alone.
    let none = taught(0.0);
    let alone = estimate(none.predict(&0, &busy_query(300, 1)));
    let e = estimate(none.predict(&0, &beside));
    assert!(
        rel_err(e.ttft_ms, alone.ttft_ms) < 0.05,
        "{e:?} vs {alone:?}"
    );
    // Before any share was learned: half.
    let fresh = trained(&m, 200, 0.0, 12);
    let e = estimate(fresh.predict(&0, &beside)).ttft_ms;
    let half = m.prefill(750, 0, 1) + m.overhead;
    assert!(rel_err(e, half) < 0.1, "{e} vs {half}");
}

#[test]
fn bytes_become_tokens_on_a_line_with_the_template_overhead() {
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    // A template adds 20 tokens to every prompt; text is 5 bytes per token.
    for new in [10u32, 40, 100, 400, 900, 1500, 60, 700] {
        let mut o = m.observation(new + 20, 0, 0, 1.0);
        o.prompt_bytes = Some(u64::from(new) * 5);
        book.observe(&0, &o);
    }
    for bytes in [100u64, 5000] {
        let q = Query {
            prompt: PromptSize::Bytes(bytes),
            ..idle(0, 0)
        };
        let e = estimate(book.predict(&0, &q));
        let want = bytes / 5 + 20;
        assert!(e.prompt_tokens.abs_diff(want as u32) <= 1, "{bytes}: {e:?}");
    }
    // A cached prefix in bytes: the same line, so 1,000 of 5,000 bytes
    // cached leaves 800 tokens to prefill.
    let q = Query {
        prompt: PromptSize::Bytes(5000),
        cached: PromptSize::Bytes(1000),
        ..idle(0, 0)
    };
    let e = estimate(book.predict(&0, &q));
    let want = m.ttft(800, 220, 0);
    assert!(rel_err(e.ttft_ms, want) < 0.05, "{e:?} vs {want}");
}

/// The tokens predicted for a prompt of `bytes` after one answer of
/// `tokens` from `first_bytes`.
fn tokens_after_one_answer((tokens, first_bytes): (u32, u64), bytes: u64) -> u32 {
    let mut book = TtftBook::new(2);
    let mut o = Member::cpu().observation(tokens, 0, 0, 1.0);
    o.prompt_bytes = Some(first_bytes);
    book.observe(&0, &o);
    let q = Query {
        prompt: PromptSize::Bytes(bytes),
        ..idle(0, 0)
    };
    estimate(book.predict(&0, &q)).prompt_tokens
}

#[test]
fn a_first_short_prompt_does_not_make_every_byte_a_token() {
    // A 23-byte question that made 33 tokens, its template's among them:
    // 27 tokens of template and 4 bytes a token make 1,804 bytes 478
    // tokens (a ratio of the one answer said 2,589).
    let n = tokens_after_one_answer((33, 23), 1804);
    assert!(n.abs_diff(478) <= 1, "{n}");
    // A long prompt of another kind of text (2 bytes a token) keeps its
    // own ratio beyond the template's 32 tokens.
    let n = tokens_after_one_answer((2000, 4000), 8000);
    assert!(n.abs_diff(3968) <= 1, "{n}");
}

#[test]
fn answers_that_run_to_max_tokens_hold_their_slot_to_the_end() {
    let m = Member::cpu();
    // Every answer here runs to its max_tokens (64): typical length 64.
    let book = trained(&m, 100, 0.0, 13);
    let long = [InFlight {
        generated: 10,
        max_tokens: Some(400),
        prefill_left: 0,
        decoding_ms: 0,
        prefilling_ms: 0,
        prefill_context: 0,
    }];
    let full = Query {
        load: Load {
            slots: 1,
            busy: 1,
            queue_ahead: 0,
            in_flight: &long,
        },
        ..idle(100, 0)
    };
    let e = estimate(book.predict(&0, &full));
    let decode = book.learned(&0).unwrap().decode_ms_per_token.unwrap();
    // 390 tokens left at the learned decode rate, not what is left of a
    // typical 64-token answer.
    assert!(rel_err(e.wait_ms, 390.0 * decode) < 0.05, "{e:?}");
    // The wait with `busy` in the slot instead.
    let wait_with = |busy: InFlight| {
        let in_flight = [busy];
        let q = Query {
            load: Load {
                in_flight: &in_flight,
                ..full.load
            },
            ..full
        };
        estimate(book.predict(&0, &q)).wait_ms
    };
    // Its time since its first token says how far it is when its tokens
    // are not counted: 200 tokens' time, 200 left.
    let timed = InFlight {
        generated: 0,
        decoding_ms: (200.0 * decode) as u32,
        ..long[0]
    };
    let w = wait_with(timed);
    assert!(rel_err(w, 200.0 * decode) < 0.05, "{w}");
    // A count wins over the time: an answer whose decode was slowed by
    // prompts beside has generated fewer tokens than its time says.
    let w = wait_with(InFlight {
        generated: 10,
        ..timed
    });
    assert!(rel_err(w, 390.0 * decode) < 0.05, "{w}");
    // Answers that stop at a quarter of their max_tokens: a quarter is
    // expected of this one too.
    let mut quarter = TtftBook::new(1);
    let mut rng = StdRng::seed_from_u64(14);
    for _ in 0..50 {
        let mut o = m.observation(rng.random_range(20..1500), 0, 0, 1.0);
        o.max_tokens = Some(256);
        quarter.observe(&0, &o);
    }
    let e = estimate(quarter.predict(&0, &full));
    let decode = quarter.learned(&0).unwrap().decode_ms_per_token.unwrap();
    assert!(rel_err(e.wait_ms, 90.0 * decode) < 0.05, "{e:?}");
}

#[test]
fn a_members_record_is_small_and_fixed() {
    // No allocation inside: the record is its size, whatever it learned.
    let size = std::mem::size_of::<member::Rates>();
    assert!(size <= 704, "{size} bytes");
    // The ratios beside it: 128 of 4 bytes and two counters, per kind of
    // load, when each kind's newest came, and the last probe.
    let ratios = std::mem::size_of::<Ratios>();
    assert!(ratios <= 4 * WINDOW + 16, "{ratios} bytes");
    let both = std::mem::size_of::<Calibration>();
    assert!(both <= 2 * (4 * WINDOW + 16) + 16, "{both} bytes");
}

#[test]
fn the_bound_is_the_prediction_times_the_recorded_quantile() {
    let m = Member::cpu();
    let mut book = trained(&m, 40, 0.0, 3);
    // A ratio for a key never predicted is not taken in.
    book.record_ratio(&9, Stratum::Alone, 2.0, 0);
    assert!(book.ratios(&9).is_none());
    assert!(book.bound(&9, &idle(500, 0), 0).is_none());
    let bare = estimate(book.predict(&0, &idle(500, 0)));
    let b = book.bound(&0, &idle(500, 0), 0).unwrap();
    assert_eq!((b.factor, b.ratios), (1.0, 0));
    assert_eq!(b.ttft_ms, bare.ttft_ms);
    assert_eq!(b.confidence, Confidence::Low, "no ratio yet");
    for i in 0..MIN_RATIOS {
        book.record_ratio(&0, Stratum::Alone, if i == 3 { 1.4 } else { 1.1 }, 0);
    }
    let b = book.bound(&0, &idle(500, 0), 0).unwrap();
    assert_eq!(b.confidence, Confidence::High);
    assert!((b.factor - 1.4).abs() < 1e-6, "{b:?}");
    assert!((b.ttft_ms - bare.ttft_ms * b.factor).abs() < 1e-9);
    assert_eq!(b.estimate, bare);
    // Forgetting the key forgets its ratios.
    book.forget(&0);
    assert!(book.ratios(&0).is_none());
}
