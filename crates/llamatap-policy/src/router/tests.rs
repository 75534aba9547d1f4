//! Shared fixtures for the routing tests, and the tests of the router's
//! choice (affinity, spread, agreement, bounded load, failover, policies).

mod chain;
mod index;
mod learn;
mod proptests;

use super::*;
use llamatap_wire::request::Route;
use serde_json::{json, Value};

/// A chat body: optional system prompt, then `turns` alternating user and
/// assistant messages (user first).
pub(super) fn chat(system: Option<&str>, turns: &[String]) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for (at, text) in turns.iter().enumerate() {
        let role = if at % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": text}));
    }
    json!({"model": "tiny", "messages": messages, "stream": true})
}

/// Turn `turn` (0-based) of conversation `id`: its user questions and the
/// assistant answers before the last question.
pub(super) fn turns(id: usize, turn: usize) -> Vec<String> {
    (0..=2 * turn)
        .map(|at| {
            if at % 2 == 0 {
                format!("conversation {id}: question {} about the weather", at / 2)
            } else {
                format!("conversation {id}: answer {} with the forecast", at / 2)
            }
        })
        .collect()
}

/// The chain of turn `turn` of conversation `id` under `system`.
pub(super) fn conversation(system: Option<&str>, id: usize, turn: usize) -> Chain {
    Chain::from_json(Route::ChatCompletions, &chat(system, &turns(id, turn)))
}

/// `n` idle candidates, upstreams `0..n`.
pub(super) fn idle(n: usize) -> Vec<Candidate> {
    (0..n).map(Candidate::new).collect()
}

/// A router over upstreams `a`, `b`, `c` with `policy`.
pub(super) fn router(policy: Policy) -> Router {
    Router::new(
        &["a", "b", "c"],
        RouteConfig {
            policy,
            ..RouteConfig::default()
        },
    )
}

/// Routes `chain` without session or exclusions.
pub(super) fn send(router: &mut Router, candidates: &[Candidate], chain: &Chain) -> Decision {
    router
        .route(
            candidates,
            &Request {
                chain,
                session: None,
                exclude: &[],
            },
        )
        .unwrap()
}

const SYSTEM: &str = "You are a helpful assistant that answers questions about the weather \
    in short sentences, citing the forecast where you can.";

/// The links of [`SYSTEM`] (its whole blocks, then its own link).
fn system_links() -> usize {
    Chain::from_json(Route::ChatCompletions, &chat(Some(SYSTEM), &[])).len()
}

#[test]
fn a_conversation_stays_on_one_upstream_across_five_turns() {
    let mut router = router(Policy::PrefixAffinity);
    let candidates = idle(3);
    let mut homes = [None; 12];
    // Twelve conversations, their turns interleaved.
    for turn in 0..5 {
        for (id, home) in homes.iter_mut().enumerate() {
            let decision = send(
                &mut router,
                &candidates,
                &conversation(Some(SYSTEM), id, turn),
            );
            match *home {
                None => {
                    assert_eq!(decision.reason, Reason::Cold, "conversation {id}");
                    *home = Some(decision.upstream);
                }
                Some(home) => {
                    assert_eq!(decision.upstream, home, "conversation {id} turn {turn}");
                    assert_eq!(decision.reason, Reason::PrefixHit);
                    // Everything up to the previous question was sent there.
                    let before = conversation(Some(SYSTEM), id, turn - 1);
                    assert_eq!(decision.prediction.links, before.len());
                }
            }
        }
    }
}

#[test]
fn conversations_sharing_only_a_system_prompt_spread_over_the_fleet() {
    let mut router = router(Policy::PrefixAffinity);
    let candidates = idle(3);
    let mut per_upstream = [0usize; 3];
    for id in 0..30 {
        let decision = send(&mut router, &candidates, &conversation(Some(SYSTEM), id, 0));
        assert_eq!(
            decision.reason,
            Reason::Cold,
            "a shared system prompt does not attract"
        );
        per_upstream[decision.upstream] += 1;
    }
    assert!(per_upstream.iter().all(|&n| n >= 5), "{per_upstream:?}");
    // Each later conversation still finds the system prompt where it lands
    // once the prompt was sent there: the prediction says its links.
    let decision = send(&mut router, &candidates, &conversation(Some(SYSTEM), 99, 0));
    assert_eq!(decision.prediction.links, system_links());
}

#[test]
fn a_document_shared_at_the_head_of_first_questions_is_found_but_does_not_attract() {
    // RAG: each question comes after the same retrieved document, in one
    // user message. Like a shared system prompt, the document does not
    // pull every conversation to one upstream; where it was sent before,
    // its blocks are predicted cached.
    let mut router = router(Policy::PrefixAffinity);
    let candidates = idle(3);
    let document = "The river ran past the old mill. ".repeat(40);
    let mut per_upstream = [0usize; 3];
    let mut found = 0;
    for id in 0..30 {
        let question = format!("{document}\nQuestion {id}: who owned the mill?");
        let body = chat(Some(SYSTEM), &[question]);
        let decision = send(
            &mut router,
            &candidates,
            &Chain::from_json(Route::ChatCompletions, &body),
        );
        assert_eq!(
            decision.reason,
            Reason::Cold,
            "a shared document does not attract"
        );
        per_upstream[decision.upstream] += 1;
        if decision.prediction.links > system_links() {
            // The system prompt and the document's whole blocks.
            assert_eq!(
                decision.prediction.links,
                system_links() + document.len() / MESSAGE_BLOCK_BYTES
            );
            found += 1;
        }
    }
    assert!(per_upstream.iter().all(|&n| n >= 5), "{per_upstream:?}");
    // Every question after the first on an upstream finds the document.
    assert_eq!(found, 30 - 3);
}

#[test]
fn two_routers_place_new_conversations_identically() {
    // The second lists the same upstreams in another order: identity is
    // the name, not the position.
    let names = [
        "http://10.0.0.1:8080",
        "http://10.0.0.2:8080",
        "http://10.0.0.3:8080",
    ];
    let reversed = [names[2], names[1], names[0]];
    let mut first = Router::new(&names, RouteConfig::default());
    let mut second = Router::new(&reversed, RouteConfig::default());
    let mut per_upstream = [0usize; 3];
    for id in 0..50 {
        let chain = conversation(Some(SYSTEM), id, 0);
        let one = send(&mut first, &idle(3), &chain);
        let other = send(&mut second, &idle(3), &chain);
        assert_eq!(
            names[one.upstream], reversed[other.upstream],
            "conversation {id}"
        );
        assert_eq!(one.reason, other.reason);
        per_upstream[one.upstream] += 1;
    }
    assert!(per_upstream.iter().all(|&n| n > 0), "{per_upstream:?}");
}

#[test]
fn a_conversation_stays_put_when_its_turns_alternate_between_two_routers() {
    // Neither router sees every turn, yet both keep finding the same home:
    // a turn neither has indexed is placed by its anchor, the first user
    // message, which every turn of the conversation shares.
    let mut routers = [
        router(Policy::PrefixAffinity),
        router(Policy::PrefixAffinity),
    ];
    for id in 0..20 {
        let mut home = None;
        for turn in 0..5 {
            let decision = send(
                &mut routers[turn % 2],
                &idle(3),
                &conversation(Some(SYSTEM), id, turn),
            );
            assert_eq!(
                *home.get_or_insert(decision.upstream),
                decision.upstream,
                "{id}/{turn}"
            );
        }
    }
}

/// Places turn 0 of a conversation on idle upstreams, then routes turn 1
/// with the load `load(home)` gives; returns the home and the decision.
fn second_turn(load: impl Fn(usize) -> Vec<Candidate>) -> (usize, Decision) {
    let mut router = router(Policy::PrefixAffinity);
    let home = send(&mut router, &idle(3), &conversation(Some(SYSTEM), 7, 0)).upstream;
    (
        home,
        send(&mut router, &load(home), &conversation(Some(SYSTEM), 7, 1)),
    )
}

/// Three idle candidates but `home` with `in_flight` and the others with
/// `others` requests in flight.
fn loads(home: usize, in_flight: u32, others: u32) -> Vec<Candidate> {
    let mut candidates = idle(3);
    for candidate in &mut candidates {
        candidate.in_flight = if candidate.upstream == home {
            in_flight
        } else {
            others
        };
    }
    candidates
}

#[test]
fn affinity_yields_to_the_least_loaded_beyond_the_bound() {
    // Two requests more than the idlest: within max(2, ceil(0.5 * 0.67)).
    let (home, decision) = second_turn(|home| loads(home, 2, 0));
    assert_eq!(
        (decision.upstream, decision.reason),
        (home, Reason::PrefixHit)
    );

    // Three more: beyond the bound, the least loaded wins.
    let (home, decision) = second_turn(|home| loads(home, 3, 0));
    assert_eq!(decision.reason, Reason::Overloaded);
    assert_ne!(decision.upstream, home);

    // The proportional part: loads 10/6/6 have mean 7.33, a slack of 4.
    let (home, decision) = second_turn(|home| loads(home, 10, 6));
    assert_eq!(
        (decision.upstream, decision.reason),
        (home, Reason::PrefixHit)
    );
    let (_, decision) = second_turn(|home| loads(home, 11, 6));
    assert_eq!(decision.reason, Reason::Overloaded);

    // A queue at the server counts as load.
    let (_, decision) = second_turn(|home| {
        let mut candidates = idle(3);
        candidates[home].deferred = Some(3);
        candidates
    });
    assert_eq!(decision.reason, Reason::Overloaded);
}

#[test]
fn after_an_overload_the_conversation_follows_its_longest_prefix() {
    let mut router = router(Policy::PrefixAffinity);
    let home = send(&mut router, &idle(3), &conversation(Some(SYSTEM), 7, 0)).upstream;
    let moved = send(
        &mut router,
        &loads(home, 3, 0),
        &conversation(Some(SYSTEM), 7, 1),
    );
    assert_eq!(moved.reason, Reason::Overloaded);
    // Turn 2 finds turn 1 only where turn 1 went.
    let decision = send(&mut router, &idle(3), &conversation(Some(SYSTEM), 7, 2));
    assert_eq!(
        (decision.upstream, decision.reason),
        (moved.upstream, Reason::PrefixHit)
    );
    assert_eq!(
        decision.prediction.links,
        conversation(Some(SYSTEM), 7, 1).len()
    );
}

#[test]
fn a_cold_placement_yields_to_load_too() {
    let mut router = router(Policy::PrefixAffinity);
    let chain = conversation(None, 1, 0);
    let preferred = send(
        &mut Router::new(&["a", "b", "c"], RouteConfig::default()),
        &idle(3),
        &chain,
    );
    let mut loaded = idle(3);
    loaded[preferred.upstream].in_flight = 5;
    let decision = send(&mut router, &loaded, &chain);
    assert_eq!(decision.reason, Reason::Overloaded);
    assert_ne!(decision.upstream, preferred.upstream);
}

#[test]
fn failover_excludes_the_upstreams_tried() {
    let mut router = router(Policy::PrefixAffinity);
    let chain = conversation(Some(SYSTEM), 3, 0);
    let first = send(&mut router, &idle(3), &chain).upstream;
    let retry = router
        .route(
            &idle(3),
            &Request {
                chain: &chain,
                session: None,
                exclude: &[first],
            },
        )
        .unwrap();
    assert_ne!(retry.upstream, first);
    assert_eq!(retry.reason, Reason::Failover);
    let last = router
        .route(
            &idle(3),
            &Request {
                chain: &chain,
                session: None,
                exclude: &[first, retry.upstream],
            },
        )
        .unwrap();
    assert_eq!(
        last.reason,
        Reason::Failover,
        "even as the only candidate left"
    );
    assert!(![first, retry.upstream].contains(&last.upstream));
    let none = router.route(
        &idle(3),
        &Request {
            chain: &chain,
            session: None,
            exclude: &[0, 1, 2],
        },
    );
    assert_eq!(none, None);
}

#[test]
fn only_eligible_candidates_are_chosen() {
    let mut router = router(Policy::PrefixAffinity);
    let chain = conversation(None, 1, 0);
    let mut candidates = idle(4); // upstream 3 is unknown to the router
    candidates[0].healthy = false;
    candidates[1].serves_model = false;
    let decision = send(&mut router, &candidates, &chain);
    assert_eq!(
        (decision.upstream, decision.reason),
        (2, Reason::OnlyCandidate)
    );
    candidates[2].weight = 0;
    let request = Request {
        chain: &chain,
        session: None,
        exclude: &[],
    };
    assert_eq!(router.route(&candidates, &request), None);
    assert_eq!(router.route(&[], &request), None);
}

#[test]
fn a_session_sticks_to_its_rendezvous_upstream() {
    let mut router = router(Policy::PrefixAffinity);
    let mut per_upstream = [0usize; 3];
    for user in 0..30 {
        let session = session_key(format!("user-{user}").as_bytes());
        let mut home = None;
        for id in 0..3 {
            let chain = conversation(None, 100 * user + id, 0);
            let decision = router
                .route(
                    &idle(3),
                    &Request {
                        chain: &chain,
                        session: Some(session),
                        exclude: &[],
                    },
                )
                .unwrap();
            assert_eq!(decision.reason, Reason::Session);
            assert_eq!(*home.get_or_insert(decision.upstream), decision.upstream);
        }
        per_upstream[home.unwrap()] += 1;
    }
    assert!(per_upstream.iter().all(|&n| n >= 5), "{per_upstream:?}");
}

#[test]
fn weights_share_cold_conversations_in_proportion() {
    let mut router = Router::new(&["a", "b", "c"], RouteConfig::default());
    let mut candidates = idle(3);
    candidates[0].weight = 2;
    let mut per_upstream = [0usize; 3];
    for id in 0..2000 {
        let decision = send(&mut router, &candidates, &conversation(None, id, 0));
        per_upstream[decision.upstream] += 1;
    }
    // Expected 1000 / 500 / 500.
    assert!((900..=1100).contains(&per_upstream[0]), "{per_upstream:?}");
    assert!((400..=600).contains(&per_upstream[1]), "{per_upstream:?}");
}

#[test]
fn no_prompt_and_no_session_goes_to_the_least_loaded() {
    let mut router = router(Policy::PrefixAffinity);
    let mut candidates = idle(3);
    candidates[0].in_flight = 1;
    candidates[2].in_flight = 1;
    let decision = send(&mut router, &candidates, &Chain::default());
    assert_eq!((decision.upstream, decision.reason), (1, Reason::Balanced));
    assert_eq!(decision.prediction, Prediction::default());
}

#[test]
fn least_busy_takes_the_lowest_load_and_breaks_ties() {
    let mut router = router(Policy::LeastBusy);
    let chain = conversation(None, 1, 0);
    let mut candidates = idle(3);
    candidates[0].in_flight = 2;
    candidates[1].in_flight = 1;
    candidates[2].in_flight = 1;
    candidates[2].idle_slots = Some(1);
    let decision = send(&mut router, &candidates, &chain);
    assert_eq!((decision.upstream, decision.reason), (2, Reason::Balanced));
    // Weight 2 halves the load: 2 / 2 = 1 < 1.5.
    candidates[0].weight = 2;
    candidates[1].in_flight = 3;
    candidates[2].in_flight = 3;
    assert_eq!(send(&mut router, &candidates, &chain).upstream, 0);
    // Equal loads rotate.
    let seen: Vec<usize> = (0..3)
        .map(|_| send(&mut router, &idle(3), &chain).upstream)
        .collect();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 1, 2], "{seen:?}");
}

#[test]
fn round_robin_takes_each_in_turn() {
    let mut router = router(Policy::RoundRobin);
    let chain = conversation(None, 1, 0);
    let mut candidates = idle(3);
    candidates[1].in_flight = 9;
    let seen: Vec<usize> = (0..6)
        .map(|_| send(&mut router, &candidates, &chain).upstream)
        .collect();
    assert_eq!(seen, [0, 1, 2, 0, 1, 2]);
    // It still predicts: the chain went everywhere.
    assert_eq!(
        send(&mut router, &candidates, &chain).prediction.links,
        chain.len()
    );
}

#[test]
fn the_prediction_states_links_bytes_and_tokens() {
    let mut router = router(Policy::PrefixAffinity);
    let first = conversation(Some(SYSTEM), 5, 0);
    let home = send(&mut router, &idle(3), &first);
    assert_eq!(home.prediction.links, 0);
    let second = conversation(Some(SYSTEM), 5, 1);
    let decision = send(&mut router, &idle(3), &second);
    assert_eq!(decision.prediction.links, first.len());
    assert_eq!(decision.prediction.bytes, first.total_bytes());
    assert_eq!(decision.prediction.tokens, None, "no ratio observed yet");
    // Observing 4 bytes per token gives token estimates at that ratio.
    let tokens = second.total_bytes() / 4;
    router.observe(
        decision.upstream,
        &second,
        &decision.prediction,
        tokens / 2,
        tokens,
    );
    let third = send(&mut router, &idle(3), &conversation(Some(SYSTEM), 5, 2));
    let bytes = third.prediction.bytes;
    assert_eq!(
        third.prediction.tokens,
        Some(bytes * tokens / second.total_bytes())
    );
}

#[test]
fn affine_names_the_prefix_holder_whatever_its_load_and_records_nothing() {
    let mut router = router(Policy::PrefixAffinity);
    let first = conversation(Some(SYSTEM), 3, 0);
    assert_eq!(router.affine(&idle(3), &first), None, "nothing sent yet");
    let home = send(&mut router, &idle(3), &first).upstream;
    let next = conversation(Some(SYSTEM), 3, 1);
    // Far beyond the load bound, it is still where the prefix is.
    assert_eq!(router.affine(&loads(home, 50, 0), &next), Some(home));
    let before = router.index(home).unwrap().len();
    assert_eq!(router.affine(&idle(3), &next), Some(home));
    assert_eq!(
        router.index(home).unwrap().len(),
        before,
        "a preview records nothing"
    );
    // Not eligible (down), or another policy: none.
    let mut down = idle(3);
    down[home].healthy = false;
    assert_eq!(router.affine(&down, &next), None);
    let mut balanced = self::router(Policy::LeastBusy);
    send(&mut balanced, &idle(3), &first);
    assert_eq!(balanced.affine(&idle(3), &next), None);
}

#[test]
fn every_reason_has_a_distinct_label_and_ttft_slo_is_one() {
    let labels: Vec<&str> = Reason::all().iter().map(Reason::as_str).collect();
    let distinct: std::collections::HashSet<&&str> = labels.iter().collect();
    assert_eq!(distinct.len(), labels.len(), "{labels:?}");
    assert!(labels.contains(&"ttft_slo"));
    assert_eq!(Reason::TtftSlo.to_string(), "ttft_slo");
    assert_eq!(Reason::TtftSteer.to_string(), "ttft_steer");
}
