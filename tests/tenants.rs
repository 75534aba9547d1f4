//! Tenants: named keys, usage per tenant, and rate limits OpenAI clients
//! understand, proven against the real llama-server, the official OpenAI
//! Python SDK (from the venv scripts/ensure-deps.sh builds) and a real
//! `redis-server` each test starts on a free port.
//!
//! Limits use fixed one-minute windows aligned to the wall clock; a test
//! whose phase must stay in one window first waits (on the clock, a
//! condition) until enough of the current minute is left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::http;
use common::llama::LlamaServer;
use common::otlp;
use common::proxy::{metric_series, metric_value, rss_kib, Llamatap};
use common::redis::Redis;
use common::{free_port, left_in_minute, temp_config, wait_for_minute_with, wait_until};

const ALICE: &str = "alice-secret-key-7f3a9c";
const BOB: &str = "bob-secret-key-5e1d20";
const FLAT: &str = "flat-secret-key-a4b8c2";

// === helpers ===

fn chat(content: &str, stream: bool, max_tokens: u32) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        "stream_options": {"include_usage": true},
        "max_tokens": max_tokens, "temperature": 0.0, "seed": 7,
    })
    .to_string()
}

/// POSTs a chat with a bearer key; the head and the whole body.
fn post_as(addr: &str, key: &str, body: &str) -> (http::Head, Vec<u8>) {
    let auth = format!("Bearer {key}");
    let mut r = http::send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth), ("Connection", "close")],
        body.as_bytes(),
    )
    .unwrap();
    let b = r.read_all().unwrap();
    (r.head, b)
}

/// The usage object an answer carried (the last one of a stream).
fn usage(streamed: bool, body: &[u8]) -> serde_json::Value {
    if streamed {
        http::sse_data(body)
            .iter()
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .rfind(|v| v.get("usage").is_some_and(|u| !u.is_null()))
            .map(|v| v["usage"].clone())
            .expect("no usage in the stream")
    } else {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        v["usage"].clone()
    }
}

fn tokens_of(u: &serde_json::Value) -> u64 {
    u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
}

// === the OpenAI SDK ===

/// The SDK's calls, each HTTP attempt's send time and answer (status and
/// the wait llamatap asked for), printed as JSON.
const SDK_SCRIPT: &str = r#"
import json, sys, time, openai
try:
    import httpx2 as httpx  # what this SDK release is built on
except ImportError:
    import httpx
base, key, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
attempts = []
def on_request(request):
    attempts.append({"sent": time.monotonic()})
def on_response(response):
    attempts[-1].update({
        "status": response.status_code,
        "at": time.monotonic(),
        "retry_after": response.headers.get("retry-after"),
        "retry_after_ms": response.headers.get("retry-after-ms"),
        "remaining": response.headers.get("x-ratelimit-remaining-requests"),
    })
client = openai.OpenAI(base_url=base, api_key=key,
    http_client=httpx.Client(event_hooks={"request": [on_request], "response": [on_response]}))
results = []
for i in range(calls):
    try:
        r = client.chat.completions.create(model="tiny", max_tokens=4,
            messages=[{"role": "user", "content": f"Say hi {i}."}])
        results.append({"ok": True, "completion_tokens": r.usage.completion_tokens})
    except Exception as e:
        results.append({"ok": False, "error": repr(e)})
print(json.dumps({"attempts": attempts, "results": results}))
"#;

#[test]
fn the_openai_sdk_backs_off_as_told_and_every_call_succeeds() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let config = temp_config(
        "tenants-sdk",
        &format!("[[auth.keys]]\nname = \"sdk\"\nkey = \"{ALICE}\"\nrequests_per_minute = 3\n"),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    // Five calls against three a minute: the fourth is refused once, waits
    // for the next window, and it and the fifth go through there. Start with
    // enough of the minute left that the first three share one window.
    wait_for_minute_with(15_000);
    let out = Command::new(common::python())
        .args([
            "-c",
            SDK_SCRIPT,
            &format!("http://{}/v1", proxy.addr()),
            ALICE,
            "5",
        ])
        .output()
        .expect("run the venv's python (scripts/ensure-deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert!(
        results.iter().all(|r| r["ok"] == true),
        "a call failed: {results:?}"
    );
    let attempts = v["attempts"].as_array().unwrap();
    let refused: Vec<usize> = (0..attempts.len())
        .filter(|i| attempts[*i]["status"] == 429)
        .collect();
    assert!(!refused.is_empty(), "no 429 seen: {attempts:?}");
    assert_eq!(attempts.len(), 5 + refused.len(), "{attempts:?}");
    // Each wait, from the 429's arrival to the retry's send, is what
    // retry-after-ms said (the SDK prefers it to retry-after): never early,
    // and at most 250 ms late (the SDK's own overhead on a loaded machine).
    for i in refused {
        let a = &attempts[i];
        let ms: f64 = a["retry_after_ms"].as_str().unwrap().parse().unwrap();
        let secs: f64 = a["retry_after"].as_str().unwrap().parse().unwrap();
        assert_eq!(secs, (ms / 1000.0).ceil(), "{a}");
        assert!(ms > 0.0 && ms <= 60_000.0, "{a}");
        let waited = attempts[i + 1]["sent"].as_f64().unwrap() - a["at"].as_f64().unwrap();
        assert!(
            waited * 1000.0 >= ms - 1.0 && waited * 1000.0 <= ms + 250.0,
            "waited {waited:.3} s, told {ms} ms: {a}"
        );
        assert_eq!(attempts[i + 1]["status"], 200, "{attempts:?}");
        eprintln!("429: told {ms} ms (retry-after {secs} s), the SDK waited {waited:.3} s");
    }
    // Every successful answer carried the x-ratelimit-* headers too.
    assert!(attempts
        .iter()
        .filter(|a| a["status"] == 200)
        .all(|a| a["remaining"].is_string()));
    let m = proxy.metrics();
    assert_eq!(
        metric_series(
            &m,
            "llamatap_tenant_rate_limited_total",
            &["tenant=\"sdk\"", "limit=\"requests\""]
        ),
        Some(attempts.len() as f64 - 5.0)
    );
}

// === usage per tenant ===

#[test]
fn usage_counters_per_tenant_equal_what_the_clients_received() {
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "tenants-usage",
        &format!(
            "[auth]\napi_keys = [\"{FLAT}\"]\n\
             [[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\ntokens_per_minute = 1000000\n\
             [[auth.keys]]\nname = \"bob\"\nkey = \"{BOB}\"\npriority = \"batch\"\nweight = 5\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    let mut want: HashMap<&str, [u64; 4]> = HashMap::new();
    let workload = [
        ("alice", ALICE, true, 12),
        ("bob", BOB, false, 9),
        ("alice", ALICE, false, 20),
        ("anonymous", FLAT, true, 7),
        ("bob", BOB, true, 15),
        ("alice", ALICE, true, 3),
        ("anonymous", FLAT, false, 11),
        ("bob", BOB, false, 6),
    ];
    let handles: Vec<_> = workload
        .iter()
        .enumerate()
        .map(|(i, &(tenant, key, stream, max))| {
            let p = p.clone();
            std::thread::spawn(move || {
                // The same system prompt twice, so some prompts are cached.
                let body = chat(
                    &format!("Write about the sea, part {}.", i % 2),
                    stream,
                    max,
                );
                let (head, b) = post_as(&p, key, &body);
                assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&b));
                (tenant, stream, head, usage(stream, &b))
            })
        })
        .collect();
    for h in handles {
        let (tenant, stream, head, u) = h.join().unwrap();
        if tenant == "alice" {
            // A tenant with a token limit sees its window on every answer.
            assert_eq!(head.header("x-ratelimit-limit-tokens"), Some("1000000"));
            assert!(head.header("x-ratelimit-remaining-tokens").is_some());
            assert!(head.header("x-ratelimit-reset-tokens").is_some());
        } else {
            assert!(head.header("x-ratelimit-limit-tokens").is_none());
        }
        let _ = stream;
        let cached = u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0);
        let w = want.entry(tenant).or_default();
        w[0] += u["prompt_tokens"].as_u64().unwrap();
        w[1] += cached;
        w[2] += u["completion_tokens"].as_u64().unwrap();
        w[3] += 1;
    }
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        let total: f64 = ["alice", "bob", "anonymous"]
            .iter()
            .map(|t| {
                metric_series(
                    m,
                    "llamatap_tenant_requests_total",
                    &[&format!("tenant=\"{t}\""), "outcome=\"ok\""],
                )
                .unwrap_or(0.0)
            })
            .sum();
        total >= workload.len() as f64
    });
    for (tenant, w) in &want {
        let t = format!("tenant=\"{tenant}\"");
        let got = |kind: &str| {
            metric_series(
                &m,
                "llamatap_tenant_tokens_total",
                &[&t, &format!("kind=\"{kind}\"")],
            )
            .unwrap()
        };
        assert_eq!(got("prompt"), w[0] as f64, "{tenant} prompt\n{m}");
        assert_eq!(got("cached"), w[1] as f64, "{tenant} cached\n{m}");
        assert_eq!(got("completion"), w[2] as f64, "{tenant} completion\n{m}");
        assert_eq!(
            metric_series(
                &m,
                "llamatap_tenant_requests_total",
                &[&t, "outcome=\"ok\""]
            ),
            Some(w[3] as f64)
        );
    }
    // Every tenant label value exists from the start; no other does.
    let values: std::collections::BTreeSet<&str> = m
        .lines()
        .filter(|l| l.starts_with("llamatap_tenant_"))
        .filter_map(|l| l.split("tenant=\"").nth(1))
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(
        values.into_iter().collect::<Vec<_>>(),
        ["alice", "anonymous", "bob"]
    );
}

// === keys never leak ===

#[test]
fn no_key_appears_in_any_log_line_span_access_line_or_metric() {
    let llama = LlamaServer::start("tiny", &[]);
    let (otlp_url, received) = otlp::http_receiver();
    let dir = common::prometheus::temp_dir("tenant-keys");
    let access = dir.join("access.log");
    let config = temp_config(
        "tenants-keys",
        &format!(
            "[auth]\napi_keys = [\"{FLAT}\"]\n\
             [[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\nrequests_per_minute = 2\n\
             [[auth.keys]]\nname = \"bob\"\nkey_env = \"BOB_KEY\"\nmax_concurrent = 1\n"
        ),
    );
    let proxy = Llamatap::start_env(
        &llama.base_url,
        &[
            "--config",
            config.to_str().unwrap(),
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
            "--access-log",
            access.to_str().unwrap(),
        ],
        // Every log line llamatap and Pingora can write, at every level.
        &[("BOB_KEY", BOB), ("RUST_LOG", "trace")],
    );
    let p = proxy.addr();
    let stranger = "stranger-key-0c9e1f7d";
    let mut sent = 0;
    for (key, stream) in [
        (ALICE, false),
        (ALICE, true),
        (ALICE, false), // 429 (or the next window's first)
        (BOB, true),
        (FLAT, false),
        (stranger, false),
    ] {
        let (head, body) = post_as(&p, key, &chat("Hello there.", stream, 6));
        sent += 1;
        let text = String::from_utf8_lossy(&body);
        for k in [ALICE, BOB, FLAT, stranger] {
            assert!(!text.contains(k), "a key in an answer: {text}");
            assert!(
                head.headers.iter().all(|(_, v)| !v.contains(k)),
                "a key in a header: {:?}",
                head.headers
            );
        }
        if head.status == 429 {
            assert!(text.contains("tenant \\\"alice\\\""), "{text}");
        }
    }
    // A stranger on a public route is let through, as anonymous.
    assert_eq!(http::get(&p, "/health").unwrap().0, 200);
    sent += 1;
    let spans = received.wait(sent, Duration::from_secs(30));
    assert!(spans.len() >= sent, "{} spans", spans.len());
    assert!(wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&access)
            .unwrap_or_default()
            .lines()
            .count()
            >= sent
    }));
    let log = std::fs::read_to_string(&access).unwrap();
    let metrics = proxy.metrics();
    let span_text = format!("{spans:?}");
    let stderr = proxy.stderr();
    assert!(stderr.contains(" TRACE "), "not at trace level:\n{stderr}");
    for (what, text) in [
        ("stderr", &stderr),
        ("access log", &log),
        ("spans", &span_text),
        ("/metrics", &metrics),
    ] {
        for k in [ALICE, BOB, FLAT, stranger] {
            assert!(!text.contains(k), "a key in the {what}:\n{text}");
        }
    }
    // The tenant is named in each of them instead.
    let tenants: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["tenant"].to_string())
        .collect();
    for t in ["\"alice\"", "\"bob\"", "\"anonymous\""] {
        assert!(tenants.iter().any(|x| x == t), "{tenants:?}");
    }
    let span_tenants: Vec<String> = spans
        .iter()
        .filter_map(|s| otlp::attr_str(s, "llamatap.tenant"))
        .collect();
    for t in ["alice", "bob", "anonymous"] {
        assert!(span_tenants.iter().any(|x| x == t), "{span_tenants:?}");
    }
}

// === the concurrency limit ===

#[test]
fn a_concurrency_slot_is_released_on_every_path() {
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "tenants-concurrency",
        &format!("[[auth.keys]]\nname = \"solo\"\nkey = \"{ALICE}\"\nmax_concurrent = 1\n"),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    let auth = format!("Bearer {ALICE}");
    // A long stream holds the one slot; its client hangs up mid-way.
    let mut held = http::send(
        &p,
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        chat("Count to a thousand.", true, 2000).as_bytes(),
    )
    .unwrap();
    assert_eq!(held.head.status, 200);
    let _ = held.next_piece().unwrap();
    // Meanwhile: refused, with no retry-after (no one knows the wait).
    for _ in 0..3 {
        let (head, body) = post_as(&p, ALICE, &chat("Hi.", false, 2));
        assert_eq!(head.status, 429, "{}", String::from_utf8_lossy(&body));
        assert!(head.header("retry-after").is_none());
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("concurrent requests limit 1"));
    }
    drop(held);
    // The hang-up frees the slot; the refusals held none.
    assert!(
        wait_until(Duration::from_secs(20), || {
            post_as(&p, ALICE, &chat("Hi.", false, 2)).0.status == 200
        }),
        "{}",
        proxy.stderr()
    );
    // A request the upstream fails (an unknown route answered 404) frees it too.
    let (head, _) = {
        let mut r = http::send(
            &p,
            "POST",
            "/v1/no-such-route",
            &[("Authorization", &auth), ("Connection", "close")],
            b"{}",
        )
        .unwrap();
        let b = r.read_all().unwrap();
        (r.head, b)
    };
    assert_eq!(head.status, 404);
    assert_eq!(post_as(&p, ALICE, &chat("Hi.", true, 2)).0.status, 200);
    // Three refusals, and any of the polls above that came before the
    // hang-up was seen.
    let m = proxy.metrics();
    let refused = metric_series(
        &m,
        "llamatap_tenant_rate_limited_total",
        &["tenant=\"solo\"", "limit=\"concurrency\""],
    )
    .unwrap();
    assert!(refused >= 3.0, "{refused}");
}

// === several replicas sharing one Redis ===

/// Sends `key`'s chat to `addr`; the status, headers and tokens charged
/// (prompt plus completion, 0 when refused).
fn charge(addr: &str, key: &str, stream: bool) -> (u16, http::Head, u64) {
    let (head, body) = post_as(addr, key, &chat("Tell me about rivers.", stream, 24));
    let tokens = if head.status == 200 {
        tokens_of(&usage(stream, &body))
    } else {
        0
    };
    (head.status, head, tokens)
}

#[test]
fn two_replicas_share_one_token_limit_through_redis_and_follow_the_fallback() {
    const TPM: u64 = 400;
    let llama = LlamaServer::start("tiny", &[]);
    let mut redis = Redis::start();
    let conf = |on_error: &str| {
        temp_config(
            &format!("tenants-redis-{on_error}"),
            &format!(
                "[[auth.keys]]\nname = \"team\"\nkey = \"{ALICE}\"\ntokens_per_minute = {TPM}\n\
                 [auth.store]\nurl = \"{}\"\ntimeout_ms = 50\non_error = \"{on_error}\"\n",
                redis.url()
            ),
        )
    };
    let (ca, cb) = (conf("allow"), conf("deny"));
    let a = Llamatap::start(&llama.base_url, &["--config", ca.to_str().unwrap()]);
    let b = Llamatap::start(&llama.base_url, &["--config", cb.to_str().unwrap()]);

    // Both replicas at once, until the shared window is full: one limit.
    wait_for_minute_with(40_000);
    let window = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    let mut admitted = 0u64;
    let mut largest = 0u64;
    let mut refused = [false, false];
    for round in 0..100 {
        let handles: Vec<_> = [a.addr(), b.addr()]
            .into_iter()
            .map(|addr| {
                std::thread::spawn(move || {
                    // What is left of the minute before the request is sent:
                    // the replica computes its Retry-After later, so it can
                    // only be less, however long the answer takes to be read.
                    let left = left_in_minute();
                    (charge(&addr, ALICE, round % 2 == 0), left)
                })
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            let ((status, head, tokens), left) = h.join().unwrap();
            match status {
                200 => {
                    assert_eq!(head.header("x-ratelimit-limit-tokens"), Some("400"));
                    admitted += tokens;
                    largest = largest.max(tokens);
                }
                429 => {
                    refused[i] = true;
                    let ms: u64 = head.header("retry-after-ms").unwrap().parse().unwrap();
                    assert!(ms <= left + 50, "{ms} ms against {left} ms left");
                    assert_eq!(head.header("x-ratelimit-remaining-tokens"), Some("0"));
                    assert_eq!(head.header("x-ratelimit-limit-tokens"), Some("400"));
                }
                s => panic!("status {s}"),
            }
        }
        if refused == [true, true] {
            break;
        }
    }
    assert_eq!(refused, [true, true], "neither replica refused");
    // Documented overshoot: the tokens of the answers in flight when the
    // window filled, here at most two (one per replica).
    assert!(
        admitted <= TPM + 2 * largest,
        "admitted {admitted} tokens against {TPM} (largest answer {largest})"
    );
    assert!(
        admitted >= TPM,
        "refused before the window was full: {admitted}"
    );
    eprintln!("two replicas admitted {admitted} tokens against {TPM} (largest answer {largest})");
    // The shared count is what the clients received.
    let key = format!("llamatap:{{team}}:{window}:tok");
    assert!(
        wait_until(Duration::from_secs(5), || redis
            .command(&["GET", &key])
            .is_some_and(|v| v.parse::<u64>().unwrap() == admitted)),
        "redis {:?} vs {admitted}",
        redis.command(&["GET", &key])
    );

    // Redis dies: A (allow) keeps serving on its own counts, B (deny)
    // refuses with 503 and says when to retry. A's own share of the full
    // window may be near the limit: start in a fresh window.
    redis.kill();
    let port = redis.port;
    let now_window = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    assert!(wait_until(Duration::from_secs(61), || now_window() > window));
    wait_for_minute_with(20_000);
    let (status, head, _) = charge(&a.addr(), ALICE, false);
    assert_eq!(status, 200, "{:?} {admitted} {}", head, a.stderr());
    let (status, head, _) = charge(&b.addr(), ALICE, false);
    assert_eq!(status, 503);
    assert_eq!(head.header("retry-after"), Some("1"));
    // More requests while the store is down: one log line each, not one per request.
    // A goes on counting on its own: answers until its own share of the
    // window reaches the limit, then 429s; never a 503.
    for _ in 0..5 {
        assert!(matches!(charge(&a.addr(), ALICE, true).0, 200 | 429));
        assert_eq!(charge(&b.addr(), ALICE, true).0, 503);
    }
    for r in [&a, &b] {
        assert_eq!(
            r.stderr().matches("rate-limit store unreachable").count(),
            1,
            "{}",
            r.stderr()
        );
    }
    assert!(a.stderr().contains("on_error = allow"));
    assert!(b.stderr().contains("on_error = deny"));
    for r in [&a, &b] {
        assert_eq!(
            metric_value(&r.metrics(), "llamatap_rate_limit_store_up"),
            Some(0.0)
        );
    }
    let m = b.metrics();
    assert!(
        metric_series(
            &m,
            "llamatap_tenant_rate_limited_total",
            &["tenant=\"team\"", "limit=\"store\""]
        )
        .unwrap()
            >= 6.0
    );

    // Redis is back (empty): B serves again at its next request, and says
    // so once.
    let _redis = Redis::start_on(port);
    assert!(
        wait_until(Duration::from_secs(10), || charge(&b.addr(), ALICE, false)
            .0
            == 200),
        "{}",
        b.stderr()
    );
    assert!(wait_until(Duration::from_secs(5), || b
        .stderr()
        .contains("rate-limit store reachable again")));
    assert_eq!(
        metric_value(&b.metrics(), "llamatap_rate_limit_store_up"),
        Some(1.0)
    );
}

#[test]
fn a_silent_store_costs_a_request_at_most_its_timeout() {
    // A "Redis" that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "tenants-silent-store",
        &format!(
            "[[auth.keys]]\nname = \"team\"\nkey = \"{ALICE}\"\nrequests_per_minute = 1000\n\
             [auth.store]\nurl = \"redis://127.0.0.1:{port}\"\ntimeout_ms = 50\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let body = chat("Hi.", false, 2);
    // Warm up llama-server and llamatap's upstream connection without a tenant limit.
    let direct = || {
        let t = std::time::Instant::now();
        let (head, _) = post_as(&llama.addr(), ALICE, &body);
        assert_eq!(head.status, 200);
        t.elapsed()
    };
    let baseline = (0..3).map(|_| direct()).max().unwrap();
    wait_for_minute_with(10_000);
    // Fail open: served, each waiting at most the 50 ms timeout.
    for i in 0..5 {
        let t = std::time::Instant::now();
        let (head, b) = post_as(&proxy.addr(), ALICE, &body);
        let took = t.elapsed();
        assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&b));
        assert!(
            took < baseline + Duration::from_millis(50 + 200),
            "request {i} took {took:?} (direct: {baseline:?})"
        );
        // Counted on this replica's own window instead.
        assert_eq!(
            head.header("x-ratelimit-remaining-requests"),
            Some((999 - i).to_string().as_str())
        );
    }
    // Routes that cannot stream take Pingora's own path: the same headers.
    let auth = format!("Bearer {ALICE}");
    let mut r = http::send(
        &proxy.addr(),
        "POST",
        "/tokenize",
        &[("Authorization", &auth), ("Connection", "close")],
        br#"{"content":"hello"}"#,
    )
    .unwrap();
    let _ = r.read_all().unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(r.head.header("x-ratelimit-limit-requests"), Some("1000"));
    assert_eq!(r.head.header("x-ratelimit-remaining-requests"), Some("994"));
    assert!(r.head.header("x-ratelimit-reset-requests").is_some());
    let err = proxy.stderr();
    assert_eq!(
        err.matches("rate-limit store unreachable (no answer within 50ms)")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(
        metric_value(&proxy.metrics(), "llamatap_rate_limit_store_up"),
        Some(0.0)
    );
}

// === the store's connections ===

/// POSTs `/tokenize` (admitted like any route) as `key`; the status and
/// `x-ratelimit-remaining-requests`.
fn tokenize(addr: &str, key: &str) -> (u16, Option<String>) {
    let auth = format!("Bearer {key}");
    let mut r = http::send(
        addr,
        "POST",
        "/tokenize",
        &[("Authorization", &auth), ("Connection", "close")],
        br#"{"content":"hello"}"#,
    )
    .unwrap();
    let _ = r.read_all().unwrap();
    let remaining = r
        .head
        .header("x-ratelimit-remaining-requests")
        .map(str::to_string);
    (r.head.status, remaining)
}

/// A tenant with a large per-minute limit, counted in `url`'s store with
/// `on_error = "deny"`: any failed store call is a 503.
fn deny_config(name: &str, url: &str, timeout_ms: u64) -> std::path::PathBuf {
    temp_config(
        name,
        &format!(
            "[[auth.keys]]\nname = \"team\"\nkey = \"{ALICE}\"\nrequests_per_minute = 100000\n\
             [auth.store]\nurl = \"{url}\"\ntimeout_ms = {timeout_ms}\non_error = \"deny\"\n"
        ),
    )
}

#[test]
fn a_store_that_closes_idle_connections_refuses_no_request() {
    let llama = LlamaServer::start("tiny", &[]);
    // Redis closes a connection idle for more than a second.
    let redis = Redis::launch(free_port(), &["--timeout", "1"], None);
    let config = deny_config("tenants-redis-idle", &redis.url(), 2000);
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    let mut served = 0;
    for round in 0..3 {
        // Several connections in the pool at once...
        let burst: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || tokenize(&p, ALICE).0)
            })
            .collect();
        for b in burst {
            assert_eq!(b.join().unwrap(), 200, "round {round}: {}", proxy.stderr());
            served += 1;
        }
        // ...then each request after Redis closed them all.
        for _ in 0..2 {
            assert!(
                wait_until(Duration::from_secs(20), || redis.clients() == 0),
                "Redis kept {} idle connections",
                redis.clients()
            );
            let (status, remaining) = tokenize(&p, ALICE);
            assert_eq!(status, 200, "round {round}: {}", proxy.stderr());
            served += 1;
            // Counted in the store (this window's count, whatever came before).
            let left: u64 = remaining.unwrap().parse().unwrap();
            assert!(left < 100_000 && left >= 100_000 - served, "{left}");
        }
    }
    let err = proxy.stderr();
    assert!(!err.contains("rate-limit store unreachable"), "{err}");
    assert_eq!(
        metric_value(&proxy.metrics(), "llamatap_rate_limit_store_up"),
        Some(1.0)
    );
}

#[test]
fn a_burst_of_200_requests_holds_at_most_16_store_connections() {
    const BURST: usize = 200;
    const MAX_CONNECTIONS: usize = 16;
    let llama = LlamaServer::start("tiny", &[]);
    let redis = Redis::start();
    let config = deny_config("tenants-redis-burst", &redis.url(), 8000);
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let before = redis.info("total_connections_received").unwrap() as usize;
    let own_before = redis
        .own_connections
        .load(std::sync::atomic::Ordering::SeqCst);
    // Redis holds every write for two seconds: the burst's admissions all
    // wait on it at once.
    assert_eq!(
        redis
            .command(&["CLIENT", "PAUSE", "2000", "WRITE"])
            .as_deref(),
        Some("OK")
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let burst: Vec<_> = (0..BURST)
        .map(|_| {
            let (p, done) = (proxy.addr(), done.clone());
            std::thread::spawn(move || {
                let got = tokenize(&p, ALICE);
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                got
            })
        })
        .collect();
    // Sample the server's clients until every request is answered.
    let mut most = 0;
    let mut samples = 0;
    while done.load(std::sync::atomic::Ordering::SeqCst) < BURST {
        most = most.max(redis.clients());
        samples += 1;
    }
    let mut remaining = Vec::new();
    for b in burst {
        let (status, left) = b.join().unwrap();
        assert_eq!(status, 200, "{}", proxy.stderr());
        remaining.push(left.unwrap().parse::<u64>().unwrap());
    }
    // Each admission was counted once, in one window or across two.
    remaining.sort_unstable();
    remaining.dedup();
    assert_eq!(remaining.len(), BURST, "a count was seen twice");
    let own = redis
        .own_connections
        .load(std::sync::atomic::Ordering::SeqCst)
        - own_before;
    let opened = redis.info("total_connections_received").unwrap() as usize - before - own - 1;
    eprintln!(
        "{BURST} requests: at most {most} store connections at once ({samples} samples), \
         {opened} opened in all"
    );
    assert!(most <= MAX_CONNECTIONS, "{most} connections at once");
    assert!(opened <= MAX_CONNECTIONS, "{opened} connections opened");
    assert!(!proxy.stderr().contains("rate-limit store unreachable"));
}

/// A CA and a certificate for `localhost` and 127.0.0.1 that it signed,
/// made with the `openssl` command in `dir`: (ca, cert, key).
fn tls_files(dir: &std::path::Path) -> [String; 3] {
    let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &["-keyout", &path("ca.key"), "-out", &path("ca.crt")],
            &["-subj", "/CN=llamatap test CA", "-days", "2"],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &["-keyout", &path("srv.key"), "-out", &path("srv.csr")],
            &["-subj", "/CN=localhost"],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            &path("srv.csr"),
            "-CA",
            &path("ca.crt"),
            "-CAkey",
            &path("ca.key"),
            "-CAcreateserial",
            "-out",
            &path("srv.crt"),
            "-days",
            "2",
            "-extfile",
            &path("ext.cnf"),
        ],
    ] {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    [path("ca.crt"), path("srv.crt"), path("srv.key")]
}

#[test]
fn the_store_url_s_user_password_database_and_tls_are_used_and_never_logged() {
    const PASSWORD: &str = "store-pass-3b8d0e51";
    const WRONG: &str = "wrong-pass-c07a2f94";
    let llama = LlamaServer::start("tiny", &[]);
    let dir = common::prometheus::temp_dir("tenant-store-tls");
    let [ca, cert, key] = tls_files(&dir);
    let tls_port = free_port().to_string();
    // A user allowed only the store's commands, on TLS; the default user
    // (the test's own calls, on the plain port) has a password of its own.
    let redis = Redis::launch(
        free_port(),
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--user",
            "team",
            "on",
            &format!(">{PASSWORD}"),
            "~llamatap:*",
            "+incr",
            "+incrby",
            "+expire",
            "+get",
            "+echo",
            "+select",
        ],
        Some("admin-pass-51c9"),
    );
    let url = |password: &str| format!("rediss://team:{password}@localhost:{tls_port}/3");
    let env = [("SSL_CERT_FILE", ca.as_str()), ("RUST_LOG", "trace")];
    let good = deny_config("tenants-redis-tls", &url(PASSWORD), 2000);
    let proxy = Llamatap::start_env(&llama.base_url, &["--config", good.to_str().unwrap()], &env);
    let window = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    let mut served = 0;
    for _ in 0..3 {
        let (status, _) = tokenize(&proxy.addr(), ALICE);
        assert_eq!(status, 200, "{}", proxy.stderr());
        served += 1;
    }
    // Counted in database 3, under the user's keys (in this window or the next).
    let counted = |w: u64| {
        redis.commands(&[
            &["SELECT", "3"],
            &["GET", &format!("llamatap:{{team}}:{w}:req")],
        ])[1]
            .as_deref()
            .map_or(0, |v| v.parse::<u64>().unwrap())
    };
    assert_eq!(counted(window) + counted(window + 1), served);
    // A wrong password: refused by Redis, logged once, never shown.
    let bad = deny_config("tenants-redis-tls-bad", &url(WRONG), 2000);
    let refused = Llamatap::start_env(&llama.base_url, &["--config", bad.to_str().unwrap()], &env);
    for _ in 0..3 {
        assert_eq!(tokenize(&refused.addr(), ALICE).0, 503);
    }
    let err = refused.stderr();
    assert_eq!(
        err.matches("rate-limit store unreachable").count(),
        1,
        "{err}"
    );
    assert!(err.contains("localhost:"), "{err}");
    for (what, text) in [("good", proxy.stderr()), ("bad", err)] {
        assert!(text.contains(" TRACE "), "{what}: not at trace level");
        for secret in [PASSWORD, WRONG] {
            assert!(
                !text.contains(secret),
                "the password in the {what} log:\n{text}"
            );
        }
    }
    assert!(!proxy.stderr().contains("rate-limit store unreachable"));
}

// === strangers add nothing ===

#[test]
fn ten_thousand_random_bearer_tokens_add_no_series_and_bounded_memory() {
    // No upstream is needed: strangers are refused before any.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let config = temp_config(
        "tenants-strangers",
        &format!(
            "[auth]\napi_keys = [\"{FLAT}\"]\n[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\nrequests_per_minute = 5\n"
        ),
    );
    let proxy = Llamatap::start(&dead, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    let send = |n: usize, seed: u64| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut x = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut buf = vec![0u8; 4096];
                    for _ in 0..n / 4 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let token = format!("{x:016x}{:016x}", x.rotate_left(29));
                        let req = format!(
                            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                        );
                        let mut s = TcpStream::connect(&p).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                        s.write_all(req.as_bytes()).unwrap();
                        // Read one whole answer (a 401 with a length).
                        let mut got = Vec::new();
                        loop {
                            let k = s.read(&mut buf).unwrap();
                            assert!(k > 0);
                            got.extend_from_slice(&buf[..k]);
                            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                                assert!(head.starts_with("http/1.1 401"), "{head}");
                                let len: usize = head
                                    .lines()
                                    .find_map(|l| l.strip_prefix("content-length:"))
                                    .unwrap()
                                    .trim()
                                    .parse()
                                    .unwrap();
                                if got.len() >= end + 4 + len {
                                    break;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    };
    let series = |m: &str| m.lines().filter(|l| !l.starts_with('#')).count();
    send(400, 1);
    let before_metrics = proxy.wait_metrics(Duration::from_secs(10), |m| {
        metric_series(
            m,
            "llamatap_tenant_requests_total",
            &["tenant=\"anonymous\"", "outcome=\"rejected\""],
        ) == Some(400.0)
    });
    let rss_before = rss_kib(proxy.child.id());
    send(10_000, 2);
    let after = proxy.wait_metrics(Duration::from_secs(20), |m| {
        metric_series(
            m,
            "llamatap_tenant_requests_total",
            &["tenant=\"anonymous\"", "outcome=\"rejected\""],
        ) == Some(10_400.0)
    });
    let rss_after = rss_kib(proxy.child.id());
    assert_eq!(
        metric_series(
            &after,
            "llamatap_tenant_requests_total",
            &["tenant=\"anonymous\"", "outcome=\"rejected\""],
        ),
        Some(10_400.0)
    );
    assert_eq!(series(&before_metrics), series(&after), "series were added");
    // Bound: 4 MiB (allocator noise), about 400 bytes per token if each left
    // anything behind.
    assert!(
        rss_after <= rss_before + 4096,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}

// === configuration ===

/// `llamatap --check-config FILE`: success, and stderr.
fn check_config(name: &str, toml: &str, env: &[(&str, &str)]) -> (bool, String) {
    let path = temp_config(name, toml);
    let out = Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args(["--check-config", path.to_str().unwrap()])
        .env_remove("LLAMATAP_API_KEYS")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    if !out.status.success() {
        assert_eq!(out.status.code(), Some(2));
    }
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn check_config_reports_each_tenant_mistake_in_one_line_without_the_key() {
    let two = |a: &str, b: &str| {
        format!("[[auth.keys]]\nname = \"a\"\n{a}\n[[auth.keys]]\nname = \"b\"\n{b}\n")
    };
    for (name, toml, want) in [
        (
            "dup-key",
            two(&format!("key = \"{ALICE}\""), &format!("key = \"{ALICE}\"")),
            "tenants \"a\" and \"b\" have the same key",
        ),
        (
            "dup-name",
            two(&format!("key = \"{ALICE}\""), &format!("key = \"{BOB}\""))
                .replace("name = \"b\"", "name = \"a\""),
            "tenant name \"a\" is used twice",
        ),
        (
            "missing-env",
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"LLAMATAP_TEST_NO_SUCH_KEY\"\n".to_string(),
            "tenant \"a\": environment variable LLAMATAP_TEST_NO_SUCH_KEY is not set",
        ),
        (
            "flat-dup",
            format!("[auth]\napi_keys = [\"{ALICE}\"]\n[[auth.keys]]\nname = \"a\"\nkey = \"{ALICE}\"\n"),
            "tenant \"a\" has the same key as an entry of auth.api_keys",
        ),
        (
            "store-url",
            "[auth.store]\nurl = \"http://127.0.0.1:6379\"\n".to_string(),
            "auth.store.url",
        ),
    ] {
        let (ok, err) = check_config(name, &toml, &[]);
        assert!(!ok, "{name}: accepted");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(!err.contains(ALICE) && !err.contains(BOB), "{name}: {err}");
    }
}

#[test]
fn the_example_tenant_block_loads_once_uncommented() {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/llamatap.example.toml"),
    )
    .unwrap();
    let mut inside = false;
    let uncommented: String = example
        .lines()
        .map(|l| {
            if l == "# [[auth.keys]]" {
                inside = true;
            } else if !l.starts_with("# ") {
                inside = false;
            }
            match l.strip_prefix("#") {
                Some(rest) if inside => rest.trim_start().to_string(),
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        uncommented.contains("\n[[auth.keys]]\nname = \"voice-app\""),
        "{uncommented}"
    );
    let (ok, err) = check_config(
        "example-tenants",
        &uncommented,
        &[("VOICE_APP_KEY", "voice-app-key-0001")],
    );
    assert!(ok, "{err}");
    let (ok, err) = check_config("example-tenants-noenv", &uncommented, &[]);
    assert!(!ok);
    assert!(
        err.contains("environment variable VOICE_APP_KEY is not set"),
        "{err}"
    );
}

// === what is charged ===

/// POSTs `body` to `path` as `key`; the head and the whole body.
fn post_path(addr: &str, key: &str, path: &str, body: &str) -> (http::Head, Vec<u8>) {
    let auth = format!("Bearer {key}");
    let mut r = http::send(
        addr,
        "POST",
        path,
        &[("Authorization", &auth), ("Connection", "close")],
        body.as_bytes(),
    )
    .unwrap();
    let b = r.read_all().unwrap();
    (r.head, b)
}

/// `x-ratelimit-remaining-tokens` as `key` sees it now, asked on
/// `/tokenize` (admitted like any route, charged nothing).
fn remaining_tokens(addr: &str, key: &str) -> u64 {
    let (head, body) = post_path(addr, key, "/tokenize", r#"{"content":"hello"}"#);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    head.header("x-ratelimit-remaining-tokens")
        .expect("no x-ratelimit-remaining-tokens")
        .parse()
        .unwrap()
}

/// Waits until `key`'s window has `want` tokens left (an answer is charged
/// in `logging`, just after the client has it); the last value seen.
fn wait_remaining(addr: &str, key: &str, want: u64) -> u64 {
    let mut seen = 0;
    wait_until(Duration::from_secs(10), || {
        seen = remaining_tokens(addr, key);
        seen == want
    });
    seen
}

/// A native answer's tokens as llama-server counts them.
fn native_tokens(v: &serde_json::Value) -> u64 {
    let t = &v["timings"];
    t["prompt_n"].as_u64().unwrap()
        + t["cache_n"].as_u64().unwrap_or(0)
        + t["predicted_n"].as_u64().unwrap()
}

#[test]
fn a_response_fields_that_hides_the_counts_is_refused_for_a_token_limited_tenant() {
    const TPM: u64 = 100_000;
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "tenants-response-fields",
        &format!(
            "[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\ntokens_per_minute = {TPM}\n\
             [[auth.keys]]\nname = \"bob\"\nkey = \"{BOB}\"\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    let native = |fields: serde_json::Value, stream: bool| {
        serde_json::json!({
            "prompt": "Once upon a time", "n_predict": 24, "temperature": 0.0,
            "stream": stream, "response_fields": fields,
        })
        .to_string()
    };
    wait_for_minute_with(30_000);
    let before = remaining_tokens(&p, ALICE);
    assert_eq!(before, TPM);
    for path in ["/completion", "/completions"] {
        for stream in [false, true] {
            let (head, body) = post_path(
                &p,
                ALICE,
                path,
                &native(serde_json::json!(["content"]), stream),
            );
            assert_eq!(head.status, 400, "{}", String::from_utf8_lossy(&body));
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["code"], "response_fields_hide_usage", "{v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            assert!(v["error"]["message"].as_str().unwrap().contains("timings"));
        }
    }
    // Keeping the counts is enough: answered, and charged what it says.
    let (head, body) = post_path(
        &p,
        ALICE,
        "/completion",
        &native(serde_json::json!(["content", "timings"]), false),
    );
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(v.get("tokens_predicted").is_none(), "{v}");
    let charged = native_tokens(&v);
    assert_eq!(wait_remaining(&p, ALICE, TPM - charged), TPM - charged);
    // A tenant without a token limit gets llama-server's filtered answer.
    let (head, body) = post_path(
        &p,
        BOB,
        "/completion",
        &native(serde_json::json!(["content"]), false),
    );
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["content"]);
}

#[test]
fn an_answer_larger_than_max_inspect_bytes_is_charged_its_counts() {
    const TPM: u64 = 100_000;
    const INSPECT: usize = 4096;
    let llama = LlamaServer::start("tiny", &[]);
    let config = temp_config(
        "tenants-large-answer",
        &format!(
            "[telemetry]\nmax_inspect_bytes = {INSPECT}\n\
             [[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\ntokens_per_minute = {TPM}\n"
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let p = proxy.addr();
    wait_for_minute_with(30_000);
    let mut left = remaining_tokens(&p, ALICE);
    assert_eq!(left, TPM);

    // A chat with top_logprobs: kilobytes of probabilities for 24 tokens.
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Tell me about rivers."}],
        "max_tokens": 24, "temperature": 0.0, "seed": 7,
        "logprobs": true, "top_logprobs": 20,
    })
    .to_string();
    let (head, answer) = post_path(&p, ALICE, "/v1/chat/completions", &body);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&answer));
    assert!(answer.len() > 4 * INSPECT, "{} bytes", answer.len());
    let charged = tokens_of(&usage(false, &answer));
    assert!(charged > 24, "{charged}");
    left -= charged;
    assert_eq!(wait_remaining(&p, ALICE, left), left);

    // A native answer puts its timings before its probabilities.
    let body = serde_json::json!({
        "prompt": "The river", "n_predict": 24, "temperature": 0.0, "n_probs": 20,
    })
    .to_string();
    let (head, answer) = post_path(&p, ALICE, "/completion", &body);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&answer));
    assert!(answer.len() > 4 * INSPECT, "{} bytes", answer.len());
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    left -= native_tokens(&v);
    assert_eq!(wait_remaining(&p, ALICE, left), left);
}
