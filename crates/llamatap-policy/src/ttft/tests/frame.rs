//! A prompt's size read from its chat chain: the bytes line fitted on
//! one-message prompts, then asked of a conversation of many short turns.

use super::*;
use crate::router::{Chain, MESSAGE_FRAME_BYTES};
use llamatap_wire::request::Route;
use serde_json::{json, Value};

/// Words of about 5 bytes each, `n` of them.
fn text(rng: &mut StdRng, n: usize) -> String {
    (0..n)
        .map(|_| ["river", "stone", "house", "light", "north"][rng.random_range(0..5)])
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a tokenizer with a ChatML-like template makes of `messages`: 4
/// bytes of text a token, the role a token and 4 tokens of frame a
/// message, and 3 for the generation prompt.
fn tokens(messages: &[Value]) -> u32 {
    let text: usize = messages
        .iter()
        .map(|m| m["content"].as_str().map_or(0, str::len))
        .sum();
    (3 + text / 4 + 5 * messages.len()) as u32
}

/// The chain's bytes, and the text and role bytes alone (without the
/// frame).
fn sizes(messages: &[Value]) -> (u64, u64) {
    let chain = Chain::from_json(Route::ChatCompletions, &json!({ "messages": messages }));
    let framed = chain.total_bytes();
    (framed, framed - MESSAGE_FRAME_BYTES * messages.len() as u64)
}

#[test]
fn a_conversation_of_short_turns_counts_its_frames() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut framed, mut bare) = (TtftBook::new(2), TtftBook::new(2));
    let m = Member::cpu();
    // One-message prompts of 5 to 900 words.
    for _ in 0..40 {
        let words = rng.random_range(5..900);
        let messages = [json!({"role": "user", "content": text(&mut rng, words)})];
        let (with, without) = sizes(&messages);
        for (book, bytes) in [(&mut framed, with), (&mut bare, without)] {
            let mut o = m.observation(tokens(&messages), 0, 0, 1.0);
            o.prompt_bytes = Some(bytes);
            book.observe(&0, &o);
        }
    }
    // A voice assistant's conversation: a short system prompt, then
    // thirty turns of 3 to 12 words.
    let mut talk = vec![json!({"role": "system", "content": text(&mut rng, 40)})];
    for turn in 0..30 {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        let words = rng.random_range(3..12);
        talk.push(json!({"role": role, "content": text(&mut rng, words)}));
    }
    let want = f64::from(tokens(&talk));
    let (with, without) = sizes(&talk);
    let asked = |book: &TtftBook<u32>, bytes| {
        let q = Query {
            prompt: PromptSize::Bytes(bytes),
            ..idle(0, 0)
        };
        f64::from(estimate(book.predict(&0, &q)).prompt_tokens)
    };
    let (got, bare_got) = (asked(&framed, with), asked(&bare, without));
    assert!(rel_err(got, want) < 0.1, "{got} vs {want}");
    // Without the frames, its 31 messages' template tokens go uncounted
    // (here 412 tokens of 513).
    assert!(bare_got < 0.85 * want, "{bare_got} vs {want}");
}
