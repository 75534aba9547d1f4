#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Stream continuation against real llama-servers: an answer whose
//! llama-server is killed (SIGKILL) or stopped (SIGSTOP) mid-answer, or
//! whose member drains (its address leaves the DNS answer), goes on from
//! the other one, and the client sees one unbroken stream; a request that
//! cannot be continued in meaning (tools) still ends with the error event.
//!
//! Two llama-servers with the slow model (about 10 tokens/s with one
//! thread), greedy sampling and `ignore_eos`, so that an answer of 160
//! tokens runs for seconds and is cut after about 40.

mod common;

use std::time::{Duration, Instant};

use common::dns::DnsServer;
use common::fleet::{self, serial, start_servers, upstream_name, upstream_up, FLEET_ARGS};
use common::http;
use common::llama::LlamaServer;
use common::otlp;
use common::proxy::{metric_series, Llamatap};
use opentelemetry_proto::tonic::trace::v1 as otlp_span;
use serde_json::{json, Value};

const ANSWER_TOKENS: usize = 160;
const CUT_AFTER: usize = 40;

/// llamatap in front of `servers` with tracing on and `config`.
fn proxy(servers: &[LlamaServer], config: &str) -> (Llamatap, otlp::Received) {
    let path = std::env::temp_dir().join(format!(
        "llamatap-continuation-{}-{}.toml",
        std::process::id(),
        servers[0].port
    ));
    std::fs::write(&path, config).unwrap();
    let (otlp_url, spans) = otlp::http_receiver();
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let p = Llamatap::start_fleet(
        &urls,
        &[
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
            "--config",
            path.to_str().unwrap(),
        ],
    );
    let mut m = String::new();
    let up = fleet::wait_for(Duration::from_secs(20), || {
        m = p.metrics();
        servers.iter().all(|s| upstream_up(&m, s) == Some(1.0))
    });
    assert!(up.is_some(), "upstreams never up:\n{m}\n{}", p.stderr());
    (p, spans)
}

/// The scrape once `llamatap_continuations_total{reason,result}` counts
/// one (the client sees the end of the answer before llamatap records the
/// request), or the last scrape after 10 s.
fn after_count(p: &Llamatap, reason: &str, result: &str) -> String {
    let labels = [
        format!("reason=\"{reason}\""),
        format!("result=\"{result}\""),
    ];
    p.wait_metrics(Duration::from_secs(10), |m| {
        let l: Vec<&str> = labels.iter().map(String::as_str).collect();
        metric_series(m, "llamatap_continuations_total", &l).is_some_and(|v| v >= 1.0)
    })
}

/// `llamatap_continuations_total{reason,result}` counts exactly one.
fn assert_counted_once(p: &Llamatap, reason: &str, result: &str) {
    let m = after_count(p, reason, result);
    let labels = [
        format!("reason=\"{reason}\""),
        format!("result=\"{result}\""),
    ];
    let l: Vec<&str> = labels.iter().map(String::as_str).collect();
    assert_eq!(
        metric_series(&m, "llamatap_continuations_total", &l),
        Some(1.0),
        "{}",
        m.lines()
            .filter(|l| l.contains("continuations"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `llamatap_continuations_total{reason="upstream_died",result="continued"}`
/// reaches `n` (waited for: counts are written after the last byte).
fn assert_continued_after_deaths(p: &Llamatap, n: f64) {
    let labels = ["reason=\"upstream_died\"", "result=\"continued\""];
    let m = p.wait_metrics(Duration::from_secs(10), |m| {
        metric_series(m, "llamatap_continuations_total", &labels) == Some(n)
    });
    assert_eq!(
        metric_series(&m, "llamatap_continuations_total", &labels),
        Some(n)
    );
}

/// One streamed chat answer as the client saw it.
#[derive(Debug, Default)]
struct Seen {
    status: u16,
    /// `delta.content` of each content event, with its arrival.
    contents: Vec<(Instant, String)>,
    ids: Vec<String>,
    finish_reasons: Vec<String>,
    usage: Option<Value>,
    error_events: Vec<String>,
    /// Content events that carried `logprobs`.
    with_logprobs: usize,
    done: bool,
    /// `[DONE]` was the last event.
    done_last: bool,
    clean_end: bool,
    raw: String,
}

impl Seen {
    fn text(&self) -> String {
        self.contents.iter().map(|(_, t)| t.as_str()).collect()
    }

    fn max_gap(&self) -> Duration {
        self.contents
            .windows(2)
            .map(|w| w[1].0 - w[0].0)
            .max()
            .unwrap_or_default()
    }
}

fn body(extra: Value) -> String {
    let mut b = json!({
        "messages": [
            {"role": "system", "content": "You are a storyteller."},
            {"role": "user", "content": "Tell me a long story about a lighthouse."},
        ],
        "stream": true,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "ignore_eos": true,
        "stream_options": {"include_usage": true},
    });
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    b.to_string()
}

/// Streams `body` through `addr`; after `cut_after` content events calls
/// `at_cut` once (which cuts the serving llama-server).
fn stream(addr: &str, body: &str, cut_after: usize, at_cut: impl FnMut()) -> Seen {
    stream_at(addr, "/v1/chat/completions", body, cut_after, at_cut)
}

/// As [`stream`], to `path`: chat chunks (`delta.content`), text-completion
/// chunks (`text`) or native events (`content`; `stop_type` as the finish
/// reason, `tokens_predicted` as the usage).
fn stream_at(
    addr: &str,
    path: &str,
    body: &str,
    cut_after: usize,
    mut at_cut: impl FnMut(),
) -> Seen {
    let mut reader = http::send(addr, "POST", path, &[], body.as_bytes()).unwrap();
    let mut seen = Seen {
        status: reader.head.status,
        ..Seen::default()
    };
    let mut pending = String::new();
    let mut cut = false;
    while let Some(piece) = reader.next_piece().unwrap() {
        let now = Instant::now();
        let text = String::from_utf8_lossy(&piece).into_owned();
        seen.raw.push_str(&text);
        pending.push_str(&text);
        while let Some(pos) = pending.find("\n\n") {
            let event: String = pending.drain(..pos + 2).collect();
            for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                seen.done_last = false;
                if data == "[DONE]" {
                    seen.done = true;
                    seen.done_last = true;
                    continue;
                }
                let v: Value = serde_json::from_str(data)
                    .unwrap_or_else(|e| panic!("an event is not JSON ({e}): {data}"));
                if v.get("error").is_some() {
                    seen.error_events.push(data.to_string());
                    continue;
                }
                if let Some(id) = v["id"].as_str() {
                    if !seen.ids.iter().any(|i| i == id) {
                        seen.ids.push(id.to_string());
                    }
                }
                let choice = &v["choices"][0];
                let content = choice["delta"]["content"]
                    .as_str()
                    .or(choice["text"].as_str())
                    .or(v["content"].as_str());
                if let Some(c) = content {
                    if !c.is_empty() {
                        seen.contents.push((now, c.to_string()));
                        if choice["logprobs"]["content"]
                            .as_array()
                            .is_some_and(|a| !a.is_empty())
                        {
                            seen.with_logprobs += 1;
                        }
                    }
                }
                if let Some(r) = choice["finish_reason"].as_str() {
                    seen.finish_reasons.push(r.to_string());
                }
                if v.get("usage").is_some_and(|u| !u.is_null()) {
                    seen.usage = Some(v["usage"].clone());
                }
                if v["stop"] == true {
                    // A native stream's last event.
                    let r = match v["stop_type"].as_str() {
                        Some("limit") => "length",
                        _ => "stop",
                    };
                    seen.finish_reasons.push(r.to_string());
                    seen.usage = Some(json!({
                        "completion_tokens": v["tokens_predicted"],
                        "prompt_tokens": v["tokens_evaluated"],
                    }));
                    seen.done = true;
                    seen.done_last = true;
                }
            }
        }
        if !cut && seen.contents.len() >= cut_after {
            cut = true;
            at_cut();
        }
    }
    seen.clean_end = reader.clean_end;
    seen
}

/// The server of `servers` generating now.
fn busy(servers: &[LlamaServer]) -> usize {
    let all: Vec<usize> = (0..servers.len()).collect();
    busy_among(servers, &all)
}

/// The server of `servers` generating now, among those of `live`.
fn busy_among(servers: &[LlamaServer], live: &[usize]) -> usize {
    let mut which = None;
    let found = fleet::wait_for(Duration::from_secs(5), || {
        which = live.iter().copied().find(|i| {
            servers[*i]
                .slots()
                .as_array()
                .into_iter()
                .flatten()
                .any(|slot| slot["is_processing"] == true)
        });
        which.is_some()
    });
    assert!(found.is_some(), "no llama-server is generating");
    which.unwrap()
}

/// Asserts `seen` is one whole answer of `ANSWER_TOKENS` tokens, with
/// `ids` completion ids (1; a native stream has none).
fn assert_whole(seen: &Seen, label: &str, ids: usize) {
    assert_eq!(seen.status, 200, "{label}: {}", seen.raw);
    assert!(
        seen.error_events.is_empty(),
        "{label}: error event: {:?}",
        seen.error_events
    );
    assert!(
        seen.done && seen.done_last && seen.clean_end,
        "{label}: no proper end: {}",
        fleet::tail_chars(&seen.raw, 600)
    );
    assert_eq!(
        seen.ids.len(),
        ids,
        "{label}: completion ids {:?}",
        seen.ids
    );
    assert_eq!(
        seen.finish_reasons,
        vec!["length".to_string()],
        "{label}: finish reasons"
    );
    let n = seen.contents.len() as f64;
    assert!(
        (n - ANSWER_TOKENS as f64).abs() <= ANSWER_TOKENS as f64 * 0.03,
        "{label}: {n} content events, not {ANSWER_TOKENS} within 3%"
    );
    let usage = seen
        .usage
        .as_ref()
        .unwrap_or_else(|| panic!("{label}: no usage chunk"));
    let completion = usage["completion_tokens"].as_u64().unwrap_or(0) as f64;
    assert!(
        (completion - ANSWER_TOKENS as f64).abs() <= ANSWER_TOKENS as f64 * 0.03,
        "{label}: usage {usage}"
    );
    assert!(
        usage["prompt_tokens"].as_u64().unwrap_or(0) > 0,
        "{label}: usage {usage}"
    );
}

#[test]
fn a_killed_upstream_mid_answer_is_continued_on_the_other() {
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, spans) = proxy(&servers, "");
    // The uninterrupted answer, for comparison (on whichever serves it).
    let whole = stream(&p.addr(), &body(json!({})), usize::MAX, || {});
    assert_whole(&whole, "uninterrupted", 1);

    let mut victim = None;
    let mut cut_at = None;
    let seen = stream(&p.addr(), &body(json!({})), CUT_AFTER, || {
        let v = busy(&servers);
        servers[v].kill();
        cut_at = Some(Instant::now());
        victim = Some(v);
    });
    let victim = victim.expect("the answer was never cut");
    assert_whole(&seen, "continued", 1);
    let gap = seen.max_gap();
    assert!(gap < Duration::from_secs(5), "gap around the fault {gap:?}");
    let text = seen.text();
    let before: String = seen
        .contents
        .iter()
        .take(CUT_AFTER)
        .map(|(_, t)| t.as_str())
        .collect();
    assert!(text.starts_with(&before));
    eprintln!(
        "cut after {CUT_AFTER} events on {}; longest gap {gap:?}\n  uninterrupted: {:?}\n  continued:     {:?}\n  equal: {}",
        upstream_name(&servers[victim]),
        fleet::tail_chars(&whole.text(), 400),
        fleet::tail_chars(&text, 400),
        whole.text() == text,
    );
    assert_counted_once(&p, "upstream_died", "continued");
    // The span event names the cut.
    let mut all = Vec::new();
    let has_event = |all: &Vec<otlp_span::Span>| {
        all.iter()
            .flat_map(|s| s.events.iter())
            .any(|e| e.name == "llamatap.continued")
    };
    let arrived = fleet::wait_for(Duration::from_secs(15), || {
        all = spans.wait(0, Duration::ZERO);
        has_event(&all)
    });
    assert!(
        arrived.is_some(),
        "no llamatap.continued event in {} spans",
        all.len()
    );
    let event = all
        .iter()
        .flat_map(|s| s.events.iter())
        .find(|e| e.name == "llamatap.continued")
        .unwrap();
    let attr = |k: &str| {
        event
            .attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.as_ref())
            .map(|v| format!("{:?}", v.value))
            .unwrap_or_default()
    };
    assert!(attr("llamatap.continuation.reason").contains("upstream_died"));
    assert!(attr("llamatap.continuation.from").contains(&upstream_name(&servers[victim])));
    assert!(attr("llamatap.continuation.to").contains(&upstream_name(&servers[1 - victim])));
    assert!(!attr("llamatap.continuation.tokens_before").is_empty());
    assert!(cut_at.is_some());
}

#[test]
fn a_stopped_upstream_is_continued_after_stall_ms() {
    let _serial = serial();
    let servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "[continuation]\nstall_ms = 1500\n");
    let mut stopped = None;
    let seen = stream(&p.addr(), &body(json!({})), CUT_AFTER, || {
        let v = busy(&servers);
        let pid = servers[v].pid().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success());
        stopped = Some(v);
    });
    let v = stopped.expect("never stopped");
    let pid = servers[v].pid().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    assert_whole(&seen, "continued after a stall", 1);
    let gap = seen.max_gap();
    assert!(
        gap >= Duration::from_millis(1500) && gap < Duration::from_secs(8),
        "gap {gap:?}"
    );
    assert_counted_once(&p, "stalled", "continued");
    // The stopped server, resumed, serves again.
    assert!(servers[v].json("GET", "/health", None)["status"] == "ok");
}

#[test]
fn a_request_with_tools_still_ends_with_the_error_event() {
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "");
    let tools = json!({"tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
        "tool_choice": "none"});
    let seen = stream(&p.addr(), &body(tools), CUT_AFTER, || {
        let v = busy(&servers);
        servers[v].kill();
    });
    assert_eq!(seen.status, 200);
    assert_eq!(
        seen.error_events.len(),
        1,
        "{}",
        fleet::tail_chars(&seen.raw, 600)
    );
    assert!(!seen.done, "a cut answer must not end with [DONE]");
    assert_counted_once(&p, "upstream_died", "not_continuable");
}

/// Two slow llama-servers on one port at 127.0.0.2 and .3, served under
/// one DNS name.
fn named_servers() -> Vec<LlamaServer> {
    for _ in 0..5 {
        let port = common::free_port();
        let started: Vec<LlamaServer> = std::thread::scope(|s| {
            let hs: Vec<_> = ["127.0.0.2", "127.0.0.3"]
                .iter()
                .map(|h| {
                    s.spawn(move || {
                        std::panic::catch_unwind(|| {
                            LlamaServer::start_at("slow", &FLEET_ARGS, h, port)
                        })
                        .ok()
                    })
                })
                .collect();
            hs.into_iter().filter_map(|h| h.join().unwrap()).collect()
        });
        if started.len() == 2 {
            return started;
        }
    }
    panic!("could not start two llama-servers on one port");
}

#[test]
fn an_answer_on_a_member_that_leaves_the_dns_answer_moves_after_drain_after_ms() {
    let _serial = serial();
    let servers = named_servers();
    let port = servers[0].port;
    let hosts = ["127.0.0.2", "127.0.0.3"];
    let zone = |hosts: &[&str]| json!({"ttl": 0, "names": {"llama.test.": hosts}});
    let dns = DnsServer::start("continuation-drain", &zone(&hosts));
    let config = common::temp_config(
        "continuation-drain",
        &format!(
            "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 100\nmax_refresh_ms = 500\n\
             [continuation]\ndrain_after_ms = 1500\n",
            dns.port()
        ),
    );
    let p = Llamatap::start(
        &format!("dns+http://llama.test:{port}"),
        &["--config", config.to_str().unwrap()],
    );
    let names: Vec<String> = hosts.iter().map(|h| format!("{h}:{port}")).collect();
    let up = |m: &str, name: &str| {
        metric_series(
            m,
            "llamatap_upstream_up",
            &[&format!("upstream=\"{name}\"")],
        )
    };
    let ready = fleet::wait_for(Duration::from_secs(30), || {
        let m = p.metrics();
        names.iter().all(|n| up(&m, n) == Some(1.0))
    });
    assert!(ready.is_some(), "members never up:\n{}", p.stderr());

    let mut removed = None;
    let mut leaving = None;
    let seen = stream(&p.addr(), &body(json!({})), CUT_AFTER, || {
        let v = busy(&servers);
        dns.set_zone(&zone(&[hosts[1 - v]]));
        removed = Some(Instant::now());
        leaving = Some(v);
    });
    let v = leaving.expect("never removed");
    let removed = removed.unwrap();
    assert_whole(&seen, "moved off a draining member", 1);
    let gap = seen.max_gap();
    assert!(gap < Duration::from_secs(5), "gap around the move {gap:?}");
    // The answer moved, not finished where it was: the draining member
    // stopped generating for it (llama-server cancelled), and the move
    // came within drain_after_ms (plus a DNS round and a watch tick) of the
    // removal.
    assert_counted_once(&p, "drained", "continued");
    let moved_by = seen
        .contents
        .windows(2)
        .max_by_key(|w| w[1].0 - w[0].0)
        .map(|w| w[0].0)
        .unwrap();
    let after_removal = moved_by.saturating_duration_since(removed);
    eprintln!(
        "removed {} after {CUT_AFTER} events; moved {after_removal:?} later; longest gap {gap:?}",
        names[v]
    );
    assert!(
        after_removal < Duration::from_millis(1500) + Duration::from_secs(4),
        "moved {after_removal:?} after the removal"
    );
    // The drained member's slot stopped when the answer moved: it decoded
    // only the part before the move.
    let decoded_there = servers[v].metric("llamacpp:n_decode_total") as u64;
    let decoded_other = servers[1 - v].metric("llamacpp:n_decode_total") as u64;
    eprintln!("decode calls: {decoded_there} on the drained member, {decoded_other} on the other");
    assert!(
        decoded_there < ANSWER_TOKENS as u64 - 20,
        "the drained member decoded {decoded_there} tokens: it went on generating"
    );
    // With nothing in flight, the member leaves.
    let left = fleet::wait_for(Duration::from_secs(30), || {
        up(&p.metrics(), &names[v]).is_none()
    });
    assert!(left.is_some(), "{} never left:\n{}", names[v], p.metrics());
}

#[test]
fn with_logprobs_a_killed_upstreams_answer_goes_on_token_exact() {
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, spans) = proxy(&servers, "");
    let b = body(json!({"logprobs": true, "top_logprobs": 1}));
    let whole = stream(&p.addr(), &b, usize::MAX, || {});
    assert_whole(&whole, "uninterrupted", 1);
    let mut victim = None;
    let seen = stream(&p.addr(), &b, CUT_AFTER, || {
        let v = busy(&servers);
        servers[v].kill();
        victim = Some(v);
    });
    assert!(victim.is_some(), "never cut");
    assert_whole(&seen, "continued from token ids", 1);
    assert_eq!(
        seen.with_logprobs,
        seen.contents.len(),
        "every content event carries the logprobs the client asked for"
    );
    // The continuation's prompt was the conversation and the very tokens
    // sent: what the target evaluated (computed plus found in its cache)
    // is the uninterrupted answer's prompt plus those tokens, to the token.
    let prompt = whole.usage.as_ref().unwrap()["prompt_tokens"]
        .as_i64()
        .unwrap();
    let e = continued_event(&spans);
    eprintln!(
        "token-exact: prompt {prompt} tokens, then {} sent; the target evaluated {} (+{} cached); equal text after the cut: {}\n  uninterrupted {:?}\n  continued     {:?}",
        e["llamatap.continuation.tokens_before"],
        e["llamatap.continuation.reprefilled_tokens"],
        e["llamatap.continuation.cached_tokens"],
        seen.text() == whole.text(),
        fleet::tail_chars(&whole.text(), 300),
        fleet::tail_chars(&seen.text(), 300)
    );
    assert_eq!(
        e["llamatap.continuation.reprefilled_tokens"] + e["llamatap.continuation.cached_tokens"],
        prompt + e["llamatap.continuation.tokens_before"],
        "{e:?}"
    );
    assert_eq!(
        seen.usage.as_ref().unwrap()["prompt_tokens"].as_i64(),
        Some(prompt),
        "the usage counts the conversation's prompt"
    );
    assert_counted_once(&p, "upstream_died", "continued");
}

/// A text completion or native completion request of `ANSWER_TOKENS`.
fn completion_body(native: bool) -> String {
    let limit = if native { "n_predict" } else { "max_tokens" };
    json!({
        "prompt": "Once upon a time, in a lighthouse by the sea,",
        "stream": true,
        limit: ANSWER_TOKENS,
        "temperature": 0,
        "ignore_eos": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

#[test]
fn text_and_native_completions_are_continued_too() {
    let _serial = serial();
    let mut servers = start_servers(3, "slow", &[]);
    let (p, spans) = proxy(&servers, "");
    let mut live: Vec<usize> = (0..servers.len()).collect();
    for (path, native) in [("/v1/completions", false), ("/completion", true)] {
        let b = completion_body(native);
        let whole = stream_at(&p.addr(), path, &b, usize::MAX, || {});
        let ids = usize::from(!native);
        assert_whole(&whole, &format!("{path} uninterrupted"), ids);
        let mut victim = None;
        let seen = stream_at(&p.addr(), path, &b, CUT_AFTER, || {
            let v = busy_among(&servers, &live);
            servers[v].kill();
            victim = Some(v);
        });
        let v = victim.expect("never cut");
        live.retain(|i| *i != v);
        assert_whole(&seen, &format!("{path} continued"), ids);
        let gap = seen.max_gap();
        assert!(gap < Duration::from_secs(5), "{path}: gap {gap:?}");
        eprintln!(
            "{path}: cut on {}, longest gap {gap:?}; equal to the uninterrupted text: {}",
            upstream_name(&servers[v]),
            seen.text() == whole.text()
        );
        if native {
            // Every native event carries its token ids: token-exact, so the
            // target evaluated the prompt and the tokens sent, no more.
            let e = continued_event(&spans);
            let prompt = whole.usage.as_ref().unwrap()["prompt_tokens"]
                .as_i64()
                .unwrap();
            assert_eq!(
                e["llamatap.continuation.reprefilled_tokens"]
                    + e["llamatap.continuation.cached_tokens"],
                prompt + e["llamatap.continuation.tokens_before"],
                "{e:?}"
            );
        }
        // The killed one is ejected; it is not chosen for the next path.
        fleet::wait_for(Duration::from_secs(10), || {
            upstream_up(&p.metrics(), &servers[v]) == Some(0.0)
        });
    }
    assert_continued_after_deaths(&p, 2.0);
}

/// The OpenAI SDK streaming one chat answer: a line per chunk (`.`), then
/// the text and the finish reason as JSON; an exception is printed and
/// exits non-zero.
const SDK_STREAM: &str = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=120)
stream = client.chat.completions.create(
    model="slow", messages=[{"role": "user", "content": "Tell me a long story."}],
    max_tokens=int(sys.argv[2]), temperature=0, stream=True,
    stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
text, finish, usage, ids = "", None, None, set()
for c in stream:
    ids.add(c.id)
    if c.usage:
        usage = c.usage.completion_tokens
    if c.choices:
        text += c.choices[0].delta.content or ""
        finish = c.choices[0].finish_reason or finish
        print(".", flush=True)
print(json.dumps({"text": text, "finish": finish, "usage": usage, "ids": len(ids)}), flush=True)
"#;

#[test]
fn the_openai_sdk_streams_through_a_kill_without_an_exception() {
    use std::io::{BufRead, BufReader};
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "");
    let mut child = std::process::Command::new(common::python())
        .args([
            "-c",
            SDK_STREAM,
            &format!("http://{}/v1", p.addr()),
            &ANSWER_TOKENS.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the venv's python (scripts/ensure-deps.sh)");
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut chunks = 0;
    let mut last = String::new();
    for line in out.lines() {
        let line = line.unwrap();
        if line == "." {
            chunks += 1;
            if chunks == CUT_AFTER {
                let v = busy(&servers);
                servers[v].kill();
            }
        } else {
            last = line;
        }
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "the SDK raised: {err}");
    let v: Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last:?} {err}"));
    eprintln!("the SDK through a kill: {v}");
    assert_eq!(v["finish"], "length");
    assert_eq!(v["ids"], 1);
    let usage = v["usage"].as_u64().unwrap_or(0) as f64;
    assert!(
        (usage - ANSWER_TOKENS as f64).abs() <= ANSWER_TOKENS as f64 * 0.03,
        "{v}"
    );
    assert!(
        chunks as f64 >= ANSWER_TOKENS as f64 * 0.97,
        "{chunks} chunks"
    );
    assert_counted_once(&p, "upstream_died", "continued");
}

/// The integer attributes of the latest `llamatap.continued` span event
/// (waits for it up to 15 s).
fn continued_event(spans: &otlp::Received) -> std::collections::HashMap<String, i64> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    let mut all = Vec::new();
    let found = fleet::wait_for(Duration::from_secs(15), || {
        all = spans.wait(0, Duration::ZERO);
        all.iter()
            .flat_map(|s| s.events.iter())
            .any(|e| e.name == "llamatap.continued")
    });
    assert!(found.is_some(), "no llamatap.continued event");
    let event = all
        .iter()
        .flat_map(|s| s.events.iter())
        .filter(|e| e.name == "llamatap.continued")
        .max_by_key(|e| e.time_unix_nano)
        .unwrap();
    event
        .attributes
        .iter()
        .filter_map(|a| match a.value.as_ref()?.value.as_ref()? {
            V::IntValue(n) => Some((a.key.clone(), *n)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_client_that_leaves_during_the_pause_ends_the_continuation_on_the_target() {
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "");
    // A long conversation (about 1,200 tokens): the target's prefill of it
    // takes seconds, the window in which the client leaves.
    let long = "The keeper climbs the stairs and trims the wick again. ".repeat(110);
    let b = body(json!({"messages": [
        {"role": "system", "content": long},
        {"role": "user", "content": "Tell me a long story about a lighthouse."},
    ]}));
    let mut reader =
        http::send(&p.addr(), "POST", "/v1/chat/completions", &[], b.as_bytes()).unwrap();
    let mut events = 0;
    while events < CUT_AFTER {
        let piece = reader
            .next_piece()
            .unwrap()
            .expect("the answer ended early");
        events += String::from_utf8_lossy(&piece)
            .matches("\"delta\":{\"content\":\"")
            .count();
    }
    let v = busy(&servers);
    servers[v].kill();
    // The continuation's prefill starts on the other; the client leaves.
    let other = &servers[1 - v];
    let prefilling = fleet::wait_for(Duration::from_secs(20), || {
        other
            .slots()
            .as_array()
            .into_iter()
            .flatten()
            .any(|slot| slot["is_processing"] == true)
    });
    assert!(
        prefilling.is_some(),
        "the continuation never reached the other"
    );
    drop(reader);
    assert_counted_once(&p, "upstream_died", "failed");
    // The target stopped: no slot busy soon after, and it decoded a token
    // or two at most, not the 120 left. llama-server takes the cancel
    // between batches, and the whole prompt is one batch: on a loaded
    // machine the slow model's prefill of it alone can take tens of
    // seconds, hence the long bound on the wait (a condition, not a sleep).
    let idle = fleet::wait_for(Duration::from_secs(180), || {
        other
            .slots()
            .as_array()
            .into_iter()
            .flatten()
            .all(|slot| slot["is_processing"] != true)
    });
    assert!(idle.is_some(), "the target went on generating");
    let decoded = other.metric("llamacpp:n_decode_total");
    eprintln!("the target's decode calls after the client left: {decoded}");
    assert!(decoded < 10.0, "the target decoded {decoded} times");
}

/// `llamatap_requests_total` summed over every series: requests recorded.
fn recorded(m: &str) -> f64 {
    common::proxy::metric_sum(m, "llamatap_requests_total", &[])
}

#[test]
fn a_finished_answer_whose_last_event_the_client_trimmed_is_not_continued() {
    // `response_fields` trims a native stream's last event to
    // `{"content":""}` (no `"stop": true`), and a last event larger than
    // `telemetry.max_event_bytes` (a large `logit_bias`, which llama-server
    // echoes in its last event) goes unread. Either way the body ends by
    // its framing: the answer is over. It is not continued (no tokens after
    // its end), and its member is not ejected.
    let _serial = serial();
    let servers = start_servers(2, "tiny", &[]);
    let (p, _spans) = proxy(&servers, "[telemetry]\nmax_event_bytes = 4096\n");
    let bias: serde_json::Map<String, Value> =
        (100..700).map(|t| (t.to_string(), json!(-0.5))).collect();
    let cases = [
        json!({"response_fields": ["content"]}),
        json!({"logit_bias": bias}),
    ];
    for (i, extra) in cases.iter().enumerate() {
        let mut b = json!({
            "prompt": "Once upon a time",
            "stream": true,
            "n_predict": 24,
            "temperature": 0,
            "ignore_eos": true,
        });
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let seen = stream_at(&p.addr(), "/completion", &b.to_string(), usize::MAX, || {});
        assert_eq!(seen.status, 200, "{}", seen.raw);
        assert!(seen.clean_end, "case {i}");
        assert!(
            seen.error_events.is_empty(),
            "case {i}: {:?}",
            seen.error_events
        );
        // One answer of 24 tokens, no more.
        assert!(
            seen.contents.len() <= 24,
            "case {i}: {} content events: {}",
            seen.contents.len(),
            fleet::tail_chars(&seen.raw, 600)
        );
        let stops = seen.raw.matches("\"stop\":true").count();
        assert!(stops <= 1, "case {i}: {stops} stop events");
        let m = p.wait_metrics(Duration::from_secs(10), |m| recorded(m) >= (i + 1) as f64);
        assert_eq!(recorded(&m), (i + 1) as f64, "case {i}");
        assert_eq!(
            common::proxy::metric_sum(&m, "llamatap_continuations_total", &[]),
            0.0,
            "case {i}: {}",
            m.lines()
                .filter(|l| l.contains("continuations_total"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // Neither member was ejected: rounds of requests at once go to both.
    let before: Vec<f64> = servers.iter().map(processed).collect();
    for round in 0..3 {
        std::thread::scope(|s| {
            for k in 0..4 {
                let addr = p.addr();
                s.spawn(move || {
                    let b = json!({
                        "prompt": format!("Round {round}, request {k}: tell a story."),
                        "n_predict": 32, "ignore_eos": true,
                    })
                    .to_string();
                    let mut r =
                        http::send(&addr, "POST", "/completion", &[], b.as_bytes()).unwrap();
                    assert_eq!(r.head.status, 200);
                    r.read_all().unwrap();
                });
            }
        });
    }
    let after: Vec<f64> = servers.iter().map(processed).collect();
    for (k, (a, b)) in after.iter().zip(&before).enumerate() {
        assert!(
            a > b,
            "server {k} took none of 6 requests: {before:?} -> {after:?}"
        );
    }
}

/// Prompt tokens `server` has processed so far (`llamacpp:prompt_tokens_total`).
fn processed(server: &LlamaServer) -> f64 {
    server.metric("llamacpp:prompt_tokens_total")
}

#[test]
fn a_member_busy_with_another_prefill_is_not_a_stall() {
    // A long prompt sent to the member that streams an answer holds the
    // answer's next token for the whole prefill (llama-server decodes both
    // slots in one batch). With `stall_ms` below that prefill, the silence
    // used to cut the answer as `stalled` and eject a healthy member. The
    // member still answers `/health`: the answer waits on, whole, on its
    // own member.
    let _serial = serial();
    let servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "[continuation]\nstall_ms = 400\n");
    let long_prompt = "The lighthouse keeper counted the waves. ".repeat(180);
    let mut prefill = None;
    let seen = stream(&p.addr(), &body(json!({"max_tokens": 60})), 10, || {
        let v = busy(&servers);
        let url = servers[v].base_url.clone();
        let b = json!({"prompt": long_prompt, "n_predict": 1, "cache_prompt": false}).to_string();
        prefill = Some(std::thread::spawn(move || {
            let addr = url.trim_start_matches("http://").to_string();
            let mut r = http::send(&addr, "POST", "/completion", &[], b.as_bytes()).unwrap();
            let status = r.head.status;
            let body = r.read_all().unwrap();
            (status, body)
        }));
    });
    let (status, answer) = prefill.expect("never sent the prefill").join().unwrap();
    assert_eq!(status, 200);
    let evaluated = serde_json::from_slice::<Value>(&answer).unwrap()["timings"]["prompt_ms"]
        .as_f64()
        .unwrap();
    assert_eq!(seen.status, 200, "{}", seen.raw);
    assert!(seen.error_events.is_empty(), "{:?}", seen.error_events);
    assert!(seen.done && seen.clean_end);
    assert_eq!(seen.ids.len(), 1);
    let gap = seen.max_gap();
    let m = p.wait_metrics(Duration::from_secs(10), |m| recorded(m) >= 1.0);
    assert_eq!(
        common::proxy::metric_sum(&m, "llamatap_continuations_total", &[]),
        0.0,
        "the answer was moved (longest gap {gap:?}, the prefill took {evaluated} ms)"
    );
    eprintln!("longest gap {gap:?} against stall_ms 400; the other prefill took {evaluated:.0} ms");
}

#[test]
fn a_queued_fleet_request_over_64_kib_reaches_its_member_whole() {
    // Routing reads ahead of a fleet request to choose its member, and the
    // queue read ahead again to watch the socket while it waited: together
    // more than Pingora can replay (64 KiB), so the member got the head and
    // the body without its start, and waited for bytes that never came.
    let _serial = serial();
    let servers = start_servers(2, "slow", &[]);
    let (p, _spans) = proxy(&servers, "[queue]\nenabled = true\nmax_inflight = 1\n");
    // Both members' one slot taken by answers of a few seconds.
    let holders: Vec<_> = (0..2)
        .map(|k| {
            let addr = p.addr();
            std::thread::spawn(move || {
                let b = json!({
                    "prompt": format!("Holder {k} tells a story"),
                    "n_predict": 40, "ignore_eos": true, "temperature": 0,
                })
                .to_string();
                let mut r = http::send(&addr, "POST", "/completion", &[], b.as_bytes()).unwrap();
                let status = r.head.status;
                r.read_all().unwrap();
                status
            })
        })
        .collect();
    let busy = fleet::wait_for(Duration::from_secs(30), || {
        servers.iter().all(|s| {
            s.slots()
                .as_array()
                .into_iter()
                .flatten()
                .any(|slot| slot["is_processing"] == true)
        })
    });
    assert!(busy.is_some(), "the holders never ran");
    let big = json!({
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 4,
        "temperature": 0,
        "padding": "x".repeat(100_000),
    })
    .to_string();
    assert!(big.len() > 100_000);
    let addr = p.addr();
    let waiter = std::thread::spawn(move || {
        let mut r = http::send(&addr, "POST", "/v1/chat/completions", &[], big.as_bytes()).unwrap();
        let status = r.head.status;
        let body = r.read_all().unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    });
    for h in holders {
        assert_eq!(h.join().unwrap(), 200);
    }
    let (status, body) = waiter.join().unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["choices"][0]["message"]["content"].is_string(), "{body}");
}

#[test]
fn on_a_real_models_text_a_continued_answer_equals_the_uninterrupted_one() {
    // SmolLM2-135M-Instruct (Q4_1): real text, greedy. Cut once with the
    // token ids carried (`logprobs`: token-exact) and once from text (the
    // target tokenizes the text again); each continued answer equals the
    // uninterrupted one, character for character.
    let _serial = serial();
    let mut servers = start_servers(3, "real", &[]);
    let (p, _spans) = proxy(&servers, "");
    let mut live: Vec<usize> = (0..servers.len()).collect();
    for (label, extra) in [
        ("token-exact", json!({"logprobs": true, "top_logprobs": 1})),
        ("from text", json!({})),
    ] {
        let mut b = json!({
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Describe a lighthouse keeper's day, hour by hour, in detail."},
            ],
            "stream": true,
            "max_tokens": 120,
            "temperature": 0,
            "stream_options": {"include_usage": true},
        });
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let b = b.to_string();
        let whole = stream(&p.addr(), &b, usize::MAX, || {});
        assert_eq!(whole.status, 200, "{label}: {}", whole.raw);
        assert!(whole.done && whole.clean_end, "{label}");
        assert!(
            whole.contents.len() > 40,
            "{label}: the answer is too short to cut: {:?}",
            whole.text()
        );
        let mut victim = None;
        let seen = stream(&p.addr(), &b, 20, || {
            let v = busy_among(&servers, &live);
            servers[v].kill();
            victim = Some(v);
        });
        let v = victim.expect("never cut");
        live.retain(|i| *i != v);
        assert_eq!(seen.status, 200, "{label}: {}", seen.raw);
        assert!(
            seen.error_events.is_empty(),
            "{label}: {:?}",
            seen.error_events
        );
        assert!(seen.done && seen.done_last && seen.clean_end, "{label}");
        assert_eq!(seen.ids.len(), 1, "{label}");
        assert_eq!(
            seen.text(),
            whole.text(),
            "{label}: the continued text differs"
        );
        assert_eq!(seen.finish_reasons, whole.finish_reasons, "{label}");
        eprintln!(
            "{label}: cut after 20 of {} events; equal: {:?}",
            whole.contents.len(),
            fleet::tail_chars(&seen.text(), 160)
        );
    }
    assert_continued_after_deaths(&p, 2.0);
}

/// `x-ratelimit-remaining-tokens` for `key`, asked on `/tokenize`
/// (admitted like any route, charged nothing).
fn remaining_tokens(addr: &str, key: &str) -> Option<u64> {
    let auth = format!("Bearer {key}");
    let mut r = http::send(
        addr,
        "POST",
        "/tokenize",
        &[("Authorization", &auth), ("Connection", "close")],
        br#"{"content":"hello"}"#,
    )
    .ok()?;
    let _ = r.read_all().ok()?;
    r.head.header("x-ratelimit-remaining-tokens")?.parse().ok()
}

#[test]
fn a_continued_answer_is_charged_the_tokens_before_and_after_the_cut() {
    const KEY: &str = "continued-tenant-key-0001";
    const TPM: u64 = 1_000_000;
    let _serial = serial();
    let mut servers = start_servers(2, "slow", &[]);
    let (p, spans) = proxy(
        &servers,
        &format!("[[auth.keys]]\nname = \"team\"\nkey = \"{KEY}\"\ntokens_per_minute = {TPM}\n"),
    );
    // The charge lands in the minute the answer ends: start with most of
    // one left (a condition on the clock).
    common::wait_for_minute_with(45_000);
    // Without include_usage nothing in the client's stream counts tokens.
    let body = body(json!({"stream_options": {"include_usage": false}}));
    let auth = format!("Bearer {KEY}");
    let mut r = http::send(
        &p.addr(),
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    let mut raw = String::new();
    let mut cut = false;
    while let Some(piece) = r.next_piece().unwrap() {
        raw.push_str(&String::from_utf8_lossy(&piece));
        if !cut && raw.matches("\"content\":\"").count() >= CUT_AFTER {
            let v = busy(&servers);
            servers[v].kill();
            cut = true;
        }
    }
    assert!(cut, "never cut:\n{raw}");
    assert!(raw.ends_with("data: [DONE]\n\n"), "{raw}");
    assert!(!raw.contains("\"usage\":{"), "{raw}");
    assert_counted_once(&p, "upstream_died", "continued");
    // Charged the whole answer (its 160 tokens) and its prompt (a few dozen
    // tokens), not nothing.
    let mut left = None;
    fleet::wait_for(Duration::from_secs(10), || {
        left = remaining_tokens(&p.addr(), KEY);
        left.is_some_and(|l| l < TPM)
    });
    let charged = TPM - left.expect("no x-ratelimit-remaining-tokens");
    let answer = ANSWER_TOKENS as u64;
    // The target generated the rest of the answer, and its prompt was the
    // conversation's plus the tokens handed back: charged as if uncut.
    let e = continued_event(&spans);
    let before = e["llamatap.continuation.tokens_before"];
    assert_eq!(
        before + e["llamatap.continuation.generated_tokens"],
        ANSWER_TOKENS as i64,
        "{e:?}"
    );
    let prompt = e["llamatap.continuation.reprefilled_tokens"]
        + e["llamatap.continuation.cached_tokens"]
        - before;
    assert!(prompt > 10, "{e:?}");
    assert_eq!(
        charged,
        prompt as u64 + answer,
        "charged {charged} for an answer of {answer} tokens: {e:?}"
    );
}
