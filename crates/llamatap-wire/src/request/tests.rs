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
        // The web UI's files, served from `--path`.
        ("/favicon.svg", Route::Ui),
        ("/manifest.webmanifest", Route::Ui),
        ("/_app/immutable/bundle.BKi_2hnG.js", Route::Ui),
        ("/_app/version.json?t=1", Route::Ui),
        ("/recommended-mcp/exa.ico", Route::Ui),
        ("/%73w.js", Route::Ui),
        // Not llama-server's page, but a file `--path` may hold.
        ("/index.htm", Route::Ui),
        // Not files: dotless API paths, dots only in a directory, `.`, `..`.
        ("/v1/stream", Route::Other),
        ("/v1/streams/lookup", Route::Other),
        ("/a.b/stream", Route::Other),
        ("/..", Route::Other),
        ("/.", Route::Other),
        ("/v1/stream?conv_id=a.js", Route::Other),
        ("/slots/0.bin", Route::Slots),
        ("/v1/chat/completions?x=1", Route::ChatCompletions),
        ("/health#top", Route::Health),
        ("/v1/audio/transcriptions", Route::Transcriptions),
        ("/audio/transcriptions", Route::Transcriptions),
        ("/v1/systemone", Route::Decision),
        // llama-server's `/slots/:id_slot` also matches these two.
        ("/slots/", Route::Slots),
        ("/slots/0/", Route::Slots),
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
        "/slots/0/extra",
        "/slots/0//",
        "/api/show",
        "/lora-adapters",
        "/v1/chat/completions/control",
        "/v1/chat/completions/input_tokens",
        "/v1/stream",
        "v1/models",
        "/metrics/",
    ] {
        assert_eq!(Route::from_path(path), Route::Other, "{path:?}");
    }
}

#[test]
fn labels_are_unique_snake_case() {
    let labels: Vec<&str> = Route::all().iter().map(Route::as_str).collect();
    assert_eq!(labels.len(), 21);
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

#[test]
fn routes_that_run_on_a_slot_are_those_that_generate_embed_rerank_transcribe_or_decide() {
    for route in Route::all() {
        let want = route.operation_name().is_some()
            || matches!(
                route,
                Route::Reranking | Route::Transcriptions | Route::Decision
            );
        assert_eq!(route.uses_slot(), want, "{route:?}");
    }
}

// === percent-decoding, as llama-server's HTTP library does ===

#[test]
fn a_percent_encoded_path_is_the_route_llama_server_runs() {
    let cases = [
        ("/v1/chat/%63ompletions", Route::ChatCompletions),
        ("/v1/chat/%63OMPLETIONS", Route::Other),
        ("%2Fv1%2Fchat%2Fcompletions", Route::ChatCompletions),
        ("/v1/chat/completion%73?stream=true", Route::ChatCompletions),
        ("/v1/%43hat/completions", Route::Other),
        ("/v1/c%68at/completions", Route::ChatCompletions),
        ("/v1/c%u0068at/completions", Route::ChatCompletions),
        ("/v1/c%U0068at/completions", Route::Other),
        ("/v1/chat/%6a", Route::Other),
        ("/v1/%72erank", Route::Reranking),
        ("/v1/%65mbeddings", Route::Embeddings),
        ("/%63ompletion", Route::Completion),
        ("/v1/messages%2Fcount_tokens", Route::Other),
        ("/v1/audio%2Ftranscriptions", Route::Transcriptions),
        ("/slots/%30", Route::Slots),
        ("/slots/0%2Fx", Route::Other),
        // Decoding happens after the query is cut off, once.
        ("/v1/chat/completions%3Fx=1", Route::Other),
        ("/v1/chat/completions%253F", Route::Other),
        ("/v1/chat/%2563ompletions", Route::Other),
        // A `%` without two hex digits stays as it is.
        ("/v1/chat/completions%", Route::Other),
        ("/v1/chat/completions%g0", Route::Other),
        ("/v1/chat/completions%u00", Route::Other),
        // A surrogate decodes to nothing.
        ("/v1/chat/com%uD800pletions", Route::ChatCompletions),
        ("/health%00", Route::Other),
    ];
    for (path, route) in cases {
        assert_eq!(Route::from_path(path), route, "{path}");
    }
}

#[test]
fn decoding_follows_the_http_library_byte_for_byte() {
    use std::borrow::Cow;
    let d = |s: &str| path::decoded(s.as_bytes()).into_owned();
    assert!(matches!(
        path::decoded(b"/v1/models?x=%41"),
        Cow::Borrowed(b"/v1/models")
    ));
    assert_eq!(d("/a%41%4a%4A"), b"/aAJJ");
    assert_eq!(d("/%ff%00"), b"/\xff\x00");
    assert_eq!(d("/%u00e9"), "/\u{e9}".as_bytes());
    assert_eq!(d("/%u20AC"), "/\u{20ac}".as_bytes());
    assert_eq!(d("/%uDFFF!"), b"/!");
    assert_eq!(d("/%u12"), b"/%u12");
    assert_eq!(d("/%1"), b"/%1");
    assert_eq!(d("/%"), b"/%");
    assert_eq!(d("/%%41"), b"/%A");
    assert_eq!(d("/x#%41?y"), b"/x");
}

/// `%XX` of one byte, in either case of hex digit.
fn encode_byte(b: u8, upper: bool) -> String {
    if upper {
        format!("%{b:02X}")
    } else {
        format!("%{b:02x}")
    }
}

proptest! {
    /// Any spelling of a slot route's path that llama-server decodes to it
    /// (any bytes as `%XX`, in either case, or as `%u00XX`, with any query)
    /// is that route: nothing that runs on a slot reaches it as `other`.
    #[test]
    fn every_encoding_of_a_slot_route_is_that_route(
        pick in any::<prop::sample::Index>(),
        how in prop::collection::vec(0u8..4, 32),
        query in "[a-z=&%0-9]{0,12}",
    ) {
        let slot_paths: Vec<(Route, &str)> = Route::all()
            .iter()
            .filter(|r| r.uses_slot())
            .flat_map(|r| r.paths().iter().map(move |p| (*r, *p)))
            .collect();
        let (route, plain) = slot_paths[pick.index(slot_paths.len())];
        let mut encoded = String::new();
        for (i, b) in plain.bytes().enumerate() {
            match how[i % how.len()] {
                0 => encoded.push(char::from(b)),
                1 => encoded.push_str(&encode_byte(b, true)),
                2 => encoded.push_str(&encode_byte(b, false)),
                _ => encoded.push_str(&format!("%u00{b:02x}")),
            }
        }
        if !query.is_empty() {
            encoded.push('?');
            encoded.push_str(&query);
        }
        prop_assert_eq!(Route::from_path(&encoded), route, "{}", encoded);
    }

    /// Decoding never panics, never grows a path, and a path with no `%`
    /// is its own decoding.
    #[test]
    fn decoding_is_total_and_never_longer(s in ".{0,64}") {
        let bare = s.split(['?', '#']).next().unwrap_or_default();
        let out = path::decoded(s.as_bytes());
        prop_assert!(out.len() <= bare.len());
        if !bare.contains('%') {
            prop_assert_eq!(out.as_ref(), bare.as_bytes());
        }
    }
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
        hides_counts: false,
        return_progress: false,
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
fn response_fields_hide_counts_as_llama_server_filters() {
    let cases = [
        (r#"{"prompt":"a","response_fields":["content"]}"#, true),
        (
            r#"{"response_fields":["content","tokens_predicted"]}"#,
            true,
        ),
        (r#"{"response_fields":["timings/predicted_n"]}"#, true),
        (r#"{"response_fields":["content","timings"]}"#, false),
        (
            r#"{"response_fields":["tokens_evaluated","tokens_predicted"]}"#,
            false,
        ),
        // Not a non-empty list of strings: llama-server filters nothing.
        (r#"{"response_fields":[]}"#, false),
        (r#"{"response_fields":"content"}"#, false),
        (r#"{"response_fields":["content",1]}"#, false),
        (r#"{"response_fields":null}"#, false),
        (r#"{"response_fields":{"content":true}}"#, false),
        (r#"{"prompt":"a"}"#, false),
        // The last value counts, as in llama-server's parser.
        (
            r#"{"response_fields":["timings"],"response_fields":["content"]}"#,
            true,
        ),
        (
            r#"{"response_fields":["content"],"response_fields":["timings"]}"#,
            false,
        ),
        // Only the top level.
        (r#"{"options":{"response_fields":["content"]}}"#, false),
    ];
    for (body, want) in cases {
        assert_eq!(inspect(body).hides_counts, want, "{body}");
    }
    let long = format!(r#"{{"response_fields":["{}"]}}"#, "x".repeat(1000));
    assert!(inspect(&long).hides_counts);
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

#[test]
fn reads_whether_the_client_asked_for_progress() {
    for (body, want) in [
        (r#"{"return_progress":true}"#, true),
        (r#"{"return_progress":false}"#, false),
        (r#"{"return_progress":1}"#, false),
        (r#"{"return_progress":true,"return_progress":false}"#, false),
        (r#"{"return_progress":false,"return_progress":true}"#, true),
        (r#"{"prompt":"a"}"#, false),
    ] {
        assert_eq!(inspect(body).return_progress, want, "{body}");
    }
}
