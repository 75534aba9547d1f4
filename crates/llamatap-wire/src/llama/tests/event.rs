#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Single events: escapes, borrowing, lenient fields, error shapes, garbage.

use std::borrow::Cow;

use proptest::prelude::*;

use crate::llama::*;
use crate::sse::SseEvent;

fn chat(data: &str) -> Delta<'_> {
    parse_event(
        StreamFormat::OpenAiChat,
        &SseEvent {
            event: b"",
            data: data.as_bytes(),
        },
    )
}

/// The event carried a token on some channel, as the observer counts them.
fn is_token(d: &Delta<'_>) -> bool {
    d.visible.is_some() || d.hidden_token
}

#[test]
fn common_chunk_borrows_everything() {
    let data = r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" word"}}],"created":1,"id":"chatcmpl-x","model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#;
    let d = chat(data);
    assert!(matches!(d.visible, Some(Cow::Borrowed(" word"))));
    assert!(matches!(d.model, Some(Cow::Borrowed("tiny.gguf"))));
    assert!(matches!(d.response_id, Some(Cow::Borrowed("chatcmpl-x"))));
    assert!(is_token(&d) && !d.hidden_token && !d.done && d.finish_reason.is_none());
}

#[test]
fn json_escapes_decode_into_visible_text() {
    let d = chat(r#"{"choices":[{"delta":{"content":"a\nb\t\"c\"\\ \u00e9 \ud83e\udd99 \/"}}]}"#);
    assert_eq!(d.visible.as_deref(), Some("a\nb\t\"c\"\\ é 🦙 /"));
    assert!(matches!(d.visible, Some(Cow::Owned(_))));
}

#[test]
fn role_only_and_empty_content_are_not_tokens() {
    let role = chat(
        r#"{"choices":[{"delta":{"role":"assistant","content":null},"finish_reason":null}],"model":"m"}"#,
    );
    assert!(!is_token(&role));
    assert_eq!(role.model.as_deref(), Some("m"));
    assert!(!is_token(&chat(
        r#"{"choices":[{"delta":{"content":""}}]}"#
    )));
    assert!(!is_token(&chat(
        r#"{"choices":[{"delta":{"reasoning_content":"","tool_calls":[]}}]}"#
    )));
    assert!(chat(r#"{"choices":[{"delta":{"reasoning_content":"\n"}}]}"#).hidden_token);
}

#[test]
fn unexpected_field_types_are_ignored_not_fatal() {
    let d = chat(
        r#"{"choices":[{"delta":{"content":"hi","tool_calls":7}},5],"model":5,"id":[],"timings":"x","usage":[1],"error":null}"#,
    );
    assert_eq!(d.visible.as_deref(), Some("hi"));
    assert!(d.hidden_token, "a non-null tool_calls value counts");
    assert_eq!(
        (d.model, d.response_id, d.timings, d.usage, d.error),
        (None, None, None, None, None)
    );
    let d = chat(
        r#"{"choices":[{"delta":{"content":"x"}}],"timings":{"prompt_n":3.0,"prompt_ms":"1","predicted_n":-1,"cache_n":null}}"#,
    );
    assert_eq!(
        d.timings,
        Some(Timings {
            prompt_n: Some(3),
            ..Timings::default()
        })
    );
    let d = chat(
        r#"{"choices":{"delta":{"content":"x"}},"usage":{"prompt_tokens":2,"completion_tokens_details":{"reasoning_tokens":4}}}"#,
    );
    assert_eq!(
        (
            d.visible,
            d.usage.map(|u| (u.input_tokens, u.reasoning_tokens))
        ),
        (None, Some((Some(2), Some(4))))
    );
}

#[test]
fn done_marker_and_error_shapes() {
    for format in StreamFormat::ALL {
        let d = parse_event(
            format,
            &SseEvent {
                event: b"",
                data: b"[DONE]",
            },
        );
        assert_eq!(
            d,
            Delta {
                done: true,
                ..Delta::default()
            }
        );
        let e = parse_event(
            format,
            &SseEvent {
                event: b"",
                data: br#"{"error":{"code":500,"message":"boom","type":"server_error"}}"#,
            },
        );
        assert_eq!(e.error.as_deref(), Some("boom"), "{format}");
        let e = parse_event(
            format,
            &SseEvent {
                event: b"",
                data: br#"{"error":{"type":"overloaded_error"}}"#,
            },
        );
        assert_eq!(e.error.as_deref(), Some("overloaded_error"), "{format}");
        let e = parse_event(
            format,
            &SseEvent {
                event: b"",
                data: br#"{"error":"plain"}"#,
            },
        );
        assert_eq!(e.error.as_deref(), Some("plain"), "{format}");
    }
    let ev = |name: &'static [u8], data: &'static [u8]| SseEvent { event: name, data };
    let a = |e| parse_event(StreamFormat::AnthropicMessages, &e);
    let real = a(ev(
        b"error",
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ));
    assert_eq!(real.error.as_deref(), Some("Overloaded"));
    let untyped = a(ev(b"", br#"{"type":"error","error":{"message":"x"}}"#));
    assert_eq!(untyped.error.as_deref(), Some("x"));
    assert_eq!(a(ev(b"error", b"{}")).error.as_deref(), Some("error"));
    let r = |e| parse_event(StreamFormat::OpenAiResponses, &e);
    let failed = r(ev(b"response.failed", br#"{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"bad"}}}"#));
    assert_eq!(
        (
            failed.done,
            failed.error.as_deref(),
            failed.finish_reason.as_deref()
        ),
        (true, Some("bad"), Some("failed"))
    );
    let inc = r(ev(b"", br#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#));
    assert_eq!(
        (inc.done, inc.finish_reason.as_deref()),
        (true, Some("max_output_tokens"))
    );
    let err = r(ev(
        b"error",
        br#"{"type":"error","code":"x","message":"rate limited"}"#,
    ));
    assert_eq!(err.error.as_deref(), Some("rate limited"));
}

#[test]
fn event_type_falls_back_to_the_data_type_field() {
    let a = parse_event(StreamFormat::AnthropicMessages, &SseEvent {
        event: b"",
        data: br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
    });
    assert_eq!(a.visible.as_deref(), Some("x"));
    let r = parse_event(
        StreamFormat::OpenAiResponses,
        &SseEvent {
            event: b"",
            data: br#"{"type":"response.reasoning_summary_text.delta","delta":"y"}"#,
        },
    );
    assert!(r.hidden_token && r.visible.is_none());
    let ping = parse_event(
        StreamFormat::AnthropicMessages,
        &SseEvent {
            event: b"ping",
            data: br#"{"type":"ping"}"#,
        },
    );
    assert_eq!(ping, Delta::default());
}

#[test]
fn native_partial_events_have_no_finish_or_usage() {
    let d = parse_event(StreamFormat::Native, &SseEvent {
        event: b"",
        data: br#"{"index":0,"content":"x","tokens":[1],"stop":false,"id_slot":-1,"tokens_predicted":1,"tokens_evaluated":3,"stop_type":"none"}"#,
    });
    assert_eq!(
        (d.visible.as_deref(), d.usage, d.finish_reason, d.done),
        (Some("x"), None, None, false)
    );
}

const GARBAGE: &[&[u8]] = &[
    b"",
    b" ",
    b"not json",
    b"{",
    b"}",
    b"[1,2]",
    b"null",
    b"true",
    b"42",
    b"\"s\"",
    b"{\"choices\":",
    b"\xff\xfe\x00",
    b"{\"choices\":[{\"delta\":{\"content\":\"\\ud83e\"}}]}",
    b"{\"content\":\"a\"} trailing",
    b"{\"a\":1,\"a\":2}",
];

#[test]
fn garbage_never_panics_and_gives_an_empty_delta() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = format!("{}1{}", r#"{"choices":"#.repeat(50_000), "}".repeat(50_000));
    for format in StreamFormat::ALL {
        for data in GARBAGE
            .iter()
            .copied()
            .chain([deep.as_bytes(), deep_obj.as_bytes()])
        {
            let d = parse_event(format, &SseEvent { event: b"", data });
            assert_eq!(
                d,
                Delta::default(),
                "{format} {:?}",
                String::from_utf8_lossy(data)
            );
            for name in [
                &b"message_start"[..],
                b"content_block_delta",
                b"response.completed",
                b"error",
            ] {
                let d = parse_event(format, &SseEvent { event: name, data });
                assert!(
                    !is_token(&d) && d.finish_reason.is_none(),
                    "{format} {:?}",
                    String::from_utf8_lossy(data)
                );
            }
            assert_eq!(
                parse_response(format, data),
                ResponseFacts::default(),
                "{format}"
            );
        }
    }
}

#[test]
fn formats_have_unique_names_and_terminal_events() {
    let names: std::collections::HashSet<_> =
        StreamFormat::ALL.iter().map(|f| f.as_str()).collect();
    assert_eq!(names.len(), 5);
    for format in StreamFormat::ALL {
        assert!(!format.terminal_event().is_empty(), "{format}");
    }
}

#[test]
fn anthropic_usage_is_split_across_two_events_and_merges_whole() {
    // llama-server's shapes: input tokens (cache reads apart) on
    // `message_start`, only the output tokens on `message_delta`.
    let event = |name: &'static [u8], data: &'static [u8]| {
        parse_event(
            StreamFormat::AnthropicMessages,
            &SseEvent { event: name, data },
        )
    };
    let start = event(
        b"message_start",
        br#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"tiny.gguf","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":30,"input_tokens":6,"output_tokens":0}}}"#,
    );
    let end = event(
        b"message_delta",
        br#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":12}}"#,
    );
    let (start, end) = (start.usage.unwrap(), end.usage.unwrap());
    assert_eq!(start.input_tokens, Some(36), "cache reads are input tokens");
    assert_eq!(end.input_tokens, None, "message_delta reports no input");
    let whole = Usage {
        input_tokens: Some(36),
        output_tokens: Some(12),
        cached_input_tokens: Some(30),
        reasoning_tokens: None,
    };
    assert_eq!(start.merge(end), whole);
    // A later report of a field wins; a field it lacks is kept.
    let later = Usage {
        input_tokens: Some(40),
        ..Usage::default()
    };
    assert_eq!(
        whole.merge(later),
        Usage {
            input_tokens: Some(40),
            ..whole
        }
    );
}

#[test]
fn delta_helpers() {
    let data = String::from(
        r#"{"choices":[{"delta":{"content":"k"},"finish_reason":"stop"}],"model":"m","id":"i"}"#,
    );
    let owned = chat(&data).into_owned();
    drop(data);
    assert_eq!(
        (owned.visible.as_deref(), owned.finish_reason.as_deref()),
        (Some("k"), Some("stop"))
    );
    let a = Usage {
        input_tokens: Some(1),
        output_tokens: Some(0),
        ..Usage::default()
    };
    let b = Usage {
        output_tokens: Some(9),
        ..Usage::default()
    };
    assert_eq!(
        a.merge(b),
        Usage {
            input_tokens: Some(1),
            output_tokens: Some(9),
            ..Usage::default()
        }
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300), name in "[a-z_.]{0,24}") {
        for format in StreamFormat::ALL {
            let _ = parse_event(format, &SseEvent { event: name.as_bytes(), data: &data });
            let _ = parse_response(format, &data);
        }
    }

    #[test]
    fn arbitrary_json_never_panics(json in arb_json()) {
        let data = json.to_string();
        for format in StreamFormat::ALL {
            for name in [&b""[..], b"message_start", b"content_block_delta", b"response.completed"] {
                let _ = parse_event(format, &SseEvent { event: name, data: data.as_bytes() });
            }
            let _ = parse_response(format, data.as_bytes());
        }
    }
}

/// JSON values using the field names the parsers look for.
fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let keys = prop::sample::select(vec![
        "choices",
        "delta",
        "content",
        "text",
        "type",
        "message",
        "usage",
        "timings",
        "error",
        "model",
        "id",
        "stop",
        "finish_reason",
        "reasoning_content",
        "tool_calls",
        "response",
        "item",
        "output",
        "prompt_n",
        "input_tokens",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-z_. ]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

#[test]
fn absurd_timings_and_counts_are_dropped_and_plausible_ones_kept() {
    let d = chat(
        r#"{"choices":[{"delta":{"content":"x"}}],"timings":{"prompt_n":1e308,"prompt_ms":1e30,"predicted_n":1e12,"predicted_ms":-5,"cache_n":1e13},"usage":{"prompt_tokens":-2,"completion_tokens":1.8e19}}"#,
    );
    assert_eq!(
        d.timings,
        Some(Timings {
            predicted_n: Some(MAX_TOKENS),
            ..Timings::default()
        })
    );
    let u = d.usage.unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (None, None));
    let d = chat(
        r#"{"choices":[{"delta":{"content":"x"}}],"timings":{"prompt_ms":604800000,"predicted_ms":0.25}}"#,
    );
    let t = d.timings.unwrap();
    assert_eq!(t.prefill(), Some(std::time::Duration::from_secs(604_800)));
    assert_eq!(t.decode(), Some(std::time::Duration::from_micros(250)));
}

#[test]
fn duration_ms_is_total() {
    for ms in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -5.0,
        -0.0001,
        1e30,
        1e308,
        f64::MAX,
        MAX_MS * 1.0001,
    ] {
        assert_eq!(duration_ms(ms), None, "{ms}");
    }
    assert_eq!(duration_ms(0.0), Some(std::time::Duration::ZERO));
    assert!(duration_ms(MAX_MS).is_some());
}

proptest! {
    #[test]
    fn duration_ms_never_panics(ms in proptest::num::f64::ANY) {
        if let Some(d) = duration_ms(ms) {
            prop_assert!(d.as_secs_f64() * 1000.0 <= MAX_MS * 1.000_001);
        }
    }
}
