#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: the chain of a prefix is a prefix of the chain; the
//! decision is a deterministic function of the request history; it never
//! picks an ineligible upstream nor one beyond the load bound.

use super::conversation;
use crate::router::*;
use llamatap_wire::request::Route;
use proptest::prelude::*;
use serde_json::{json, Value};

fn message() -> impl Strategy<Value = Value> {
    let role = prop::sample::select(vec!["system", "user", "assistant", "tool"]);
    let text = "[a-zA-Z ,.é日]{0,40}";
    let content = prop_oneof![
        text.prop_map(Value::from),
        prop::collection::vec(text, 0..3).prop_map(|parts| json!(parts
            .iter()
            .map(|t| json!({"type": "text", "text": t}))
            .collect::<Vec<_>>())),
        Just(Value::Null),
    ];
    (role, content).prop_map(|(role, content)| json!({"role": role, "content": content}))
}

/// A message's block links: its text's whole blocks before the end, when
/// its content is a string or a list of one text part.
fn blocks(message: &Value) -> usize {
    let text = match &message["content"] {
        Value::String(text) => Some(text.as_str()),
        Value::Array(parts) if parts.len() == 1 => parts[0]["text"].as_str(),
        _ => None,
    };
    text.map_or(0, |t| t.len().saturating_sub(1) / MESSAGE_BLOCK_BYTES)
}

proptest! {
    #[test]
    fn the_chain_of_a_message_prefix_is_a_prefix(
        messages in prop::collection::vec(message(), 0..8),
        cut in 0usize..8,
        system in proptest::option::of("[a-z ]{0,20}"),
    ) {
        let cut = cut.min(messages.len());
        let body = |messages: &[Value]| {
            let mut body = json!({"model": "m", "messages": messages});
            if let Some(system) = &system {
                body["system"] = json!(system);
            }
            Chain::from_json(Route::Messages, &body)
        };
        let whole = body(&messages);
        let prefix = body(&messages[..cut]);
        // A link per message, and per whole block before its text's end.
        let extra = usize::from(system.is_some());
        let links = |messages: &[Value]| messages.iter().map(|m| 1 + blocks(m)).sum::<usize>();
        prop_assert_eq!(whole.len(), links(&messages) + extra);
        prop_assert_eq!(prefix.len(), links(&messages[..cut]) + extra);
        prop_assert_eq!(prefix.links(), &whole.links()[..prefix.len()]);
        prop_assert_eq!(prefix.total_bytes(), whole.bytes(prefix.len()));
    }

    #[test]
    fn messages_that_begin_alike_share_their_whole_blocks(
        text in "[a-zA-Z ,.é日]{0,120}",
        cut in 0usize..400,
    ) {
        let cut = (0..=cut.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let chain = |text: &str| {
            Chain::from_json(Route::ChatCompletions, &json!({"messages": [
                {"role": "user", "content": text}]}))
        };
        let (whole, prefix) = (chain(&text), chain(&text[..cut]));
        // The shorter text's blocks, all of which end before it does.
        let shared = cut.saturating_sub(1) / MESSAGE_BLOCK_BYTES;
        prop_assert_eq!(&prefix.links()[..shared], &whole.links()[..shared]);
        let framed = text.len() + "user".len() + MESSAGE_FRAME_BYTES as usize;
        prop_assert_eq!(whole.total_bytes(), framed as u64);
    }

    #[test]
    fn the_chain_of_a_prompt_prefix_shares_its_whole_blocks(
        text in "[ -~]{0,2000}",
        cut in 0usize..2000,
    ) {
        let cut = cut.min(text.len());
        let whole = Chain::from_json(Route::Completions, &json!({"prompt": text}));
        let prefix = Chain::from_json(Route::Completions, &json!({"prompt": &text[..cut]}));
        let blocks = cut / BLOCK_BYTES;
        prop_assert_eq!(whole.len(), text.len().div_ceil(BLOCK_BYTES));
        prop_assert_eq!(&prefix.links()[..blocks], &whole.links()[..blocks]);
        prop_assert_eq!(whole.total_bytes(), text.len() as u64);
    }
}

/// One request of a random workload.
#[derive(Clone, Debug)]
struct Step {
    conversation: usize,
    turn: usize,
    loads: [u32; 3],
    down: Option<usize>,
    session: Option<u8>,
    exclude: Option<usize>,
    observe: Option<u8>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0usize..12,
        0usize..5,
        [0u32..6, 0u32..6, 0u32..6],
        proptest::option::of(0usize..3),
        proptest::option::weighted(0.2, any::<u8>()),
        proptest::option::weighted(0.1, 0usize..3),
        proptest::option::weighted(0.5, 0u8..=100),
    )
        .prop_map(
            |(conversation, turn, loads, down, session, exclude, observe)| Step {
                conversation,
                turn,
                loads,
                down,
                session,
                exclude,
                observe,
            },
        )
}

/// Runs `steps` through a fresh router; returns every decision, checking
/// each against the candidates it was given.
fn run(policy: Policy, steps: &[Step]) -> Vec<Option<Decision>> {
    let config = RouteConfig {
        policy,
        index_capacity: 64,
        ..RouteConfig::default()
    };
    let mut router = Router::new(&["a", "b", "c"], config);
    let mut decisions = Vec::new();
    for step in steps {
        let chain = conversation(Some("Be brief."), step.conversation, step.turn);
        let candidates: Vec<Candidate> = (0..3)
            .map(|at| Candidate {
                healthy: step.down != Some(at),
                in_flight: step.loads[at],
                ..Candidate::new(at)
            })
            .collect();
        let exclude: Vec<usize> = step.exclude.into_iter().collect();
        let request = Request {
            chain: &chain,
            session: step.session.map(|s| session_key(&[s])),
            exclude: &exclude,
        };
        let decision = router.route(&candidates, &request);
        let eligible: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| c.healthy && !exclude.contains(&c.upstream))
            .collect();
        match decision {
            None => assert!(eligible.is_empty()),
            Some(decision) => {
                let chosen = eligible.iter().find(|c| c.upstream == decision.upstream);
                let chosen = chosen.expect("an eligible upstream");
                if policy == Policy::PrefixAffinity {
                    let least = eligible.iter().map(|c| c.in_flight).min().unwrap();
                    let mean = eligible.iter().map(|c| f64::from(c.in_flight)).sum::<f64>()
                        / eligible.len() as f64;
                    let slack = 2f64.max((0.5 * mean).ceil());
                    assert!(f64::from(chosen.in_flight) <= f64::from(least) + slack);
                }
                if let Some(percent) = step.observe {
                    let prompt = chain.total_bytes() / 4 + 1;
                    router.observe(
                        decision.upstream,
                        &chain,
                        &decision.prediction,
                        prompt * u64::from(percent) / 100,
                        prompt,
                    );
                }
            }
        }
        decisions.push(decision);
    }
    decisions
}

proptest! {
    #[test]
    fn decisions_are_deterministic_and_eligible(
        steps in prop::collection::vec(step(), 1..60),
        policy in prop::sample::select(vec![Policy::PrefixAffinity, Policy::LeastBusy, Policy::RoundRobin]),
    ) {
        prop_assert_eq!(run(policy, &steps), run(policy, &steps));
    }
}
