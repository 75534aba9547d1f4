#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Prompt progress events through llamatap, on a real llama-server (the
//! tiny model, `-b 64`, so that a prompt of a few hundred tokens sends
//! several progress events): llamatap asks for them, a client that did not
//! ask gets none (its stream has the events a direct request gets, ids and
//! times apart), a client that asked gets them, the prediction corrected by
//! them is in the access line and `/latency.json`, and `[ttft]
//! prompt_progress = false` turns it all off; and two prompts prefilled
//! together on the slow model count each other's tokens.

mod common;

use std::path::Path;
use std::time::Duration;

use common::access_lines;
use common::http;
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use serde_json::{json, Value};

/// The body of a streamed (or not) request on `path`.
fn body(path: &str, prompt: &str, stream: bool, extra: &[(&str, Value)]) -> String {
    let mut v = match path {
        "/v1/chat/completions" => json!({"messages": [{"role": "user", "content": prompt}]}),
        _ => json!({ "prompt": prompt }),
    };
    let o = v.as_object_mut().unwrap();
    o.insert("stream".into(), json!(stream));
    o.insert("max_tokens".into(), json!(6));
    o.insert("n_predict".into(), json!(6));
    o.insert("temperature".into(), json!(0));
    o.insert("seed".into(), json!(7));
    for (k, val) in extra {
        o.insert((*k).into(), val.clone());
    }
    v.to_string()
}

/// Sends `body` to `addr`: the status and the whole answer.
fn send(addr: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let mut r = http::send(addr, "POST", path, &[], body.as_bytes()).unwrap();
    let status = r.head.status;
    (status, r.read_all().unwrap())
}

/// The stream's events, each a parsed JSON object (or the `[DONE]`
/// string), with what differs between two runs of the same request
/// removed: ids, times and llama-server's timings.
fn skeleton(answer: &[u8]) -> Vec<Value> {
    http::sse_data(answer)
        .iter()
        .map(|d| {
            let mut v: Value = serde_json::from_str(d).unwrap_or(Value::String(d.clone()));
            if let Some(o) = v.as_object_mut() {
                for k in ["id", "created", "timings"] {
                    o.remove(k);
                }
            }
            v
        })
        .collect()
}

/// The progress events of an answer.
fn progress_events(answer: &[u8]) -> Vec<Value> {
    http::sse_data(answer)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v.get("prompt_progress").is_some())
        .collect()
}

/// Waits for the access log's `n`th line (1-based) and returns it.
fn access_line(path: &Path, n: usize) -> Value {
    let logged = common::wait_until(Duration::from_secs(30), || access_lines(path).len() >= n);
    assert!(logged, "no access line {n} in {}", path.display());
    access_lines(path).swap_remove(n - 1)
}

fn start(llama: &LlamaServer, name: &str, toml: &str) -> (Llamatap, std::path::PathBuf) {
    let name = format!("progress-{name}-{}", llama.port);
    Llamatap::start_logged(&llama.base_url, &name, toml)
}

#[test]
fn progress_is_asked_stripped_or_passed_and_corrects_the_prediction() {
    let llama = LlamaServer::start("tiny", &["-np", "1", "-b", "64", "-ub", "64"]);
    let (proxy, log) = start(&llama, "on", "");
    let addr = proxy.addr();
    let direct = llama.addr();
    let prompt = llama.prompt_of_tokens(300);
    let chat = "/v1/chat/completions";

    // llama-server keeps the last of duplicate keys: the client's own
    // `return_progress` wins over the one llamatap puts first.
    let dup = format!(
        "{{\"return_progress\":true,{}",
        &body(chat, &prompt, true, &[("return_progress", json!(false))])[1..]
    );
    let (status, answer) = send(&direct, chat, &dup);
    assert_eq!(status, 200);
    assert!(
        progress_events(&answer).is_empty(),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Asked for, llama-server sends them (the prompt is new to its cache).
    let fresh = format!("other words {prompt}");
    let asked = body(chat, &fresh, true, &[("return_progress", json!(true))]);
    let (_, answer) = send(&direct, chat, &asked);
    assert!(
        progress_events(&answer).len() >= 2,
        "{}",
        String::from_utf8_lossy(&answer)
    );

    // The first request through llamatap teaches the predictor.
    let (status, first) = send(&addr, chat, &body(chat, &prompt, true, &[]));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&first));
    assert!(progress_events(&first).is_empty());
    access_line(&log, 1);

    // (a) Not asked by the client: no progress event, and the events of a
    // direct request, ids and times apart. The prompt is new to the cache
    // for the proxied one, so it sends several progress events upstream.
    for (i, path) in [chat, "/v1/completions", "/completion"].iter().enumerate() {
        // Neither run reuses the cache, so that both compute alike.
        let fresh = [("cache_prompt", json!(false))];
        let p = format!("nonce{i} {prompt}");
        let (status, proxied) = send(&addr, path, &body(path, &p, true, &fresh));
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&proxied));
        let text = String::from_utf8_lossy(&proxied);
        assert!(!text.contains("prompt_progress"), "{path}: {text}");
        let (_, direct_answer) = send(&direct, path, &body(path, &p, true, &fresh));
        assert_eq!(skeleton(&proxied), skeleton(&direct_answer), "{path}");
        // The correction is recorded: the access line has it.
        let line = access_line(&log, 2 + i);
        assert_eq!(line["path"], *path);
        assert!(line["predicted_ttft_ms"].is_u64(), "{line}");
        assert!(line["corrected_ttft_ms"].is_u64(), "{path}: {line}");
        // So is when its slot started it: after dispatch, before the first
        // token (both from arrival, later than dispatch).
        let started = line["ttft_slot_started_ms"].as_u64();
        let ttft = line["ttft_ms"].as_f64().unwrap();
        assert!(started.is_some_and(|s| s as f64 <= ttft.ceil()), "{line}");
        assert!(line["ttft_predicted_wait_ms"].is_u64(), "{line}");
        eprintln!(
            "{path}: predicted {} ms (wait {}), corrected {} ms, slot started {} ms \
             from dispatch, measured {} ms from arrival",
            line["predicted_ttft_ms"],
            line["ttft_predicted_wait_ms"],
            line["corrected_ttft_ms"],
            line["ttft_slot_started_ms"],
            line["ttft_ms"]
        );
    }

    // (b) Asked by the client: passed through untouched.
    let p = format!("nonce-asked {prompt}");
    let own = [
        ("return_progress", json!(true)),
        ("cache_prompt", json!(false)),
    ];
    let (status, proxied) = send(&addr, chat, &body(chat, &p, true, &own));
    assert_eq!(status, 200);
    let events = progress_events(&proxied);
    assert!(events.len() >= 2, "{}", String::from_utf8_lossy(&proxied));
    eprintln!("progress events a client asked for: {}", events.len());
    let first_progress = &events[0]["prompt_progress"];
    assert!(first_progress["total"].as_u64().unwrap() > 0);
    let line = access_line(&log, 5);
    assert!(line["corrected_ttft_ms"].is_u64(), "{line}");
    // The answer itself is whole: the events after the progress are the
    // direct request's.
    let (_, direct_answer) = send(&direct, chat, &body(chat, &p, true, &own));
    let strip = |a: &[u8]| -> Vec<Value> {
        skeleton(a)
            .into_iter()
            .filter(|v| v.get("prompt_progress").is_none())
            .collect()
    };
    assert_eq!(strip(&proxied), strip(&direct_answer));

    // Not streamed: nothing changes in the answer.
    let (status, whole) = send(&addr, chat, &body(chat, &prompt, false, &[]));
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&whole).unwrap();
    assert!(v.get("prompt_progress").is_none(), "{v}");
    assert!(v["choices"][0]["message"].is_object(), "{v}");

    // The latency page has the corrected mark.
    let (status, page) = http::get(&proxy.admin(), "/latency.json").unwrap();
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&page).unwrap();
    let text = v.to_string();
    assert!(text.contains("\"corrected_first_token_ms\":"), "{text}");
    let rows = v["requests"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter()
            .any(|r| r["corrected_first_token_ms"].is_number()),
        "{text}"
    );
}

#[test]
fn the_switch_turns_progress_off() {
    let llama = LlamaServer::start("tiny", &["-np", "1", "-b", "64", "-ub", "64"]);
    let (proxy, log) = start(&llama, "off", "[ttft]\nprompt_progress = false\n");
    let addr = proxy.addr();
    let prompt = llama.prompt_of_tokens(300);
    let chat = "/v1/chat/completions";
    for i in 0..2 {
        let p = format!("nonce{i} {prompt}");
        let (status, answer) = send(&addr, chat, &body(chat, &p, true, &[]));
        assert_eq!(status, 200);
        assert!(progress_events(&answer).is_empty());
        // Learned from (in `logging`, before its access line) before the
        // next is predicted: the client reads the answer's end a moment
        // before.
        access_line(&log, i + 1);
    }
    let line = access_line(&log, 2);
    assert!(line["predicted_ttft_ms"].is_u64(), "{line}");
    assert!(line["corrected_ttft_ms"].is_null(), "{line}");
    assert!(line["ttft_slot_started_ms"].is_null(), "{line}");
    // A client that asks still gets them from llama-server.
    let p = format!("nonce-asked {prompt}");
    let (_, answer) = send(
        &addr,
        chat,
        &body(chat, &p, true, &[("return_progress", json!(true))]),
    );
    assert!(!progress_events(&answer).is_empty());
}

/// A streamed chat whose prompt takes the slow model seconds to prefill
/// (in batches of 64 tokens), through llamatap with a 3 s upstream read
/// timeout and no pings: the answer and its access line.
fn slow_prefill(name: &str, toml: &str) -> (Vec<u8>, Value) {
    let llama = LlamaServer::start(
        "slow",
        &[
            "-np",
            "1",
            "-b",
            "64",
            "-ub",
            "64",
            "--sse-ping-interval",
            "-1",
        ],
    );
    let toml = format!("[upstream_timeouts]\nread_seconds = 3\n{toml}");
    let (proxy, log) = start(&llama, name, &toml);
    let prompt = llama.prompt_of_tokens(1600);
    let chat = "/v1/chat/completions";
    let (status, answer) = send(&proxy.addr(), chat, &body(chat, &prompt, true, &[]));
    assert_eq!(status, 200);
    (answer, access_line(&log, 1))
}

#[test]
fn progress_events_keep_a_long_prefill_alive_unseen() {
    let (answer, line) = slow_prefill("alive", "");
    let text = String::from_utf8_lossy(&answer);
    eprintln!("with progress: {line}");
    assert_eq!(line["outcome"], "ok", "{line}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(!text.contains("prompt_progress"), "{text}");
    assert!(line["corrected_ttft_ms"].is_null() || line["corrected_ttft_ms"].is_u64());
    // The same prefill without them is silent for longer than the read
    // timeout, and is cut.
    let (answer, line) = slow_prefill("silent", "[ttft]\nprompt_progress = false\n");
    eprintln!("without progress: {line}");
    assert_ne!(line["outcome"], "ok", "{line}");
    assert!(!String::from_utf8_lossy(&answer).ends_with("data: [DONE]\n\n"));
}

/// Two streamed chats on one member with two slots, the second sent once
/// the first's prefill started: each answer's access line counts the other
/// prompt's tokens that went through its own prefill's batches, at most all
/// of them.
#[test]
fn prompts_prefilled_together_count_each_others_tokens() {
    let llama = LlamaServer::start("slow", &["-np", "2", "-b", "64", "-ub", "64"]);
    let (proxy, log) = start(&llama, "beside", "");
    let addr = proxy.addr();
    let chat = "/v1/chat/completions";
    let long = llama.prompt_of_tokens_from("long", 600);
    let short = llama.prompt_of_tokens_from("short", 120);
    // The first asks for progress itself, to be seen to have started.
    let first = body(chat, &long, true, &[("return_progress", json!(true))]);
    let mut reader = http::post(&addr, chat, &first).unwrap();
    let started = reader.read_until(b"prompt_progress").unwrap();
    assert!(!started.is_empty());
    let second = std::thread::spawn({
        let addr = addr.clone();
        let b = body(chat, &short, true, &[]);
        move || send(&addr, chat, &b)
    });
    let rest = reader.read_all().unwrap();
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));
    let (status, answer) = second.join().unwrap();
    assert_eq!(status, 200);
    assert!(progress_events(&answer).is_empty());
    access_line(&log, 2);
    let lines = access_lines(&log);
    let new =
        |l: &Value| l["prompt_tokens"].as_u64().unwrap() - l["cached_tokens"].as_u64().unwrap();
    for (this, other) in [(&lines[0], &lines[1]), (&lines[1], &lines[0])] {
        eprintln!("{this}");
        let beside = this["ttft_prefill_beside_tokens"].as_u64();
        let beside = beside.unwrap_or_else(|| panic!("no tokens beside: {this}"));
        assert!(beside > 0, "{this}");
        assert!(
            beside <= new(other) + 1,
            "{beside} of {}: {this}",
            new(other)
        );
    }
}
