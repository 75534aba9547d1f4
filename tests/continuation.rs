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
fn stream(addr: &str, body: &str, cut_after: usize, mut at_cut: impl FnMut()) -> Seen {
    let mut reader =
        http::send(addr, "POST", "/v1/chat/completions", &[], body.as_bytes()).unwrap();
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
                if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
                    if !c.is_empty() {
                        seen.contents.push((now, c.to_string()));
                    }
                }
                if let Some(r) = v["choices"][0]["finish_reason"].as_str() {
                    seen.finish_reasons.push(r.to_string());
                }
                if v.get("usage").is_some_and(|u| !u.is_null()) {
                    seen.usage = Some(v["usage"].clone());
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
    let mut which = None;
    let found = fleet::wait_for(Duration::from_secs(5), || {
        which = servers.iter().position(|s| {
            s.slots()
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

/// Asserts `seen` is one whole answer of `ANSWER_TOKENS` tokens.
fn assert_whole(seen: &Seen, label: &str) {
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
    assert_eq!(seen.ids.len(), 1, "{label}: completion ids {:?}", seen.ids);
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
    assert_whole(&whole, "uninterrupted");

    let mut victim = None;
    let mut cut_at = None;
    let seen = stream(&p.addr(), &body(json!({})), CUT_AFTER, || {
        let v = busy(&servers);
        servers[v].kill();
        cut_at = Some(Instant::now());
        victim = Some(v);
    });
    let victim = victim.expect("the answer was never cut");
    assert_whole(&seen, "continued");
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
    let m = after_count(&p, "upstream_died", "continued");
    assert_eq!(
        metric_series(
            &m,
            "llamatap_continuations_total",
            &["reason=\"upstream_died\"", "result=\"continued\""]
        ),
        Some(1.0),
        "{}",
        m.lines()
            .filter(|l| l.contains("continuations"))
            .collect::<Vec<_>>()
            .join("\n")
    );
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
    assert_whole(&seen, "continued after a stall");
    let gap = seen.max_gap();
    assert!(
        gap >= Duration::from_millis(1500) && gap < Duration::from_secs(8),
        "gap {gap:?}"
    );
    let m = after_count(&p, "stalled", "continued");
    assert_eq!(
        metric_series(
            &m,
            "llamatap_continuations_total",
            &["reason=\"stalled\"", "result=\"continued\""]
        ),
        Some(1.0)
    );
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
    let m = after_count(&p, "upstream_died", "not_continuable");
    assert_eq!(
        metric_series(
            &m,
            "llamatap_continuations_total",
            &["reason=\"upstream_died\"", "result=\"not_continuable\""]
        ),
        Some(1.0)
    );
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
    assert_whole(&seen, "moved off a draining member");
    let gap = seen.max_gap();
    assert!(gap < Duration::from_secs(5), "gap around the move {gap:?}");
    // The answer moved, not finished where it was: the draining member
    // stopped generating for it (llama-server cancelled), and the move
    // came within drain_after_ms (plus a DNS round and a watch tick) of the
    // removal.
    let m = after_count(&p, "drained", "continued");
    assert_eq!(
        metric_series(
            &m,
            "llamatap_continuations_total",
            &["reason=\"drained\"", "result=\"continued\""]
        ),
        Some(1.0),
        "{}",
        p.stderr()
    );
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
