//! The token ids an event of the client's stream carried: what makes a
//! continuation token-exact. A chat or text-completion chunk carries them
//! when the request asked for `logprobs` (`choices[0].logprobs.content[].id`);
//! a native event always does (`tokens`; else its
//! `completion_probabilities[].id`).
//!
//! Deliberately not here: deciding whether the ids are complete (the
//! observer's transcript does, event by event).

use serde::Deserialize;

use super::Shape;

#[derive(Deserialize)]
struct Entry {
    id: u32,
}

#[derive(Deserialize)]
struct Probs {
    #[serde(default)]
    content: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    logprobs: Option<Probs>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Native {
    #[serde(default)]
    tokens: Option<Vec<u32>>,
    #[serde(default)]
    completion_probabilities: Option<Vec<Entry>>,
}

/// Appends the token ids of one event (`data`, without `data: `) of a
/// `shape` stream to `out`; `false` when the event carries none (nothing is
/// appended).
pub fn event_token_ids(shape: Shape, data: &[u8], out: &mut Vec<u32>) -> bool {
    let before = out.len();
    match shape {
        Shape::Chat | Shape::Completions => {
            let Ok(c) = serde_json::from_slice::<Chunk>(data) else {
                return false;
            };
            let entries = c
                .choices
                .into_iter()
                .next()
                .and_then(|ch| ch.logprobs)
                .and_then(|p| p.content);
            out.extend(entries.into_iter().flatten().map(|e| e.id));
        }
        Shape::Native => {
            let Ok(n) = serde_json::from_slice::<Native>(data) else {
                return false;
            };
            match (n.tokens, n.completion_probabilities) {
                (Some(t), _) if !t.is_empty() => out.extend_from_slice(&t),
                (_, Some(p)) => out.extend(p.into_iter().map(|e| e.id)),
                _ => {}
            }
        }
    }
    out.len() > before
}
