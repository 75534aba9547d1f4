//! Tests of request inspection: every llama-server path, each API's body
//! shapes, wrong types, non-JSON and odd inputs, and property tests that no
//! input panics.

use super::*;
use proptest::prelude::*;

#[test]
fn routes_llama_server_paths() {
    let cases = [
        ("/v1/chat/completions", Route::ChatCompletions),
        ("/chat/completions", Route::ChatCompletions),
        ("/api/chat", Route::ChatCompletions),
        ("/v1/completions", Route::Completions),
        ("/completions", Route::Completion),
        ("/completion", Route::Completion),
        ("/v1/embeddings", Route::Embeddings),
        ("/embeddings", Route::Embedding),
        ("/embedding", Route::Embedding),
        ("/v1/models", Route::Models),
        ("/models", Route::Models),
        ("/api/tags", Route::Models),
        ("/infill", Route::Infill),
        ("/tokenize", Route::Tokenize),
        ("/detokenize", Route::Detokenize),
        ("/apply-template", Route::ApplyTemplate),
        ("/rerank", Route::Reranking),
        ("/reranking", Route::Reranking),
        ("/v1/rerank", Route::Reranking),
        ("/v1/reranking", Route::Reranking),
        ("/health", Route::Health),
        ("/v1/health", Route::Health),
        ("/props", Route::Props),
        ("/slots", Route::Slots),
        ("/slots/0", Route::Slots),
        ("/slots/12?action=save", Route::Slots),
        ("/metrics", Route::Metrics),
        ("/v1/messages", Route::Messages),
        ("/v1/responses", Route::Responses),
        ("/responses", Route::Responses),
        ("/", Route::Ui),
        ("/index.html", Route::Ui),
        ("/v1/chat/completions?x=1", Route::ChatCompletions),
        ("/health#top", Route::Health),
    ];
    for (path, route) in cases {
        assert_eq!(Route::from_path(path), route, "{path}");
    }
}

#[test]
fn each_route_has_one_operation_and_format() {
    use crate::llama::StreamFormat as F;
    let generating = [
        (Route::ChatCompletions, "chat", F::OpenAiChat),
        (Route::Completions, "text_completion", F::OpenAiCompletion),
        (Route::Completion, "text_completion", F::Native),
        (Route::Infill, "text_completion", F::Native),
        (Route::Messages, "chat", F::AnthropicMessages),
        (Route::Responses, "chat", F::OpenAiResponses),
    ];
    for route in Route::all() {
        let want = generating.iter().find(|(r, _, _)| r == route);
        assert_eq!(route.stream_format(), want.map(|w| w.2), "{route}");
        match want {
            Some((_, op, _)) => assert_eq!(route.operation_name(), Some(*op), "{route}"),
            None if matches!(route, Route::Embeddings | Route::Embedding) => {
                assert_eq!(route.operation_name(), Some("embeddings"))
            }
            None => assert_eq!(route.operation_name(), None, "{route}"),
        }
    }
    // Every format is some route's, and the paths llama-server streams on
    // name the right one.
    for format in F::ALL {
        assert!(Route::all()
            .iter()
            .any(|r| r.stream_format() == Some(format)));
    }
    for (path, format) in [
        ("/v1/chat/completions", F::OpenAiChat),
        ("/chat/completions?x=1", F::OpenAiChat),
        ("/api/chat", F::OpenAiChat),
        ("/v1/completions", F::OpenAiCompletion),
        ("/completions", F::Native),
        ("/completion", F::Native),
        ("/infill", F::Native),
        ("/v1/messages", F::AnthropicMessages),
        ("/responses", F::OpenAiResponses),
    ] {
        assert_eq!(
            Route::from_path(path).stream_format(),
            Some(format),
            "{path}"
        );
    }
}

#[test]
fn other_paths_are_other() {
    for path in [
        "",
        "?",
        "/v1/messages/count_tokens",
        "/messages",
        "/v1/chat/completions/",
        "/V1/CHAT/COMPLETIONS",
        "//v1/chat/completions",
        "/proxy/v1/chat/completions",
        "/slots/",
        "/slots/0/extra",
        "/api/show",
        "/lora-adapters",
        "/v1/audio/transcriptions",
        "/index.htm",
        "v1/models",
        "/metrics/",
    ] {
        assert_eq!(Route::from_path(path), Route::Other, "{path:?}");
    }
}

#[test]
fn labels_are_unique_snake_case() {
    let labels: Vec<&str> = Route::all().iter().map(Route::as_str).collect();
    assert_eq!(labels.len(), 19);
    let mut unique = labels.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), labels.len());
    for label in labels {
        assert!(label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    }
    assert_eq!(Route::ChatCompletions.as_str(), "chat_completions");
    assert_eq!(Route::ApplyTemplate.to_string(), "apply_template");
    assert_eq!(Route::Other.as_str(), "other");
}

#[test]
fn operation_names_follow_genai_conventions() {
    for route in Route::all() {
        let want = match route {
            Route::ChatCompletions | Route::Messages | Route::Responses => Some("chat"),
            Route::Completions | Route::Completion | Route::Infill => Some("text_completion"),
            Route::Embeddings | Route::Embedding => Some("embeddings"),
            _ => None,
        };
        assert_eq!(route.operation_name(), want, "{route:?}");
    }
    assert_eq!(Route::Reranking.operation_name(), None);
}

// === bodies ===

fn inspect(body: &str) -> RequestFacts {
    inspect_body(body.as_bytes())
}

#[test]
fn reads_an_openai_chat_body() {
    let body = r#"{"model":"tiny.gguf","messages":[{"role":"user","content":"Hi"}],
        "stream":true,"max_tokens":64,"temperature":0.7,"top_p":0.9,"seed":42}"#;
    let want = RequestFacts {
        model: Some("tiny.gguf".into()),
        stream: Some(true),
        max_tokens: Some(64),
        temperature: Some(0.7),
        top_p: Some(0.9),
        seed: Some(42),
    };
    assert_eq!(inspect(body), want);
}

#[test]
fn reads_each_apis_token_limit() {
    let cases = [
        (r#"{"max_completion_tokens":10,"max_tokens":20}"#, Some(10)), // OpenAI chat
        (r#"{"max_tokens":20,"n_predict":30}"#, Some(20)),
        (r#"{"prompt":"a","n_predict":128}"#, Some(128)), // native /completion
        (r#"{"prompt":"a","n_predict":-1}"#, None),       // unlimited
        (
            r#"{"model":"m","max_tokens":1024,"messages":[]}"#,
            Some(1024),
        ), // Anthropic
        (r#"{"input":"hi","max_output_tokens":256}"#, Some(256)), // Responses
        (r#"{"max_completion_tokens":"x","max_tokens":5}"#, Some(5)),
        (r#"{"max_tokens":0}"#, Some(0)),
        (r#"{"max_tokens":1.5}"#, None),
        (r#"{"max_tokens":18446744073709551615}"#, Some(u64::MAX)),
        (r#"{"max_tokens":18446744073709551616}"#, None),
    ];
    for (body, want) in cases {
        assert_eq!(inspect(body).max_tokens, want, "{body}");
    }
}

#[test]
fn a_wrongly_typed_field_is_none_alone() {
    let body = r#"{"model":"m","stream":"yes","temperature":"hot","top_p":[1],
        "seed":1.5,"max_tokens":{"n":1}}"#;
    let want = RequestFacts {
        model: Some("m".into()),
        ..RequestFacts::default()
    };
    assert_eq!(inspect(body), want);
    assert_eq!(inspect(r#"{"model":7,"stream":false}"#).stream, Some(false));
    assert_eq!(inspect(r#"{"model":null}"#).model, None);
    assert_eq!(inspect(r#"{"model":""}"#).model, None);
}

#[test]
fn numbers_convert_where_exact() {
    let facts = inspect(r#"{"temperature":1,"top_p":-0,"seed":-1}"#);
    assert_eq!(facts.temperature, Some(1.0));
    assert_eq!(facts.top_p, Some(0.0));
    assert_eq!(facts.seed, Some(-1));
    assert_eq!(
        inspect(r#"{"seed":9223372036854775807}"#).seed,
        Some(i64::MAX)
    );
    assert_eq!(inspect(r#"{"seed":9223372036854775808}"#).seed, None);
    assert_eq!(inspect(r#"{"temperature":1e400}"#), RequestFacts::default());
}

#[test]
fn model_names_are_capped() {
    let at_cap = "m".repeat(MAX_MODEL_BYTES);
    let body = format!(r#"{{"model":"{at_cap}"}}"#);
    assert_eq!(inspect(&body).model, Some(at_cap.clone()));
    let body = format!(r#"{{"model":"{at_cap}m","stream":true}}"#);
    assert_eq!(inspect(&body).model, None);
    assert_eq!(inspect(&body).stream, Some(true));
    let escaped = inspect(r#"{"model":"a\"b\u00e9"}"#).model;
    assert_eq!(escaped.as_deref(), Some("a\"bé"));
}

#[test]
fn only_top_level_fields_count() {
    let body = r#"{"messages":[{"model":"inner","stream":true}],
        "options":{"max_tokens":5},"model":"outer"}"#;
    let want = RequestFacts {
        model: Some("outer".into()),
        ..RequestFacts::default()
    };
    assert_eq!(inspect(body), want);
}

#[test]
fn a_duplicated_key_takes_its_last_value() {
    assert_eq!(
        inspect(r#"{"model":"a","model":"b"}"#).model,
        Some("b".into())
    );
    assert_eq!(inspect(r#"{"stream":true,"stream":"x"}"#).stream, None);
}

#[test]
fn non_json_and_non_objects_give_nothing() {
    for body in [
        "",
        "not json",
        "[1,2,3]",
        r#""model""#,
        "null",
        "42",
        "{",
        "{model:\"m\"}",
        "\u{FEFF}",
    ] {
        assert_eq!(inspect(body), RequestFacts::default(), "{body:?}");
    }
    assert_eq!(inspect_body(&[0xff, 0xfe, b'{']), RequestFacts::default());
}

#[test]
fn a_body_cut_short_keeps_the_fields_before_the_cut() {
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"Hel"#;
    let facts = inspect(body);
    assert_eq!(facts.model.as_deref(), Some("m"));
    assert_eq!(facts.stream, Some(true));
    assert_eq!(inspect(r#"{"model":"m","stream":tr"#).stream, None);
    assert_eq!(
        inspect(r#"{"model":"m"} trailing"#).model.as_deref(),
        Some("m")
    );
}

#[test]
fn odd_inputs_are_handled() {
    let bom = "\u{FEFF}{\"model\":\"m\"}";
    assert_eq!(inspect(bom).model.as_deref(), Some("m"));
    let deep = format!(
        r#"{{"model":"m","x":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(inspect(&deep).model.as_deref(), Some("m"));
    let huge = format!(
        r#"{{"messages":[{{"content":"{}"}}],"model":"m"}}"#,
        "x".repeat(1 << 20)
    );
    assert_eq!(inspect(&huge).model.as_deref(), Some("m"));
    assert_eq!(inspect(" \n{ \"stream\" : false } ").stream, Some(false));
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = inspect_body(&bytes);
    }

    #[test]
    fn never_panics_on_json_like_text(body in r#"[{}\[\]":,0-9a-z_ .eE+\-\\]{0,200}"#) {
        let _ = inspect_body(body.as_bytes());
    }

    #[test]
    fn reads_back_what_it_is_given(
        model in "[a-zA-Z0-9._:/-]{1,40}",
        stream in any::<bool>(),
        max_tokens in any::<u64>(),
        seed in any::<i64>(),
        temperature in 0.0f64..2.0,
    ) {
        let body = serde_json::json!({
            "messages": [{"role": "user", "content": "hi"}],
            "model": model, "stream": stream, "max_tokens": max_tokens,
            "seed": seed, "temperature": temperature,
        });
        let facts = inspect_body(body.to_string().as_bytes());
        prop_assert_eq!(facts.model, Some(model));
        prop_assert_eq!(facts.stream, Some(stream));
        prop_assert_eq!(facts.max_tokens, Some(max_tokens));
        prop_assert_eq!(facts.seed, Some(seed));
        // serde_json without `float_roundtrip` may be one ulp off.
        let read = facts.temperature.unwrap_or(f64::NAN);
        prop_assert!((read - temperature).abs() <= 1e-15, "{read} != {temperature}");
    }

    #[test]
    fn any_prefix_never_panics(cut in 0usize..200) {
        let body = br#"{"model":"tiny","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"Hi there"}],"temperature":0.5}"#;
        let facts = inspect_body(&body[..cut.min(body.len())]);
        prop_assert!(facts.model.is_none() || facts.model.as_deref() == Some("tiny"));
    }
}

#[test]
fn the_prompt_comes_from_the_same_parse_as_the_facts() {
    let body = br#"{"model":"m","stream":true,"max_tokens":9,"tools":[{"type":"function"}],
        "messages":[{"role":"user","content":"hi"}],"other":{"deep":[1,2]},"system":"s"}"#;
    let (facts, prompt) = inspect_body_and_prompt(body);
    assert_eq!(facts, inspect_body(body));
    assert_eq!(
        prompt,
        serde_json::json!({"model": "m", "tools": [{"type": "function"}],
            "messages": [{"role": "user", "content": "hi"}], "system": "s"})
    );
    // A body cut short keeps what was read before the cut.
    let (facts, prompt) = inspect_body(&body[..60]).model.map_or_else(
        || (None, serde_json::Value::Null),
        |m| (Some(m), inspect_body_and_prompt(&body[..60]).1),
    );
    assert_eq!(facts.as_deref(), Some("m"));
    assert!(prompt.get("messages").is_none());
    assert_eq!(
        inspect_body_and_prompt(b"not json").1,
        serde_json::json!({})
    );
}

#[test]
fn a_prompt_reader_is_handed_each_prompt_field_in_body_order() {
    /// Records each field handed over, and its value.
    #[derive(Default)]
    struct Record(Vec<(PromptField, serde_json::Value)>);
    impl PromptReader for Record {
        fn read<'de, D: serde::Deserializer<'de>>(
            &mut self,
            field: PromptField,
            value: D,
        ) -> Result<(), D::Error> {
            let value = <serde_json::Value as serde::Deserialize>::deserialize(value)?;
            self.0.push((field, value));
            Ok(())
        }
    }
    let body = br#"{"input":"a","model":"m","tools":[1],"other":{"messages":[]},
        "input":["b"],"instructions":null,"system":{"x":1},"messages":[{"role":"user"}]}"#;
    let mut record = Record::default();
    let facts = inspect_body_with_prompt(body, &mut record);
    assert_eq!(facts, inspect_body(body));
    let fields: Vec<_> = record.0.iter().map(|(f, _)| f.as_str()).collect();
    // A field named twice is handed over twice; nested keys never are.
    assert_eq!(
        fields,
        [
            "input",
            "tools",
            "input",
            "instructions",
            "system",
            "messages"
        ]
    );
    assert_eq!(record.0[2].1, serde_json::json!(["b"]));
    // A body cut inside a field: the fields before it only.
    let mut record = Record::default();
    let _ = inspect_body_with_prompt(&body[..35], &mut record);
    assert_eq!(record.0.len(), 1);
}
