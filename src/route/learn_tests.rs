//! Tests of learning from `cache_n`: confirmed, shortfall, unpredicted,
//! and the accuracy counters.

use super::tests::{conversation, idle, send};
use super::*;

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
fn a_confirmed_prediction_counts_and_grows_the_limit() {
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
fn a_shortfall_forgets_what_the_upstream_lost() {
    let mut router = small_router(10_000);
    let only = [Candidate::new(0)];
    // Conversation 0 first, then 400 others on the same upstream.
    send(&mut router, &only, &conversation(None, 0, 0));
    for id in 1..=400 {
        send(&mut router, &only, &conversation(None, id, 0));
    }
    let index = router.index(0).unwrap();
    assert_eq!(index.len(), 401);
    // Turn 1 of conversation 0 is predicted, but nothing was cached: the
    // upstream lost it, and with it everything older (nothing here), but
    // conversations sent after it stay.
    let next = conversation(None, 0, 1);
    let decision = send(&mut router, &only, &next);
    assert_eq!(decision.prediction.links, 1);
    let prompt = tokens(&next, next.len());
    let seen = router.observe(0, &next, &decision.prediction, 0, prompt);
    assert_eq!(
        seen,
        Observation::Shortfall {
            predicted: 1,
            links: 0,
            forgotten: 0
        }
    );
    // The upstream keeps less than the 403 links indexed: that is the limit.
    assert_eq!(router.index(0).unwrap().limit(), 403);
    // Now conversation 200 is predicted and missed. Its new turn adds two
    // links, so the limit evicts conversations 1 and 2; the shortfall
    // forgets the 197 others sent before it. It and the later ones stay,
    // and so does conversation 0's new turn (the upstream just computed it).
    let again = conversation(None, 200, 1);
    let decision = send(&mut router, &only, &again);
    assert_eq!(decision.prediction.links, 1);
    let seen = router.observe(
        0,
        &again,
        &decision.prediction,
        0,
        tokens(&again, again.len()),
    );
    assert_eq!(
        seen,
        Observation::Shortfall {
            predicted: 1,
            links: 0,
            forgotten: 197
        }
    );
    let index = router.index(0).unwrap();
    for gone in [1, 2, 3, 199] {
        assert_eq!(index.matched(conversation(None, gone, 0).links()).links, 0);
    }
    assert_eq!(index.matched(conversation(None, 201, 0).links()).links, 1);
    assert_eq!(index.matched(next.links()).links, next.len());
    assert_eq!(index.limit(), MIN_LIMIT, "it keeps no more than it showed");
    let accuracy = router.accuracy(0).unwrap();
    assert_eq!((accuracy.predicted, accuracy.shortfalls), (2, 2));
    assert_eq!(accuracy.forgotten_links, 197);
}

#[test]
fn an_unpredicted_hit_grows_the_limit_and_a_cold_miss_teaches_nothing() {
    let mut router = small_router(100_000);
    let only = [Candidate::new(0)];
    // Lower the limit first through a shortfall.
    send(&mut router, &only, &conversation(None, 1, 0));
    let next = conversation(None, 1, 1);
    let decision = send(&mut router, &only, &next);
    router.observe(0, &next, &decision.prediction, 0, 100);
    assert_eq!(router.index(0).unwrap().limit(), MIN_LIMIT);

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
    assert_eq!(router.index(0).unwrap().limit(), MIN_LIMIT + 2);
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
}
