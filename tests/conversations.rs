//! Resumable streams through a fleet of two real llama-servers: a replay,
//! a stop and a follow-up reach the member that holds the conversation,
//! the lookup is answered across the fleet, a member that left gives a
//! clear error, and replicas share the book through the store.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::fleet::{self, serial, start_servers, upstream_up};
use common::http;
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use common::{access_lines, temp_config};

const ALICE: &str = "alice-secret-key-7f3a9c";
const BOB: &str = "bob-secret-key-5e1d20";

fn named_keys() -> String {
    format!(
        "[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\n\
         [[auth.keys]]\nname = \"bob\"\nkey = \"{BOB}\"\n"
    )
}

/// One request: status and body.
fn call(addr: &str, method: &str, target: &str, key: Option<&str>, body: &str) -> (u16, Vec<u8>) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut h: Vec<(&str, &str)> = vec![("Connection", "close")];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    let mut r = http::send(addr, method, target, &h, body.as_bytes()).unwrap();
    let b = r.read_all().unwrap();
    (r.head.status, b)
}

/// A streamed chat whose prompt differs per conversation `n`, so that the
/// router places each by its own hash, on either member.
fn stream_chat(n: usize) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": format!("Conversation {n}: count from one to forty in words, {}.", "slowly ".repeat(n))}],
        "stream": true, "max_tokens": 48, "temperature": 0.0, "seed": 7,
    })
    .to_string()
}

/// Starts a streamed chat under `conv` and hangs up after `events` whole
/// events: those events' bytes.
fn start_and_hang_up(
    addr: &str,
    key: Option<&str>,
    conv: &str,
    n: usize,
    events: usize,
) -> Vec<u8> {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut h: Vec<(&str, &str)> = vec![("X-Conversation-Id", conv)];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    let body = stream_chat(n);
    let mut r = http::send(addr, "POST", "/v1/chat/completions", &h, body.as_bytes()).unwrap();
    assert_eq!(r.head.status, 200);
    let mut got = Vec::new();
    let ends = |b: &[u8]| -> Vec<usize> {
        (0..b.len().saturating_sub(1))
            .filter(|&i| &b[i..i + 2] == b"\n\n")
            .collect()
    };
    while ends(&got).len() < events {
        got.extend_from_slice(&r.next_piece().unwrap().expect("the stream ended early"));
    }
    drop(r);
    got.truncate(ends(&got)[events - 1] + 2);
    got
}

/// The lookup's entries through `addr`.
fn lookup(addr: &str, key: Option<&str>, ids: &[&str]) -> (u16, Vec<serde_json::Value>) {
    let body = serde_json::json!({ "conversation_ids": ids }).to_string();
    let (s, b) = call(addr, "POST", "/v1/streams/lookup", key, &body);
    let v: serde_json::Value = serde_json::from_slice(&b)
        .unwrap_or_else(|_| panic!("{s}: {}", String::from_utf8_lossy(&b)));
    match v {
        serde_json::Value::Array(a) => (s, a),
        other => (s, vec![other]),
    }
}

/// The lookup's entries at one llama-server directly.
fn direct_lookup(llama: &LlamaServer, ids: &[&str]) -> Vec<serde_json::Value> {
    let body = serde_json::json!({ "conversation_ids": ids }).to_string();
    match llama.json("POST", "/v1/streams/lookup", Some(&body)) {
        serde_json::Value::Array(a) => a,
        other => panic!("{other}"),
    }
}

fn replay(addr: &str, key: Option<&str>, conv: &str) -> (u16, Vec<u8>) {
    call(
        addr,
        "GET",
        &format!("/v1/stream?conv_id={conv}&from=0"),
        key,
        "",
    )
}

/// A whole answer: its events end with `[DONE]`.
fn whole(body: &[u8]) -> bool {
    http::sse_data(body).last().is_some_and(|d| d == "[DONE]")
}

fn fleet_of_two(extra: &[&str]) -> (Vec<LlamaServer>, Llamatap) {
    let servers = start_servers(2, "tiny", &[]);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let proxy = Llamatap::start_fleet(&urls, extra);
    wait_all_up(&proxy, &servers);
    (servers, proxy)
}

fn wait_all_up(proxy: &Llamatap, servers: &[LlamaServer]) {
    let ok = fleet::wait_for(Duration::from_secs(20), || {
        let m = proxy.metrics();
        servers.iter().all(|s| upstream_up(&m, s) == Some(1.0))
    });
    assert!(ok.is_some(), "{}", proxy.stderr());
}

/// Which of `servers` holds `conv` (asked directly).
fn holder(servers: &[LlamaServer], conv: &str) -> Option<usize> {
    servers
        .iter()
        .position(|s| !direct_lookup(s, &[conv]).is_empty())
}

// === route by conversation ===

#[test]
fn replays_stops_and_lookups_reach_the_member_holding_the_conversation() {
    let _serial = serial();
    let (servers, proxy) = fleet_of_two(&[]);
    let addr = proxy.addr();
    let ids: Vec<String> = (0..8).map(|i| format!("conv-{i}")).collect();
    let mut seen = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        seen.push(start_and_hang_up(&addr, None, id, i, 5));
    }
    let placed: Vec<Option<usize>> = ids.iter().map(|id| holder(&servers, id)).collect();
    eprintln!("conversations per member: {placed:?}");
    assert!(placed.iter().all(Option::is_some), "{placed:?}");
    let mut found = 0;
    for (id, first) in ids.iter().zip(&seen) {
        let (s, all) = replay(&addr, None, id);
        if s == 200 && whole(&all) && all.starts_with(first) {
            found += 1;
        }
    }
    eprintln!("replays that found their answer: {found} of {}", ids.len());
    assert_eq!(found, ids.len());

    // The lookup lists every conversation, wherever it is.
    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (s, entries) = lookup(&addr, None, &names);
    assert_eq!(s, 200);
    assert_eq!(entries.len(), ids.len(), "{entries:?}");

    // A stop reaches the member holding the conversation.
    for id in &ids {
        let (s, b) = call(
            &addr,
            "DELETE",
            &format!("/v1/stream?conv_id={id}"),
            None,
            "",
        );
        assert_eq!(s, 204, "{}", String::from_utf8_lossy(&b));
        assert_eq!(holder(&servers, id), None, "{id} is still buffered");
    }
}

#[test]
fn with_named_keys_the_fleets_lookup_is_merged_and_each_tenant_sees_its_own() {
    let _serial = serial();
    let config = temp_config("conv-fleet-keys", &named_keys());
    let (servers, proxy) = fleet_of_two(&["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    // Alice's conversations, until they sit on both members (a new
    // conversation is placed by a hash of its first message, so six alone
    // land on one member in one run of 32). Scoped: asked directly by her
    // id, no member knows it.
    let prefix = llamatap_wire::conversation::Scope::of_tenant("alice")
        .prefix()
        .to_string();
    let mut ids: Vec<String> = Vec::new();
    let mut per_member = vec![0usize; servers.len()];
    for i in 0..40 {
        if ids.len() >= 6 && per_member.iter().all(|n| *n > 0) {
            break;
        }
        let id = format!("k-{i}");
        start_and_hang_up(&addr, Some(ALICE), &id, i, 2);
        let at = holder(&servers, &format!("{prefix}{id}"));
        per_member[at.unwrap_or_else(|| panic!("{id} is held by no member"))] += 1;
        ids.push(id);
    }
    eprintln!("alice's conversations per member: {per_member:?}");
    assert!(per_member.iter().all(|n| *n > 0), "{per_member:?}");
    start_and_hang_up(&addr, Some(BOB), "bob-1", 9, 2);
    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut with_bob = names.clone();
    with_bob.push("bob-1");
    let (s, entries) = lookup(&addr, Some(ALICE), &with_bob);
    assert_eq!(s, 200);
    let mut listed: Vec<String> = entries
        .iter()
        .map(|e| e["conversation_id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    let (_, bobs) = lookup(&addr, Some(BOB), &with_bob);
    assert_eq!(bobs.len(), 1, "{bobs:?}");
    assert_eq!(bobs[0]["conversation_id"], "bob-1");
    // Each replay finds its member; Bob's replay of Alice's id does not.
    for id in &ids {
        let (s, all) = replay(&addr, Some(ALICE), id);
        assert_eq!(s, 200, "{id}: {}", String::from_utf8_lossy(&all));
        assert!(whole(&all), "{id}");
        assert_eq!(replay(&addr, Some(BOB), id).0, 404, "{id}");
    }
}

#[test]
fn a_follow_up_with_the_same_id_goes_to_the_member_holding_it() {
    let _serial = serial();
    let (servers, proxy) = fleet_of_two(&[]);
    let addr = proxy.addr();
    let mut moved = 0;
    for i in 0..4 {
        let id = format!("follow-{i}");
        start_and_hang_up(&addr, None, &id, i, 2);
        let first = holder(&servers, &id).unwrap();
        // Another prompt, which the router alone may place elsewhere.
        start_and_hang_up(&addr, None, &id, 20 + i * 3, 2);
        let now = holder(&servers, &id).unwrap();
        if now != first {
            moved += 1;
        }
        // llama-server replaced the buffer in place: one member has it.
        let holders = servers
            .iter()
            .filter(|s| !direct_lookup(s, &[&id]).is_empty())
            .count();
        assert_eq!(holders, 1, "{id}");
    }
    assert_eq!(moved, 0);
}

#[test]
fn a_replay_whose_member_died_is_served_from_the_copy_or_gets_a_clear_error() {
    let _serial = serial();
    let redis = common::redis::Redis::start();
    let toml = format!(
        "[auth.store]\nurl = \"{}\"\ntimeout_ms = 2000\n\
         [queue]\nenabled = true\nshared = true\n",
        redis.url()
    );
    let config = temp_config("conv-died", &toml);
    let args = ["--config", config.to_str().unwrap()];
    let (mut servers, a) = fleet_of_two(&args);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let b = Llamatap::start_fleet(&urls, &args);
    wait_all_up(&b, &servers);
    let ids: Vec<String> = (0..6).map(|i| format!("gone-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start_and_hang_up(&a.addr(), None, id, i, 2);
    }
    let placed: Vec<usize> = ids.iter().map(|id| holder(&servers, id).unwrap()).collect();
    // What the members replay while they live.
    let before: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| {
            let (s, all) = replay(&a.addr(), None, id);
            assert_eq!(s, 200);
            all
        })
        .collect();
    let stored = fleet::wait_for(Duration::from_secs(10), || {
        ids.iter().all(|id| {
            redis
                .command(&["GET", &format!("llamatap:conv:{id}")])
                .is_some_and(|v| v.contains("127.0.0.1"))
        })
    });
    assert!(stored.is_some());
    let victim = placed[0];
    let name = fleet::upstream_name(&servers[victim]);
    servers[victim].kill();
    for proxy in [&a, &b] {
        let down = fleet::wait_for(Duration::from_secs(20), || {
            upstream_up(&proxy.metrics(), &servers[victim]) == Some(0.0)
        });
        assert!(down.is_some());
    }
    let mut from_copy = 0;
    for ((id, at), first) in ids.iter().zip(&placed).zip(&before) {
        // The replica that saw the answer serves it, the same bytes.
        let (s, all) = replay(&a.addr(), None, id);
        assert_eq!(s, 200, "{id}: {}", String::from_utf8_lossy(&all));
        assert_eq!(&all, first, "{id}");
        // From byte 10 on, too.
        let target = format!("/v1/stream?conv_id={id}&from=10");
        let (s, tail) = call(&a.addr(), "GET", &target, None, "");
        assert_eq!(s, 200);
        assert_eq!(tail, first[10..], "{id}");
        // The replica that only knows where it was: a clear error.
        let (s, b_all) = replay(&b.addr(), None, id);
        if *at == victim {
            from_copy += 1;
            assert_eq!(s, 502, "{}", String::from_utf8_lossy(&b_all));
            let v: serde_json::Value = serde_json::from_slice(&b_all).unwrap();
            assert_eq!(v["error"]["code"], "conversation_lost");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains(&name) && msg.contains("down"), "{msg}");
        } else {
            assert_eq!(s, 200, "{id}");
            assert_eq!(&b_all, first);
        }
    }
    eprintln!("replays served from the copy after their member died: {from_copy}");
    assert!(from_copy > 0);
    // The lookup still answers, from the member left.
    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (s, entries) = lookup(&a.addr(), None, &names);
    assert_eq!(s, 200);
    let alive = placed.iter().filter(|p| **p != victim).count();
    assert_eq!(entries.len(), alive, "{entries:?}");
    // A stop of a conversation whose member died forgets the copy.
    let gone = &ids[0];
    let (s, _) = call(
        &a.addr(),
        "DELETE",
        &format!("/v1/stream?conv_id={gone}"),
        None,
        "",
    );
    assert_eq!(s, 204);
    assert_eq!(replay(&a.addr(), None, gone).0, 502);
}

#[test]
fn replicas_share_the_book_through_the_store() {
    let _serial = serial();
    let redis = common::redis::Redis::start();
    let toml = format!(
        "[auth.store]\nurl = \"{}\"\ntimeout_ms = 2000\n\
         [queue]\nenabled = true\nshared = true\n",
        redis.url()
    );
    let config = temp_config("conv-shared", &toml);
    let args = ["--config", config.to_str().unwrap()];
    let (servers, a) = fleet_of_two(&args);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let b = Llamatap::start_fleet(&urls, &args);
    wait_all_up(&b, &servers);
    let ids: Vec<String> = (0..8).map(|i| format!("shared-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start_and_hang_up(&a.addr(), None, id, i, 5);
    }
    // The store holds every id (written off the request's path).
    let stored = fleet::wait_for(Duration::from_secs(10), || {
        ids.iter().all(|id| {
            redis
                .command(&["GET", &format!("llamatap:conv:{id}")])
                .is_some_and(|v| v.contains("127.0.0.1"))
        })
    });
    assert!(stored.is_some());
    let mut found = 0;
    for id in &ids {
        let (s, all) = replay(&b.addr(), None, id);
        if s == 200 && whole(&all) {
            found += 1;
        }
    }
    eprintln!("replays through the other replica that found their answer: {found} of 8");
    assert_eq!(found, ids.len());
}

// === one account of a resumed answer ===

/// llama-server's count of generated tokens, from a chat stream's last
/// event with `timings`.
fn predicted_n(body: &[u8]) -> Option<u64> {
    http::sse_data(body)
        .iter()
        .rev()
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .find_map(|v| v["timings"]["predicted_n"].as_u64())
}

#[test]
fn a_hung_up_generation_is_observed_to_its_end_and_its_replay_is_recorded_as_a_replay() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let log = std::env::temp_dir().join(format!("llamatap-conv-{}.jsonl", llama.port));
    let _ = std::fs::remove_file(&log);
    let proxy = Llamatap::start(&llama.base_url, &["--access-log", log.to_str().unwrap()]);
    let addr = proxy.addr();
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Tell a long story."}],
        "stream": true, "max_tokens": 400, "temperature": 0.0, "seed": 7,
        "ignore_eos": true,
    })
    .to_string();
    let h = [("X-Conversation-Id", "long-1")];
    let mut r = http::send(&addr, "POST", "/v1/chat/completions", &h, body.as_bytes()).unwrap();
    assert_eq!(r.head.status, 200);
    r.next_piece().unwrap().unwrap();
    drop(r);
    let lines = || access_lines(&log);
    let logged = common::wait_until(Duration::from_secs(60), || {
        lines()
            .iter()
            .any(|l| l["conversation"]["use"] == "generate")
    });
    assert!(logged, "{}", proxy.stderr());
    let (s, all) = replay(&addr, None, "long-1");
    assert_eq!(s, 200);
    assert!(whole(&all));
    let generated = predicted_n(&all).expect("the replay's last event has timings");
    assert_eq!(generated, 400);
    let replayed = common::wait_until(Duration::from_secs(30), || {
        lines().iter().any(|l| l["conversation"]["use"] == "replay")
    });
    assert!(replayed);
    let lines = lines();
    let gen = lines
        .iter()
        .find(|l| l["conversation"]["use"] == "generate")
        .unwrap();
    eprintln!("generation: {gen}");
    assert_eq!(gen["outcome"], "client_hangup");
    // The whole answer, counted once: llama-server's own count.
    assert_eq!(gen["completion_tokens"], generated, "{gen}");
    let unsent = gen["conversation"]["unsent_bytes"].as_u64().unwrap();
    assert!(unsent > 0, "{gen}");
    let rep = lines
        .iter()
        .find(|l| l["conversation"]["use"] == "replay")
        .unwrap();
    eprintln!("replay: {rep}");
    assert_eq!(rep["conversation"]["replayed_bytes"], all.len() as u64);
    assert_eq!(rep["conversation"]["unsent_bytes"], 0);
    let m = proxy.metrics();
    let unsent_total = common::proxy::metric_value(&m, "llamatap_conversation_unsent_bytes_total");
    assert_eq!(unsent_total, Some(unsent as f64), "{m}");
    let replayed_total =
        common::proxy::metric_value(&m, "llamatap_conversation_replayed_bytes_total");
    assert_eq!(replayed_total, Some(all.len() as f64));
    assert!(
        m.contains("llamatap_conversation_requests_total{use=\"replay\"} 1"),
        "{m}"
    );
}

// === pings ===

/// A streamed chat whose prompt takes the slow model seconds to prefill,
/// through llamatap with a 3 s upstream read timeout: the body's pieces
/// with their arrival times (from the request), and the access line.
fn slow_prefill_through(ping: &str) -> (Vec<(Duration, Vec<u8>)>, serde_json::Value, i64) {
    let llama = LlamaServer::start("slow", &["-np", "1", "--sse-ping-interval", ping]);
    let log = std::env::temp_dir().join(format!("llamatap-ping-{}.jsonl", llama.port));
    let _ = std::fs::remove_file(&log);
    let config = temp_config(
        &format!("ping-{}", llama.port),
        "[upstream_timeouts]\nread_seconds = 3\n",
    );
    let (otlp_url, spans) = common::otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
        ],
    );
    let prompt = llama.prompt_of_tokens(1600);
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": prompt}],
        "stream": true, "max_tokens": 8, "temperature": 0.0, "seed": 42,
    })
    .to_string();
    let sent = std::time::Instant::now();
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/v1/chat/completions",
        &[],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
    let pieces: Vec<(Duration, Vec<u8>)> = r
        .pieces_timed()
        .unwrap()
        .into_iter()
        .map(|(t, p)| (t.duration_since(sent), p))
        .collect();
    let logged = common::wait_until(Duration::from_secs(30), || !access_lines(&log).is_empty());
    assert!(logged);
    let line = access_lines(&log).remove(0);
    let server = spans
        .wait(1, Duration::from_secs(30))
        .into_iter()
        .find(|s| common::otlp::attr_int(s, "llamatap.token_events").is_some())
        .expect("the request's span");
    let events = common::otlp::attr_int(&server, "llamatap.token_events").unwrap();
    (pieces, line, events)
}

#[test]
fn pings_pass_through_byte_exact_outside_ttft_and_the_counts_and_keep_the_upstream_alive() {
    let (pieces, line, token_events) = slow_prefill_through("1");
    let all: Vec<u8> = pieces.iter().flat_map(|(_, p)| p.clone()).collect();
    let first_ping = pieces
        .iter()
        .find(|(_, p)| p.as_slice() == b":\n\n")
        .map(|(t, _)| *t)
        .expect("no ping reached the client");
    let pings = pieces
        .iter()
        .filter(|(_, p)| p.as_slice() == b":\n\n")
        .count();
    let first_content = pieces
        .iter()
        .find(|(_, p)| !http::chat_content(p).is_empty())
        .map(|(t, _)| *t)
        .expect("no content");
    eprintln!(
        "pings: {pings}, first at {first_ping:?}, first content at {first_content:?}; access line: {line}; token_events {token_events}"
    );
    // The 3 s read timeout did not cut the seconds-long prefill: each ping
    // proved the upstream alive.
    assert!(pings >= 2, "{pings}");
    assert!(whole(&all), "{}", String::from_utf8_lossy(&all));
    assert_eq!(line["outcome"], "ok", "{line}");
    // Pings are not the first token, nor the first sentence.
    let ttft = line["ttft_ms"].as_f64().unwrap();
    let ping_ms = first_ping.as_secs_f64() * 1000.0;
    assert!(
        ttft > ping_ms + 500.0,
        "ttft {ttft} ms, first ping {ping_ms} ms"
    );
    if let Some(s) = line["first_sentence_ms"].as_f64() {
        assert!(s >= ttft, "{line}");
    }
    // Nor token events: at most one per generated token.
    let generated = line["completion_tokens"].as_i64().unwrap();
    assert!(token_events <= generated, "{token_events} > {generated}");
}

#[test]
fn without_pings_the_same_silent_prefill_hits_the_read_timeout() {
    let (pieces, line, _) = slow_prefill_through("-1");
    let all: Vec<u8> = pieces.iter().flat_map(|(_, p)| p.clone()).collect();
    assert!(!pieces.iter().any(|(_, p)| p.as_slice() == b":\n\n"));
    assert!(!whole(&all), "{}", String::from_utf8_lossy(&all));
    assert_eq!(line["outcome"], "upstream_error", "{line}");
}

#[test]
fn a_replica_without_the_store_finds_the_holder_by_asking_the_members() {
    let _serial = serial();
    let (servers, a) = fleet_of_two(&[]);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let b = Llamatap::start_fleet(&urls, &[]);
    wait_all_up(&b, &servers);
    let ids: Vec<String> = (0..8).map(|i| format!("asked-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start_and_hang_up(&a.addr(), None, id, i, 5);
    }
    let mut found = 0;
    for id in &ids {
        let (s, all) = replay(&b.addr(), None, id);
        if s == 200 && whole(&all) {
            found += 1;
        }
    }
    eprintln!("replays through a replica that never saw them: {found} of 8");
    assert_eq!(found, ids.len());
    // A stop through it reaches the holder too.
    for id in &ids[..4] {
        let (s, _) = call(
            &b.addr(),
            "DELETE",
            &format!("/v1/stream?conv_id={id}"),
            None,
            "",
        );
        assert_eq!(s, 204);
        assert_eq!(holder(&servers, id), None, "{id}");
    }
    // An id no member holds: llama-server's own 404.
    assert_eq!(replay(&b.addr(), None, "nobody-has-it").0, 404);
}

/// Starts an endless story under `conv` through `proxy`, hangs up after
/// its first piece, and kills the member holding it while it generates:
/// the bytes the client got, and which member was killed.
fn start_and_kill(
    servers: &mut [LlamaServer],
    proxy: &Llamatap,
    key: Option<(&str, &str)>,
    conv: &str,
) -> (Vec<u8>, usize) {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Tell an endless story."}],
        "stream": true, "max_tokens": 1200, "temperature": 0.0, "seed": 7,
        "ignore_eos": true,
    })
    .to_string();
    let auth = key.map(|(_, k)| format!("Bearer {k}"));
    let mut h = vec![("X-Conversation-Id", conv)];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    let addr = proxy.addr();
    let mut r = http::send(&addr, "POST", "/v1/chat/completions", &h, body.as_bytes()).unwrap();
    assert_eq!(r.head.status, 200);
    let heard = r.next_piece().unwrap().unwrap().to_vec();
    drop(r);
    // As llama-server sees it: scoped to the tenant.
    let scoped = match key {
        Some((tenant, _)) => format!(
            "{}{conv}",
            llamatap_wire::conversation::Scope::of_tenant(tenant).prefix()
        ),
        None => conv.to_string(),
    };
    let conv = scoped.as_str();
    let at = holder(servers, conv).unwrap();
    // Killed while it still generates, with some of it buffered.
    let midway = fleet::wait_for(Duration::from_secs(30), || {
        direct_lookup(&servers[at], &[conv])
            .first()
            .is_some_and(|e| e["total_bytes"].as_u64().unwrap_or(0) > 12_000)
    });
    assert!(midway.is_some());
    let done = direct_lookup(&servers[at], &[conv])[0]["is_done"] == true;
    servers[at].kill();
    assert!(!done, "the answer ended before the kill: make it longer");
    let down = fleet::wait_for(Duration::from_secs(20), || {
        upstream_up(&proxy.metrics(), &servers[at]) == Some(0.0)
    });
    assert!(down.is_some());
    (heard, at)
}

#[test]
fn a_copy_of_an_answer_cut_by_its_members_death_ends_with_an_error_event_without_continuation() {
    let _serial = serial();
    let off = temp_config("conv-cut-off", "[continuation]\nenabled = false\n");
    let servers = start_servers(2, "tiny", &[]);
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let proxy = Llamatap::start_fleet(&urls, &["--config", off.to_str().unwrap()]);
    let mut servers = servers;
    wait_all_up(&proxy, &servers);
    start_and_kill(&mut servers, &proxy, None, "cut-1");
    let (s, all) = replay(&proxy.addr(), None, "cut-1");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&all));
    let events = http::sse_data(&all);
    eprintln!("events kept of the cut answer: {}", events.len());
    assert!(events.len() > 20, "{}", events.len());
    assert!(!events.iter().any(|e| e == "[DONE]"));
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "conversation_cut", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("continuation is off"), "{message}");
}

/// The access line of the request to `path`, once written.
fn logged(log: &std::path::Path, path: &str) -> serde_json::Value {
    let mut line = None;
    common::wait_until(Duration::from_secs(30), || {
        line = access_lines(log).into_iter().find(|l| l["path"] == path);
        line.is_some()
    });
    line.unwrap_or_else(|| panic!("no access line for {path}"))
}

#[test]
fn a_cut_copy_with_no_other_member_to_continue_it_ends_with_an_error_event_naming_why() {
    let _serial = serial();
    let (mut servers, proxy) = fleet_of_two(&[]);
    let (heard, at) = start_and_kill(&mut servers, &proxy, None, "alone-1");
    let other = 1 - at;
    servers[other].kill();
    let down = fleet::wait_for(Duration::from_secs(20), || {
        upstream_up(&proxy.metrics(), &servers[other]) == Some(0.0)
    });
    assert!(down.is_some());
    let (s, all) = replay(&proxy.addr(), None, "alone-1");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&all));
    assert!(all.starts_with(&heard));
    let events = http::sse_data(&all);
    assert!(!events.iter().any(|e| e == "[DONE]"));
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "conversation_cut", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    // The other member is down too: none takes the rest (`no_other_upstream`),
    // or the one the fleet still tries fails to connect (`target_failed`).
    let why = message
        .rsplit("its rest was not generated: ")
        .next()
        .unwrap();
    assert!(
        ["no_other_upstream", "target_failed", "no_upstream"].contains(&why),
        "{message}"
    );
    // The rest was not taken for good: the copy is still there, cut.
    let (s, again) = replay(&proxy.addr(), None, "alone-1");
    assert_eq!(s, 200);
    assert!(again.starts_with(&heard));
}

/// The text of a chat stream's events, and their ids and finish reasons.
fn chat_text(events: &[String]) -> (String, Vec<String>, Vec<String>) {
    let (mut text, mut ids, mut finishes) = (String::new(), Vec::new(), Vec::new());
    for e in events {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(e) else {
            continue;
        };
        if let Some(id) = v["id"].as_str() {
            ids.push(id.to_string());
        }
        for c in v["choices"].as_array().into_iter().flatten() {
            text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                finishes.push(f.to_string());
            }
        }
    }
    ids.dedup();
    (text, ids, finishes)
}

/// What the tenant has left of its tokens this minute, as a request's
/// answer head says (charged for what ended before it).
fn tokens_left(addr: &str, key: &str) -> u64 {
    let auth = format!("Bearer {key}");
    let h = [("Authorization", auth.as_str()), ("Connection", "close")];
    let body = br#"{"content": "one"}"#;
    let mut r = http::send(addr, "POST", "/tokenize", &h, body).unwrap();
    let left = r
        .head
        .header("x-ratelimit-remaining-tokens")
        .map(str::to_string);
    r.read_all().unwrap();
    left.unwrap().parse().unwrap()
}

#[test]
fn a_replay_of_an_answer_cut_by_its_members_death_gets_its_rest_from_the_other_member() {
    let _serial = serial();
    const LIMIT: u64 = 1_000_000;
    let keys = temp_config(
        "conv-rest",
        &format!(
            "[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\ntokens_per_minute = {LIMIT}\n"
        ),
    );
    let servers = start_servers(2, "tiny", &[]);
    let log = std::env::temp_dir().join(format!("llamatap-rest-{}.jsonl", servers[0].port));
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let args = [
        "--access-log",
        log.to_str().unwrap(),
        "--config",
        keys.to_str().unwrap(),
    ];
    let proxy = Llamatap::start_fleet(&urls, &args);
    let mut servers = servers;
    wait_all_up(&proxy, &servers);
    let addr = proxy.addr();
    // The generation's charge and every reading below share one window of
    // the tenant's limit: start with enough of the minute left.
    common::wait_for_minute_with(40_000);
    let (heard, at) = start_and_kill(&mut servers, &proxy, Some(("alice", ALICE)), "rest-1");
    let other = 1 - at;
    let generation = logged(&log, "/v1/chat/completions");
    // Each /tokenize is charged its own few tokens: the difference of two
    // readings is what ended between them, plus the first reading's own.
    let probe = {
        let a = tokens_left(&addr, ALICE);
        a - tokens_left(&addr, ALICE)
    };
    let before_replay = tokens_left(&addr, ALICE);
    let (s, all) = replay(&addr, Some(ALICE), "rest-1");
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&all));
    let after_replay = tokens_left(&addr, ALICE);
    // One whole answer: what the first client heard first, one id, one
    // finish, `[DONE]`, and no error event.
    assert!(
        all.starts_with(&heard),
        "the replay starts with what was heard"
    );
    let events = http::sse_data(&all);
    let tail = String::from_utf8_lossy(&all[all.len().saturating_sub(600)..]).into_owned();
    assert!(whole(&all), "{tail}");
    assert!(
        !all.windows(8).any(|w| w == b"\"error\":"),
        "no error event"
    );
    let (text, ids, finishes) = chat_text(&events);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(finishes, vec!["length".to_string()]);
    assert!(!text.is_empty());
    // The record: a replay from the copy, continued from the dead member
    // on the other.
    let line = logged(&log, "/v1/stream");
    assert_eq!(line["conversation"]["use"], "replay", "{line}");
    assert_eq!(line["conversation"]["from_copy"], true, "{line}");
    let c = &line["continuations"][0];
    assert_eq!(c["result"], "continued", "{line}");
    assert_eq!(c["from"], fleet::upstream_name(&servers[at]), "{line}");
    assert_eq!(c["to"], fleet::upstream_name(&servers[other]), "{line}");
    let before = c["tokens_before"].as_u64().unwrap();
    let generated = c["generated_tokens"].as_u64().unwrap();
    assert!(before > 0 && generated > 0, "{c}");
    assert_eq!(before + generated, 1200, "the whole answer, in tokens: {c}");
    // Charged once: the replay only what the other member generated.
    let replay_charge = before_replay - after_replay - probe;
    let generation_charge = LIMIT - before_replay - 2 * probe;
    eprintln!(
        "copy: {before} tokens from {}; rest: {generated} tokens on {}; \
         generation charged {generation_charge} (prompt {}), replay charged {replay_charge}",
        fleet::upstream_name(&servers[at]),
        fleet::upstream_name(&servers[other]),
        generation["prompt_tokens"],
    );
    assert_eq!(replay_charge, generated);
    assert!(
        generation_charge >= before,
        "{generation_charge} < {before}"
    );
    // A later replay gets the grown copy, whole.
    let (s, again) = replay(&addr, Some(ALICE), "rest-1");
    assert_eq!(s, 200);
    assert_eq!(again, all, "the grown copy is the answer the replay got");
}

// === a member that drains away ===

#[test]
fn after_its_member_drained_away_a_replay_is_served_from_the_copy_or_named_lost() {
    let _serial = serial();
    const NAME: &str = "conv.test";
    let hosts = ["127.0.0.2", "127.0.0.3"];
    let port = common::free_port();
    let servers: Vec<LlamaServer> = hosts
        .iter()
        .map(|h| LlamaServer::start_at("tiny", &["-np", "2"], h, port))
        .collect();
    let zone = |hs: &[&str]| serde_json::json!({"ttl": 0, "names": {format!("{NAME}."): hs}});
    let dns = common::dns::DnsServer::start("conversations", &zone(&hosts));
    let redis = common::redis::Redis::start();
    let toml = format!(
        "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 100\nmax_refresh_ms = 1000\n\
         [auth.store]\nurl = \"{}\"\ntimeout_ms = 2000\n\
         [queue]\nenabled = true\nshared = true\n",
        dns.port(),
        redis.url()
    );
    let config = temp_config("conv-drain", &toml);
    let upstream = format!("dns+http://{NAME}:{port}");
    let args = ["--config", config.to_str().unwrap()];
    let a = Llamatap::start(&upstream, &args);
    let b = Llamatap::start(&upstream, &args);
    for proxy in [&a, &b] {
        let ok = fleet::wait_for(Duration::from_secs(30), || {
            let m = proxy.metrics();
            hosts.iter().all(|h| {
                common::proxy::metric_series(
                    &m,
                    "llamatap_upstream_up",
                    &[&format!("upstream=\"{h}:{port}\"")],
                ) == Some(1.0)
            })
        });
        assert!(ok.is_some(), "{}", proxy.stderr());
    }
    let ids: Vec<String> = (0..6).map(|i| format!("drained-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start_and_hang_up(&a.addr(), None, id, i, 2);
    }
    let placed: Vec<usize> = ids.iter().map(|id| holder(&servers, id).unwrap()).collect();
    let before: Vec<Vec<u8>> = ids.iter().map(|id| replay(&a.addr(), None, id).1).collect();
    let stored = fleet::wait_for(Duration::from_secs(10), || {
        ids.iter().all(|id| {
            redis
                .command(&["GET", &format!("llamatap:conv:{id}")])
                .is_some_and(|v| v.contains(&port.to_string()))
        })
    });
    assert!(stored.is_some());
    // The first conversation's member leaves the name's answer: it drains
    // and, idle, leaves the fleet (its llama-server still runs).
    let victim = placed[0];
    let stays = 1 - victim;
    let name = format!("{}:{port}", hosts[victim]);
    dns.set_zone(&zone(&[hosts[stays]]));
    for proxy in [&a, &b] {
        let left = fleet::wait_for(Duration::from_secs(30), || {
            common::proxy::metric_series(
                &proxy.metrics(),
                "llamatap_upstream_up",
                &[&format!("upstream=\"{name}\"")],
            )
            .is_none()
        });
        assert!(left.is_some(), "{name} never left");
    }
    let mut served = 0;
    for ((id, at), first) in ids.iter().zip(&placed).zip(&before) {
        let (s, all) = replay(&a.addr(), None, id);
        assert_eq!(s, 200, "{id}");
        assert_eq!(&all, first, "{id}");
        let (s, b_all) = replay(&b.addr(), None, id);
        if *at == victim {
            served += 1;
            assert_eq!(s, 502, "{}", String::from_utf8_lossy(&b_all));
            let v: serde_json::Value = serde_json::from_slice(&b_all).unwrap();
            assert_eq!(v["error"]["code"], "conversation_lost");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains(&name) && msg.contains("left the fleet"),
                "{msg}"
            );
        } else {
            assert_eq!(s, 200);
        }
    }
    eprintln!("replays served from the copy after their member drained away: {served}");
    assert!(served > 0);
}
