//! What can be continued, the continuation's bodies, the stream's ids and
//! the re-wrapped chunks.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// A continuable chat request with `extra`'s keys set over it (a null is
/// sent as null).
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

/// What the client has: `text`, `tokens` tokens, no ids.
fn text_sent(text: &str, tokens: u64) -> Sent<'_> {
    Sent {
        text,
        ids: None,
        tokens,
    }
}

fn refusal(extra: Value) -> Refusal {
    plan(&chat(extra)).unwrap_err()
}

// === plan ===

#[test]
fn each_refusal_and_its_word() {
    let tool = json!([{"type": "function", "function": {"name": "f"}}]);
    let cases = [
        (plan(b"[1]").unwrap_err(), Refusal::NotJson, "not_json"),
        (
            refusal(json!({"stream": false})),
            Refusal::NotStreaming,
            "not_streaming",
        ),
        (refusal(json!({"tools": tool})), Refusal::Tools, "tools"),
        (
            refusal(json!({"grammar": "root ::= \"a\""})),
            Refusal::Grammar,
            "grammar",
        ),
        (
            refusal(json!({"json_schema": {}})),
            Refusal::JsonSchema,
            "json_schema",
        ),
        (
            refusal(json!({"response_format": {"type": "json_object"}})),
            Refusal::ResponseFormat,
            "response_format",
        ),
        (
            refusal(json!({"n": 2})),
            Refusal::SeveralChoices,
            "several_choices",
        ),
        (
            refusal(json!({"messages": []})),
            Refusal::NoMessages,
            "no_messages",
        ),
    ];
    for (got, want, word) in cases {
        assert_eq!(got, want);
        assert_eq!(got.as_str(), word);
    }
}

#[test]
fn other_shapes_of_each_refusal() {
    for body in [&b"{"[..], b"", b"\"text\"", b"null", b"{\"stream\":true} x"] {
        assert_eq!(plan(body).unwrap_err(), Refusal::NotJson, "{body:?}");
    }
    for stream in [json!(null), json!("true"), json!(1)] {
        assert_eq!(refusal(json!({"stream": stream})), Refusal::NotStreaming);
    }
    let absent = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(plan(absent).unwrap_err(), Refusal::NotStreaming);
    for choice in [
        json!("auto"),
        json!("required"),
        json!({"type": "function"}),
    ] {
        assert_eq!(refusal(json!({"tool_choice": choice})), Refusal::Tools);
    }
    assert_eq!(refusal(json!({"grammar": ""})), Refusal::Grammar);
    for format in [
        json!({"type": "json_schema", "json_schema": {"schema": {}}}),
        json!({}),
        json!("text"),
    ] {
        assert_eq!(
            refusal(json!({"response_format": format})),
            Refusal::ResponseFormat
        );
    }
    assert_eq!(refusal(json!({"n": 2.0})), Refusal::SeveralChoices);
    for messages in [json!(null), json!("hi"), json!({})] {
        assert_eq!(refusal(json!({"messages": messages})), Refusal::NoMessages);
    }
    let absent = br#"{"model":"m","stream":true}"#;
    assert_eq!(plan(absent).unwrap_err(), Refusal::NoMessages);
}

#[test]
fn refusals_are_checked_in_the_enums_order() {
    let every = json!({
        "stream": false, "tool_choice": "auto", "grammar": "g", "json_schema": {},
        "response_format": {"type": "json_object"}, "n": 3, "messages": [],
    });
    let mut body = every.as_object().unwrap().clone();
    for want in [
        Refusal::NotStreaming,
        Refusal::Tools,
        Refusal::Grammar,
        Refusal::JsonSchema,
        Refusal::ResponseFormat,
        Refusal::SeveralChoices,
        Refusal::NoMessages,
    ] {
        assert_eq!(refusal(Value::Object(body.clone())), want);
        // Lift the refusal just seen; the next one shows.
        match want {
            Refusal::NotStreaming => body.insert("stream".into(), json!(true)),
            Refusal::Tools => body.remove("tool_choice"),
            Refusal::Grammar => body.remove("grammar"),
            Refusal::JsonSchema => body.remove("json_schema"),
            Refusal::ResponseFormat => body.remove("response_format"),
            Refusal::SeveralChoices => body.remove("n"),
            _ => body.remove("messages"),
        };
    }
}

#[test]
fn harmless_fields_are_accepted() {
    for extra in [
        json!({}),
        json!({"tool_choice": "none"}),
        json!({"tools": [], "tool_choice": "none"}),
        json!({"tools": null, "tool_choice": null, "grammar": null, "json_schema": null}),
        json!({"response_format": {"type": "text"}}),
        json!({"response_format": null}),
        json!({"n": 1}),
        json!({"n": null}),
    ] {
        assert!(plan(&chat(extra.clone())).is_ok(), "{extra}");
    }
}

#[test]
fn the_limit_and_the_usage_flag() {
    let limit = |extra| plan(&chat(extra)).unwrap().max_tokens();
    assert_eq!(
        limit(json!({"max_completion_tokens": 10, "max_tokens": 99})),
        Some(10)
    );
    assert_eq!(
        limit(json!({"max_completion_tokens": null, "max_tokens": 99})),
        Some(99)
    );
    assert_eq!(limit(json!({"max_tokens": 0})), Some(0));
    assert_eq!(limit(json!({"max_tokens": null})), None);
    assert_eq!(limit(json!({"max_tokens": "12"})), None);
    assert_eq!(limit(json!({})), None);

    let usage = |extra| plan(&chat(extra)).unwrap().include_usage();
    assert!(usage(json!({"stream_options": {"include_usage": true}})));
    assert!(!usage(json!({"stream_options": {"include_usage": false}})));
    assert!(!usage(json!({"stream_options": {}})));
    assert!(!usage(json!({})));
}

#[test]
fn what_remains_of_the_limit() {
    let p = plan(&chat(json!({"max_tokens": 100}))).unwrap();
    assert_eq!(p.remaining(0), Some(100));
    assert_eq!(p.remaining(40), Some(60));
    assert_eq!(p.remaining(100), Some(0));
    assert_eq!(p.remaining(u64::MAX), Some(0));
    let unlimited = plan(&chat(json!({}))).unwrap();
    assert_eq!(unlimited.remaining(40), None);
}

// === completion_body ===

/// Every carried field, each with a value of its own.
fn carried_values() -> Value {
    json!({
        "model": "router/tiny", "temperature": 0.5, "top_p": 0.9, "top_k": 3,
        "min_p": 0.05, "typical_p": 0.95, "seed": 7, "stop": ["\n\n", "END"],
        "ignore_eos": true, "presence_penalty": 0.25, "frequency_penalty": -0.5,
        "repeat_penalty": 1.1, "repeat_last_n": 64, "penalize_nl": false,
        "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
        "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\n", ":"],
        "xtc_probability": 0.1, "xtc_threshold": 0.2, "mirostat": 2,
        "mirostat_tau": 5.0, "mirostat_eta": 0.1, "logit_bias": {"15": -100},
        "samplers": ["top_k", "temperature"], "dynatemp_range": 0.3,
        "dynatemp_exponent": 1.5, "top_n_sigma": 1.0, "n_probs": 2,
        "adaptive_target": 0.4, "adaptive_decay": 0.9, "min_keep": 1,
        "backend_sampling": false, "post_sampling_probs": true,
        "lora": [{"id": 0, "scale": 0.5}], "t_max_predict_ms": 2500,
        "n_indent": 4, "n_keep": -1, "n_discard": 8, "timings_per_token": true,
    })
}

#[test]
fn the_completion_body_carries_sampling_verbatim() {
    let carried = carried_values();
    assert_eq!(carried.as_object().unwrap().len(), CARRIED.len());
    let p = plan(&chat(carried.clone())).unwrap();
    let v: Value =
        serde_json::from_slice(&p.completion_body(Some("R"), &text_sent("S", 0))).unwrap();
    for (k, want) in carried.as_object().unwrap() {
        assert_eq!(&v[k], want, "{k}");
    }
    // Those four and nothing more.
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.retain(|k| !carried.as_object().unwrap().contains_key(*k));
    keys.sort_unstable();
    assert_eq!(keys, ["cache_prompt", "n_predict", "prompt", "stream"]);
    assert_eq!(
        (&v["stream"], &v["cache_prompt"]),
        (&json!(true), &json!(true))
    );
}

#[test]
fn the_completion_body_leaves_the_chat_fields_out() {
    let p = plan(&chat(json!({
        "tools": [], "tool_choice": "none", "stream_options": {"include_usage": true},
        "response_format": {"type": "text"}, "n": 1, "logprobs": true, "top_logprobs": 2,
        "max_tokens": 160, "max_completion_tokens": 160, "user": "u",
        "temperature": null, "seed": null,
    })))
    .unwrap();
    let v: Value =
        serde_json::from_slice(&p.completion_body(Some("R"), &text_sent("S", 40))).unwrap();
    for absent in [
        "messages",
        "tools",
        "tool_choice",
        "stream_options",
        "response_format",
        "n",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "user",
        "temperature",
        "seed",
    ] {
        assert!(v.get(absent).is_none(), "{absent} carried");
    }
    assert_eq!(v["n_predict"], 120);
    assert_eq!(v["model"], "m");
}

#[test]
fn the_prompt_is_the_rendering_then_the_text_sent() {
    let p = plan(&chat(json!({"max_tokens": 10}))).unwrap();
    let rendered = "<|im_start|>user\nhi \"quoted\" \\ back<|im_end|>\n<|im_start|>assistant\n";
    let sent = "Once upon a time — 灯台 🌊 \"so\" \\n\u{0}\n";
    let body = p.completion_body(Some(rendered), &text_sent(sent, 10));
    assert!(!body.contains(&b'\n'), "not compact");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["prompt"].as_str().unwrap(), format!("{rendered}{sent}"));
    assert_eq!(v["n_predict"], 0);

    let unlimited = plan(&chat(json!({}))).unwrap();
    let v: Value =
        serde_json::from_slice(&unlimited.completion_body(Some(""), &text_sent("", 3))).unwrap();
    assert_eq!((&v["prompt"], &v["n_predict"]), (&json!(""), &json!(-1)));
}

#[test]
fn the_rendered_prompt() {
    let good = |a: &[u8]| rendered_prompt(a).unwrap();
    assert_eq!(good(br#"{"prompt":"a\nb \u00e9 \"q\""}"#), "a\nb é \"q\"");
    assert_eq!(good(br#"{"prompt":""}"#), "");
    assert_eq!(good(br#"{"prompt":"p","extra":1}"#), "p");
    for bad in [
        &br#"{"prompt":1}"#[..],
        br#"{"prompt":null}"#,
        br#"{"prompt":["a"]}"#,
        br#"{"error":{"code":400,"message":"x","type":"invalid_request_error"}}"#,
        br#"["prompt"]"#,
        b"\"prompt\"",
        b"not json",
        b"",
    ] {
        assert_eq!(
            rendered_prompt(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

// === stream_ids and the re-wrapped chunks ===

/// A first chunk as llama-server writes it: the role, no content yet.
const FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1733300000,"id":"chatcmpl-abc","model":"tiny.gguf","system_fingerprint":"b1-x","object":"chat.completion.chunk"}"#;

fn ids() -> StreamIds {
    stream_ids(FIRST).unwrap()
}

#[test]
fn stream_ids_from_the_first_chunk() {
    let want = StreamIds {
        id: "chatcmpl-abc".into(),
        created: 1_733_300_000,
        model: "tiny.gguf".into(),
        system_fingerprint: Some("b1-x".into()),
        index: 0,
        text_completion: false,
    };
    assert_eq!(ids(), want);
    let two = stream_ids(br#"{"id":"a","created":1,"model":"m","choices":[{"index":2}]}"#);
    assert_eq!(
        two.map(|i| (i.index, i.system_fingerprint)),
        Some((2, None))
    );
    let bare = stream_ids(br#"{"id":"a","created":1,"model":"m","choices":[]}"#);
    assert_eq!(bare.map(|i| i.index), Some(0));
}

#[test]
fn stream_ids_need_id_created_and_model() {
    for bad in [
        &br#"{"created":1,"model":"m"}"#[..],
        br#"{"id":"a","model":"m"}"#,
        br#"{"id":"a","created":1}"#,
        br#"{"id":1,"created":1,"model":"m"}"#,
        br#"{"id":"a","created":"1","model":"m"}"#,
        br#"{"id":"a","created":1.5,"model":"m"}"#,
        br#"{"id":"a","created":1,"model":null}"#,
        b"[DONE]",
        b"data: {}",
        &FIRST[..FIRST.len() - 1],
        b"",
    ] {
        assert_eq!(stream_ids(bad), None, "{:?}", String::from_utf8_lossy(bad));
    }
}

/// The `data` of each SSE event in `bytes`.
fn events(bytes: &[u8]) -> Vec<String> {
    let s = std::str::from_utf8(bytes).unwrap();
    assert!(s.ends_with("\n\n"), "{s:?}");
    s.split_terminator("\n\n")
        .map(|e| e.strip_prefix("data: ").unwrap().to_string())
        .collect()
}

/// The one chunk of a single event, with this stream's ids.
fn chunk_of(data: &str) -> Value {
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["id"], "chatcmpl-abc");
    assert_eq!(v["created"], 1_733_300_000);
    assert_eq!(v["model"], "tiny.gguf");
    assert_eq!(v["system_fingerprint"], "b1-x");
    assert_eq!(v["object"], "chat.completion.chunk");
    v
}

#[test]
fn a_content_event_is_llama_servers_chunk() {
    let e = String::from_utf8(ids().content_event("Hi", None)).unwrap();
    assert_eq!(
        e,
        "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\
         \"created\":1733300000,\"id\":\"chatcmpl-abc\",\"model\":\"tiny.gguf\",\
         \"system_fingerprint\":\"b1-x\",\"object\":\"chat.completion.chunk\"}\n\n"
    );
    let plain = StreamIds {
        system_fingerprint: None,
        index: 3,
        ..ids()
    };
    let e = String::from_utf8(plain.content_event("Hi", None)).unwrap();
    assert!(!e.contains("system_fingerprint"), "{e}");
    assert!(e.contains(r#""index":3,"#), "{e}");
    assert!(e.contains(r#""model":"tiny.gguf","object":"#), "{e}");
}

#[test]
fn content_events_round_trip_the_text() {
    for text in [
        "",
        "quote \" and \\ back \\n",
        "line\nbreak\r\n\n\ttab",
        "emoji 🌊 灯台 é",
        "\u{0}\u{1}\u{1f}\u{7f}ctl",
        "data: [DONE]\n\n",
    ] {
        let e = events(&ids().content_event(text, None));
        assert_eq!(e.len(), 1, "{text:?}");
        let v = chunk_of(&e[0]);
        assert_eq!(v["choices"][0]["delta"], json!({"content": text}));
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(v["choices"][0]["index"], 0);
        assert!(v.get("usage").is_none());
    }
}

#[test]
fn the_end_without_usage() {
    let e = events(&ids().finish_events("length", None));
    assert_eq!(e.len(), 2);
    let fin = chunk_of(&e[0]);
    assert_eq!(
        fin["choices"],
        json!([{"finish_reason": "length", "index": 0, "delta": {}}])
    );
    assert!(fin.get("usage").is_none());
    assert!(e[0].starts_with(r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"#));
    assert_eq!(e[1], "[DONE]");
}

#[test]
fn the_end_with_usage() {
    let usage = AnswerUsage {
        prompt_tokens: 30,
        completion_tokens: 160,
    };
    let e = events(&ids().finish_events("stop", Some(usage)));
    assert_eq!(e.len(), 3);
    assert_eq!(chunk_of(&e[0])["choices"][0]["finish_reason"], "stop");
    let u = chunk_of(&e[1]);
    assert_eq!(u["choices"], json!([]));
    assert_eq!(
        u["usage"],
        json!({"completion_tokens": 160, "prompt_tokens": 30, "total_tokens": 190})
    );
    // llama-server's key order, usage last.
    assert!(e[1].starts_with(r#"{"choices":[],"created":"#), "{}", e[1]);
    assert!(
        e[1].ends_with(r#""object":"chat.completion.chunk","usage":{"completion_tokens":160,"prompt_tokens":30,"total_tokens":190}}"#),
        "{}",
        e[1]
    );
    assert_eq!(e[2], "[DONE]");

    let huge = AnswerUsage {
        prompt_tokens: u64::MAX,
        completion_tokens: 1,
    };
    let e = events(&ids().finish_events("stop", Some(huge)));
    assert_eq!(chunk_of(&e[1])["usage"]["total_tokens"], u64::MAX);
}

#[test]
fn native_stop_types_become_finish_reasons() {
    assert_eq!(finish_reason(Some("limit")), "length");
    assert_eq!(finish_reason(Some("eos")), "stop");
    assert_eq!(finish_reason(Some("word")), "stop");
    assert_eq!(finish_reason(Some("none")), "stop");
    assert_eq!(finish_reason(None), "stop");
}

proptest! {
    #[test]
    fn any_text_round_trips(text in any::<String>()) {
        let e = events(&ids().content_event(&text, None));
        prop_assert_eq!(e.len(), 1);
        let v: Value = serde_json::from_str(&e[0]).unwrap();
        prop_assert_eq!(v["choices"][0]["delta"]["content"].as_str(), Some(text.as_str()));
    }
}

#[test]
fn the_limit_is_read_as_llama_server_reads_it() {
    let limit = |extra: Value| plan(&chat(extra)).unwrap().max_tokens();
    assert_eq!(limit(json!({"n_predict": 50, "max_tokens": 99})), Some(50));
    assert_eq!(
        limit(json!({"n_predict": null, "max_tokens": 99})),
        Some(99)
    );
    assert_eq!(
        limit(json!({"max_completion_tokens": -1, "max_tokens": 99})),
        None
    );
    assert_eq!(limit(json!({"n_predict": -1})), None);
    // An integer field read from a number with a fraction: truncated, as
    // `json::get<int>` does (20.0 is a limit of 20, not no limit).
    assert_eq!(limit(json!({"max_tokens": 20.0})), Some(20));
    assert_eq!(limit(json!({"max_tokens": 20.9})), Some(20));
    assert_eq!(limit(json!({"n_predict": -1.0, "max_tokens": 5})), None);
    let body = plan(&chat(json!({"max_tokens": 20.0})))
        .unwrap()
        .completion_body(Some("R"), &text_sent("S", 5));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["n_predict"], json!(15));
}

#[test]
fn several_completions_are_refused_by_either_name() {
    // `n_cmpl` is llama-server's own name, `n` its alias; either above 1
    // generates several answers, which one stream cannot carry on.
    for extra in [
        json!({"n_cmpl": 2}),
        json!({"n_cmpl": 2.0}),
        json!({"n": 3}),
        json!({"n_cmpl": 2, "n": 1}),
    ] {
        assert_eq!(refusal(extra.clone()), Refusal::SeveralChoices, "{extra}");
    }
    for extra in [
        json!({"n_cmpl": 1}),
        json!({"n": 1.5}),
        json!({"n_cmpl": null, "n": 1}),
    ] {
        assert!(plan(&chat(extra.clone())).is_ok(), "{extra}");
    }
}

#[test]
fn a_native_requests_logprobs_alias_asks_for_n_probs() {
    let native = |extra: Value| {
        let mut b = json!({"prompt": "p", "stream": true});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let p = plan_for(Shape::Native, &serde_json::to_vec(&b).unwrap()).unwrap();
        let body = p.completion_body(None, &text_sent("", 0));
        serde_json::from_slice::<Value>(&body).unwrap()["n_probs"].clone()
    };
    assert_eq!(native(json!({"logprobs": 3})), json!(3));
    assert_eq!(native(json!({"n_probs": 2, "logprobs": 3})), json!(2));
    assert_eq!(native(json!({"logprobs": 0})), Value::Null);
}

// === completions, native, token ids ===

fn completion(prompt: Value, extra: Value) -> Vec<u8> {
    let mut b = json!({"prompt": prompt, "stream": true, "max_tokens": 10});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    serde_json::to_vec(&b).unwrap()
}

#[test]
fn a_completion_has_one_prompt_to_extend() {
    for (prompt, want) in [
        (json!("Once"), Ok(())),
        (json!(["Once"]), Ok(())),
        (json!([1, 2, 3]), Ok(())),
        (json!(["Once", 5, "upon"]), Ok(())),
        (json!([]), Err(Refusal::NoPrompt)),
        (json!(""), Err(Refusal::NoPrompt)),
        (json!(null), Err(Refusal::NoPrompt)),
        (json!(7), Err(Refusal::NoPrompt)),
        (json!(["a", "b"]), Err(Refusal::SeveralChoices)),
        (json!([[1, 2], [3]]), Err(Refusal::SeveralChoices)),
        (
            json!([{"prompt_string": "a"}]),
            Err(Refusal::SeveralChoices),
        ),
        (json!([1, -2]), Err(Refusal::SeveralChoices)),
    ] {
        for shape in [Shape::Completions, Shape::Native] {
            let got = plan_for(shape, &completion(prompt.clone(), json!({}))).map(|_| ());
            assert_eq!(got, want, "{shape:?} {prompt}");
        }
    }
    // A chat refusal applies to a completion too; `messages` does not.
    let p = completion(json!("a"), json!({"grammar": "root ::= \"a\""}));
    assert_eq!(
        plan_for(Shape::Completions, &p).unwrap_err(),
        Refusal::Grammar
    );
    assert_eq!(Refusal::NoPrompt.as_str(), "no_prompt");
}

#[test]
fn the_continuations_prompt_for_each_shape_and_what_was_sent() {
    let body = |shape, prompt: Value, sent: &Sent<'_>| -> Value {
        let p = plan_for(shape, &completion(prompt, json!({}))).unwrap();
        serde_json::from_slice(&p.completion_body(None, sent)).unwrap()
    };
    let ids = [11u32, 12, 13];
    let exact = Sent {
        text: "abc",
        ids: Some(&ids),
        tokens: 3,
    };
    let text = text_sent(" upon", 1);
    // Token-exact: the prompt, then the ids (a mixed array).
    assert_eq!(
        body(Shape::Completions, json!("Once"), &exact)["prompt"],
        json!(["Once", 11, 12, 13])
    );
    assert_eq!(
        body(Shape::Native, json!([1, 2]), &exact)["prompt"],
        json!([1, 2, 11, 12, 13])
    );
    // From text: joined to a string, one more string after ids.
    assert_eq!(
        body(Shape::Completions, json!(["Once"]), &text)["prompt"],
        json!("Once upon")
    );
    assert_eq!(
        body(Shape::Native, json!(["A", 1]), &text)["prompt"],
        json!(["A", 1, " upon"])
    );
    let b = body(Shape::Completions, json!("Once"), &exact);
    assert_eq!(b["n_predict"], 7);
    // Chat: the rendering, then the ids.
    let chat_plan = plan(&chat(json!({}))).unwrap();
    let v: Value = serde_json::from_slice(&chat_plan.completion_body(Some("R"), &exact)).unwrap();
    assert_eq!(v["prompt"], json!(["R", 11, 12, 13]));
    assert!(chat_plan.needs_template());
    assert!(!plan_for(Shape::Native, &completion(json!("a"), json!({})))
        .unwrap()
        .needs_template());
}

#[test]
fn logprobs_become_n_probs_as_llama_server_reads_them() {
    let n_probs = |shape, body: Vec<u8>| -> Value {
        let p = plan_for(shape, &body).unwrap();
        let v: Value =
            serde_json::from_slice(&p.completion_body(Some("R"), &text_sent("", 0))).unwrap();
        v["n_probs"].clone()
    };
    assert_eq!(n_probs(Shape::Chat, chat(json!({"logprobs": true}))), 20);
    assert_eq!(
        n_probs(
            Shape::Chat,
            chat(json!({"logprobs": true, "top_logprobs": 3}))
        ),
        3
    );
    assert_eq!(
        n_probs(
            Shape::Chat,
            chat(json!({"logprobs": false, "top_logprobs": 3}))
        ),
        Value::Null
    );
    assert_eq!(n_probs(Shape::Chat, chat(json!({}))), Value::Null);
    assert_eq!(
        n_probs(
            Shape::Completions,
            completion(json!("a"), json!({"logprobs": 2}))
        ),
        2
    );
    assert_eq!(
        n_probs(Shape::Native, completion(json!("a"), json!({"n_probs": 4}))),
        4
    );
}

/// A text-completion chunk as llama-server writes it.
const TEXT_FIRST: &[u8] = br#"{"choices":[{"text":" many","index":0,"logprobs":null,"finish_reason":null}],"created":1796401585,"model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-P5K"}"#;

#[test]
fn text_completion_chunks_are_llama_servers() {
    let ids = stream_ids(TEXT_FIRST).unwrap();
    assert!(ids.text_completion);
    let e = String::from_utf8(ids.content_event(" many", None)).unwrap();
    assert_eq!(
        e,
        format!("data: {}\n\n", String::from_utf8_lossy(TEXT_FIRST))
    );
    let end = String::from_utf8(ids.finish_events(
        "length",
        Some(AnswerUsage {
            prompt_tokens: 2,
            completion_tokens: 2,
        }),
    ))
    .unwrap();
    assert_eq!(
        end,
        "data: {\"choices\":[{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}],\
         \"created\":1796401585,\"model\":\"tiny.gguf\",\"system_fingerprint\":\"b0-unknown\",\
         \"object\":\"text_completion\",\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":2,\
         \"total_tokens\":4},\"id\":\"chatcmpl-P5K\"}\n\ndata: [DONE]\n\n"
    );
}

#[test]
fn logprobs_are_re_wrapped_as_the_client_asked() {
    let probs = json!([{"id": 9454, "token": "ansion", "bytes": [97], "logprob": -7.3,
        "top_logprobs": [{"id": 1784, "token": " many", "bytes": [32], "logprob": -7.0}]}]);
    let chat_event = chunk_of(&events(&ids().content_event("ansion", Some(&probs)))[0]);
    assert_eq!(chat_event["choices"][0]["logprobs"]["content"], probs);
    let text = stream_ids(TEXT_FIRST).unwrap();
    let e = events(&text.content_event("ansion", Some(&probs)));
    let v: Value = serde_json::from_str(&e[0]).unwrap();
    assert_eq!(v["choices"][0]["logprobs"]["content"], probs);
    assert_eq!(v["choices"][0]["text"], "ansion");
}

#[test]
fn a_native_event_counts_the_tokens_sent_before() {
    let e = native_event(
        br#"{"index":0,"content":"x","tokens":[5],"stop":false,"tokens_predicted":3,"tokens_evaluated":9}"#,
        40,
    );
    assert_eq!(
        e,
        b"data: {\"index\":0,\"content\":\"x\",\"tokens\":[5],\"stop\":false,\"tokens_predicted\":43,\"tokens_evaluated\":9}\n\n"
    );
    let plain = br#"{"content":"x"}"#;
    assert_eq!(native_event(plain, 40), b"data: {\"content\":\"x\"}\n\n");
    let end = String::from_utf8(native_end(160)).unwrap();
    let v: Value = serde_json::from_str(end.strip_prefix("data: ").unwrap().trim_end()).unwrap();
    assert_eq!(
        (&v["stop"], &v["stop_type"], &v["tokens_predicted"]),
        (&json!(true), &json!("limit"), &json!(160))
    );
    let odd = br#"{"tokens_predicted":"3"}"#;
    assert_eq!(
        native_event(odd, 40),
        b"data: {\"tokens_predicted\":\"3\"}\n\n"
    );
}

#[test]
fn token_ids_of_each_kind_of_event() {
    let mut out = Vec::new();
    let chat_with = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" a"},"logprobs":{"content":[{"id":19469,"token":" a","bytes":[32],"logprob":-7.2,"top_logprobs":[]}]}}],"id":"x"}"#;
    assert!(event_token_ids(Shape::Chat, chat_with, &mut out));
    let text_with = br#"{"choices":[{"text":" b","index":0,"logprobs":{"content":[{"id":7,"token":" b"},{"id":8,"token":""}]},"finish_reason":null}]}"#;
    assert!(event_token_ids(Shape::Completions, text_with, &mut out));
    let native = br#"{"index":0,"content":".","tokens":[29889],"stop":false}"#;
    assert!(event_token_ids(Shape::Native, native, &mut out));
    let native_probs = br#"{"content":".","completion_probabilities":[{"id":3,"token":"."}]}"#;
    assert!(event_token_ids(Shape::Native, native_probs, &mut out));
    assert_eq!(out, [19469, 7, 8, 29889, 3]);
    for (shape, none) in [
        (
            Shape::Chat,
            &br#"{"choices":[{"delta":{"content":" a"}}]}"#[..],
        ),
        (
            Shape::Chat,
            br#"{"choices":[{"delta":{"content":" a"},"logprobs":null}]}"#,
        ),
        (
            Shape::Completions,
            br#"{"choices":[{"text":"a","logprobs":null}]}"#,
        ),
        (Shape::Native, br#"{"content":"","tokens":[],"stop":true}"#),
        (Shape::Chat, b"not json"),
    ] {
        assert!(
            !event_token_ids(shape, none, &mut out),
            "{}",
            String::from_utf8_lossy(none)
        );
    }
    assert_eq!(out.len(), 5, "nothing appended when none is carried");
}
