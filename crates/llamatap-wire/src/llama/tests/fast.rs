#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The fast path agrees with the JSON parser on everything it accepts.

use proptest::prelude::*;

use crate::llama::{fast, openai};

/// A token chunk as llama-server writes it, with the given raw JSON pieces.
fn chunk(field: &str, text_json: &str, index: &str, created: &str, id: &str) -> String {
    format!(
        r#"{{"choices":[{{"finish_reason":null,"index":{index},"delta":{{"{field}":{text_json}}}}}],"created":{created},"id":"{id}","model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}}"#
    )
}

#[test]
fn the_llama_server_token_chunk_takes_the_fast_path() {
    for (field, text) in [
        ("content", " word"),
        ("reasoning_content", "hmm"),
        ("content", "é🦙"),
        ("content", ""),
    ] {
        let data = chunk(
            field,
            &format!("\"{text}\""),
            "0",
            "1764493200",
            "chatcmpl-x",
        );
        let fast = fast::token_chunk(data.as_bytes()).expect("template matches");
        assert_eq!(fast, openai::parse_chunk(data.as_bytes(), true), "{data}");
    }
}

#[test]
fn anything_else_falls_back() {
    let ok = chunk("content", "\"x\"", "0", "1", "i");
    assert!(fast::token_chunk(ok.as_bytes()).is_some());
    for data in [
        chunk("content", "\"a\\nb\"", "0", "1", "i"),  // escape
        chunk("content", "\"a\tb\"", "0", "1", "i"),   // raw control character: invalid JSON
        chunk("content", "null", "0", "1", "i"),       // role-only shape
        chunk("tool_calls", "[]", "0", "1", "i"),      // other delta
        chunk("content", "\"x\"", "01", "1", "i"),     // leading zero: invalid JSON
        chunk("content", "\"x\"", "0", "-1", "i"),     // not the template
        chunk("content", "\"x\"", "0", "1", "i\\\"q"), // escaped id
        format!("{ok} "),
        format!("{ok}x"),
        ok.replace("null", "\"stop\""),
        ok.replace("\"x\"}}", "\"x\",\"role\":\"assistant\"}}"),
    ] {
        assert!(fast::token_chunk(data.as_bytes()).is_none(), "{data}");
    }
    let mut bad_utf8 = ok.into_bytes();
    let at = bad_utf8.iter().position(|&b| b == b'x').unwrap();
    bad_utf8[at] = 0xff;
    assert!(fast::token_chunk(&bad_utf8).is_none());
}

proptest! {
    #[test]
    fn fast_path_equals_the_parser(
        text in any::<String>(),
        reasoning in any::<bool>(),
        index in prop_oneof![Just("0".to_owned()), "[0-9]{1,3}"],
        created in "[0-9]{1,11}",
        id in "[ -~]{0,12}",
        raw_text in any::<bool>(),
    ) {
        let field = if reasoning { "reasoning_content" } else { "content" };
        // Either proper JSON encoding, or the raw text spliced in (often invalid).
        let text_json = if raw_text { format!("\"{text}\"") } else { serde_json::to_string(&text).unwrap() };
        let data = chunk(field, &text_json, &index, &created, &id);
        if let Some(fast) = fast::token_chunk(data.as_bytes()) {
            prop_assert_eq!(fast, openai::parse_chunk(data.as_bytes(), true));
        }
    }
}
