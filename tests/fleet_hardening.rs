//! The fleet against scripted llama-servers that misbehave on purpose: a
//! client's mistake answered with a 5xx, a slow member, a failed health
//! check, a restart, a shortfall, a dead model, a duplicate upstream. Each
//! test runs the real binary and fails on the behaviour it guards against.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::http;
use common::proxy::{metric_series, Llamatap};
use common::upstream::{self, ReqInfo, Scripted};
use common::wait_until;
use serde_json::Value;

/// What a scripted llama-server does, shared with the test.
#[derive(Default)]
struct Script {
    /// `/health` answers 503 while set.
    sick: AtomicBool,
    /// `/slots` takes this long (ms) to answer.
    slots_delay_ms: AtomicUsize,
    /// The `id_task` its slots report; negative: none (a fresh process).
    last_task: AtomicI64,
    /// When each `/health` check arrived.
    health_checks: Mutex<Vec<Instant>>,
    /// Chats answered.
    chats: AtomicUsize,
    /// Model name it serves.
    model: Mutex<String>,
    /// Streaming chats whose connection it closes before the response head.
    die_before_head: AtomicUsize,
}

/// A scripted llama-server: `/health`, `/slots`, `/v1/models`, a 501 for
/// `/metrics`, a 500 for a completion without a prompt, and chat answers
/// whose `timings.cache_n` is the whole prompt unless the last message says
/// `miss`.
fn llama(script: Arc<Script>) -> Scripted {
    Scripted::start_conn(move |mut s: TcpStream, log| {
        while let Some(req) = upstream::read_request(&mut s) {
            answer(&script, &mut s, &req);
            if !matches!(
                req.path.as_str(),
                "/health" | "/slots" | "/v1/models" | "/metrics"
            ) {
                log.lock().unwrap().push(req.clone());
            }
            if req
                .header("connection")
                .is_some_and(|c| c.eq_ignore_ascii_case("close"))
            {
                return;
            }
        }
    })
}

fn answer(script: &Script, s: &mut TcpStream, req: &ReqInfo) {
    match req.path.as_str() {
        "/health" => {
            script.health_checks.lock().unwrap().push(Instant::now());
            if script.sick.load(Ordering::SeqCst) {
                upstream::json(
                    s,
                    503,
                    r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
                );
            } else {
                upstream::json(s, 200, r#"{"status":"ok"}"#);
            }
        }
        "/slots" => {
            let delay = script.slots_delay_ms.load(Ordering::SeqCst) as u64;
            std::thread::sleep(Duration::from_millis(delay));
            let task = script.last_task.load(Ordering::SeqCst);
            let slot = if task >= 0 {
                format!(r#"{{"id":0,"is_processing":false,"id_task":{task}}}"#)
            } else {
                r#"{"id":0,"is_processing":false}"#.to_string()
            };
            upstream::json(s, 200, &format!("[{slot}]"));
        }
        "/v1/models" => {
            let model = script.model.lock().unwrap().clone();
            upstream::json(
                s,
                200,
                &format!(r#"{{"object":"list","data":[{{"id":"{model}","object":"model"}}]}}"#),
            );
        }
        "/metrics" => upstream::json(
            s,
            501,
            r#"{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with `--metrics`","type":"not_supported_error"}}"#,
        ),
        "/v1/completions" => upstream::json(
            s,
            500,
            r#"{"error":{"code":500,"message":"\"prompt\" is required","type":"server_error"}}"#,
        ),
        "/v1/chat/completions" if script.sick.load(Ordering::SeqCst) => upstream::json(
            s,
            503,
            r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
        ),
        "/v1/chat/completions"
            if serde_json::from_slice::<Value>(&req.body).is_ok_and(|b| b["stream"] == true) =>
        {
            let dies = script
                .die_before_head
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if dies {
                // The request was read; the connection closes unanswered.
                let _ = s.shutdown(std::net::Shutdown::Both);
                return;
            }
            script.chats.fetch_add(1, Ordering::SeqCst);
            upstream::sse_head(s);
            for event in [
                upstream::chat_role_event(),
                upstream::chat_event("ok."),
                upstream::chat_final_event(10, 0, 1),
                "data: [DONE]\n\n".to_string(),
            ] {
                upstream::chunk(s, event.as_bytes());
            }
            upstream::end_chunks(s);
        }
        "/v1/chat/completions" => {
            script.chats.fetch_add(1, Ordering::SeqCst);
            let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let last = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            let prompt = (req.body.len() / 4).max(1);
            let cached = if last.contains("miss") { 0 } else { prompt - 1 };
            upstream::json(
                s,
                200,
                &format!(
                    r#"{{"object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"ok."}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":1,"total_tokens":{}}},"timings":{{"cache_n":{cached},"prompt_n":{},"prompt_ms":1.0,"predicted_n":1,"predicted_ms":1.0}}}}"#,
                    prompt + 1,
                    prompt - cached
                ),
            );
        }
        _ => upstream::json(
            s,
            404,
            r#"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#,
        ),
    }
}

fn script(model: &str) -> Arc<Script> {
    let s = Script::default();
    *s.model.lock().unwrap() = model.to_string();
    s.last_task.store(-1, Ordering::SeqCst);
    Arc::new(s)
}

/// A chat body: one conversation (`id`) at turn `turn`; the last message
/// says `last` (earlier ones said `hi`).
fn chat(id: usize, turn: usize, last: &str) -> String {
    let system = format!("You are terse with conversation {id}.");
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for t in 0..=turn {
        let content = if t == turn {
            format!("conversation {id} question {t}: {last} {}", "x".repeat(200))
        } else {
            format!("conversation {id} question {t}: hi {}", "x".repeat(200))
        };
        messages.push(serde_json::json!({"role": "user", "content": content}));
        if t < turn {
            messages.push(serde_json::json!({"role": "assistant", "content": "ok."}));
        }
    }
    serde_json::json!({"model": "tiny.gguf", "messages": messages}).to_string()
}

fn post_chat(proxy: &Llamatap, body: &str) -> u16 {
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    let status = r.head.status;
    let _ = r.read_all();
    status
}

fn up_series(proxy: &Llamatap, upstream: &Scripted) -> Option<f64> {
    let name = upstream.addr.clone();
    metric_series(
        &proxy.metrics(),
        "llamatap_upstream_up",
        &[&format!("upstream=\"{name}\"")],
    )
}

fn wait_ready(proxy: &Llamatap) {
    assert!(
        wait_until(Duration::from_secs(20), || {
            http::get(&proxy.admin(), "/readyz").is_ok_and(|(code, _)| code == 200)
        }),
        "never ready: {}",
        proxy.stderr()
    );
}

/// llama-server answers `GET /metrics` without `--metrics` with 501 and a
/// completion without a prompt with 500: a client's mistake, which must not
/// eject a healthy upstream and move everybody's conversations elsewhere.
/// A 503 on a route that works (llama-server loading its model) still does.
#[test]
fn a_client_mistake_answered_with_a_5xx_ejects_no_upstream() {
    let (sa, sb) = (script("tiny.gguf"), script("tiny.gguf"));
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &["--routing-policy", "round_robin"]);
    wait_ready(&proxy);
    let mut conversation = 0;
    // One mistake each time, so that only one upstream answers it (with
    // both ejected, both would be tried again and nothing would show).
    for mistake in ["GET /metrics", "POST /v1/completions {}"] {
        let status = if mistake.starts_with("GET") {
            http::get(&proxy.addr(), "/metrics").unwrap().0
        } else {
            http::post(&proxy.addr(), "/v1/completions", "{}")
                .unwrap()
                .head
                .status
        };
        assert!(status >= 500, "{mistake}: {status}");
        let before = (
            sa.chats.load(Ordering::SeqCst),
            sb.chats.load(Ordering::SeqCst),
        );
        for _ in 0..10 {
            conversation += 1;
            assert_eq!(post_chat(&proxy, &chat(conversation, 0, "hi")), 200);
        }
        let (na, nb) = (
            sa.chats.load(Ordering::SeqCst) - before.0,
            sb.chats.load(Ordering::SeqCst) - before.1,
        );
        assert_eq!(
            (na + nb, na.min(nb)),
            (10, 5),
            "after {mistake}: a={na} b={nb}: an upstream was ejected"
        );
    }

    // A 503 from a chat (the server is loading) is the upstream's own state.
    sa.sick.store(true, Ordering::SeqCst);
    let before = sb.chats.load(Ordering::SeqCst);
    let mut refused = 0;
    for i in 0..6 {
        let body = chat(100 + i, 0, "hi");
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body).unwrap();
        let _ = r.read_all();
        refused += usize::from(r.head.status != 200);
    }
    sa.sick.store(false, Ordering::SeqCst);
    // The first request that met the 503 (if any) got it; afterwards a is
    // ejected or marked down and b takes the rest.
    assert!(
        sb.chats.load(Ordering::SeqCst) - before >= 5,
        "b took {} of 6 ({refused} refused)",
        sb.chats.load(Ordering::SeqCst) - before
    );
}

/// Upstream a's `/slots` takes 2.5 s; b's health checks keep their 2 s
/// schedule (they used to wait for the slowest member's every read).
#[test]
fn a_slow_member_does_not_delay_another_members_checks() {
    let (sa, sb) = (script("tiny.gguf"), script("tiny.gguf"));
    sa.slots_delay_ms.store(2500, Ordering::SeqCst);
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &[]);
    wait_ready(&proxy);
    assert!(
        wait_until(Duration::from_secs(30), || {
            sb.health_checks.lock().unwrap().len() >= 6
        }),
        "b was checked {} times",
        sb.health_checks.lock().unwrap().len()
    );
    let checks = sb.health_checks.lock().unwrap().clone();
    let gaps: Vec<Duration> = checks.windows(2).map(|w| w[1] - w[0]).collect();
    let widest = gaps.iter().max().copied().unwrap();
    // 2 s apart; 4.5 s and more when b waited on a's slow /slots.
    assert!(
        widest < Duration::from_millis(3500),
        "b's checks were {gaps:?} apart"
    );
    drop(proxy);
}

/// Which upstream took a conversation, and why, from `/latency.json`.
fn last_route(proxy: &Llamatap, count: usize) -> (String, String) {
    let mut found = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            let Ok((200, body)) = http::get(&proxy.admin(), "/latency.json") else {
                return false;
            };
            let v: Value = serde_json::from_slice(&body).unwrap();
            let rows: Vec<Value> = v["requests"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r["route"] == "chat_completions")
                .collect();
            if rows.len() < count {
                return false;
            }
            let newest = rows
                .iter()
                .max_by(|x, y| {
                    let key = |r: &Value| r["received_unix_ms"].as_f64().unwrap_or(0.0);
                    key(x).total_cmp(&key(y))
                })
                .unwrap();
            found = Some((
                newest["upstream"].as_str().unwrap_or("").to_string(),
                newest["route_reason"].as_str().unwrap_or("").to_string(),
            ));
            true
        }),
        "no latency row"
    );
    found.unwrap()
}

/// A failed `/health` (a blip, a 503 under load) keeps the upstream's
/// prefix index: the next turn is still a `prefix_hit`. A restart (its
/// slots' task ids start again) empties it: the next turn is `cold`.
#[test]
fn affinity_survives_a_failed_check_and_not_a_restart() {
    let (sa, sb) = (script("tiny.gguf"), script("tiny.gguf"));
    sa.last_task.store(40, Ordering::SeqCst);
    sb.last_task.store(40, Ordering::SeqCst);
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &[]);
    wait_ready(&proxy);
    assert_eq!(post_chat(&proxy, &chat(1, 0, "hi")), 200);
    let (home, reason) = last_route(&proxy, 1);
    assert_eq!(reason, "cold");
    // Turn 1 extends turn 0 only up to its first user message (the
    // anchor), which does not attract; turn 2 extends turn 1 beyond it.
    assert_eq!(post_chat(&proxy, &chat(1, 1, "hi")), 200);
    assert_eq!(last_route(&proxy, 2).0, home);
    let (home_script, home_server) = if home == a.addr {
        (sa.clone(), &a)
    } else {
        (sb.clone(), &b)
    };
    home_script.sick.store(true, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(10), || up_series(&proxy, home_server)
            == Some(0.0)),
        "never seen down"
    );
    home_script.sick.store(false, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(10), || up_series(&proxy, home_server)
            == Some(1.0)),
        "never back"
    );
    assert_eq!(post_chat(&proxy, &chat(1, 2, "hi")), 200);
    assert_eq!(
        last_route(&proxy, 3),
        (home.clone(), "prefix_hit".to_string()),
        "a failed check cost the conversation its affinity"
    );
    let log = proxy.stderr();
    assert!(
        log.contains("upstream down") && log.contains(&home),
        "the transition is logged, naming the upstream: {log}"
    );

    // Restart: a new process has no task history.
    home_script.last_task.store(-1, Ordering::SeqCst);
    assert!(
        wait_until(Duration::from_secs(10), || proxy
            .stderr()
            .contains("upstream restarted")),
        "restart not noticed: {}",
        proxy.stderr()
    );
    assert_eq!(post_chat(&proxy, &chat(1, 3, "hi")), 200);
    assert_eq!(
        last_route(&proxy, 4).1,
        "cold",
        "the restart was not forgotten"
    );
}

/// A shortfall (llama-server reused less of one conversation than
/// predicted) says nothing about the others: a conversation sent before it
/// is still predicted where it went.
#[test]
fn a_shortfall_does_not_forget_other_conversations() {
    let (sa, sb) = (script("tiny.gguf"), script("tiny.gguf"));
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    // b is down: every conversation goes to a.
    sb.sick.store(true, Ordering::SeqCst);
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &[]);
    wait_ready(&proxy);
    assert!(wait_until(Duration::from_secs(10), || up_series(
        &proxy, &b
    ) == Some(0.0)));
    assert_eq!(post_chat(&proxy, &chat(1, 0, "hi")), 200);
    assert_eq!(post_chat(&proxy, &chat(2, 0, "hi")), 200);
    // Conversation 2's next turn finds nothing cached: a shortfall.
    assert_eq!(post_chat(&proxy, &chat(2, 1, "miss")), 200);
    // Conversation 1's next turn is still predicted on a, and confirmed.
    assert_eq!(post_chat(&proxy, &chat(1, 1, "hi")), 200);
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        common::proxy::metric_sum(m, "llamatap_routing_predictions_total", &[]) >= 4.0
    });
    let result = |r: &str| {
        common::proxy::metric_sum(
            &m,
            "llamatap_routing_predictions_total",
            &[&format!("result=\"{r}\"")],
        )
    };
    // Turns 0 find their prompts cached though nothing was predicted.
    assert_eq!(result("unpredicted"), 2.0, "{m}");
    assert_eq!(result("shortfall"), 1.0, "{m}");
    assert_eq!(
        result("confirmed"),
        1.0,
        "conversation 1 was forgotten: {m}"
    );
    drop(b);
}

/// A model whose only upstream is down is not listed and gets a 503 that
/// names the model and the upstream, with `Retry-After`; `/readyz` names
/// what is missing; the answer keeps the client's connection. A request
/// naming no model where two are served is a 400 listing them.
#[test]
fn a_model_without_a_healthy_upstream_is_a_503_and_unlisted() {
    let (sa, sb) = (script("alpha"), script("beta"));
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &[]);
    wait_ready(&proxy);
    // Ready needs one healthy member; each member's model is learned by
    // its own health check: wait until both are listed.
    let listed = |proxy: &Llamatap| -> Vec<String> {
        http::get(&proxy.addr(), "/v1/models")
            .ok()
            .and_then(|(_, body)| serde_json::from_slice::<Value>(&body).ok())
            .and_then(|v| {
                v["data"].as_array().map(|d| {
                    d.iter()
                        .filter_map(|m| m["id"].as_str().map(str::to_string))
                        .collect()
                })
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(20), || listed(&proxy)
            == ["alpha", "beta"]),
        "both models never listed: {:?}",
        listed(&proxy)
    );
    // Two requests on one connection: llamatap's own 200 keeps it open.
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for _ in 0..2 {
        use std::io::{Read, Write};
        write!(s, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !String::from_utf8_lossy(&got).contains("\"object\":\"list\"}") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "closed after {got:?}");
            got.push(byte[0]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
    // Two models and none named: a 400 that lists them, sent to no one.
    let body = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 400);
    let v: Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "model_required", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("alpha, beta"), "{message}");
    assert_eq!(
        sa.chats.load(Ordering::SeqCst) + sb.chats.load(Ordering::SeqCst),
        0
    );

    sb.sick.store(true, Ordering::SeqCst);
    assert!(wait_until(Duration::from_secs(10), || up_series(
        &proxy, &b
    ) == Some(0.0)));
    let (code, body) = http::get(&proxy.addr(), "/v1/models").unwrap();
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["alpha"]);
    let body = r#"{"model":"beta","messages":[{"role":"user","content":"hi"}]}"#;
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 503);
    assert_eq!(r.head.header("retry-after"), Some("2"));
    let v: Value = serde_json::from_slice(&r.read_all().unwrap()).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert_eq!(v["error"]["code"], "model_unavailable");
    // A plain reason for the client: which members are down, and why, is
    // for the log and the span.
    assert!(
        message.contains("beta") && !message.contains(&b.addr),
        "{message}"
    );
    assert_eq!(sb.chats.load(Ordering::SeqCst), 0);
    let (code, why) = http::get(&proxy.admin(), "/readyz").unwrap();
    assert_eq!(code, 503);
    let why = String::from_utf8_lossy(&why);
    assert!(why.contains("beta"), "{why}");
}

/// The same server listed twice (`localhost` and `127.0.0.1`) would be two
/// members of one llama-server: refused at start, in one line.
#[test]
fn the_same_server_listed_twice_is_refused() {
    let s = script("tiny.gguf");
    let a = llama(s);
    let port = a.addr.rsplit(':').next().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args([
            "--listen",
            &format!("127.0.0.1:{}", common::free_port()),
            "--admin-listen",
            &format!("127.0.0.1:{}", common::free_port()),
            "--upstream",
            &format!("http://127.0.0.1:{port}"),
            "--upstream",
            &format!("http://localhost:{port}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let exited = wait_until(Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    if !exited {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(exited, "it started with the same server listed twice");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("same server"), "{err}");
}

/// A llama-server whose listener the test opens and closes on one port.
struct Flappy {
    port: u16,
    open: Arc<AtomicBool>,
}

impl Flappy {
    /// Its port stays held the whole test by a socket bound to it that
    /// never listens (`SO_REUSEPORT`): while the listener is closed, a
    /// connect is refused, and no other socket can take the port meanwhile
    /// (a server that another test starts on a "free" port, say).
    fn start(script: Arc<Script>) -> Flappy {
        use socket2::{Domain, Socket, Type};
        let bound = |addr: &std::net::SocketAddr| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.set_reuse_port(true).unwrap();
            s.bind(&(*addr).into()).unwrap();
            s
        };
        let holder = bound(&"127.0.0.1:0".parse().unwrap());
        let addr = holder.local_addr().unwrap().as_socket().unwrap();
        let port = addr.port();
        let open = Arc::new(AtomicBool::new(true));
        let want = open.clone();
        std::thread::spawn(move || {
            let _holder = holder;
            let mut listener: Option<std::net::TcpListener> = None;
            loop {
                match (want.load(Ordering::SeqCst), listener.is_some()) {
                    (true, false) => {
                        let s = bound(&addr);
                        s.listen(128).unwrap();
                        s.set_nonblocking(true).unwrap();
                        listener = Some(s.into());
                    }
                    (false, true) => listener = None,
                    _ => {}
                }
                match listener.as_ref().map(|l| l.accept()) {
                    Some(Ok((mut s, _))) => {
                        s.set_nonblocking(false).unwrap();
                        let script = script.clone();
                        std::thread::spawn(move || {
                            while let Some(req) = upstream::read_request(&mut s) {
                                answer(&script, &mut s, &req);
                                if req.header("connection").is_some() {
                                    return;
                                }
                            }
                        });
                    }
                    _ => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Flappy { port, open }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// A failed connect sends the request to another upstream: a failover,
/// counted as one, and the upstream that failed is named in the log.
#[test]
fn a_failed_connect_fails_over_and_names_the_upstream() {
    let (sf, sa) = (script("tiny.gguf"), script("tiny.gguf"));
    let flappy = Flappy::start(sf.clone());
    let a = llama(sa.clone());
    let proxy = Llamatap::start_fleet(
        &[&flappy.url(), &a.url()],
        &["--routing-policy", "round_robin"],
    );
    wait_ready(&proxy);
    let name = format!("127.0.0.1:{}", flappy.port);
    let failovers = |m: &str| {
        common::proxy::metric_sum(
            m,
            "llamatap_routing_decisions_total",
            &["reason=\"failover\""],
        )
    };
    // Close its listener and send at once, before a health check sees it:
    // round robin sends one of two requests there. Repeat until it did.
    for round in 0..10 {
        flappy.open.store(true, Ordering::SeqCst);
        assert!(wait_until(Duration::from_secs(10), || {
            let m = proxy.metrics();
            metric_series(
                &m,
                "llamatap_upstream_up",
                &[&format!("upstream=\"{name}\"")],
            ) == Some(1.0)
        }));
        std::thread::sleep(Duration::from_millis(50));
        flappy.open.store(false, Ordering::SeqCst);
        // The listener closes within a few ms of the flag.
        assert!(wait_until(Duration::from_secs(5), || {
            TcpStream::connect(("127.0.0.1", flappy.port)).is_err()
        }));
        for i in 0..2 {
            assert_eq!(post_chat(&proxy, &chat(round * 2 + i, 0, "hi")), 200);
        }
        if failovers(&proxy.metrics()) >= 1.0 {
            break;
        }
    }
    let m = proxy.metrics();
    assert!(failovers(&m) >= 1.0, "no failover happened: {m}");
    assert!(
        proxy.stderr().contains(&name),
        "the upstream is named: {}",
        proxy.stderr()
    );
}

/// A member that closes a streaming request's connection before any byte
/// of the answer (it died under the request): nothing reached the client,
/// so the stream starts again on the other member (a continuation from zero
/// tokens), where a 502 used to end it.
#[test]
fn a_stream_whose_member_dies_before_the_head_starts_on_another() {
    let (sa, sb) = (script("tiny.gguf"), script("tiny.gguf"));
    sa.die_before_head.store(1, Ordering::SeqCst);
    let (a, b) = (llama(sa.clone()), llama(sb.clone()));
    let proxy = Llamatap::start_fleet(&[&a.url(), &b.url()], &["--routing-policy", "round_robin"]);
    wait_ready(&proxy);
    // Round robin: one of two requests goes to a first.
    for conversation in 0..2 {
        let mut body: Value = serde_json::from_str(&chat(conversation, 0, "hi")).unwrap();
        body["stream"] = Value::Bool(true);
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &body.to_string()).unwrap();
        assert_eq!(r.head.status, 200, "conversation {conversation}");
        let got = String::from_utf8(r.read_all().unwrap()).unwrap();
        assert!(
            got.ends_with("data: [DONE]\n\n"),
            "conversation {conversation}: {got}"
        );
        assert_eq!(
            got.matches("chatcmpl-test").count(),
            3,
            "one whole answer: {got}"
        );
    }
    assert_eq!(
        sa.die_before_head.load(Ordering::SeqCst),
        0,
        "a never got a stream"
    );
    assert_eq!(sb.chats.load(Ordering::SeqCst), 2, "b answered both");
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        metric_series(
            m,
            "llamatap_continuations_total",
            &["reason=\"upstream_died\"", "result=\"continued\""],
        ) == Some(1.0)
    });
    assert_eq!(
        metric_series(
            &m,
            "llamatap_continuations_total",
            &["reason=\"upstream_died\"", "result=\"continued\""]
        ),
        Some(1.0)
    );
}
