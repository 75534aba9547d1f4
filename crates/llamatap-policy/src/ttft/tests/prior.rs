//! A new member's start from a peer's rates (`member/prior.rs`).

use super::*;

/// A member whose prefill has a large fixed part: one short prompt alone
/// says nothing of a long one.
fn fixed_heavy() -> Member {
    Member {
        fixed: 40.0,
        ..Member::cpu()
    }
}

/// `m`'s prediction of `new` tokens, nothing cached, on `key` of `book`.
fn at(book: &TtftBook<u32>, key: u32, new: u32) -> Estimate {
    estimate(book.predict(&key, &idle(new, 0)))
}

#[test]
fn a_new_member_starts_from_its_peers_curve() {
    let m = fixed_heavy();
    let mut book = trained(&m, 60, 0.0, 7);
    let mut alone = book.clone();
    let first = m.observation(33, 0, 0, 1.0);
    book.observe_among(&1, &first, |_| true);
    alone.observe(&1, &first);
    let want = m.ttft(415, 0, 0);
    let borrowed = at(&book, 1, 415);
    let own = at(&alone, 1, 415);
    // One 33-token prompt alone is a cost per token: about three times
    // too long at 415 tokens. The peer's curve has the fixed part.
    assert!(
        rel_err(own.ttft_ms, want) > 1.0,
        "{} vs {want}",
        own.ttft_ms
    );
    assert!(
        rel_err(borrowed.ttft_ms, want) < 0.1,
        "{} vs {want}",
        borrowed.ttft_ms
    );
    // The peer's answers are not the member's own.
    assert_eq!(borrowed.confidence, Confidence::Low);
    assert_eq!(book.learned(&1).map(|l| l.observations), Some(1));
    assert_eq!(book.ratios(&1).map(|c| c.len(0)), Some(0));
}

#[test]
fn without_a_peer_a_new_member_starts_empty() {
    let m = fixed_heavy();
    let trained_book = trained(&m, 60, 0.0, 7);
    let first = m.observation(33, 0, 0, 1.0);
    let (mut among, mut plain) = (trained_book.clone(), trained_book);
    // Key 0 serves another model: it is no peer.
    among.observe_among(&1, &first, |k| *k != 0);
    plain.observe(&1, &first);
    for new in [33, 415, 1500] {
        assert_eq!(at(&among, 1, new), at(&plain, 1, new));
    }
    // A key already held learns as it did: the peer is not read again.
    let mut again = among.clone();
    let second = m.observation(400, 0, 0, 1.0);
    again.observe_among(&1, &second, |_| true);
    among.observe(&1, &second);
    assert_eq!(at(&again, 1, 900), at(&among, 1, 900));
}

#[test]
fn a_peer_on_other_hardware_is_scaled_then_outweighed() {
    let peer = fixed_heavy();
    // Three times slower per token, a fifth of the fixed part: another
    // speed and another shape.
    let other = Member {
        fixed: peer.fixed * 0.2,
        per_token: peer.per_token * 3.0,
        overhead: peer.overhead * 2.0,
        ..peer
    };
    let mut book = trained(&peer, 60, 0.0, 7);
    let mut rng = StdRng::seed_from_u64(11);
    let mut errors = Vec::new();
    for i in 0..12 {
        let new = if i == 0 {
            90
        } else {
            rng.random_range(20..1500)
        };
        book.observe_among(&1, &other.observation(new, 0, 0, 1.0), |_| true);
        if i == 0 {
            // The peer's curve, scaled through the first prefill.
            let first = at(&book, 1, 90).prefill_ms;
            assert!(rel_err(first, other.prefill(90, 0, 0)) < 0.01, "{first}");
        }
        errors.push(rel_err(at(&book, 1, 700).ttft_ms, other.ttft(700, 0, 0)));
    }
    // At the peer's speed 700 tokens would be 57 % short. Scaled through
    // one short prompt, the peer's shape (its fixed part) makes it 40 %
    // short; the member's own answers correct the shape.
    assert!(errors.iter().all(|e| *e < 0.5), "{errors:?}");
    assert!(errors.iter().skip(2).all(|e| *e < 0.1), "{errors:?}");
    // The peer learned nothing from it.
    let p = at(&book, 0, 700).ttft_ms;
    assert!(rel_err(p, peer.ttft(700, 0, 0)) < 0.05, "{p}");
}

#[test]
fn a_peer_of_few_answers_is_no_start() {
    let fast = fixed_heavy();
    let slow = Member {
        per_token: fast.per_token * 4.0,
        ..fast
    };
    let mut book = TtftBook::new(8);
    for i in 0..PEER_ANSWERS - 1 {
        book.observe(&2, &slow.observation(100 + 150 * i, 0, 0, 1.0));
    }
    let first = fast.observation(300, 0, 0, 1.0);
    let mut plain = book.clone();
    book.observe_among(&1, &first, |_| true);
    plain.observe(&1, &first);
    assert_eq!(at(&book, 1, 1200), at(&plain, 1, 1200));
    // With one more answer it is a peer; one with more answers yet is
    // preferred.
    book.observe(&2, &slow.observation(1500, 0, 0, 1.0));
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..3 * PEER_ANSWERS {
        let new = rng.random_range(20..1500);
        book.observe(&0, &fast.observation(new, 0, 0, 1.0));
    }
    book.observe_among(&3, &first, |_| true);
    let got = at(&book, 3, 1200).ttft_ms;
    assert!(rel_err(got, fast.ttft(1200, 0, 0)) < 0.1, "{got}");
}
