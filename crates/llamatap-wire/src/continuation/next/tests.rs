//! Planning the next attempt: each refusal in its order, the two ends, and
//! what a target is asked for.

use serde_json::{json, Value};

use super::*;

const FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1700000000,"id":"chatcmpl-x","model":"m","object":"chat.completion.chunk"}"#;

fn chat(extra: Value) -> Vec<u8> {
    let mut b =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    serde_json::to_vec(&b).unwrap()
}

fn heard() -> Heard<'static> {
    Heard {
        text: "Hi there",
        token_events: 2,
        first_event: Some(FIRST),
        ..Heard::default()
    }
}

fn refused(shape: Shape, body: &[u8], h: &Heard<'_>) -> &'static str {
    match next(shape, body, h) {
        Next::Refused(why) => why,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_requests_own_refusal_comes_first() {
    let h = Heard {
        mid_event: true,
        ..heard()
    };
    let body = chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}]}));
    assert_eq!(refused(Shape::Chat, &body, &h), "tools");
}

#[test]
fn what_was_heard_refuses_in_order() {
    let body = chat(json!({}));
    let all = Heard {
        mid_event: true,
        error: true,
        skipped_events: true,
        hidden: true,
        overflow: true,
        ..heard()
    };
    let order = [
        "cut_mid_event",
        "upstream_error_event",
        "event_skipped",
        "hidden_tokens",
        "text_too_long",
    ];
    let mut h = all;
    for want in order {
        assert_eq!(refused(Shape::Chat, &body, &h), want);
        match want {
            "cut_mid_event" => h.mid_event = false,
            "upstream_error_event" => h.error = false,
            "event_skipped" => h.skipped_events = false,
            "hidden_tokens" => h.hidden = false,
            _ => h.overflow = false,
        }
    }
    assert!(matches!(next(Shape::Chat, &body, &h), Next::Generate(_)));
}

#[test]
fn a_chat_stream_needs_its_ids() {
    let h = Heard {
        first_event: Some(b"{}"),
        ..heard()
    };
    assert_eq!(refused(Shape::Chat, &chat(json!({})), &h), "no_stream_ids");
    // A native stream has none to keep.
    let body = serde_json::to_vec(&json!({"prompt": "x", "stream": true})).unwrap();
    assert!(matches!(next(Shape::Native, &body, &h), Next::Generate(_)));
}

#[test]
fn a_finished_answer_ends_where_it_is() {
    let h = Heard {
        finished: true,
        ..heard()
    };
    match next(Shape::Chat, &chat(json!({})), &h) {
        Next::End { tail, why } => {
            assert_eq!(why, "finished");
            assert_eq!(tail, b"data: [DONE]\n\n");
        }
        other => panic!("{other:?}"),
    }
    let body = serde_json::to_vec(&json!({"prompt": "x", "stream": true})).unwrap();
    match next(Shape::Native, &body, &h) {
        Next::End { tail, why } => {
            assert_eq!(why, "finished");
            assert!(tail.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_token_asked_for_was_sent() {
    let body = chat(json!({"max_tokens": 2}));
    match next(Shape::Chat, &body, &heard()) {
        Next::End { tail, why } => {
            assert_eq!(why, "limit_reached");
            let s = String::from_utf8(tail).unwrap();
            assert!(s.contains("\"finish_reason\":\"length\""), "{s}");
            assert!(s.ends_with("data: [DONE]\n\n"));
        }
        other => panic!("{other:?}"),
    }
    let native =
        serde_json::to_vec(&json!({"prompt": "x", "stream": true, "n_predict": 2})).unwrap();
    match next(Shape::Native, &native, &heard()) {
        Next::End { tail, .. } => {
            let s = String::from_utf8(tail).unwrap();
            assert!(s.contains("\"tokens_predicted\":2"), "{s}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_rest_counts_ids_when_every_event_had_them() {
    let ids = [5u32, 6, 7];
    let h = Heard {
        ids: Some(&ids),
        ..heard()
    };
    let Next::Generate(rest) = next(Shape::Chat, &chat(json!({"max_tokens": 10})), &h) else {
        panic!("not generated");
    };
    assert_eq!(rest.target.tokens_before, 3);
    assert_eq!(rest.token_ids.as_deref(), Some(&ids[..]));
    let body: Value = serde_json::from_slice(&rest.completion_body(Some("<prompt>"))).unwrap();
    assert_eq!(body["n_predict"], 7);
    // Without ids, the token events count.
    let Next::Generate(rest) = next(Shape::Chat, &chat(json!({})), &heard()) else {
        panic!("not generated");
    };
    assert_eq!(rest.target.tokens_before, 2);
    assert!(rest.token_ids.is_none());
    assert_eq!(
        rest.target.ids.as_ref().map(|i| i.id.as_str()),
        Some("chatcmpl-x")
    );
}

#[test]
fn empty_ids_with_text_are_not_ids() {
    let h = Heard {
        ids: Some(&[]),
        ..heard()
    };
    let Next::Generate(rest) = next(Shape::Chat, &chat(json!({})), &h) else {
        panic!("not generated");
    };
    assert!(rest.token_ids.is_none());
    assert_eq!(rest.target.tokens_before, 2);
}
