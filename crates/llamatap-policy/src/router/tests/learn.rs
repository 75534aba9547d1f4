//! Tests of learning from `cache_n`: confirmed, shortfall, unpredicted,
//! and the accuracy counters.

use super::{conversation, idle, send};
use crate::router::*;

/// A router of upstreams `a`, `b` with indexes of `capacity` links.
fn small_router(capacity: usize) -> Router {
    Router::new(
        &["a", "b"],
        RouteConfig {
            index_capacity: capacity,
            ..RouteConfig::default()
        },
    )
}

/// Tokens of `chain`'s first `links` links at 4 bytes a token.
fn tokens(chain: &Chain, links: usize) -> u64 {
    chain.bytes(links) / 4
}

#[test]
fn a_confirmed_prediction_counts() {
    let mut router = small_router(10_000);
    let first = conversation(Some("Be brief."), 1, 0);
    send(&mut router, &idle(2), &first);
    let second = conversation(Some("Be brief."), 1, 1);
    let decision = send(&mut router, &idle(2), &second);
    assert_eq!(decision.prediction.links, 2);
    // llama-server also kept the answer it generated: 3 links cached.
    let prompt = tokens(&second, second.len());
    let seen = router.observe(
        decision.upstream,
        &second,
        &decision.prediction,
        tokens(&second, 3),
        prompt,
    );
    assert_eq!(seen, Observation::Confirmed { links: 3 });
    let accuracy = router.accuracy(decision.upstream).unwrap();
    assert_eq!(
        (accuracy.observed, accuracy.predicted, accuracy.confirmed),
        (1, 1, 1)
    );
    assert_eq!(accuracy.prompt_tokens, prompt);
    assert_eq!(accuracy.cached_tokens, tokens(&second, 3));
    assert_eq!(
        accuracy.predicted_tokens,
        prompt * second.bytes(2) / second.total_bytes()
    );
}

#[test]
fn a_shortfall_counts_and_forgets_no_other_chain() {
    let mut router = small_router(10_000);
    let only = [Candidate::new(0)];
    // Conversation 0 first, then 400 others on the same upstream.
    send(&mut router, &only, &conversation(None, 0, 0));
    for id in 1..=400 {
        send(&mut router, &only, &conversation(None, id, 0));
    }
    assert_eq!(router.index(0).unwrap().len(), 401);
    // Turn 1 of conversation 0 is predicted, but nothing was cached
    // (llama-server took another slot, say). That says nothing of the
    // conversations sent after or before it.
    let next = conversation(None, 0, 1);
    let decision = send(&mut router, &only, &next);
    assert_eq!(decision.prediction.links, 1);
    let prompt = tokens(&next, next.len());
    let seen = router.observe(0, &next, &decision.prediction, 0, prompt);
    assert_eq!(
        seen,
        Observation::Shortfall {
            predicted: 1,
            links: 0
        }
    );
    let index = router.index(0).unwrap();
    for kept in [1, 2, 199, 400] {
        assert_eq!(
            index.matched(conversation(None, kept, 0).links()).links,
            1,
            "conversation {kept} was dropped"
        );
    }
    // The upstream just computed this turn's whole prompt: still indexed.
    assert_eq!(index.matched(next.links()).links, next.len());
    // The next turn of that conversation is predicted there again.
    let after = conversation(None, 0, 2);
    let decision = send(&mut router, &only, &after);
    assert_eq!(decision.prediction.links, next.len());
    let accuracy = router.accuracy(0).unwrap();
    assert_eq!((accuracy.predicted, accuracy.shortfalls), (1, 1));
    assert_eq!(accuracy.forgotten_links, 0, "nothing was forgotten");
}

#[test]
fn an_unpredicted_hit_and_a_cold_miss_are_told_apart() {
    let mut router = small_router(100_000);
    let only = [Candidate::new(0)];
    let cold = conversation(None, 2, 0);
    let decision = send(&mut router, &only, &cold);
    assert_eq!(
        router.observe(0, &cold, &decision.prediction, 0, 100),
        Observation::Cold
    );
    let unknown = conversation(None, 3, 1);
    let decision = send(&mut router, &only, &unknown);
    assert_eq!(decision.prediction.links, 0);
    let seen = router.observe(
        0,
        &unknown,
        &decision.prediction,
        tokens(&unknown, 2),
        tokens(&unknown, 3),
    );
    assert_eq!(seen, Observation::Unpredicted { links: 2 });
    assert_eq!(router.accuracy(0).unwrap().unpredicted, 1);
}

#[test]
fn nothing_to_compare_is_unmeasured() {
    let mut router = small_router(100);
    let chain = conversation(None, 1, 0);
    let prediction = Prediction::default();
    assert_eq!(
        router.observe(0, &chain, &prediction, 0, 0),
        Observation::Unmeasured
    );
    assert_eq!(
        router.observe(0, &Chain::default(), &prediction, 1, 10),
        Observation::Unmeasured
    );
    assert_eq!(
        router.observe(7, &chain, &prediction, 1, 10),
        Observation::Unmeasured
    );
    assert_eq!(router.accuracy(0).unwrap().observed, 0);
}

#[test]
fn forget_empties_one_upstream() {
    let mut router = small_router(100);
    let chain = conversation(None, 1, 0);
    send(&mut router, &[Candidate::new(0)], &chain);
    send(&mut router, &[Candidate::new(1)], &chain);
    router.forget(0);
    router.forget(9);
    assert!(router.index(0).unwrap().is_empty());
    assert_eq!(router.index(1).unwrap().len(), chain.len());
    assert_eq!(
        router.accuracy(0).unwrap().forgotten_links,
        chain.len() as u64,
        "a restart's forgotten links are counted"
    );
}
