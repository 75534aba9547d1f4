use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::*;
use llamatap_wire::request::Route;

const CHAT: Route = Route::ChatCompletions;

fn digest(body: &Value, capture: bool) -> PromptDigest {
    PromptDigest::from_json(CHAT, body, capture).unwrap()
}

fn body(system: &str, messages: &[(&str, &str)]) -> Value {
    let mut m = vec![json!({"role": "system", "content": system})];
    for (role, content) in messages {
        m.push(json!({"role": role, "content": content}));
    }
    json!({"model": "m", "messages": m})
}

/// What llama-server would report for a prompt of `tokens` of which `cached` reused.
fn observed(tokens: u64, cached: u64, upstream: u64) -> Observed {
    Observed {
        cache_n: Some(cached),
        prompt_n: Some(tokens - cached),
        prompt_ms: Some((tokens - cached) as f64 * 2.0),
        upstream: Some(upstream),
    }
}

const SYSTEM: &str = "You are a careful assistant. Answer in one short sentence.";

#[test]
fn a_clean_conversation_is_new_then_reused() {
    let mut book = Book::default();
    let t1 = body(SYSTEM, &[("user", "hello there")]);
    let d = book
        .diagnose(digest(&t1, false), observed(100, 0, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
    assert_eq!(d.position, None);
    let t2 = body(
        SYSTEM,
        &[
            ("user", "hello there"),
            ("assistant", "hi"),
            ("user", "more"),
        ],
    );
    let d = book
        .diagnose(digest(&t2, false), observed(130, 99, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::Reused);
    assert_eq!(d.position, None);
    assert_eq!(d.recomputed_tokens, 1);
    assert!(!d.cause.is_break());
}

#[test]
fn a_clock_in_the_system_prompt_is_named_with_its_offset() {
    for capture in [false, true] {
        let mut book = Book::default();
        let sys1 = "You are a careful assistant. Current time: 14:05:33. Be brief.";
        let sys2 = "You are a careful assistant. Current time: 14:05:41. Be brief.";
        let t1 = body(sys1, &[("user", "hi")]);
        book.diagnose(digest(&t1, capture), observed(100, 0, 1));
        let t2 = body(
            sys2,
            &[("user", "hi"), ("assistant", "yo"), ("user", "and?")],
        );
        let d = book
            .diagnose(digest(&t2, capture), observed(120, 10, 1))
            .unwrap();
        assert_eq!(d.cause, Cause::SystemChanged);
        let p = d.position.clone().unwrap();
        assert_eq!((p.message_index, p.field), (0, Field::System));
        let exact = sys1.find("33").unwrap();
        if capture {
            assert_eq!(p.offset, exact);
            let old = d.old_excerpt.unwrap();
            let new = d.new_excerpt.unwrap();
            assert!(old.contains("14:05:33"), "{old}");
            assert!(new.contains("14:05:41"), "{new}");
            assert!(old.chars().count() <= EXCERPT_CHARS);
        } else {
            assert_eq!(p.offset, exact / CHUNK_CHARS * CHUNK_CHARS);
            assert_eq!(d.old_excerpt, None);
        }
        // 100 covered, 10 reused: 90 recomputed at 2 ms a token.
        assert_eq!(d.recomputed_tokens, 90);
        assert!((d.recomputed_ms - 180.0).abs() < 1e-9);
    }
}

#[test]
fn an_edited_earlier_message_is_history_edited() {
    let mut book = Book::default();
    let t1 = body(
        SYSTEM,
        &[
            ("user", "first question"),
            ("assistant", "first answer"),
            ("user", "second"),
        ],
    );
    book.diagnose(digest(&t1, false), observed(100, 0, 1));
    let long = "x".repeat(100);
    let edited = format!("first answer{long}");
    let t2 = body(
        SYSTEM,
        &[
            ("user", "first question"),
            ("assistant", &edited),
            ("user", "second"),
            ("assistant", "ok"),
            ("user", "third"),
        ],
    );
    let d = book
        .diagnose(digest(&t2, false), observed(150, 40, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::HistoryEdited);
    let p = d.position.unwrap();
    assert_eq!((p.message_index, p.field, p.offset), (2, Field::Content, 0));
}

#[test]
fn a_changed_role_name_or_tool_call_is_that_field() {
    let base = json!({"model": "m", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "name": "f", "content": "42"},
    ]});
    let cases = [
        (
            "/messages/1/tool_calls/0/function/arguments",
            json!("{\"a\":1}"),
            1,
            Field::ToolCalls,
        ),
        ("/messages/2/name", json!("g"), 2, Field::Name),
        ("/messages/2/role", json!("user"), 2, Field::Role),
        ("/messages/2/tool_call_id", json!("2"), 2, Field::Other),
    ];
    for (pointer, value, index, field) in cases {
        let mut book = Book::default();
        book.diagnose(digest(&base, false), observed(50, 0, 1));
        let mut changed = base.clone();
        *changed.pointer_mut(pointer).unwrap() = value;
        let d = book
            .diagnose(digest(&changed, false), observed(50, 5, 1))
            .unwrap();
        assert_eq!(d.cause, Cause::HistoryEdited, "{pointer}");
        let p = d.position.unwrap();
        assert_eq!((p.message_index, p.field), (index, field), "{pointer}");
    }
}

#[test]
fn dropped_oldest_turns_are_history_truncated() {
    let mut book = Book::default();
    let t1 = body(
        SYSTEM,
        &[
            ("user", "one"),
            ("assistant", "a1"),
            ("user", "two"),
            ("assistant", "a2"),
            ("user", "three"),
        ],
    );
    book.diagnose(digest(&t1, false), observed(200, 0, 1));
    // The first user message is gone: the conversation is found by its
    // second one.
    let t2 = body(
        SYSTEM,
        &[
            ("user", "two"),
            ("assistant", "a2"),
            ("user", "three"),
            ("assistant", "a3"),
            ("user", "four"),
        ],
    );
    let d = book
        .diagnose(digest(&t2, false), observed(180, 20, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::HistoryTruncated);
    let p = d.position.unwrap();
    assert_eq!((p.message_index, p.field, p.offset), (1, Field::Message, 0));
    assert_eq!(d.recomputed_tokens, 160);
    // The next turn extends the truncated one and is found again.
    let t3 = body(
        SYSTEM,
        &[
            ("user", "two"),
            ("assistant", "a2"),
            ("user", "three"),
            ("assistant", "a3"),
            ("user", "four"),
            ("assistant", "a4"),
            ("user", "five"),
        ],
    );
    let d = book
        .diagnose(digest(&t3, false), observed(200, 179, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::Reused);
    // A new conversation opening with a later message of another one is new.
    let other = body("another system prompt", &[("user", "three")]);
    let d = book
        .diagnose(digest(&other, false), observed(30, 0, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
    assert_eq!(book.len(), 2);
}

#[test]
fn reordered_tools_are_tools_changed() {
    let f = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
    let g = json!({"type": "function", "function": {"name": "g", "parameters": {}}});
    let mut t1 = body(SYSTEM, &[("user", "q")]);
    t1["tools"] = json!([f.clone(), g.clone()]);
    let mut t2 = body(SYSTEM, &[("user", "q"), ("assistant", "a"), ("user", "q2")]);
    t2["tools"] = json!([g, f]);
    let mut book = Book::default();
    book.diagnose(digest(&t1, false), observed(100, 0, 1));
    let d = book
        .diagnose(digest(&t2, false), observed(120, 3, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::ToolsChanged);
    let p = d.position.unwrap();
    assert_eq!((p.message_index, p.field), (0, Field::Tools));
}

#[test]
fn a_prompt_that_extends_but_is_not_reused_is_evicted_or_other_upstream() {
    let t1 = body(SYSTEM, &[("user", "q")]);
    let t2 = body(SYSTEM, &[("user", "q"), ("assistant", "a"), ("user", "q2")]);
    for (upstream, cause) in [(1, Cause::Evicted), (2, Cause::OtherUpstream)] {
        let mut book = Book::default();
        book.diagnose(digest(&t1, false), observed(300, 0, 1));
        let d = book
            .diagnose(digest(&t2, false), observed(320, 0, upstream))
            .unwrap();
        assert_eq!(d.cause, cause);
        assert_eq!(d.position, None);
        assert_eq!(d.recomputed_tokens, 300);
        assert!((d.recomputed_ms - 600.0).abs() < 1e-9);
    }
    // Another upstream that had the prefix anyway: reused.
    let mut book = Book::default();
    book.diagnose(digest(&t1, false), observed(300, 0, 1));
    let d = book
        .diagnose(digest(&t2, false), observed(320, 299, 2))
        .unwrap();
    assert_eq!(d.cause, Cause::Reused);
}

#[test]
fn without_token_counts_the_cause_is_unknown() {
    let t1 = body(SYSTEM, &[("user", "q")]);
    let t2 = body(SYSTEM, &[("user", "q"), ("assistant", "a"), ("user", "q2")]);
    let mut book = Book::default();
    book.diagnose(digest(&t1, false), Observed::default());
    let d = book
        .diagnose(digest(&t2, false), observed(20, 0, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::Unknown);
}

#[test]
fn only_chat_bodies_with_a_user_message_have_a_conversation() {
    let v = json!({"prompt": "hello"});
    assert!(PromptDigest::from_json(Route::Completions, &v, false).is_none());
    assert!(PromptDigest::from_json(CHAT, &json!([1]), false).is_none());
    let no_user = body(SYSTEM, &[]);
    assert_eq!(digest(&no_user, false).key, None);
    let mut book = Book::default();
    assert!(book
        .diagnose(digest(&no_user, false), observed(10, 0, 1))
        .is_none());
    // Anthropic's top-level system and a list of text parts read like
    // OpenAI's system message and string content.
    let anthropic = json!({"model": "m", "system": SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
    let openai = body(SYSTEM, &[("user", "hi")]);
    let a = PromptDigest::from_json(Route::Messages, &anthropic, false).unwrap();
    assert_eq!(a, digest(&openai, false));
}

#[test]
fn text_is_kept_only_with_capture_and_bounded() {
    let long = "y".repeat(10_000);
    let b = body(&long, &[("user", "hi")]);
    let plain = digest(&b, false);
    assert!(plain.messages.iter().all(|m| m.text.is_none()));
    assert_eq!(plain.messages[0].chars, 10_000);
    assert_eq!(plain.messages[0].chunks.len(), MAX_CHUNKS);
    let kept = digest(&b, true);
    assert_eq!(
        kept.messages[0].text.as_deref().map(|t| t.chars().count()),
        Some(MAX_TEXT_CHARS)
    );
}

#[test]
fn chunk_offsets_are_exact_to_the_chunk_for_multibyte_text() {
    // 100 characters of 3 bytes each, then a change at character 70.
    let a: String = "語".repeat(100);
    let mut b: Vec<char> = a.chars().collect();
    b[70] = 'x';
    let b: String = b.into_iter().collect();
    let mut book = Book::default();
    book.diagnose(
        digest(&body(&a, &[("user", "q")]), false),
        observed(10, 0, 1),
    );
    let d = book
        .diagnose(
            digest(&body(&b, &[("user", "q")]), false),
            observed(10, 0, 1),
        )
        .unwrap();
    assert_eq!(d.position.unwrap().offset, 64);
    let pd = digest(&body(&a, &[]), false);
    assert_eq!(pd.messages[0].chars, 100);
    assert_eq!(pd.messages[0].chunks.len(), 4);
}

#[test]
fn the_book_stays_within_its_budget_and_forgets_the_least_recent() {
    let budget = 256 * 1024;
    let mut book = Book::new(budget);
    let mut first_bytes = 0;
    for i in 0..20_000 {
        let b = body(
            SYSTEM,
            &[
                ("user", &format!("conversation {i}")),
                ("assistant", "a"),
                ("user", "b"),
            ],
        );
        book.diagnose(digest(&b, false), observed(50, 0, 1));
        if i == 0 {
            first_bytes = book.bytes();
        }
        assert!(book.bytes() <= budget);
    }
    // A 3-message conversation (plus system) is accounted this many bytes:
    // the figure the manual states (docs/operations.md).
    assert_eq!(first_bytes, ENTRY_BYTES_4_MESSAGES);
    assert_eq!(book.len(), budget / first_bytes);
    // The most recent is kept, the first ones are gone.
    let last = digest(&body(SYSTEM, &[("user", "conversation 19999")]), false);
    let first = digest(&body(SYSTEM, &[("user", "conversation 0")]), false);
    assert!(book.get(last.key.unwrap()).is_some());
    assert!(book.get(first.key.unwrap()).is_none());
    // A turn larger than the whole budget is not kept.
    let mut tiny = Book::new(100);
    tiny.diagnose(
        digest(&body(SYSTEM, &[("user", "x")]), false),
        observed(5, 0, 1),
    );
    assert!(tiny.is_empty());
}

/// Accounted bytes of a conversation of 4 short messages (each one chunk).
const ENTRY_BYTES_4_MESSAGES: usize = 548;

#[test]
fn a_thousand_clean_random_turns_give_no_false_cause() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut book = Book::default();
    let words = [
        "alpha", "beta", "gamma", "delta", "語", "é", "  ", "\n", "42",
    ];
    let text = |rng: &mut StdRng, n: usize| -> String {
        (0..n)
            .map(|_| words[rng.random_range(0..words.len())])
            .collect::<Vec<_>>()
            .join(" ")
    };
    struct Conv {
        messages: Vec<Value>,
        tools: Option<Value>,
        tokens: u64,
        upstream: u64,
    }
    let mut convs: Vec<Conv> = Vec::new();
    let mut counts = std::collections::HashMap::new();
    for turn in 0..1000 {
        let new = convs.is_empty() || rng.random_bool(0.15);
        let c = if new {
            let mut messages = Vec::new();
            if rng.random_bool(0.7) {
                messages.push(json!({"role": "system", "content": text(&mut rng, 40)}));
            }
            messages.push(json!({"role": "user", "content": format!("conversation {turn}: {}", text(&mut rng, 10))}));
            let tools = rng.random_bool(0.3).then(
                || json!([{"type": "function", "function": {"name": "t", "parameters": {}}}]),
            );
            convs.push(Conv {
                messages,
                tools,
                tokens: 0,
                upstream: rng.random_range(0..3),
            });
            convs.len() - 1
        } else {
            let c = rng.random_range(0..convs.len());
            let conv = &mut convs[c];
            conv.messages
                .push(json!({"role": "assistant", "content": text(&mut rng, 8)}));
            if rng.random_bool(0.2) {
                conv.messages.push(json!({"role": "assistant", "content": null,
                    "tool_calls": [{"id": format!("{turn}"), "type": "function", "function": {"name": "t", "arguments": "{}"}}]}));
                conv.messages.push(json!({"role": "tool", "tool_call_id": format!("{turn}"), "content": text(&mut rng, 3)}));
            }
            conv.messages
                .push(json!({"role": "user", "content": text(&mut rng, 12)}));
            c
        };
        let conv = &mut convs[c];
        let mut b = json!({"model": "m", "messages": conv.messages});
        if let Some(t) = &conv.tools {
            b["tools"] = t.clone();
        }
        let tokens = conv.tokens + 20 + rng.random_range(0..30);
        // llama-server reuses the previous prompt, give or take its last token.
        let cached = conv.tokens.saturating_sub(rng.random_range(0..2));
        let d = book
            .diagnose(
                digest(&b, turn % 2 == 0),
                observed(tokens, cached, conv.upstream),
            )
            .unwrap();
        let expected = if new {
            Cause::NewConversation
        } else {
            Cause::Reused
        };
        assert_eq!(d.cause, expected, "turn {turn}: {d:?}");
        *counts.entry(d.cause).or_insert(0) += 1;
        conv.tokens = tokens;
    }
    assert!(counts[&Cause::Reused] > 700, "{counts:?}");
}

#[test]
fn text_split_into_parts_digests_like_one_string() {
    let text: String = (0..300)
        .map(|i| if i % 7 == 0 { '語' } else { 'a' })
        .collect();
    let one = digest(&body(SYSTEM, &[("user", &text)]), false);
    let chars: Vec<char> = text.chars().collect();
    for cut in [1, 31, 32, 33, 100, 299] {
        let (a, b): (String, String) =
            (chars[..cut].iter().collect(), chars[cut..].iter().collect());
        let parts = json!({"model": "m", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": a}, {"type": "text", "text": b}]},
        ]});
        let split = digest(&parts, false);
        assert_eq!(
            split.messages[1].chunks, one.messages[1].chunks,
            "cut {cut}"
        );
        assert_eq!(split, one, "cut {cut}");
    }
    assert_eq!(one.messages[1].chars, 300);
    assert_eq!(one.messages[1].chunks.len(), 10);
}

#[test]
fn an_edited_first_message_with_the_later_turns_kept_is_history_edited() {
    let mut book = Book::default();
    let t1 = body(
        SYSTEM,
        &[
            ("user", "Plan a trip to Lisbon."),
            ("assistant", "Day one: Alfama."),
            ("user", "And day two?"),
        ],
    );
    book.diagnose(digest(&t1, false), observed(120, 0, 1));
    // An agent rewrites the opening request and keeps the rest.
    let t2 = body(
        SYSTEM,
        &[
            ("user", "Plan a trip to Porto."),
            ("assistant", "Day one: Alfama."),
            ("user", "And day two?"),
            ("assistant", "Belem."),
            ("user", "Day three?"),
        ],
    );
    let d = book
        .diagnose(digest(&t2, false), observed(150, 20, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::HistoryEdited);
    let p = d.position.unwrap();
    assert_eq!((p.message_index, p.field), (1, Field::Content));
    assert_eq!(book.len(), 1, "the conversation goes on under its new key");
    // The next turn extends the edited one: reused.
    let t3 = body(
        SYSTEM,
        &[
            ("user", "Plan a trip to Porto."),
            ("assistant", "Day one: Alfama."),
            ("user", "And day two?"),
            ("assistant", "Belem."),
            ("user", "Day three?"),
            ("assistant", "Sintra."),
            ("user", "Thanks."),
        ],
    );
    let d = book
        .diagnose(digest(&t3, false), observed(170, 149, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::Reused);
    // A new conversation that only shares a later user message is new.
    let other = body(
        SYSTEM,
        &[
            ("user", "Plan a trip to Rome."),
            ("assistant", "Day one: the Forum."),
            ("user", "And day two?"),
        ],
    );
    let d = book
        .diagnose(digest(&other, false), observed(120, 0, 1))
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
}
