//! The cached prefix's costs: the KV cache read once per prefill, and the
//! chat template's head that a prompt thought new still finds cached.

use super::*;

/// A member trained on `n` idle prefills: short additions to long caches
/// and cold prompts, mixed, with ±5 % noise.
fn trained_on_caches(m: &Member, n: usize, seed: u64) -> TtftBook<u32> {
    let mut book = TtftBook::new(2);
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..n {
        let (new, cached) = if i % 2 == 0 {
            (rng.random_range(40..160), rng.random_range(300..1200))
        } else {
            (rng.random_range(40..1200), 10)
        };
        let f = 1.0 + rng.random_range(-0.05..=0.05);
        book.observe(&0, &m.observation(new, cached, 0, f));
    }
    book
}

#[test]
fn a_cost_per_cached_token_is_learned() {
    // Each prefill reads the whole cache: a short addition to a long
    // conversation costs more than its new tokens say.
    let m = Member {
        per_token: 0.8,
        per_ctx: 0.0,
        per_cached: 0.1,
        ..Member::cpu()
    };
    let book = trained_on_caches(&m, 120, 21);
    for (new, cached) in [(60, 900), (100, 400), (800, 10)] {
        let e = estimate(book.predict(&0, &idle(new + cached, cached)));
        let want = m.ttft(new, cached, 0);
        assert!(
            rel_err(e.ttft_ms, want) < 0.08,
            "{new} new after {cached}: {} vs {want}",
            e.ttft_ms
        );
    }
    let l = book.learned(&0).map(|l| l.prefill_cached_ms);
    assert!(l.is_some_and(|c| (c - 100.0).abs() < 25.0), "{l:?}");
}

#[test]
fn a_template_head_alone_teaches_no_cost_per_cached_token() {
    // Every prompt so far shared only the template's head (8 to 10 tokens)
    // with the slot: the noise must not become a cost per cached token
    // that a long conversation's cache would multiply.
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..40 {
        let f = 1.0 + rng.random_range(-0.1..=0.1);
        let o = m.observation(rng.random_range(30..600), rng.random_range(8..=10), 0, f);
        book.observe(&0, &o);
    }
    let e = estimate(book.predict(&0, &idle(960, 900)));
    let want = m.ttft(60, 900, 0);
    assert!(rel_err(e.ttft_ms, want) < 0.3, "{} vs {want}", e.ttft_ms);
}

#[test]
fn a_prompt_thought_new_still_finds_the_template_head_cached() {
    let m = Member {
        per_token: 0.9,
        ..Member::cpu()
    };
    // llama-server reused 10 tokens of each prompt the caller thought new.
    let teach = |uncached: bool| {
        let mut book = TtftBook::new(2);
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..30 {
            let mut o = m.observation(rng.random_range(20..400), 10, 0, 1.0);
            o.predicted_uncached = uncached;
            book.observe(&0, &o);
        }
        book
    };
    let want = m.ttft(40, 10, 0);
    let q = idle(50, 0);
    let head = estimate(teach(true).predict(&0, &q));
    assert!(
        rel_err(head.ttft_ms, want) < 0.03,
        "{} vs {want}",
        head.ttft_ms
    );
    // Without it, the 10 tokens count as new: a quarter more prefill.
    let none = estimate(teach(false).predict(&0, &q));
    assert!(none.ttft_ms > want * 1.15, "{} vs {want}", none.ttft_ms);
    // A cache the caller knows of is its own estimate, head included.
    let known = estimate(teach(true).predict(&0, &idle(50, 30)));
    assert!(
        rel_err(known.ttft_ms, m.ttft(20, 30, 0)) < 0.05,
        "{known:?}"
    );
}

#[test]
fn a_repeated_prompt_the_caller_did_not_know_of_is_not_the_head() {
    // The same prompt sent again is served from the cache, though the
    // caller predicted it uncached: that is no template head.
    let m = Member::cpu();
    let mut book = TtftBook::new(2);
    for _ in 0..10 {
        let mut o = m.observation(1, 499, 0, 1.0);
        o.predicted_uncached = true;
        book.observe(&0, &o);
        book.observe(&0, &m.observation(300, 0, 0, 1.0));
    }
    let e = estimate(book.predict(&0, &idle(300, 0)));
    let want = m.ttft(300, 0, 0);
    assert!(rel_err(e.ttft_ms, want) < 0.05, "{} vs {want}", e.ttft_ms);
}
