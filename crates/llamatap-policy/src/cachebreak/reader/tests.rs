//! The digest read from a body's bytes as they are parsed equals the digest
//! of the parsed body, whatever the whitespace, escapes, key order or keys
//! named twice. What it costs is measured in `benches/cachebreak.rs`
//! (`docs/benchmarks.md`), not timed here.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::*;
use crate::cachebreak::MAX_MESSAGES;

const CHAT: Route = Route::ChatCompletions;

/// The digest of `bytes` as the proxy reads them.
fn read(bytes: &[u8], capture: bool) -> PromptDigest {
    inspect(CHAT, bytes, capture).1.unwrap_or_default()
}

/// The digest of the body parsed first.
fn parsed(bytes: &[u8], capture: bool) -> PromptDigest {
    let value: Value = serde_json::from_slice(bytes).unwrap();
    PromptDigest::from_json(CHAT, &value, capture).unwrap()
}

/// Equal digests, down to what `PartialEq` leaves out (lengths, chunks, text).
fn assert_same(a: &PromptDigest, b: &PromptDigest, what: &str) {
    assert_eq!(a, b, "{what}");
    for (x, y) in a.messages.iter().zip(b.messages.iter()) {
        assert_eq!(
            (x.system, x.chars, &x.chunks, &x.text),
            (y.system, y.chars, &y.chunks, &y.text),
            "{what}"
        );
    }
}

/// `value` as JSON text written another way: keys in a shuffled order, each
/// object key first named once with a value that the later one replaces,
/// whitespace around every token, and some characters escaped.
fn rewrite(value: &Value, rng: &mut StdRng, out: &mut String) {
    let space = |rng: &mut StdRng, out: &mut String| {
        for _ in 0..rng.random_range(0..3) {
            out.push([' ', '\n', '\t', '\r'][rng.random_range(0..4)]);
        }
    };
    space(rng, out);
    match value {
        Value::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' | '\\' => out.extend(['\\', c]),
                    c if (c as u32) < 0x20 || rng.random_bool(0.2) => {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{u:04x}"));
                        }
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                rewrite(item, rng, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.random_range(0..=i));
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if rng.random_bool(0.3) {
                    // Named twice: the first value does not count.
                    let junk = [json!(null), json!("junk"), json!({"text": 1}), json!([0])];
                    rewrite(&Value::String((*k).clone()), rng, out);
                    out.push(':');
                    rewrite(&junk[rng.random_range(0..junk.len())], rng, out);
                    out.push(',');
                }
                rewrite(&Value::String((*k).clone()), rng, out);
                space(rng, out);
                out.push(':');
                rewrite(v, rng, out);
            }
            space(rng, out);
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
    space(rng, out);
}

#[test]
fn reading_the_bytes_digests_like_the_parsed_body() {
    let parts = json!([
        {"text": "text before its type, ", "type": "text"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
        {"type": "input_text", "text": "escaped \"quote\" and \u{8a9e}"},
        {"type": "text", "text": 7},
        "a bare string part",
    ]);
    let tools: Vec<Value> = (0..70).map(|i| json!({"name": format!("t{i}")})).collect();
    let mut messages = vec![
        json!({"content": "content before role", "role": "system"}),
        json!({"role": "user", "content": parts, "name": "n"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}),
        json!({"role": "tool", "tool_call_id": "1", "content": "42"}),
        json!({"role": 5, "content": "a role that is not a string"}),
        json!({"type": "function_call_output", "output": [1, -1, 1.5, -0.0, true]}),
        json!(["not", "an", "object"]),
    ];
    messages.extend((0..MAX_MESSAGES).map(|i| json!({"role": "user", "content": i})));
    let bodies = [
        json!({"model": "m", "messages": messages, "tools": tools}),
        json!({"model": "m", "system": [{"type": "text", "text": "s"}], "instructions": null,
            "input": "one string", "tools": null}),
        json!({"model": "m", "instructions": 3, "input": [{"role": "user", "content": "i"}],
            "messages": "not a list", "tools": {"one": "object"}}),
    ];
    let mut rng = StdRng::seed_from_u64(1);
    for body in &bodies {
        let canonical = serde_json::to_vec(body).unwrap();
        for capture in [false, true] {
            let want = parsed(&canonical, capture);
            assert_same(&read(&canonical, capture), &want, "canonical");
            for round in 0..20 {
                let mut text = String::new();
                rewrite(body, &mut rng, &mut text);
                let what = format!("round {round}: {text:.200}");
                assert_same(&read(text.as_bytes(), capture), &want, &what);
                assert_same(&parsed(text.as_bytes(), capture), &want, &what);
            }
        }
    }
    // The bounds hold as before: the first messages, the first tools.
    let d = read(&serde_json::to_vec(&bodies[0]).unwrap(), false);
    assert_eq!(d.messages.len(), MAX_MESSAGES);
    assert_eq!(d.tools.len(), crate::cachebreak::MAX_TOOLS);
}

#[test]
fn values_that_differ_digest_apart() {
    let tools = |t: Value| read(json!({"tools": [t]}).to_string().as_bytes(), false).tools;
    let distinct = [
        json!(1),
        json!(1.0),
        json!(-1),
        json!("1"),
        json!([1]),
        json!([[1]]),
        json!([1, 1]),
        json!({"a": 1}),
        json!({"b": 1}),
        json!({"a": 1, "b": 1}),
        json!(null),
        json!(true),
        json!(false),
        json!([]),
        json!({}),
    ];
    let hashes: Vec<_> = distinct.iter().map(|t| tools(t.clone())).collect();
    for (i, a) in hashes.iter().enumerate() {
        for (j, b) in hashes.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "{} and {}", distinct[i], distinct[j]);
        }
    }
}

proptest! {
    #[test]
    fn any_rewriting_of_a_chat_body_digests_alike(
        seed in any::<u64>(),
        texts in prop::collection::vec("[a-z \"\\\\\n語é]{0,40}", 1..8),
        numbers in prop::collection::vec(any::<i64>(), 0..4),
        floats in prop::collection::vec(-1e6f64..1e6, 0..3),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let roles = ["user", "assistant", "system", "developer", "tool"];
        let mut messages = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let role = roles[rng.random_range(0..roles.len())];
            let content = match i % 3 {
                0 => json!(t),
                1 => json!([{"type": "text", "text": t}, {"type": "image", "n": numbers}]),
                _ => json!([{"text": t, "type": "input_text"}, {"type": "text", "text": t}]),
            };
            messages.push(json!({"role": role, "content": content, "extra": {"f": floats}}));
        }
        let body = json!({"model": "m", "messages": messages,
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"n": numbers}}}],
            "system": texts[0]});
        let canonical = serde_json::to_vec(&body).unwrap();
        let want = parsed(&canonical, true);
        prop_assert_eq!(&read(&canonical, true), &want);
        let mut text = String::new();
        rewrite(&body, &mut rng, &mut text);
        assert_same(&read(text.as_bytes(), true), &want, &text);
    }
}
