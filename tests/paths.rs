//! A request path is the handler llama-server runs, however it is spelled:
//! llama-server percent-decodes the path before it routes, so llamatap
//! does too. A percent-encoded chat is queued, charged to its tenant's
//! token limit and measured as a chat; a rerank request waits in the queue
//! like generation. Proven against a real llama-server.
//!
//! The slot is held by construction: an answer of the slow model that
//! cannot end within the test (1,000 tokens at its decode speed take tens
//! of seconds), which the test hangs up when it is done.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::http;
use common::llama::LlamaServer;
use common::proxy::{metric_series, Llamatap};
use common::{temp_config, wait_until};

const ALICE: &str = "alice-secret-key-7f3a9c";
const ALICE_H: &[(&str, &str)] = &[("Authorization", "Bearer alice-secret-key-7f3a9c")];

fn chat(content: &str, stream: bool, max_tokens: u32) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "stream_options": {"include_usage": true},
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "temperature": 0.0,
    })
    .to_string()
}

/// POSTs `body` to `path` with alice's key; the head and the whole body.
fn post(addr: &str, path: &str, body: &str) -> (http::Head, Vec<u8>) {
    let mut r = http::send(addr, "POST", path, ALICE_H, body.as_bytes()).unwrap();
    let b = r.read_all().unwrap();
    (r.head, b)
}

fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default()
}

#[test]
fn a_percent_encoded_chat_is_charged_and_measured_as_a_chat() {
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "paths-charge",
        &format!(
            "[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\ntokens_per_minute = 1000000\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    // Without a key, no spelling of a chat gets through: a target that is
    // not origin-form (the URI roots it at `/`, the public web UI) is
    // routed by llama-server after decoding, so llamatap reads it so too.
    for path in ["/v1/chat/%63ompletions", "%2Fv1%2Fchat%2Fcompletions"] {
        let mut r =
            http::send(&p, "POST", path, &[], chat("No key.", false, 2).as_bytes()).unwrap();
        let b = r.read_all().unwrap();
        assert_eq!(
            r.head.status,
            401,
            "{path}: {}",
            String::from_utf8_lossy(&b)
        );
    }
    // The three charges and the reading after them share one window of
    // the tenant's limit.
    common::wait_for_minute_with(30_000);
    let mut charged = 0;
    for (path, stream) in [
        ("/v1/chat/%63ompletions", false),
        ("/v1/chat/completion%73", true),
        ("/v1/c%u0068at/completions?x=1", false),
    ] {
        let (head, body) = post(&p, path, &chat("Say something.", stream, 6));
        let text = String::from_utf8_lossy(&body);
        assert_eq!(head.status, 200, "{path}: {text}");
        let usage = if stream {
            http::sse_data(&body)
                .iter()
                .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .rfind(|v| v["usage"].is_object())
                .map(|v| v["usage"].clone())
                .unwrap()
        } else {
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()["usage"].clone()
        };
        let tokens = usage["total_tokens"].as_u64().unwrap();
        assert!(tokens > 6, "{path}: {usage}");
        charged += tokens;
    }
    // The window saw every token: the next answer's remaining count is the
    // limit less what the three answers used.
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        metric_series(
            m,
            "llamatap_requests_total",
            &["route=\"chat_completions\"", "outcome=\"ok\""],
        )
        .unwrap_or(0.0)
            >= 3.0
    });
    let (head, body) = post(&p, "/v1/chat/completions", &chat("Again.", false, 1));
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    let remaining: u64 = head
        .header("x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    eprintln!("three encoded chats used {charged} tokens; remaining {remaining} of 1000000");
    assert_eq!(remaining, 1_000_000 - charged);
    // Recorded as chats of the model, never as route `other`.
    assert_eq!(
        metric_series(&m, "llamatap_requests_total", &["route=\"other\""]).unwrap_or(0.0),
        0.0,
        "{m}"
    );
    let t = "tenant=\"alice\"";
    let completion = metric_series(
        &m,
        "llamatap_tenant_tokens_total",
        &[t, "kind=\"completion\""],
    );
    assert_eq!(completion, Some(18.0), "{m}");
}

#[test]
fn a_percent_encoded_chat_and_a_rerank_wait_in_the_queue_like_a_plain_chat() {
    let llama = LlamaServer::start("slow", &["-np", "2"]);
    let config = temp_config(
        "paths-queue",
        &format!(
            "[queue]\nenabled = true\nmax_inflight = 1\n\
             [queue.classes.default]\nmax_wait_ms = 300\n\
             [[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    // The one slot: an answer that cannot end while the test runs.
    let long = chat("Tell a long story.", true, 1000);
    let mut held =
        http::send(&p, "POST", "/v1/chat/completions", ALICE_H, long.as_bytes()).unwrap();
    assert_eq!(held.head.status, 200);
    // Its prompt is counted once its first token streams.
    while let Some(piece) = held.next_piece().unwrap() {
        if String::from_utf8_lossy(&piece).contains("\"content\":\"") {
            break;
        }
    }
    assert!(
        wait_until(Duration::from_secs(60), || {
            llama.metric("llamacpp:requests_processing") >= 1.0
        }),
        "the long answer never started"
    );
    let prompts_before = llama.metric("llamacpp:prompt_tokens_total");
    let rerank = serde_json::json!({"query": "q", "documents": ["a", "b"]}).to_string();
    for (path, body) in [
        ("/v1/chat/completions", chat("Plain.", false, 4)),
        ("/v1/chat/%63ompletions", chat("Encoded.", false, 4)),
        ("%2Fv1%2Fchat%2Fcompletions", chat("Slashes.", false, 4)),
        ("/v1/%72erank", rerank.clone()),
        ("/rerank", rerank.clone()),
    ] {
        let (head, b) = post(&p, path, &body);
        let text = String::from_utf8_lossy(&b);
        assert_eq!(head.status, 503, "{path} did not wait: {text}");
        assert_eq!(error_code(&b), "queue_timeout", "{path}: {text}");
        assert!(head.header("retry-after").is_some(), "{path}");
    }
    assert_eq!(
        llama.metric("llamacpp:prompt_tokens_total"),
        prompts_before,
        "a refused request reached llama-server"
    );
    // Still the only one generating; the head of the held stream has come.
    assert_eq!(llama.metric("llamacpp:requests_processing"), 1.0);
    assert!(held.next_piece().unwrap().is_some());
    drop(held);
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        metric_series(
            m,
            "llamatap_queue_refused_total",
            &["reason=\"queue_timeout\""],
        ) == Some(5.0)
    });
    for route in ["chat_completions", "reranking"] {
        let refused = metric_series(
            &m,
            "llamatap_requests_total",
            &[&format!("route=\"{route}\""), "outcome=\"rejected\""],
        );
        let want = if route == "reranking" { 2.0 } else { 3.0 };
        assert_eq!(refused, Some(want), "{route}\n{m}");
    }
}
