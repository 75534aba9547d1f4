//! `queue.affinity_wait_ms` against two real llama-servers (the medium
//! model, whose prefill is a visible part of TTFT; one slot each for
//! llamatap, `max_inflight = 1`): a conversation's next turn finds the
//! upstream holding its 1,500-token prefix busy. Without the wait it goes
//! to the free upstream and recomputes the prefix; with it, it waits for
//! its own upstream and reuses the prefix, unless that upstream stays busy
//! past the limit. The table printed is the trade-off.
//!
//! Needs llama-server (`scripts/ensure-deps.sh`); fails loudly without it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::fleet::{serial, wait_for};
use common::http;
use common::llama::LlamaServer;
use common::proxy::{metric_series, Llamatap};
use common::temp_config;
use serde_json::Value;

const NP2: [&str; 4] = ["-np", "2", "-c", "8192"];
const PROMPT_TOKENS: &str = "llamacpp:prompt_tokens_total";

/// A streamed answer: status, time to the first content, `cache_n`.
struct Turn {
    status: u16,
    ttft: Option<Duration>,
    cache_n: Option<u64>,
    body: String,
}

/// Sends one turn; `first_token`, when given, hears once the first content
/// arrived (llama-server has counted the prompt by then).
fn send(
    addr: &str,
    messages: &Value,
    max_tokens: u32,
    first_token: Option<mpsc::Sender<()>>,
) -> Turn {
    let body = serde_json::json!({
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": true,
    })
    .to_string();
    let sent = Instant::now();
    let mut r = http::post(addr, "/v1/chat/completions", &body).unwrap();
    let status = r.head.status;
    let mut raw = Vec::new();
    let mut ttft = None;
    while let Ok(Some(p)) = r.next_piece() {
        if ttft.is_none() && String::from_utf8_lossy(&p).contains("\"content\":\"") {
            ttft = Some(sent.elapsed());
            if let Some(tx) = &first_token {
                let _ = tx.send(());
            }
        }
        raw.extend_from_slice(&p);
    }
    let cache_n = http::sse_data(&raw)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["timings"]["cache_n"].as_u64());
    Turn {
        status,
        ttft,
        cache_n,
        body: String::from_utf8_lossy(&raw).into_owned(),
    }
}

fn busy(llama: &LlamaServer) -> bool {
    llama
        .slots()
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s["is_processing"] == true))
}

/// One run: what the next turn got, and where.
struct Run {
    wait_ms: u64,
    occupier_tokens: u32,
    ttft: Duration,
    cache_n: u64,
    home: bool,
    result: &'static str,
}

/// Turn 1 of a fresh conversation (stem `stem`) lands on some upstream; a
/// long answer of the same conversation occupies it; turn 2 arrives.
fn run(servers: &[LlamaServer], stem: &str, wait_ms: u64, occupier_tokens: u32) -> Run {
    let cfg = temp_config(
        &format!("affinity-{stem}"),
        &format!("[queue]\nenabled = true\nmax_inflight = 1\naffinity_wait_ms = {wait_ms}\n"),
    );
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let t = Llamatap::start_fleet(&urls, &["--config", cfg.to_str().unwrap()]);
    let both_up = |m: &str| {
        urls.iter().all(|u| {
            let name = u.trim_start_matches("http://");
            metric_series(
                m,
                "llamatap_upstream_up",
                &[&format!("upstream=\"{name}\"")],
            ) == Some(1.0)
        })
    };
    assert!(wait_for(Duration::from_secs(30), || both_up(&t.metrics())).is_some());
    let question = servers[0].prompt_of_tokens_from(stem, 1500);
    let turn1 = serde_json::json!([{"role": "user", "content": question}]);
    let before: Vec<f64> = servers.iter().map(|s| s.metric(PROMPT_TOKENS)).collect();
    let first = send(&t.addr(), &turn1, 1, None);
    assert_eq!(first.status, 200, "{}", first.body);
    let home = (0..servers.len())
        .find(|i| servers[*i].metric(PROMPT_TOKENS) > before[*i] + 1000.0)
        .expect("turn 1 reached one llama-server");
    // The same conversation again, with a long answer: affinity sends it
    // home, where it holds llamatap's one slot.
    let addr = t.addr();
    let again = turn1.clone();
    let (tx, streaming) = mpsc::channel();
    let occupier = thread::spawn(move || send(&addr, &again, occupier_tokens, Some(tx)));
    // Once its first token is out, its prompt is in the home upstream's
    // counter, so any later growth there is turn 2's.
    streaming
        .recv_timeout(Duration::from_secs(60))
        .expect("the long answer started streaming");
    assert!(busy(&servers[home]), "the long answer holds its upstream");
    assert!(!busy(&servers[1 - home]), "the other upstream is free");
    let turn2 = serde_json::json!([
        {"role": "user", "content": question},
        {"role": "assistant", "content": "Understood."},
        {"role": "user", "content": "Now summarise it in one line."}
    ]);
    let before: Vec<f64> = servers.iter().map(|s| s.metric(PROMPT_TOKENS)).collect();
    let next = send(&t.addr(), &turn2, 4, None);
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(occupier.join().unwrap().status, 200);
    let on_home = servers[home].metric(PROMPT_TOKENS) > before[home];
    let m = t.metrics();
    let count = |r: &str| {
        metric_series(
            &m,
            "llamatap_queue_affinity_waits_total",
            &[&format!("result=\"{r}\"")],
        )
        .unwrap_or(0.0)
    };
    let result = match (count("freed"), count("expired")) {
        (f, 0.0) if f >= 1.0 => "freed",
        (0.0, e) if e >= 1.0 => "expired",
        (0.0, 0.0) => "no wait",
        other => panic!("one turn waited, counted {other:?}"),
    };
    Run {
        wait_ms,
        occupier_tokens,
        ttft: next.ttft.expect("turn 2 streamed content"),
        cache_n: next.cache_n.expect("turn 2 has timings"),
        home: on_home,
        result,
    }
}

#[test]
fn a_bounded_wait_for_the_prefix_upstream_reuses_the_prefix_and_gives_up_in_time() {
    let _serial = serial();
    let servers = vec![
        LlamaServer::start("medium", &NP2),
        LlamaServer::start("medium", &NP2),
    ];
    let runs = [
        run(&servers, "alpha", 0, 400),
        run(&servers, "bravo", 60000, 400),
        run(&servers, "charlie", 300, 2000),
        run(&servers, "delta", 60000, 40),
    ];
    eprintln!(
        "\nnext turn of a 1,500-token conversation whose upstream is busy (max_inflight 1 each)\n\
         | affinity_wait_ms | busy answer (tokens) | result | served by | cache_n | TTFT ms |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    for r in &runs {
        eprintln!(
            "| {} | {} | {} | {} | {} | {:.0} |",
            r.wait_ms,
            r.occupier_tokens,
            r.result,
            if r.home { "its upstream" } else { "the other" },
            r.cache_n,
            r.ttft.as_secs_f64() * 1e3
        );
    }
    // No wait: the free upstream, the prefix recomputed.
    assert_eq!((runs[0].result, runs[0].home), ("no wait", false));
    assert!(
        runs[0].cache_n < 100,
        "recomputed: cache_n {}",
        runs[0].cache_n
    );
    // A wait longer than the busy answer: its own upstream, the prefix reused.
    assert_eq!((runs[1].result, runs[1].home), ("freed", true));
    assert!(
        runs[1].cache_n >= 1000,
        "reused: cache_n {}",
        runs[1].cache_n
    );
    // A wait shorter than the busy answer: it gives up and goes elsewhere,
    // within its limit (the TTFT includes the wait and a full prefill).
    assert_eq!((runs[2].result, runs[2].home), ("expired", false));
    assert!(
        runs[2].ttft >= Duration::from_millis(300),
        "{:?}",
        runs[2].ttft
    );
}
