#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Prompts sent to a member in the order llamatap dispatched them
//! (`[ttft] sequence_prompts`), on a real llama-server with one slot: a
//! prompt waits while the one dispatched before it has not started, and
//! no longer than 50 ms; without the setting (off by default) it does not
//! wait.

mod common;

use std::path::Path;
use std::time::Duration;

use common::access_lines;
use common::http;
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn chat(prompt: &str, max_tokens: u32) -> String {
    json!({
        "messages": [{"role": "user", "content": prompt}],
        "stream": true,
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "temperature": 0,
    })
    .to_string()
}

fn wait_for_lines(path: &Path, n: usize) -> Vec<Value> {
    let logged = common::wait_until(Duration::from_secs(60), || access_lines(path).len() >= n);
    assert!(logged, "no access line {n} in {}", path.display());
    access_lines(path)
}

fn post(addr: &str, body: &str) -> http::Reader {
    http::post(addr, CHAT, body).unwrap()
}

/// Sends a short streamed prompt from another thread, and waits until
/// llama-server holds `deferred` requests in its queue.
fn queue(
    llama: &LlamaServer,
    addr: &str,
    prompt: &str,
    deferred: u32,
) -> std::thread::JoinHandle<std::io::Result<Vec<u8>>> {
    let (addr, body) = (addr.to_string(), chat(prompt, 4));
    let sent = std::thread::spawn(move || post(&addr, &body).read_all());
    let queued = common::wait_until(Duration::from_secs(60), || {
        llama.metric("llamacpp:requests_deferred") >= f64::from(deferred)
    });
    assert!(
        queued,
        "{prompt}: llama-server never held {deferred} in its queue"
    );
    sent
}

/// With one slot held by a long answer: a prompt queued in llama-server
/// behind it (not started), then a second prompt. Returns the access
/// lines of the holder, the queued prompt and the second, in that order.
fn queued_pair(llama: &LlamaServer, name: &str, toml: &str) -> Vec<Value> {
    let logged = format!("sequence-{name}-{}", llama.port);
    let (proxy, log) = Llamatap::start_logged(&llama.base_url, &logged, toml);
    let addr = proxy.addr();
    // A first streamed answer: the member is seen to send progress events.
    post(&addr, &chat(&format!("{name} warm up"), 4))
        .read_all()
        .unwrap();
    wait_for_lines(&log, 1);
    // The holder takes the only slot and decodes for seconds.
    let mut holder = post(&addr, &chat(&format!("{name} hold"), 4000));
    holder.read_until(b"\"content\":\"").unwrap();
    // Queued in llama-server: written upstream, so described on the board.
    let queued = queue(llama, &addr, &format!("{name} queued"), 1);
    // Then the next one (with sequencing, once its wait is over).
    let second = queue(llama, &addr, &format!("{name} second"), 2);
    // The holder's client hangs up: llama-server stops it, and the two
    // queued prompts are answered.
    drop(holder);
    queued.join().unwrap().unwrap();
    second.join().unwrap().unwrap();
    let lines = wait_for_lines(&log, 4);
    // The holder is the answer its client cut; the one slot served the
    // queued prompt before the second, so its line came first.
    let (cut, answered): (Vec<Value>, Vec<Value>) = lines[1..]
        .iter()
        .cloned()
        .partition(|l| l["outcome"] == "client_hangup");
    assert_eq!((cut.len(), answered.len()), (1, 2), "{lines:?}");
    [&cut[..], &answered[..]].concat()
}

#[test]
fn a_prompt_waits_for_the_one_before_it_to_start_at_most_50_ms() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let lines = queued_pair(&llama, "on", "[ttft]\nsequence_prompts = true\n");
    let [holder, queued, second] = &lines[..] else {
        panic!("{lines:?}");
    };
    for l in &lines {
        eprintln!("{l}");
    }
    // The holder and the queued prompt had nothing unstarted before them.
    assert_eq!(holder["ttft_sequenced_ms"], Value::Null, "{holder}");
    assert_eq!(queued["ttft_sequenced_ms"], Value::Null, "{queued}");
    // The second waited for the queued prompt's start, which the held slot
    // kept seconds away: the wait's bound ended it.
    let waited = second["ttft_sequenced_ms"].as_u64();
    let waited = waited.unwrap_or_else(|| panic!("the second did not wait: {second}"));
    assert!((50..1000).contains(&waited), "{second}");
}

#[test]
fn by_default_no_prompt_waits() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let lines = queued_pair(&llama, "off", "");
    for l in &lines {
        eprintln!("{l}");
        assert_eq!(l["ttft_sequenced_ms"], Value::Null, "{l}");
    }
}
