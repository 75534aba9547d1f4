//! Why was this turn slow: each cause of a recomputed prompt is caused on
//! purpose, against real llama-servers, by multi-turn conversations sent
//! through the OpenAI Python SDK, and must be named exactly, with its
//! position, in the access log (and, for one case, on the span with its
//! excerpts, in `/metrics` and on the latency page).
//!
//! Model: `medium.gguf` (a 600-token prompt prefills in about 0.2 s on this
//! machine, so a recomputed prefix is visible in the prefill time), one slot
//! per server, `--cache-ram 0`, and for the one-upstream test `--jinja` with a
//! ChatML template that renders the tool definitions first.
//!
//! What it proves, test by test:
//! - `one_upstream_names_every_cause_with_its_position`: a clean
//!   conversation is `new_conversation` then `reused` on every turn; a clock
//!   in the system prompt is `system_changed` at message 0, field `system`,
//!   at the clock's exact character (content capture is on), with the old
//!   and new time in the span event's excerpts; an edited assistant message
//!   is `history_edited` at its index and offset; dropped oldest turns are
//!   `history_truncated` at message 1; reordered tool definitions are
//!   `tools_changed` at tool 0; a llama-server restarted between two turns
//!   is `evicted`, with the previous prompt's tokens recomputed.
//! - `a_turn_sent_to_another_upstream_is_other_upstream`: in a fleet of two,
//!   the conversation's upstream is killed after two turns; the third turn
//!   fails over to the other one and is `other_upstream`.
//! - `clean_interleaved_conversations_are_always_reused`: three clean
//!   conversations interleaved over 24 turns, each on its own slot: the
//!   first turn of each is `new_conversation`, every other one `reused`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use common::llama::LlamaServer;
use common::otlp;
use common::proxy::Llamatap;
use common::{temp_config, wait_until};

/// The OpenAI SDK, one chat completion per JSON line on stdin (messages and
/// optional tools), streamed; prints the answer and what it sent.
const SDK_SCRIPT: &str = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0, timeout=120)
for line in sys.stdin:
    req = json.loads(line)
    extra = {"tools": req["tools"]} if req.get("tools") else {}
    stream = client.chat.completions.create(
        model="medium", messages=req["messages"], max_tokens=6,
        temperature=0, stream=True, **extra)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    print(json.dumps({"answer": text, "sent": req["messages"]}), flush=True)
"#;

/// One long-lived Python process driving the SDK.
struct Sdk {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Sdk {
    fn start(proxy: &Llamatap) -> Sdk {
        let mut child = Command::new(common::python())
            .args(["-c", SDK_SCRIPT, &format!("http://{}/v1", proxy.addr())])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the venv's python (scripts/ensure-deps.sh)");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Sdk {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one chat turn; returns the answer.
    fn chat(&mut self, messages: &[Value], tools: Option<&Value>) -> String {
        let line = json!({"messages": messages, "tools": tools}).to_string();
        writeln!(self.stdin, "{line}").unwrap();
        let mut out = String::new();
        self.stdout.read_line(&mut out).unwrap();
        let v: Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("the SDK script failed ({e}): {out:?}"));
        assert_eq!(v["sent"].as_array().unwrap().len(), messages.len());
        v["answer"].as_str().unwrap().to_string()
    }
}

impl Drop for Sdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A conversation as a client keeps it.
struct Conv {
    messages: Vec<Value>,
    tools: Option<Value>,
}

impl Conv {
    fn new(system: &str) -> Conv {
        Conv {
            messages: vec![json!({"role": "system", "content": system})],
            tools: None,
        }
    }

    /// Adds a user message, sends the conversation, adds the answer.
    fn turn(&mut self, sdk: &mut Sdk, user: &str) {
        self.messages.push(json!({"role": "user", "content": user}));
        let answer = sdk.chat(&self.messages, self.tools.as_ref());
        self.messages
            .push(json!({"role": "assistant", "content": answer}));
    }
}

/// The access log's lines, as they are written.
struct AccessLog {
    path: PathBuf,
    seen: usize,
}

impl AccessLog {
    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The next request's line (waiting for it).
    fn next(&mut self) -> Value {
        let path = self.path.clone();
        assert!(
            wait_until(Duration::from_secs(30), || Self::lines(&path).len()
                > self.seen),
            "no access-log line {} in {}",
            self.seen + 1,
            path.display()
        );
        let line = Self::lines(&path)[self.seen].clone();
        self.seen += 1;
        line
    }

    /// The next line's cache break, checked: cause and position (message
    /// index, field, offset; `None` when the prompt extends the previous).
    fn expect(&mut self, what: &str, cause: &str, at: Option<(u64, &str, u64)>) -> Value {
        let line = self.next();
        let b = &line["cache_break"];
        eprintln!(
            "{what}: {} ttft {} ms, prompt {} (cached {}), recomputed {} tokens in {} ms",
            b["cause"],
            line["ttft_ms"],
            line["prompt_tokens"],
            line["cached_tokens"],
            b["recomputed_tokens"],
            b["recomputed_ms"]
        );
        assert_eq!(b["cause"], cause, "{what}: {line}");
        match at {
            Some((i, field, offset)) => {
                assert_eq!(b["message_index"], i, "{what}: {line}");
                assert_eq!(b["field"], field, "{what}: {line}");
                assert_eq!(b["offset"], offset, "{what}: {line}");
            }
            None => assert_eq!(b["field"], Value::Null, "{what}: {line}"),
        }
        line
    }
}

/// About `words` words of filler (4 tokens a word or so).
fn filler(stem: &str, words: usize) -> String {
    (0..words)
        .map(|i| format!("{stem}{}", i * 7 + 100))
        .collect::<Vec<_>>()
        .join(" ")
}

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": format!("the {name} tool"),
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}})
}

/// Characters two strings share at their start.
fn common_prefix(a: &str, b: &str) -> u64 {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count() as u64
}

/// A ChatML template that renders the tool definitions, in their order,
/// before the messages (the built-in `chatml` leaves them out).
const TOOLS_TEMPLATE: &str =
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}\
{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// llama-server's flags for the one-upstream test: one slot, `--jinja` with
/// [`TOOLS_TEMPLATE`].
fn single_slot_flags(template: &Path) -> Vec<String> {
    ["-np", "1", "-c", "4096", "--jinja", "--chat-template-file"]
        .iter()
        .map(|s| s.to_string())
        .chain([template.display().to_string()])
        .collect()
}

#[test]
fn one_upstream_names_every_cause_with_its_position() {
    let template =
        std::env::temp_dir().join(format!("llamatap-cachebreak-{}.jinja", std::process::id()));
    std::fs::write(&template, TOOLS_TEMPLATE).unwrap();
    let flags = single_slot_flags(&template);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut llama = LlamaServer::start("medium", &flags);
    let port = llama.port;
    let log = std::env::temp_dir().join(format!("llamatap-cachebreak-{port}.jsonl"));
    let _ = std::fs::remove_file(&log);
    let config = temp_config("cachebreak", "[telemetry]\ncapture_content = true\n");
    let (endpoint, received) = otlp::http_receiver();
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
            "http/protobuf",
        ],
    );
    let mut sdk = Sdk::start(&proxy);
    let mut access = AccessLog {
        path: log.clone(),
        seen: 0,
    };
    let system = format!("You are the lab's assistant. {}", filler("rule", 150));

    // A clean conversation: reused on every turn after the first.
    let mut clean = Conv::new(&system);
    clean.turn(&mut sdk, "clean: tell me about the weather");
    access.expect("clean turn 1", "new_conversation", None);
    for (n, user) in ["and tomorrow?", "and the day after?", "thanks"]
        .iter()
        .enumerate()
    {
        clean.turn(&mut sdk, user);
        let line = access.expect(&format!("clean turn {}", n + 2), "reused", None);
        assert!(
            line["cache_break"]["recomputed_tokens"].as_u64().unwrap() <= 8,
            "{line}"
        );
    }

    // A clock in the system prompt.
    let prefix = "You are the lab's assistant. Current time: 16:05:";
    let mut clock = Conv::new(&format!("{prefix}01. {}", filler("rule", 150)));
    clock.turn(&mut sdk, "clock: what time is it?");
    access.expect("clock turn 1", "new_conversation", None);
    clock.messages[0] =
        json!({"role": "system", "content": format!("{prefix}09. {}", filler("rule", 150))});
    clock.turn(&mut sdk, "and now?");
    let offset = prefix.chars().count() as u64 + 1;
    let line = access.expect(
        "clock turn 2",
        "system_changed",
        Some((0, "system", offset)),
    );
    let recomputed = line["cache_break"]["recomputed_tokens"].as_u64().unwrap();
    assert!(
        recomputed > 400,
        "the whole system prompt after the clock: {line}"
    );
    assert!(
        line["cache_break"]["recomputed_ms"].as_f64().unwrap() > 0.0,
        "{line}"
    );
    let clock_trace = line["trace_id"].as_str().unwrap().to_string();

    // An earlier (assistant) message rewritten by the client.
    let mut edited = Conv::new(&system);
    edited.turn(&mut sdk, "edit: first question");
    access.expect("edit turn 1", "new_conversation", None);
    edited.turn(&mut sdk, "second question");
    access.expect("edit turn 2", "reused", None);
    let old = edited.messages[2]["content"].as_str().unwrap().to_string();
    let new = format!("{}[edited]", old.chars().take(3).collect::<String>());
    edited.messages[2] = json!({"role": "assistant", "content": new});
    edited.turn(&mut sdk, "third question");
    access.expect(
        "edit turn 3",
        "history_edited",
        Some((2, "content", common_prefix(&old, &new))),
    );

    // The oldest turns dropped (a sliding window that keeps the system prompt).
    let mut window = Conv::new(&system);
    window.turn(&mut sdk, "window: one");
    access.expect("window turn 1", "new_conversation", None);
    window.turn(&mut sdk, "two");
    access.expect("window turn 2", "reused", None);
    window.messages.drain(1..3);
    window.turn(&mut sdk, "three");
    access.expect(
        "window turn 3",
        "history_truncated",
        Some((1, "message", 0)),
    );

    // Tool definitions serialised in another order.
    let mut tools = Conv::new(&system);
    tools.tools = Some(json!([tool("lookup"), tool("search")]));
    tools.turn(&mut sdk, "tools: find the file");
    access.expect("tools turn 1", "new_conversation", None);
    tools.tools = Some(json!([tool("search"), tool("lookup")]));
    tools.turn(&mut sdk, "and the other one");
    let line = access.expect("tools turn 2", "tools_changed", Some((0, "tools", 0)));
    assert!(
        line["cache_break"]["recomputed_tokens"].as_u64().unwrap() > 400,
        "the tools come first in the prompt: all after them recomputed: {line}"
    );

    // llama-server restarted between two turns.
    let mut restart = Conv::new(&system);
    restart.turn(&mut sdk, "restart: hello");
    let first = access.expect("restart turn 1", "new_conversation", None);
    restart.turn(&mut sdk, "still there?");
    access.expect("restart turn 2", "reused", None);
    llama.kill();
    drop(llama);
    let _llama = LlamaServer::start_on_port("medium", &flags, port);
    restart.turn(&mut sdk, "and now?");
    let line = access.expect("restart turn 3", "evicted", None);
    let before = first["prompt_tokens"].as_u64().unwrap();
    assert!(
        line["cache_break"]["recomputed_tokens"].as_u64().unwrap() > before,
        "the whole previous prompt recomputed: {line}"
    );

    // The span of the clock turn: attributes, and the event with excerpts.
    let spans = received.wait(1, Duration::from_secs(1));
    let _ = spans;
    let clock_span = wait_for_span(&received, &clock_trace);
    assert_eq!(
        otlp::attr_str(&clock_span, "llamatap.cache.break.cause").as_deref(),
        Some("system_changed")
    );
    assert_eq!(
        otlp::attr_int(&clock_span, "llamatap.cache.break.offset"),
        Some(offset as i64)
    );
    let event = clock_span
        .events
        .iter()
        .find(|e| e.name == "cache_break")
        .expect("a cache_break event");
    let text = |key: &str| {
        event
            .attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref())
            .map(|v| format!("{:?}", v.value))
            .unwrap_or_default()
    };
    assert!(
        text("llamatap.cache.break.old_text").contains("16:05:01"),
        "{event:?}"
    );
    assert!(
        text("llamatap.cache.break.new_text").contains("16:05:09"),
        "{event:?}"
    );

    // The counters and the latency page.
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        m.contains("llamatap_prefill_recomputed_requests_total{cause=\"evicted\"} 1")
    });
    for (cause, n) in [
        ("reused", 6),
        ("new_conversation", 6),
        ("system_changed", 1),
        ("history_edited", 1),
        ("history_truncated", 1),
        ("tools_changed", 1),
        ("evicted", 1),
        ("other_upstream", 0),
    ] {
        let want = format!("llamatap_prefill_recomputed_requests_total{{cause=\"{cause}\"}} {n}\n");
        assert!(m.contains(&want), "{want} in\n{m}");
    }
    let (_, page) = common::http::get(&proxy.admin(), "/latency").unwrap();
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains("⚠ system_changed @0.system+"),
        "the page marks the break"
    );
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&template);
}

fn wait_for_span(
    received: &otlp::Received,
    trace_id: &str,
) -> opentelemetry_proto::tonic::trace::v1::Span {
    let mut found = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            found = received
                .wait(0, Duration::ZERO)
                .into_iter()
                .find(|s| otlp::hex(&s.trace_id) == trace_id && s.parent_span_id.is_empty());
            found.is_some()
        }),
        "no SERVER span for trace {trace_id}"
    );
    found.unwrap()
}

#[test]
fn a_turn_sent_to_another_upstream_is_other_upstream() {
    let mut servers = [
        LlamaServer::start("medium", &["-np", "1", "-c", "4096"]),
        LlamaServer::start("medium", &["-np", "1", "-c", "4096"]),
    ];
    let log = std::env::temp_dir().join(format!(
        "llamatap-cachebreak-fleet-{}.jsonl",
        servers[0].port
    ));
    let _ = std::fs::remove_file(&log);
    let proxy = Llamatap::start_fleet(
        &[&servers[0].base_url, &servers[1].base_url],
        &["--access-log", log.to_str().unwrap()],
    );
    let mut sdk = Sdk::start(&proxy);
    let mut access = AccessLog {
        path: log.clone(),
        seen: 0,
    };
    let mut conv = Conv::new(&format!(
        "You are the fleet's assistant. {}",
        filler("rule", 150)
    ));
    conv.turn(&mut sdk, "fleet: hello");
    access.expect("fleet turn 1", "new_conversation", None);
    conv.turn(&mut sdk, "go on");
    let line = access.expect("fleet turn 2", "reused", None);
    let home = line["upstream"].as_str().unwrap().to_string();
    let i = servers
        .iter()
        .position(|s| home.contains(&s.port.to_string()))
        .unwrap_or_else(|| panic!("which server is {home}?"));
    servers[i].kill();
    conv.turn(&mut sdk, "and now?");
    let line = access.expect("fleet turn 3", "other_upstream", None);
    assert_ne!(line["upstream"], home.as_str(), "{line}");
    assert!(
        line["cache_break"]["recomputed_tokens"].as_u64().unwrap() > 400,
        "{line}"
    );
    let _ = std::fs::remove_file(&log);
}

/// Clean conversations, interleaved in a pseudo-random order, each on its
/// own slot: every turn after the first is `reused`, never a false break.
#[test]
fn clean_interleaved_conversations_are_always_reused() {
    let llama = LlamaServer::start("medium", &["-np", "3", "-c", "6144"]);
    let log = std::env::temp_dir().join(format!("llamatap-cachebreak-clean-{}.jsonl", llama.port));
    let _ = std::fs::remove_file(&log);
    let proxy = Llamatap::start(&llama.base_url, &["--access-log", log.to_str().unwrap()]);
    let mut sdk = Sdk::start(&proxy);
    let mut access = AccessLog {
        path: log.clone(),
        seen: 0,
    };
    // Distinct system prompts, so llama-server gives each its own slot.
    let mut convs: Vec<Conv> = ["alpha", "bravo", "charlie"]
        .iter()
        .map(|stem| Conv::new(&format!("You help team {stem}. {}", filler(stem, 120))))
        .collect();
    let mut turns = [0usize; 3];
    let mut state = 12_345u64;
    for n in 0..24 {
        // A small linear congruential generator: the order is the same every run.
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let c = if n < 3 { n } else { (state >> 33) as usize % 3 };
        convs[c].turn(
            &mut sdk,
            &format!("conversation {c}, turn {}: go on", turns[c]),
        );
        let want = if turns[c] == 0 {
            "new_conversation"
        } else {
            "reused"
        };
        access.expect(&format!("conversation {c} turn {}", turns[c]), want, None);
        turns[c] += 1;
    }
    let _ = std::fs::remove_file(&log);
}
