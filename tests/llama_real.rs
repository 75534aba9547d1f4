//! llamatap in front of the real llama-server (random-weight models built by
//! `scripts/ensure-deps.sh`): passthrough of every route, equal content direct
//! and proxied, token counts equal to llama-server's timings, and hang-ups
//! that make llama-server cancel.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::http;
use common::llama::LlamaServer;
use common::otlp::{self, attr_int};
use common::proxy::{assert_model_series_at_zero, metric_series, metric_sum, Llamatap};

fn chat_body(content: &str, stream: bool, max_tokens: u32) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "stream": stream, "max_tokens": max_tokens, "temperature": 0.0, "seed": 42,
    })
    .to_string()
}

fn final_timings(body: &[u8]) -> serde_json::Value {
    http::sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .rfind(|v| v.get("timings").is_some())
        .map(|v| v["timings"].clone())
        .expect("no timings in the stream")
}

#[test]
fn every_series_of_a_known_model_exists_at_zero_before_any_request() {
    // So that the first requests after a start are an increase Prometheus
    // can see (rate() needs a sample before them), not the birth of a series.
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let config = common::temp_config("aliases", "[models]\naliases = [\"voice-assistant\"]\n");
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let model = format!("model=\"{}\"", llama.model_id);
    // The upstream's model name is learned from its /v1/models, in the background.
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_series(m, "llamatap_upstream_models", &[&model]) == Some(1.0)
    });
    assert_eq!(
        metric_series(&m, "llamatap_upstream_models", &[&model]),
        Some(1.0),
        "the upstream's model was never learned\n{m}"
    );
    for name in [llama.model_id.as_str(), "voice-assistant", "other", "none"] {
        assert_model_series_at_zero(&m, name);
    }
}

#[test]
fn tiny_model_routes_content_and_counts() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let (otlp_url, spans) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let (d, p) = (llama.addr(), proxy.addr());

    // Streaming chat: same content direct and through the proxy.
    let body = chat_body("Tell me a story about a cat.", true, 48);
    let direct = http::post(&d, "/v1/chat/completions", &body)
        .unwrap()
        .read_all()
        .unwrap();
    let mut r = http::post(&p, "/v1/chat/completions", &body).unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(r.head.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.head.header("x-accel-buffering"), Some("no"));
    assert!(r.head.header("traceresponse").is_some());
    let proxied = r.read_all().unwrap();
    assert!(r.clean_end);
    let content = http::chat_content(&proxied);
    assert!(!content.is_empty());
    assert_eq!(
        content,
        http::chat_content(&direct),
        "content differs direct vs proxied"
    );
    assert!(String::from_utf8_lossy(&proxied)
        .trim_end()
        .ends_with("data: [DONE]"));
    let timings = final_timings(&proxied);

    // Token counts in metrics and span equal llama-server's own timings.
    let model_label = format!("model=\"{}\"", llama.model_id);
    const STAGES: [&str; 6] = [
        "upstream_headers",
        "ttft",
        "first_sentence",
        "e2e",
        "prefill",
        "decode",
    ];
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_tokens_total", &["kind=\"completion\""]) > 0.0
            && STAGES.iter().all(|stage| {
                let s = format!("stage=\"{stage}\"");
                metric_sum(
                    m,
                    "llamatap_stage_duration_seconds_count",
                    &[&s, &model_label],
                ) > 0.0
            })
    });
    let predicted = timings["predicted_n"].as_f64().unwrap();
    let prompt = timings["prompt_n"].as_f64().unwrap() + timings["cache_n"].as_f64().unwrap_or(0.0);
    assert_eq!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"completion\""]),
        predicted
    );
    assert_eq!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"prompt\""]),
        prompt
    );
    for stage in STAGES {
        let s = format!("stage=\"{stage}\"");
        assert_eq!(
            metric_sum(
                &m,
                "llamatap_stage_duration_seconds_count",
                &[&s, &model_label]
            ),
            1.0,
            "{stage} under the upstream's model name\n{m}"
        );
    }
    let got = spans.wait(2, Duration::from_secs(10));
    let server = got.iter().find(|s| s.kind == 2).expect("server span");
    assert_eq!(
        attr_int(server, "gen_ai.usage.output_tokens"),
        Some(predicted as i64)
    );
    assert_eq!(
        attr_int(server, "llama_cpp.timings.predicted_n"),
        Some(predicted as i64)
    );
    assert!(server.events.iter().any(|e| e.name == "first_token"));
    assert!(server.events.iter().any(|e| e.name == "first_sentence"));

    // Non-streaming chat: same message.
    let body = chat_body("Tell me a story about a dog.", false, 32);
    let (_, direct) = json_post(&d, "/v1/chat/completions", &body);
    let (status, proxied) = json_post(&p, "/v1/chat/completions", &body);
    assert_eq!(status, 200);
    assert_eq!(proxied["choices"], direct["choices"]);

    // Native /completion streaming.
    let body =
        r#"{"prompt":"Once upon a time","n_predict":24,"stream":true,"temperature":0,"seed":1}"#;
    let native = |addr: &str| -> String {
        let out = http::post(addr, "/completion", body)
            .unwrap()
            .read_all()
            .unwrap();
        http::sse_data(&out)
            .iter()
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter_map(|v| v["content"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(native(&p), native(&d));

    // GET and utility routes: byte-identical where the answer is deterministic.
    // The model lists carry a `created` time in seconds, so a pair of answers
    // may straddle a second: a pair is asked again (a corrupting proxy would
    // differ every time).
    for path in ["/health", "/v1/models", "/models", "/props"] {
        let pair = || (http::get(&d, path).unwrap(), http::get(&p, path).unwrap());
        let (mut a, mut b) = pair();
        for _ in 0..3 {
            if a == b {
                break;
            }
            (a, b) = pair();
        }
        assert_eq!(a.0, b.0, "{path}");
        assert_eq!(
            String::from_utf8_lossy(&a.1),
            String::from_utf8_lossy(&b.1),
            "{path}"
        );
    }
    for path in ["/slots", "/metrics", "/"] {
        let (status, body) = http::get(&p, path).unwrap();
        assert_eq!(status, http::get(&d, path).unwrap().0, "{path}");
        assert!(!body.is_empty(), "{path}");
    }
    for (path, body) in [
        ("/tokenize", r#"{"content":"hello world"}"#),
        ("/detokenize", r#"{"tokens":[1,2,3]}"#),
        (
            "/apply-template",
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        ),
        ("/v1/embeddings", r#"{"input":"hi"}"#),
        ("/embedding", r#"{"content":"hi"}"#),
        ("/reranking", r#"{"query":"a","documents":["b"]}"#),
        (
            "/infill",
            r#"{"input_prefix":"def f(","input_suffix":")","n_predict":4,"temperature":0}"#,
        ),
    ] {
        let a = json_post(&d, path, body);
        let b = json_post(&p, path, body);
        assert_eq!(a.0, b.0, "{path}");
        if path != "/infill" {
            assert_eq!(a.1, b.1, "{path}");
        }
    }

    // llama-server's own errors pass through untouched.
    for (path, body) in [
        ("/v1/chat/completions", "{not json"),
        ("/v1/chat/completions", r#"{"messages":"x"}"#),
    ] {
        let a = raw_post(&d, path, body);
        let b = raw_post(&p, path, body);
        assert_eq!(a, b, "{path} {body}");
        assert!(a.0 >= 400);
    }
    let huge = llama.prompt_of_tokens(2600);
    let overflow = chat_body(&huge, true, 8);
    let a = raw_post(&d, "/v1/chat/completions", &overflow);
    let b = raw_post(&p, "/v1/chat/completions", &overflow);
    assert_eq!(a.0, 400);
    assert_eq!(a, b);
    assert!(String::from_utf8_lossy(&a.1).contains("exceed_context_size_error"));

    // A request body over 64 KiB streams through whole.
    let big = "word123 ".repeat(12_000);
    let body = serde_json::json!({ "content": big }).to_string();
    assert!(body.len() > 90_000);
    let a = json_post(&d, "/tokenize", &body);
    let b = json_post(&p, "/tokenize", &body);
    assert_eq!(a.0, 200);
    assert_eq!(a.1, b.1);
    assert!(a.1["tokens"].as_array().unwrap().len() > 40_000);

    let (code, _) = http::get(&proxy.admin(), "/readyz").unwrap();
    assert_eq!(code, 200);
}

fn raw_post(addr: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let mut r = http::post(addr, path, body).unwrap();
    let b = r.read_all().unwrap();
    (r.head.status, b)
}

fn json_post(addr: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let (s, b) = raw_post(addr, path, body);
    (
        s,
        serde_json::from_slice(&b).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn mid_stream_hangup_makes_llama_server_cancel() {
    let llama = LlamaServer::start("slow", &["-np", "1"]);
    let proxy = Llamatap::start(&llama.base_url, &[]);
    let cancels = llama.log_count("cancel task");
    let mut r = http::post(
        &proxy.addr(),
        "/v1/chat/completions",
        &chat_body("Hi", true, 400),
    )
    .unwrap();
    // Wait for the first content token, then hang up.
    let mut seen = Vec::new();
    while http::chat_content(&seen).is_empty() {
        seen.extend(r.next_piece().unwrap().expect("stream ended early"));
    }
    assert!(!llama.slots_idle(), "the slot should be generating");
    let hung_up = Instant::now();
    drop(r);
    // llama-server cancels the task (it would otherwise generate all 400
    // tokens and log no cancel).
    assert!(
        llama.wait_log_count("cancel task", cancels + 1, Duration::from_secs(30)),
        "{}",
        llama.log()
    );
    assert!(
        llama.wait_slots_idle(Duration::from_secs(30)),
        "slot still busy 30 s after the hang-up"
    );
    let idle_after = hung_up.elapsed();
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_cancellations_total", &["phase=\"decode\""]) >= 1.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_cancellations_total", &["phase=\"decode\""]),
        1.0
    );
    assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), 0.0);
    eprintln!("slot idle {idle_after:?} after the hang-up");
}

#[test]
fn hangup_during_prefill_frees_the_slot_without_generating() {
    let llama = LlamaServer::start("slow", &["-np", "1"]);
    let proxy = Llamatap::start(&llama.base_url, &[]);
    let prompt = llama.prompt_of_tokens(1600);
    let cancels = llama.log_count("cancel task");
    let r = http::post(
        &proxy.addr(),
        "/v1/chat/completions",
        &chat_body(&prompt, true, 200),
    )
    .unwrap();
    assert_eq!(r.head.status, 200, "headers come before the prefill");
    assert!(
        common::wait_until(Duration::from_secs(30), || !llama.slots_idle()),
        "the slot should be prefilling"
    );
    drop(r);
    // The proxy closed its upstream socket at once (scripted tests time that);
    // this llama-server build notices when the prefill ends, then cancels
    // without generating the answer.
    assert!(
        llama.wait_log_count("cancel task", cancels + 1, Duration::from_secs(60)),
        "{}",
        llama.log()
    );
    let t = Instant::now();
    let idle = llama.wait_slots_idle(Duration::from_secs(30));
    eprintln!("idle={idle} after {:?}", t.elapsed());
    assert!(idle, "{}", llama.log());
    let slots = llama.slots();
    let decoded = slots[0]["next_token"][0]["n_decoded"].as_u64().unwrap_or(0);
    assert!(
        decoded <= 1,
        "generated {decoded} tokens for a client that was gone"
    );
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_cancellations_total", &["phase=\"prefill\""]) >= 1.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_cancellations_total", &["phase=\"prefill\""]),
        1.0,
        "{m}"
    );
}

#[test]
fn back_to_back_streams_never_hit_a_closed_pooled_connection() {
    // llama-server closes its connection after each streamed answer without
    // saying so; a request that took that connection from the pool would
    // fail with 502 (it may have reached llama-server, so it is not sent
    // again). Streaming routes ask for the close, so no connection that
    // carried a stream is pooled.
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let proxy = Llamatap::start(&llama.base_url, &[]);
    for i in 0..200 {
        let body = if i % 3 == 0 {
            chat_body("Hi", false, 4)
        } else {
            chat_body("Hi", true, 4)
        };
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
        assert_eq!(r.head.status, 200, "request {i}");
        r.read_all().unwrap();
    }
    let m = proxy.metrics();
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        0.0
    );
}

/// Prompt and completion tokens as llama-server reports them in a whole JSON
/// answer or in the events of a stream, in any of its formats (prompt tokens
/// include those read from the KV cache): usage, the native final result,
/// else timings.
fn reported_tokens(values: &[serde_json::Value]) -> (Option<u64>, Option<u64>) {
    let n = |v: &serde_json::Value| v.as_u64();
    let (mut prompt, mut completion) = (None, None);
    for v in values {
        // Native: the final result (`stop: true`) counts the tokens.
        if v["stop"] == true {
            prompt = n(&v["tokens_evaluated"]).or(prompt);
            completion = n(&v["tokens_predicted"]).or(completion);
        }
        let usage = [&v["usage"], &v["message"]["usage"], &v["response"]["usage"]]
            .into_iter()
            .find(|u| u.is_object());
        let Some(u) = usage else {
            // A chat stream without `stream_options.include_usage`: timings.
            let t = &v["timings"];
            if let (Some(p), Some(c)) = (n(&t["prompt_n"]), n(&t["predicted_n"])) {
                prompt = Some(p + n(&t["cache_n"]).unwrap_or(0));
                completion = Some(c);
            }
            continue;
        };
        // OpenAI chat and completions; Responses; Anthropic (input excludes cache reads).
        let input = n(&u["prompt_tokens"])
            .or(n(&u["input_tokens"]).map(|i| i + n(&u["cache_read_input_tokens"]).unwrap_or(0)));
        prompt = input.or(prompt);
        completion = n(&u["completion_tokens"])
            .or(n(&u["output_tokens"]))
            .or(completion);
    }
    (prompt, completion)
}

fn stream_values(body: &[u8]) -> Vec<serde_json::Value> {
    http::sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// Each streamed format through llamatap: the prompt and completion tokens
/// it records (metrics and span) equal llama-server's own counts, and the
/// answer is `ok` (its terminal event was recognised).
#[test]
fn streamed_token_counts_equal_llama_servers_in_every_format() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let (otlp_url, spans) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let (d, p) = (llama.addr(), proxy.addr());
    let prompt = "Tell me a story about a cat.";
    let messages = serde_json::json!([{"role": "user", "content": prompt}]);
    let common = serde_json::json!({"temperature": 0.0, "seed": 42});
    let with = |extra: serde_json::Value| {
        let mut body = common.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // What llama-server says the chat prompt costs: the messages route must agree.
    let (_, chat) = json_post(
        &d,
        "/v1/chat/completions",
        &with(serde_json::json!({"messages": messages, "max_tokens": 8})).to_string(),
    );
    let chat_prompt = reported_tokens(&[chat]).0.unwrap();
    let cases = [
        (
            "/v1/messages",
            "messages",
            with(serde_json::json!({"messages": messages, "max_tokens": 12})),
        ),
        (
            "/v1/responses",
            "responses",
            with(serde_json::json!({"input": messages, "max_output_tokens": 12})),
        ),
        (
            "/v1/completions",
            "completions",
            with(serde_json::json!({"prompt": prompt, "max_tokens": 12})),
        ),
        (
            "/completion",
            "completion",
            with(serde_json::json!({"prompt": prompt, "n_predict": 12})),
        ),
        (
            "/v1/chat/completions",
            "chat_completions",
            with(serde_json::json!({"messages": messages, "max_tokens": 12})),
        ),
    ];
    let mut spans_expected = 0;
    for (path, route, body) in cases {
        // Non-streamed, straight to llama-server.
        let mut whole = body.clone();
        whole["stream"] = false.into();
        let (status, answer) = json_post(&d, path, &whole.to_string());
        assert_eq!(status, 200, "{path}: {answer}");
        let (want_prompt, _) = reported_tokens(&[answer]);
        let want_prompt = want_prompt.unwrap_or_else(|| panic!("{path}: no prompt tokens"));
        if route == "messages" {
            assert_eq!(want_prompt, chat_prompt, "the same messages as chat");
        }

        // Streamed, through llamatap.
        let before = proxy.metrics();
        let tokens = |m: &str, kind: &str| {
            metric_sum(m, "llamatap_tokens_total", &[&format!("kind=\"{kind}\"")])
        };
        let mut streamed = body.clone();
        streamed["stream"] = true.into();
        let mut r = http::post(&p, path, &streamed.to_string()).unwrap();
        assert_eq!(r.head.status, 200, "{path}");
        let out = r.read_all().unwrap();
        let (stream_prompt, stream_completion) = reported_tokens(&stream_values(&out));
        assert_eq!(
            stream_prompt,
            Some(want_prompt),
            "{path}: llama-server's own stream"
        );
        let want_completion = stream_completion.unwrap();
        assert!(want_completion > 0, "{path}");

        let needle = format!("route=\"{route}\"");
        // Completion tokens are counted last of the three kinds.
        let after = proxy.wait_metrics(Duration::from_secs(5), |m| {
            tokens(m, "completion") > tokens(&before, "completion")
        });
        assert_eq!(
            metric_sum(
                &after,
                "llamatap_requests_total",
                &[&needle, "outcome=\"ok\""]
            ),
            1.0,
            "{path}\n{after}"
        );
        assert_eq!(
            tokens(&after, "prompt") - tokens(&before, "prompt"),
            want_prompt as f64,
            "{path}: llamatap_tokens_total{{kind=\"prompt\"}}"
        );
        assert_eq!(
            tokens(&after, "completion") - tokens(&before, "completion"),
            want_completion as f64,
            "{path}: llamatap_tokens_total{{kind=\"completion\"}}"
        );
        spans_expected += 2;
        let got = spans.wait(spans_expected, Duration::from_secs(10));
        let server = got
            .iter()
            .find(|s| s.kind == 2 && otlp::attr_str(s, "llamatap.route").as_deref() == Some(route))
            .unwrap_or_else(|| panic!("{path}: no server span"));
        assert_eq!(
            attr_int(server, "gen_ai.usage.input_tokens"),
            Some(want_prompt as i64),
            "{path}"
        );
        assert_eq!(
            attr_int(server, "gen_ai.usage.output_tokens"),
            Some(want_completion as i64),
            "{path}"
        );
    }
}
