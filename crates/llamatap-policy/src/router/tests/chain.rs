//! Tests of prefix chains: what a link covers, anchors, blocks, and the
//! stability of the hashes.

use super::{chat, conversation, turns};
use crate::router::*;
use llamatap_wire::request::Route;
use serde_json::{json, Value};

fn chat_chain(body: &Value) -> Chain {
    Chain::from_json(Route::ChatCompletions, body)
}

fn prompt_chain(body: &Value) -> Chain {
    Chain::from_json(Route::Completions, body)
}

#[test]
fn the_next_turn_extends_the_chain() {
    let system = Some("Be brief.");
    for turn in 0..4 {
        let now = conversation(system, 1, turn);
        let next = conversation(system, 1, turn + 1);
        assert_eq!(now.len(), 2 + 2 * turn);
        assert_eq!(next.len(), now.len() + 2);
        assert!(next.links().starts_with(now.links()));
        assert_eq!(next.bytes(now.len()), now.total_bytes());
    }
}

#[test]
fn a_shared_system_prompt_shares_the_first_link_only() {
    let one = conversation(Some("Be brief."), 1, 0);
    let two = conversation(Some("Be brief."), 2, 0);
    assert_eq!(one.links()[0], two.links()[0]);
    assert_ne!(one.links()[1], two.links()[1]);
    assert_eq!((one.anchor(), two.anchor()), (Some(1), Some(1)));
    assert_ne!(one.cold_key(), two.cold_key());
}

#[test]
fn the_anchor_is_the_first_user_message() {
    let tools =
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]);
    let mut body = chat(Some("Be brief."), &turns(1, 1));
    body["tools"] = tools;
    let chain = chat_chain(&body);
    assert_eq!(chain.len(), 1 + 1 + 3, "tools, system, three messages");
    assert_eq!(chain.anchor(), Some(2));
    assert_eq!(chain.cold_key(), Some(chain.links()[2]));
    assert_eq!(conversation(None, 1, 1).anchor(), Some(0));
    // No user message: the last link.
    let system_only = chat_chain(&chat(Some("Be brief."), &[]));
    assert_eq!((system_only.len(), system_only.anchor()), (1, Some(0)));
    assert_eq!(Chain::default().anchor(), None);
    assert_eq!(Chain::default().cold_key(), None);
}

#[test]
fn tools_and_the_model_change_every_link() {
    let plain = chat(None, &turns(1, 0));
    let mut with_tools = plain.clone();
    with_tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    let mut other_model = plain.clone();
    other_model["model"] = json!("other");
    let plain = chat_chain(&plain);
    let with_tools = chat_chain(&with_tools);
    assert_eq!(with_tools.len(), plain.len() + 1);
    assert_ne!(with_tools.links()[1], plain.links()[0]);
    assert_ne!(chat_chain(&other_model).links()[0], plain.links()[0]);
}

#[test]
fn content_spellings_that_render_alike_hash_alike() {
    let text = chat_chain(&json!({"messages": [{"role": "user", "content": "Hi there"}]}));
    let part = chat_chain(&json!({"messages": [{"role": "user",
        "content": [{"type": "text", "text": "Hi there"}]}]}));
    assert_eq!(text, part);
    // Key order is not part of the hash.
    let reordered = Chain::from_body(
        Route::ChatCompletions,
        br#"{"messages":[{"content":"Hi there","role":"user"}]}"#,
    );
    assert_eq!(text, reordered);
    // A part with more than type and text (an image, cache control) is
    // hashed whole, so it differs.
    let marked = chat_chain(&json!({"messages": [{"role": "user",
        "content": [{"type": "text", "text": "Hi there", "cache_control": {"type": "ephemeral"}}]}]}));
    assert_ne!(text, marked);
    // Other message fields count.
    let named =
        chat_chain(&json!({"messages": [{"role": "user", "content": "Hi there", "name": "ann"}]}));
    assert_ne!(text, named);
}

#[test]
fn anthropic_system_and_responses_input_read_as_messages() {
    let chat_form = json!({"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"}]});
    let anthropic = json!({"model": "m", "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]});
    let responses = json!({"model": "m", "instructions": "Be brief.", "input": "Hi"});
    let expected = chat_chain(&chat_form);
    assert_eq!(Chain::from_json(Route::Messages, &anthropic), expected);
    assert_eq!(Chain::from_json(Route::Responses, &responses), expected);
    // Responses items without a role are links of their own.
    let items = json!({"input": [{"role": "user", "content": "Hi"},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"}]});
    let chain = Chain::from_json(Route::Responses, &items);
    assert_eq!((chain.len(), chain.anchor()), (2, Some(0)));
}

#[test]
fn completion_prompts_hash_in_blocks() {
    let text = "x".repeat(600);
    let chain = prompt_chain(&json!({"prompt": text}));
    assert_eq!(chain.len(), 3, "256 + 256 + 88 bytes");
    assert_eq!(chain.total_bytes(), 600);
    assert_eq!(chain.bytes(1), 256);
    assert_eq!(chain.anchor(), Some(COLD_BLOCKS - 1));
    // A longer prompt shares the whole blocks, not the partial one.
    let longer = prompt_chain(&json!({"prompt": "x".repeat(700)}));
    assert_eq!(longer.links()[..2], chain.links()[..2]);
    assert_ne!(longer.links()[2], chain.links()[2]);
    // The native route reads the same field the same way.
    assert_eq!(
        Chain::from_json(Route::Completion, &json!({"prompt": text})),
        chain
    );
    // A batch is routed by its first prompt.
    assert_eq!(prompt_chain(&json!({"prompt": [text, "other"]})), chain);
    let short = prompt_chain(&json!({"prompt": "hello"}));
    assert_eq!((short.len(), short.anchor()), (1, Some(0)));
}

#[test]
fn token_prompts_hash_64_tokens_a_block() {
    let tokens: Vec<u32> = (0..100).collect();
    let chain = prompt_chain(&json!({"prompt": tokens}));
    assert_eq!(chain.len(), 2);
    assert_eq!(chain.total_bytes(), 400);
    assert_eq!(prompt_chain(&json!({"prompt": [tokens]})), chain);
    // Text and tokens never share links.
    let bytes: String = (0..64).map(|_| 'a').collect();
    assert_ne!(
        prompt_chain(&json!({"prompt": bytes})).links()[0],
        chain.links()[0]
    );
    // Not tokens: negative, too large, mixed.
    for prompt in [
        json!([-1]),
        json!([4_294_967_296u64]),
        json!([{"a": 1}]),
        json!(7),
    ] {
        assert!(
            prompt_chain(&json!({ "prompt": prompt })).is_empty(),
            "{prompt}"
        );
    }
}

#[test]
fn anything_else_gives_the_empty_chain() {
    let body = chat(None, &turns(1, 0));
    for route in [
        Route::Embeddings,
        Route::Tokenize,
        Route::Models,
        Route::Other,
    ] {
        assert!(Chain::from_json(route, &body).is_empty(), "{route}");
    }
    for bytes in [
        &b""[..],
        b"not json",
        b"[1,2]",
        b"{\"messages\": 3}",
        b"{\"messages\":[{\"role\"",
    ] {
        assert!(Chain::from_body(Route::ChatCompletions, bytes).is_empty());
    }
    let with_bom = [
        &b"\xEF\xBB\xBF"[..],
        br#"{"messages":[{"role":"user","content":"Hi"}]}"#,
    ]
    .concat();
    assert_eq!(Chain::from_body(Route::ChatCompletions, &with_bom).len(), 1);
}

#[test]
fn a_long_message_shares_its_leading_blocks() {
    // One document, two questions after it: llama-server reuses the
    // document's tokens, so the chains share its whole blocks.
    let document = "d".repeat(200);
    let ask = |question: &str| {
        chat_chain(&json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": format!("{document} {question}")}]}))
    };
    let one = ask("Who?");
    let two = ask("Where?");
    // System, blocks of bytes 0-63, 64-127, 128-191, the message's link.
    assert_eq!((one.len(), two.len()), (5, 5));
    assert_eq!(one.links()[..4], two.links()[..4]);
    assert_ne!(one.links()[4], two.links()[4]);
    assert_eq!(one.bytes(2) - one.bytes(1), 64);
    assert_eq!(one.bytes(4) - one.bytes(1), 192);
    // The blocks hold the bytes the message's link held alone; the link
    // keeps the template's frame around the message.
    let text_bytes = 205 + "user".len() as u64 + MESSAGE_FRAME_BYTES;
    assert_eq!(one.total_bytes() - one.bytes(1), text_bytes);
    // The anchor is the message's own link, after its blocks: a shared
    // document does not decide where a conversation goes.
    assert_eq!((one.anchor(), two.anchor()), (Some(4), Some(4)));
    assert_ne!(one.cold_key(), two.cold_key());
    // The next turn extends the chain link for link.
    let mut body = json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": format!("{document} Who?")}]});
    let turn = chat_chain(&body);
    if let Some(messages) = body["messages"].as_array_mut() {
        messages.push(json!({"role": "assistant", "content": "d".repeat(100)}));
    }
    let next = chat_chain(&body);
    assert_eq!(next.len(), turn.len() + 2, "one block and its own link");
    assert!(next.links().starts_with(turn.links()));
}

#[test]
fn a_message_has_a_block_for_each_whole_block_before_its_end() {
    let links =
        |text: String| chat_chain(&json!({"messages": [{"role": "user", "content": text}]})).len();
    assert_eq!(links("x".repeat(64)), 1, "no block ends before its end");
    assert_eq!(links("x".repeat(65)), 2);
    assert_eq!(links("x".repeat(128)), 2);
    assert_eq!(links("x".repeat(129)), 3);
    // The role counts: a user's and an assistant's text are not one prefix.
    let as_role =
        |role: &str| chat_chain(&json!({"messages": [{"role": role, "content": "x".repeat(100)}]}));
    assert_ne!(as_role("user").links()[0], as_role("assistant").links()[0]);
    // A message's own link is the one it had before blocks: the pinned
    // hashes below hold for messages too short to have any.
    assert_eq!(as_role("user").len(), 2);
    // A list of one text part reads as its string; other content has no
    // blocks (a list of several parts, an image).
    let part = chat_chain(&json!({"messages": [{"role": "user",
        "content": [{"type": "text", "text": "x".repeat(100)}]}]}));
    assert_eq!(part, as_role("user"));
    let parts = chat_chain(&json!({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "x".repeat(100)}, {"type": "text", "text": "y"}]}]}));
    assert_eq!(parts.len(), 1);
    // Anthropic's `system` and a Responses `input` string have them too.
    let system = Chain::from_json(
        Route::Messages,
        &json!({"system": "s".repeat(100), "messages": []}),
    );
    assert_eq!(system.len(), 2);
    let input = Chain::from_json(Route::Responses, &json!({"input": "x".repeat(100)}));
    assert_eq!((input.len(), input.anchor()), (2, Some(1)));
}

#[test]
fn covered_links_rounds_each_link_at_its_middle() {
    // Links of 256, 256 and 88 bytes; 150 prompt tokens (4 bytes a token).
    let chain = prompt_chain(&json!({"prompt": "x".repeat(600)}));
    assert_eq!(chain.covered_links(0, 150), 0);
    assert_eq!(
        chain.covered_links(31, 150),
        0,
        "124 bytes: under half of the first"
    );
    assert_eq!(
        chain.covered_links(32, 150),
        1,
        "128 bytes: half of the first"
    );
    assert_eq!(chain.covered_links(96, 150), 2);
    assert_eq!(chain.covered_links(138, 150), 2, "552 bytes: under 556");
    assert_eq!(chain.covered_links(139, 150), 3);
    assert_eq!(chain.covered_links(500, 150), 3, "clamped to the prompt");
    assert_eq!(chain.covered_links(5, 0), 0);
}

#[test]
fn hashes_are_stable_across_processes_and_releases() {
    // Pinned values: a change here moves every conversation once, which
    // must be a deliberate decision (see the hash module docs). The two
    // single-string values agree with the reference C library (libxxhash
    // 0.8.1, XXH3_64bits_withSeed with seed "llamatap").
    let chain = conversation(Some("Be brief."), 1, 0);
    assert_eq!(
        chain.links(),
        [732_506_084_254_556_324, 13_016_895_302_705_254_087]
    );
    assert_eq!(
        upstream_id("http://127.0.0.1:8080"),
        12_443_395_200_862_572_396
    );
    assert_eq!(session_key(b"user-1"), 14_423_315_328_243_872_299);
}
