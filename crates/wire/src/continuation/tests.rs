//! What can be continued, the continuation's bodies and the re-wrapped
//! chunks.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn chat(extra: Value) -> Vec<u8> {
    let mut b = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": true,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    serde_json::to_vec(&b).unwrap()
}

#[test]
fn every_refusal_in_order() {
    assert_eq!(plan(b"[1]").unwrap_err(), Refusal::NotJson);
    assert_eq!(plan(b"{").unwrap_err(), Refusal::NotJson);
    assert_eq!(
        plan(&chat(json!({"stream": false}))).unwrap_err(),
        Refusal::NotStreaming
    );
    assert_eq!(
        plan(&chat(json!({"stream": null}))).unwrap_err(),
        Refusal::NotStreaming
    );
    assert_eq!(
        plan(&chat(json!({"messages": []}))).unwrap_err(),
        Refusal::NoMessages
    );
    let tool = json!([{"type": "function", "function": {"name": "f"}}]);
    assert_eq!(
        plan(&chat(json!({"tools": tool}))).unwrap_err(),
        Refusal::Tools
    );
    assert_eq!(
        plan(&chat(json!({"tool_choice": "auto"}))).unwrap_err(),
        Refusal::Tools
    );
    assert_eq!(
        plan(&chat(json!({"grammar": "root ::= \"a\""}))).unwrap_err(),
        Refusal::Grammar
    );
    assert_eq!(
        plan(&chat(json!({"json_schema": {}}))).unwrap_err(),
        Refusal::JsonSchema
    );
    assert_eq!(
        plan(&chat(json!({"response_format": {"type": "json_object"}}))).unwrap_err(),
        Refusal::ResponseFormat
    );
    assert_eq!(
        plan(&chat(json!({"n": 2}))).unwrap_err(),
        Refusal::SeveralChoices
    );
    // The words are fixed.
    let words: Vec<&str> = [
        Refusal::NotJson,
        Refusal::NotStreaming,
        Refusal::Tools,
        Refusal::Grammar,
        Refusal::JsonSchema,
        Refusal::ResponseFormat,
        Refusal::SeveralChoices,
        Refusal::NoMessages,
    ]
    .iter()
    .map(|r| r.as_str())
    .collect();
    assert_eq!(words.len(), 8);
    assert!(words
        .iter()
        .all(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
}

#[test]
fn harmless_fields_are_accepted() {
    for extra in [
        json!({"tool_choice": "none"}),
        json!({"tools": []}),
        json!({"tools": null, "grammar": null, "json_schema": null}),
        json!({"response_format": {"type": "text"}}),
        json!({"n": 1}),
    ] {
        assert!(plan(&chat(extra.clone())).is_ok(), "{extra}");
    }
}

#[test]
fn limits_and_usage() {
    let p = plan(&chat(
        json!({"max_completion_tokens": 10, "max_tokens": 99}),
    ))
    .unwrap();
    assert_eq!(p.max_tokens(), Some(10));
    let p = plan(&chat(
        json!({"max_completion_tokens": null, "max_tokens": 99}),
    ))
    .unwrap();
    assert_eq!(p.max_tokens(), Some(99));
    assert_eq!(p.remaining(40), Some(59));
    assert_eq!(p.remaining(99), Some(0));
    assert_eq!(p.remaining(500), Some(0));
    let p = plan(&chat(json!({}))).unwrap();
    assert_eq!(p.max_tokens(), None);
    assert_eq!(p.remaining(40), None);
    assert!(!p.include_usage());
    let p = plan(&chat(json!({"stream_options": {"include_usage": true}}))).unwrap();
    assert!(p.include_usage());
}

#[test]
fn the_completion_body_carries_sampling_and_nothing_else() {
    let p = plan(&chat(json!({
        "max_tokens": 160, "temperature": 0.5, "top_k": 3, "seed": 7,
        "stop": ["\n\n", "END"], "ignore_eos": true, "logit_bias": {"15": -100},
        "stream_options": {"include_usage": true}, "logprobs": true,
        "response_format": {"type": "text"}, "n": 1, "user": "u",
    })))
    .unwrap();
    let rendered = "<|im_start|>user\nhi \"quoted\"<|im_end|>\n<|im_start|>assistant\n";
    let sent = "Once upon a time — 灯台 🌊\n";
    let v: Value = serde_json::from_slice(&p.completion_body(rendered, sent, 40)).unwrap();
    assert_eq!(v["prompt"].as_str().unwrap(), format!("{rendered}{sent}"));
    assert_eq!(v["stream"], true);
    assert_eq!(v["cache_prompt"], true);
    assert_eq!(v["n_predict"], 120);
    assert_eq!(v["temperature"], 0.5);
    assert_eq!(v["top_k"], 3);
    assert_eq!(v["seed"], 7);
    assert_eq!(v["stop"], json!(["\n\n", "END"]));
    assert_eq!(v["ignore_eos"], true);
    assert_eq!(v["logit_bias"], json!({"15": -100}));
    assert_eq!(v["model"], "m");
    for absent in [
        "messages",
        "stream_options",
        "logprobs",
        "response_format",
        "n",
        "user",
        "max_tokens",
    ] {
        assert!(v.get(absent).is_none(), "{absent} carried");
    }
    let unlimited = plan(&chat(json!({}))).unwrap();
    let v: Value = serde_json::from_slice(&unlimited.completion_body("a", "b", 3)).unwrap();
    assert_eq!(v["n_predict"], -1);
    assert_eq!(v["prompt"], "ab");
}

#[test]
fn the_rendered_prompt() {
    assert_eq!(
        rendered_prompt(br#"{"prompt":"a\nb"}"#).as_deref(),
        Some("a\nb")
    );
    assert_eq!(rendered_prompt(br#"{"prompt":1}"#), None);
    assert_eq!(rendered_prompt(br#"{"error":{"message":"x"}}"#), None);
    assert_eq!(rendered_prompt(b"not json"), None);
    assert_eq!(rendered_prompt(br#"["prompt"]"#), None);
}

const FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1733300000,"id":"chatcmpl-abc","model":"tiny.gguf","system_fingerprint":"b1-x","object":"chat.completion.chunk"}"#;

#[test]
fn stream_ids_from_the_first_chunk() {
    let ids = stream_ids(FIRST).unwrap();
    assert_eq!(
        ids,
        StreamIds {
            id: "chatcmpl-abc".into(),
            created: 1_733_300_000,
            model: "tiny.gguf".into(),
            system_fingerprint: Some("b1-x".into()),
            index: 0,
        }
    );
    assert!(stream_ids(br#"{"id":"a","model":"m"}"#).is_none());
    assert!(stream_ids(br#"{"id":"a","created":"x","model":"m"}"#).is_none());
    assert!(stream_ids(b"[DONE]").is_none());
    let two = stream_ids(br#"{"id":"a","created":1,"model":"m","choices":[{"index":2}]}"#).unwrap();
    assert_eq!((two.index, two.system_fingerprint), (2, None));
}

fn events(bytes: &[u8]) -> Vec<String> {
    let s = std::str::from_utf8(bytes).unwrap();
    assert!(s.ends_with("\n\n"), "{s:?}");
    s.split_terminator("\n\n")
        .map(|e| e.strip_prefix("data: ").unwrap().to_string())
        .collect()
}

#[test]
fn content_events_keep_the_stream_and_round_trip_the_text() {
    let ids = stream_ids(FIRST).unwrap();
    for text in [
        "plain",
        "quote \" and \\ back",
        "line\nbreak\r\n",
        "emoji 🌊 灯台",
        "\u{1}\u{1f}ctl",
    ] {
        let e = events(&ids.content_event(text));
        assert_eq!(e.len(), 1);
        let v: Value = serde_json::from_str(&e[0]).unwrap();
        assert_eq!(v["choices"][0]["delta"]["content"], text);
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(v["choices"][0]["index"], 0);
        assert_eq!(
            (v["id"].as_str(), v["created"].as_i64()),
            (Some("chatcmpl-abc"), Some(1_733_300_000))
        );
        assert_eq!(v["model"], "tiny.gguf");
        assert_eq!(v["system_fingerprint"], "b1-x");
        assert_eq!(v["object"], "chat.completion.chunk");
        assert!(v.get("usage").is_none());
    }
    // The key order is llama-server's.
    let e = String::from_utf8(ids.content_event("x")).unwrap();
    assert!(e.starts_with(r#"data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"x"}}],"created":1733300000,"id":"chatcmpl-abc""#), "{e}");
}

#[test]
fn the_end_of_the_stream() {
    let ids = stream_ids(FIRST).unwrap();
    let e = events(&ids.finish_events("length", None));
    assert_eq!(e.len(), 2);
    let fin: Value = serde_json::from_str(&e[0]).unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(e[1], "[DONE]");

    let usage = AnswerUsage {
        prompt_tokens: 30,
        completion_tokens: 160,
    };
    let e = events(&ids.finish_events("stop", Some(usage)));
    assert_eq!(e.len(), 3);
    let u: Value = serde_json::from_str(&e[1]).unwrap();
    assert_eq!(u["choices"], json!([]));
    assert_eq!(
        u["usage"],
        json!({"completion_tokens": 160, "prompt_tokens": 30, "total_tokens": 190})
    );
    assert_eq!(u["id"], "chatcmpl-abc");
    assert_eq!(e[2], "[DONE]");
}

#[test]
fn native_stop_types_become_finish_reasons() {
    assert_eq!(finish_reason(Some("limit")), "length");
    assert_eq!(finish_reason(Some("eos")), "stop");
    assert_eq!(finish_reason(Some("word")), "stop");
    assert_eq!(finish_reason(None), "stop");
}

proptest! {
    #[test]
    fn any_text_round_trips(text in any::<String>()) {
        let ids = stream_ids(FIRST).unwrap();
        let e = events(&ids.content_event(&text));
        prop_assert_eq!(e.len(), 1);
        let v: Value = serde_json::from_str(&e[0]).unwrap();
        prop_assert_eq!(v["choices"][0]["delta"]["content"].as_str(), Some(text.as_str()));
    }
}
