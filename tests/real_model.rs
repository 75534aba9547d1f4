//! llamatap in front of a real instruct model (SmolLM2-135M-Instruct, Q4_1,
//! `LLAMATAP_REAL_MODEL`) behind the real llama-server, with the model's own
//! chat template: what the random-weight models cannot show.
//!
//! - `real_answers_get_their_first_sentence_end_to_end`: greedy answers to
//!   voice prompts; each has a `first_sentence` span event whose text and
//!   length are the answer's first sentence by the rule, ending at a real
//!   boundary of the streamed text; the histogram counts them; the latency
//!   page has them after TTFT. It prints how much earlier dating a sentence
//!   to its period made it, from the client's own clock.
//! - `cache_break_causes_with_the_models_own_template`: a conversation is
//!   `new_conversation`, then `reused` when a turn is appended; an edited
//!   assistant message is `history_edited` at its index and offset; a
//!   changed system prompt is `system_changed` at message 0.
//! - `prefix_affinity_keeps_a_conversation_on_the_upstream_that_holds_it`:
//!   two llama-servers; every second turn goes where its first went, as a
//!   `prefix_hit`, and llama-server reports its prefix reused (`cache_n`),
//!   which llamatap reports too.
//!
//! Short answers (at most 48 tokens), one slot per server, one thread each:
//! the file runs in 20 to 40 s on 2 cores. Needs llama-server and the
//! model (`scripts/ensure-deps.sh`); fails loudly without them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use llamatap_wire::sentence::{SentenceClock, SentenceRule};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use serde_json::{json, Value};

use common::fleet::{self, chat_stream, upstream_up};
use common::http;
use common::llama::LlamaServer;
use common::otlp;
use common::proxy::{metric_sum, Llamatap};
use common::{temp_config, wait_until};

const ONE_SLOT: [&str; 2] = ["-np", "1"];
/// Two slots; a prompt takes a busy slot's cache only when half of it is
/// that slot's prompt (the default, a tenth, lets the chat template's
/// opening tokens alone pick the slot of another conversation).
const TWO_SLOTS: [&str; 4] = ["-np", "2", "--slot-prompt-similarity", "0.5"];

fn chat(messages: &Value, max_tokens: u32) -> String {
    json!({"messages": messages, "stream": true, "max_tokens": max_tokens, "temperature": 0.0})
        .to_string()
}

/// Content capture on: the sentence's text on its span event, exact
/// cache-break offsets.
const CAPTURE: &str = "[telemetry]\ncapture_content = true\n";

// === the first sentence ===

/// Voice prompts whose greedy answers open with a sentence.
const VOICE: &str = "You are a voice assistant. Answer briefly, in plain sentences.";
const PROMPTS: [&str; 6] = [
    "Explain photosynthesis in simple terms.",
    "Why is the sky blue?",
    "What is Python used for?",
    "Who painted the Mona Lisa?",
    "Is it going to rain tomorrow?",
    "Spell the word necessary.",
];

/// One streamed answer as the client saw it: each content delta with the
/// arrival of the read that carried it.
struct Streamed {
    trace_id: String,
    deltas: Vec<(Instant, String)>,
    /// The last read (the final event and `[DONE]`).
    end: Instant,
}

fn stream(addr: &str, body: &str) -> Streamed {
    let mut r = http::post(addr, "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 200);
    let trace_id = r
        .head
        .header("traceresponse")
        .unwrap()
        .split('-')
        .nth(1)
        .unwrap()
        .to_string();
    let mut deltas = Vec::new();
    let pieces = r.pieces_timed().unwrap();
    let end = pieces.last().map(|(at, _)| *at).unwrap();
    for (at, piece) in pieces {
        for content in http::sse_data(&piece)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
        {
            deltas.push((at, content));
        }
    }
    Streamed {
        trace_id,
        deltas,
        end,
    }
}

/// The SERVER span of trace `id`, once exported.
fn server_span(received: &otlp::Received, id: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
    let mut found = None;
    let ok = wait_until(Duration::from_secs(30), || {
        found = received
            .wait(0, Duration::ZERO)
            .into_iter()
            .find(|s| s.kind == 2 && otlp::hex(&s.trace_id) == id);
        found.is_some()
    });
    assert!(ok, "no SERVER span for trace {id}");
    found.unwrap()
}

fn event_attr(
    event: &opentelemetry_proto::tonic::trace::v1::span::Event,
    key: &str,
) -> Option<AnyValue> {
    event
        .attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.clone()?.value)
}

#[test]
fn real_answers_get_their_first_sentence_end_to_end() {
    let llama = LlamaServer::start("real", &ONE_SLOT);
    let config = temp_config("real-sentence", CAPTURE);
    let (endpoint, received) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http",
        ],
    );
    let mut saved = Vec::new();
    for prompt in PROMPTS {
        let messages =
            json!([{"role": "system", "content": VOICE}, {"role": "user", "content": prompt}]);
        let answer = stream(&proxy.addr(), &chat(&messages, 48));
        let content: String = answer.deltas.iter().map(|(_, d)| d.as_str()).collect();
        // The rule's first sentence of the whole answer, fed at once.
        let mut rule = SentenceRule::new();
        let want = rule
            .push(&content)
            .or_else(|| rule.finish())
            .expect("a sentence");
        let start = content.len() - content.trim_start().len();
        assert!(
            content[start..].starts_with(&want.text),
            "{prompt}: {want:?} in {content:?}"
        );
        let rest = &content[start + want.text.len()..];
        assert!(
            rest.is_empty() || rest.starts_with(char::is_whitespace),
            "{prompt}: {want:?} ends inside the text: {content:?}"
        );

        let span = server_span(&received, &answer.trace_id);
        let event = span
            .events
            .iter()
            .find(|e| e.name == "first_sentence")
            .unwrap_or_else(|| panic!("{prompt}: no first_sentence event"));
        assert_eq!(
            event_attr(event, "sentence.text"),
            Some(AnyValue::StringValue(want.text.clone()))
        );
        assert_eq!(
            event_attr(event, "sentence.chars"),
            Some(AnyValue::IntValue(want.chars as i64))
        );
        let first_token = span
            .events
            .iter()
            .find(|e| e.name == "first_token")
            .unwrap();
        assert!(
            event.time_unix_nano >= first_token.time_unix_nano,
            "{prompt}"
        );

        // The event that carried the sentence's period against the one that
        // let the rule see the end (the end of the stream for an answer that
        // is one sentence), and how far apart they arrived at the client.
        let n = answer.deltas.len();
        let mut clock = SentenceClock::new();
        let dated = (0..n).find_map(|i| clock.push(&answer.deltas[i].1, i));
        let dated = dated.or_else(|| clock.finish(n)).unwrap().1;
        let mut rule = SentenceRule::new();
        let seen = (0..n).find(|&i| rule.push(&answer.deltas[i].1).is_some());
        let seen = seen.unwrap_or(n);
        let at = |i: usize| answer.deltas.get(i).map_or(answer.end, |(at, _)| *at);
        if dated < seen {
            saved.push(at(seen).duration_since(at(dated)));
        }
        eprintln!(
            "{prompt}: {:?}, dated to event {dated} of {n}, seen at {seen}",
            want.text
        );
    }
    saved.sort();
    eprintln!(
        "{} answers; {} dated to their period, earlier by {:?} median (client's clock)",
        PROMPTS.len(),
        saved.len(),
        saved.get(saved.len() / 2)
    );
    assert!(saved.len() * 2 > PROMPTS.len(), "{saved:?}");
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"first_sentence\""],
        ) >= 6.0
    });
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_stage_duration_seconds_count",
            &["stage=\"first_sentence\""]
        ),
        PROMPTS.len() as f64,
        "{m}"
    );
    for entry in fleet::latency_entries(&proxy.admin()) {
        let (ttft, sentence) = (
            entry["ttft_ms"].as_f64(),
            entry["first_sentence_ms"].as_f64(),
        );
        assert!(sentence.unwrap() >= ttft.unwrap(), "{entry}");
    }
}

// === cache-break causes ===

/// The access-log line of trace `id`, once written.
fn access_line(path: &Path, id: &str) -> Value {
    let mut found = None;
    let ok = wait_until(Duration::from_secs(30), || {
        found = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["trace_id"] == id);
        found.is_some()
    });
    assert!(ok, "no access-log line for {id} in {}", path.display());
    found.unwrap()
}

fn log_path(name: &str, port: u16) -> PathBuf {
    let path = std::env::temp_dir().join(format!("llamatap-real-{name}-{port}.jsonl"));
    let _ = std::fs::remove_file(&path);
    path
}

/// Sends `messages`; returns the answer and its access-log line.
fn turn(proxy: &Llamatap, log: &Path, messages: &Value) -> (String, Value) {
    let ex = chat_stream(&proxy.addr(), &chat(messages, 16));
    assert!(ex.clean_end, "{}", ex.body);
    (ex.content.clone(), access_line(log, &ex.trace_id))
}

fn expect_cause(what: &str, line: &Value, cause: &str, at: Option<(u64, &str, u64)>) {
    let b = &line["cache_break"];
    eprintln!(
        "{what}: {} (prompt {}, cached {})",
        b["cause"], line["prompt_tokens"], line["cached_tokens"]
    );
    assert_eq!(b["cause"], cause, "{what}: {line}");
    if let Some((index, field, offset)) = at {
        assert_eq!(
            (&b["message_index"], &b["field"], &b["offset"]),
            (&json!(index), &json!(field), &json!(offset)),
            "{what}: {line}"
        );
    }
}

#[test]
fn cache_break_causes_with_the_models_own_template() {
    let llama = LlamaServer::start("real", &ONE_SLOT);
    let log = log_path("cachebreak", llama.port);
    // Tracing on: access-log lines carry the clients' trace ids; content
    // capture on: exact offsets.
    let (endpoint, _spans) = otlp::http_receiver();
    let config = temp_config("real-cachebreak", CAPTURE);
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http",
        ],
    );
    let system = "You are a helpful assistant who answers in one short sentence.";
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Name a fruit."}),
    ];
    let (answer, line) = turn(&proxy, &log, &json!(messages));
    expect_cause("turn 1", &line, "new_conversation", None);

    messages.push(json!({"role": "assistant", "content": answer}));
    messages.push(json!({"role": "user", "content": "Name a vegetable."}));
    let (answer2, line) = turn(&proxy, &log, &json!(messages));
    expect_cause("turn 2", &line, "reused", None);
    assert!(line["cached_tokens"].as_u64().unwrap() > 20, "{line}");

    // The client rewrites the first answer.
    let old = answer.clone();
    let new = format!("{}[edited]", old.chars().take(3).collect::<String>());
    let offset = old
        .chars()
        .zip(new.chars())
        .take_while(|(a, b)| a == b)
        .count() as u64;
    messages[2] = json!({"role": "assistant", "content": new});
    messages.push(json!({"role": "assistant", "content": answer2}));
    messages.push(json!({"role": "user", "content": "And a grain?"}));
    let (_, line) = turn(&proxy, &log, &json!(messages));
    expect_cause(
        "edited answer",
        &line,
        "history_edited",
        Some((2, "content", offset)),
    );

    // A changed system prompt.
    messages[0] = json!({"role": "system", "content": format!("{system} Today is Monday.")});
    let (_, line) = turn(&proxy, &log, &json!(messages));
    let offset = system.chars().count() as u64;
    expect_cause(
        "system prompt",
        &line,
        "system_changed",
        Some((0, "system", offset)),
    );
    let _ = std::fs::remove_file(&log);
}

// === prefix affinity ===

#[test]
fn prefix_affinity_keeps_a_conversation_on_the_upstream_that_holds_it() {
    let _serial = fleet::serial();
    let servers = [
        LlamaServer::start("real", &TWO_SLOTS),
        LlamaServer::start("real", &TWO_SLOTS),
    ];
    let (otlp_url, _spans) = otlp::http_receiver();
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let proxy = Llamatap::start_fleet(
        &urls,
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    assert!(
        fleet::wait_for(Duration::from_secs(15), || {
            let m = proxy.metrics();
            servers.iter().all(|s| upstream_up(&m, s) == Some(1.0))
        })
        .is_some(),
        "both upstreams up"
    );
    // Two conversations at a time, so that each upstream's two slots can
    // hold all it was given.
    let systems = [
        "Weather expert here: keep every answer short.",
        "Pasta chef speaking, answers are short.",
        "Roman historian; short answers only.",
        "French teacher, brief answers.",
    ];
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for pair in systems.chunks(2) {
        let opening: Vec<Value> = pair
            .iter()
            .map(|system| json!([{"role": "system", "content": system}, {"role": "user", "content": "Tell me one fact."}]))
            .collect();
        let ones: Vec<_> = opening
            .iter()
            .map(|m| chat_stream(&proxy.addr(), &chat(m, 24)))
            .collect();
        for (messages, one) in opening.iter().zip(ones) {
            assert!(one.clean_end, "{}", one.body);
            let mut messages = messages.as_array().unwrap().clone();
            messages.push(json!({"role": "assistant", "content": one.content}));
            messages.push(json!({"role": "user", "content": "And another one?"}));
            let two = chat_stream(&proxy.addr(), &chat(&json!(messages), 24));
            assert!(two.clean_end, "{}", two.body);
            first.push(one);
            second.push(two);
        }
    }
    let ids: Vec<&str> = first
        .iter()
        .chain(&second)
        .map(|ex| ex.trace_id.as_str())
        .collect();
    let entries = fleet::latency_by_trace(&proxy.admin(), &ids, Duration::from_secs(30));
    for ((topic, one), two) in systems.iter().zip(&first).zip(&second) {
        let (a, b) = (&entries[&one.trace_id], &entries[&two.trace_id]);
        eprintln!(
            "{topic}: turn 1 {} ({}), turn 2 {} ({}), cached {} of turn 1's {} prompt tokens",
            a["upstream"],
            a["route_reason"],
            b["upstream"],
            b["route_reason"],
            b["cached_tokens"],
            one.timings().0 + one.timings().1
        );
        assert_eq!(a["route_reason"], "cold", "{a}");
        assert_eq!(b["route_reason"], "prefix_hit", "{b}");
        assert_eq!(
            a["upstream"], b["upstream"],
            "{topic}: the second turn left its upstream"
        );
        let (cache_n, _) = two.timings();
        assert_eq!(
            b["cached_tokens"].as_u64(),
            Some(cache_n),
            "llamatap reports llama-server's reuse: {b}"
        );
        let (c1, p1) = one.timings();
        assert!(
            cache_n >= (c1 + p1) * 3 / 4,
            "{topic}: turn 1's prompt reused: cache_n {cache_n} of {}",
            c1 + p1
        );
    }
}
