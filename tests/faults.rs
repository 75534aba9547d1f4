#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Faults and storms: a llama-server killed and restarted under load, stale
//! keep-alive connections, a black-holing trace collector, and a thousand
//! clients hanging up at once. Each checks what the client gets, what the
//! telemetry records, and that the proxy is healthy (and holds nothing) after.

mod common;

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http;
use common::llama::LlamaServer;
use common::proxy::{metric_sum, rss_kib, Llamatap};
use common::upstream::{self, Scripted};
use common::wait_until;

fn chat(stream: bool, max_tokens: u32) -> String {
    serde_json::json!({"messages":[{"role":"user","content":"Hello"}],"stream":stream,"max_tokens":max_tokens,"temperature":0})
        .to_string()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn stale_keepalive_connections_never_fail_a_post() {
    // llama-server (cpp-httplib) closes idle keep-alive connections after 5 s;
    // llamatap drops pooled ones after 2 s, so a POST never lands on a dead one.
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let proxy = Llamatap::start(&llama.base_url, &[]);
    for pause in [0u64, 3, 6] {
        std::thread::sleep(Duration::from_secs(pause));
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &chat(false, 4)).unwrap();
        assert_eq!(r.head.status, 200, "after {pause} s idle");
        r.read_all().unwrap();
    }
    let m = proxy.metrics();
    assert_eq!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ),
        0.0
    );
}

#[test]
fn llama_server_killed_and_restarted_mid_load() {
    let mut llama = LlamaServer::start("slow", &["-np", "2"]);
    let port = llama.port;
    let proxy = Llamatap::start(&llama.base_url, &[]);
    assert!(wait_until(Duration::from_secs(30), || http::get(
        &proxy.admin(),
        "/readyz"
    )
    .unwrap()
    .0 == 200));
    // Two streams in flight, each past its first token.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &chat(true, 500)).unwrap();
        let mut seen = Vec::new();
        while http::chat_content(&seen).is_empty() {
            seen.extend(r.next_piece().unwrap().expect("stream ended early"));
        }
        streams.push((r, seen));
    }
    llama.kill();
    for (mut r, mut seen) in streams {
        seen.extend(r.read_all().unwrap());
        assert!(r.clean_end, "the client must see an explicit end");
        let text = String::from_utf8_lossy(&seen);
        assert!(
            !text.contains("[DONE]"),
            "a killed stream must not look complete"
        );
        let last: serde_json::Value =
            serde_json::from_str(http::sse_data(&seen).last().unwrap()).unwrap();
        assert_eq!(last["error"]["type"], "upstream_error", "{text}");
    }
    // While it is down: 502 in OpenAI shape, /readyz says so.
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &chat(false, 4)).unwrap();
    assert_eq!(r.head.status, 502);
    r.read_all().unwrap();
    assert!(wait_until(Duration::from_secs(30), || http::get(
        &proxy.admin(),
        "/readyz"
    )
    .unwrap()
    .0 == 503));
    // The two cut streams and the 502, counted now: once the upstream
    // serves another model, the old name's series are removed.
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(
            m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""],
        ) >= 3.0
    });
    assert!(
        metric_sum(
            &m,
            "llamatap_requests_total",
            &["outcome=\"upstream_error\""]
        ) >= 3.0,
        "{m}"
    );
    // Back on the same port: new requests succeed, /readyz recovers.
    let llama = LlamaServer::start_on_port("tiny", &["-np", "1"], port);
    assert!(wait_until(Duration::from_secs(30), || http::get(
        &proxy.admin(),
        "/readyz"
    )
    .unwrap()
    .0 == 200));
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &chat(true, 8)).unwrap();
    assert_eq!(r.head.status, 200);
    assert!(String::from_utf8_lossy(&r.read_all().unwrap()).contains("[DONE]"));
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_inflight_streams", &[]) == 0.0
    });
    assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), 0.0);
    drop(llama);
}

#[test]
fn a_black_holing_collector_does_not_slow_the_stream() {
    // Accepts connections, never answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_url = format!("http://{}", hole.local_addr().unwrap());
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for c in hole.incoming().flatten() {
            h.lock().unwrap().push(c);
        }
    });
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        for i in 0..20 {
            upstream::chunk(s, upstream::chat_event(&format!("w{i} ")).as_bytes());
            std::thread::sleep(Duration::from_millis(10));
        }
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let plain = Llamatap::start(&up.url(), &[]);
    let traced = Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &hole_url, "--otlp-protocol", "http"],
    );
    let time = |addr: &str| {
        let start = Instant::now();
        let mut r = http::post(addr, "/v1/chat/completions", &chat(true, 8)).unwrap();
        r.read_all().unwrap();
        start.elapsed()
    };
    let mut base = Duration::ZERO;
    let mut with_hole = Duration::ZERO;
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        base += time(&plain.addr());
        let t = time(&traced.addr());
        with_hole += t;
        slowest = slowest.max(t);
    }
    eprintln!(
        "10 streams: {base:?} without tracing, {with_hole:?} with a black-holing collector (slowest {slowest:?})"
    );
    // An export on the request path would hold a stream for the export's
    // 10 s timeout; no stream of 20 events 10 ms apart comes near half of
    // it, however loaded the machine (a comparison with the untraced
    // streams' time failed on a busy machine at 1.8 times).
    assert!(
        slowest < Duration::from_secs(5),
        "a traced stream took {slowest:?} ({with_hole:?} for 10, against {base:?} untraced)"
    );
    // Spans are dropped after the export timeout, and counted.
    let m = traced.wait_metrics(Duration::from_secs(25), |m| {
        metric_sum(
            m,
            "llamatap_otel_spans_total",
            &["result=\"dropped_export_failed\""],
        ) >= 1.0
    });
    assert!(
        metric_sum(
            &m,
            "llamatap_otel_spans_total",
            &["result=\"dropped_export_failed\""]
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(http::get(&traced.admin(), "/healthz").unwrap().0, 200);
}

/// Hang-up storms in [`a_thousand_clients_hang_up_at_once_and_nothing_is_left`].
const STORMS: u32 = 10;

#[test]
fn a_thousand_clients_hang_up_at_once_and_nothing_is_left() {
    let open = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let (o, c) = (open.clone(), closed.clone());
    let up = Scripted::start(move |s, req| {
        o.fetch_add(1, Ordering::SeqCst);
        upstream::sse_head(s);
        if req.body.windows(7).any(|w| w == b"decode!") {
            upstream::chunk(s, upstream::chat_event("Hello").as_bytes());
        }
        // Silent (a prefill, or a stalled decode) until the proxy closes.
        if upstream::wait_closed(s, Duration::from_secs(60)).is_some() {
            c.fetch_add(1, Ordering::SeqCst);
        }
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let pid = proxy.child.id();
    // Warm up, then measure the baseline once the warm-up requests are done.
    for _ in 0..20 {
        http::post(&proxy.addr(), "/v1/models", "").ok();
    }
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_requests_total", &["route=\"models\""]) >= 20.0
            && metric_sum(m, "llamatap_inflight_requests", &[]) == 0.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_requests_total", &["route=\"models\""]),
        20.0,
        "{m}"
    );
    let (fd0, rss0) = (fd_count(pid), rss_kib(pid));
    let n = 1000;
    let mut after = Vec::new();
    let mut first_footprint = 0;
    for round in 1..=STORMS {
        let (opened, closed_before) = (open.load(Ordering::SeqCst), closed.load(Ordering::SeqCst));
        let mut clients: Vec<TcpStream> = Vec::with_capacity(n);
        for i in 0..n {
            let body = if i % 2 == 0 {
                "{\"stream\":true,\"x\":\"decode!\"}"
            } else {
                "{\"stream\":true}"
            };
            clients.push(
                http::send_only(
                    &proxy.addr(),
                    "POST",
                    "/v1/chat/completions",
                    body.as_bytes(),
                )
                .unwrap(),
            );
        }
        assert!(
            wait_until(Duration::from_secs(30), || open.load(Ordering::SeqCst)
                >= opened + n),
            "only {} streams reached the upstream",
            open.load(Ordering::SeqCst) - opened
        );
        let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
            metric_sum(m, "llamatap_inflight_streams", &[]) >= n as f64
        });
        assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), n as f64);
        let rss_held = rss_kib(pid);
        if round == 1 {
            first_footprint = rss_held.saturating_sub(rss0);
        }
        let hung_up = Instant::now();
        drop(clients);
        assert!(
            wait_until(Duration::from_secs(30), || closed.load(Ordering::SeqCst)
                >= closed_before + n),
            "{} of {n} upstream connections closed",
            closed.load(Ordering::SeqCst) - closed_before
        );
        let all_closed = hung_up.elapsed();
        let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
            metric_sum(m, "llamatap_inflight_requests", &[]) == 0.0
        });
        assert_eq!(metric_sum(&m, "llamatap_inflight_requests", &[]), 0.0);
        assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), 0.0);
        assert_eq!(
            metric_sum(&m, "llamatap_cancellations_total", &[]),
            (n as u32 * round) as f64
        );
        assert!(
            wait_until(Duration::from_secs(30), || fd_count(pid) <= fd0 + 2),
            "fds: {} now, {fd0} before",
            fd_count(pid)
        );
        let rss1 = rss_kib(pid);
        eprintln!(
            "storm {round}: {n} upstream connections closed within {all_closed:?}; RSS {rss0} KiB at rest before, {rss_held} KiB holding {n} streams, {rss1} KiB after; fds {fd0} -> {}",
            fd_count(pid)
        );
        after.push(rss1);
    }
    // Nothing leaks. The allocator keeps freed memory for reuse, so RSS stays
    // near the peak after a storm, and over the first storms it climbs while
    // fragmentation settles (measured: +17, +12, +8, +7 MiB, then flat within
    // a few MiB from the 6th storm to the 12th). A leak would instead add the
    // same amount every storm, for ever. So after the warm-up (storms 1 to
    // 5), over storms 5 to 10, RSS may not grow by half of what holding the
    // first 1,000 streams took (a leak of ~5 KiB per request would).
    let growth = after[STORMS as usize - 1] as i64 - after[4] as i64;
    assert!(
        growth <= first_footprint as i64 / 2,
        "memory keeps growing storm after storm: {after:?} KiB after each, {first_footprint} KiB to hold the first {n}"
    );
    // Healthy afterwards.
    let r = http::post(
        &proxy.addr(),
        "/v1/chat/completions",
        "{\"stream\":true,\"x\":\"decode!\"}",
    )
    .unwrap();
    assert_eq!(r.head.status, 200);
}

#[test]
fn hangup_storm_against_llama_server_with_parallel_slots() {
    let llama = LlamaServer::start("tiny", &["-np", "4", "-c", "4096"]);
    let proxy = Llamatap::start(&llama.base_url, &[]);
    let pid = proxy.child.id();
    let fd0 = fd_count(pid);
    let n = 1000;
    let body = chat(true, 2000);
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(
            http::send_only(
                &proxy.addr(),
                "POST",
                "/v1/chat/completions",
                body.as_bytes(),
            )
            .unwrap(),
        );
    }
    // Every slot is busy with a request.
    let busy = || {
        llama
            .slots()
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["is_processing"] == true)
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || busy() == 4),
        "{} of 4 slots busy",
        busy()
    );
    drop(clients);
    assert!(
        llama.wait_slots_idle(Duration::from_secs(30)),
        "llama-server slots still busy after the storm"
    );
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        metric_sum(m, "llamatap_inflight_requests", &[]) == 0.0
    });
    assert_eq!(
        metric_sum(&m, "llamatap_inflight_requests", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(metric_sum(&m, "llamatap_inflight_streams", &[]), 0.0);
    assert!(
        wait_until(Duration::from_secs(30), || fd_count(pid) <= fd0 + 4),
        "fds: {} now, {fd0} before",
        fd_count(pid)
    );
    assert!(
        llama.log_count("cancel task") >= 4,
        "llama-server cancelled fewer tasks than slots"
    );
    // Healthy afterwards, and llama-server too.
    let mut r = http::post(&proxy.addr(), "/v1/chat/completions", &chat(true, 8)).unwrap();
    assert_eq!(r.head.status, 200);
    assert!(String::from_utf8_lossy(&r.read_all().unwrap()).contains("[DONE]"));
}

#[test]
fn zero_downtime_upgrade_keeps_the_stream_in_flight() {
    let up = Scripted::start(|s, _req| {
        upstream::sse_head(s);
        for i in 0..15 {
            upstream::chunk(s, upstream::chat_event(&format!("t{i} ")).as_bytes());
            std::thread::sleep(Duration::from_millis(100));
        }
        upstream::chunk(s, b"data: [DONE]\n\n");
        upstream::end_chunks(s);
    });
    let mut old = Llamatap::start(&up.url(), &[]);
    let mut r = http::post(&old.addr(), "/v1/chat/completions", &chat(true, 8)).unwrap();
    r.read_until(b"t0").unwrap();
    let _ = std::fs::remove_file(old.upgrade_sock());
    let mut new = old.spawn_upgrade(&up.url());
    // The new process listens on the upgrade socket before the old one is told to hand over.
    assert!(
        wait_until(Duration::from_secs(30), || old.upgrade_sock().exists()),
        "the new process never created {}",
        old.upgrade_sock().display()
    );
    old.signal("QUIT");
    // The stream in flight on the old process finishes whole.
    let rest = r.read_all().unwrap();
    assert!(r.clean_end);
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("t14") && text.contains("[DONE]"), "{text}");
    // Meanwhile and afterwards, new connections are served (by the new process).
    for _ in 0..5 {
        let mut r = http::post(&old.addr(), "/v1/chat/completions", &chat(true, 8)).unwrap();
        assert_eq!(r.head.status, 200);
        drop(r.read_until(b"t0").unwrap());
    }
    let status = old
        .wait_exit(Duration::from_secs(15))
        .expect("old process did not exit");
    assert!(status.success());
    let mut r = http::post(&old.addr(), "/v1/chat/completions", &chat(true, 8)).unwrap();
    assert_eq!(r.head.status, 200);
    assert!(String::from_utf8_lossy(&r.read_all().unwrap()).contains("[DONE]"));
    assert!(
        new.try_wait().unwrap().is_none(),
        "the new process must keep serving"
    );
    let _ = new.kill();
    let _ = new.wait();
}

#[test]
fn slow_loris_clients_are_timed_out() {
    let up = Scripted::start(|s, _req| upstream::json(s, 200, "{}"));
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    let waited = start.elapsed();
    eprintln!("slow-loris connection closed after {waited:?} ({n} bytes)");
    assert!(waited < Duration::from_secs(75), "held {waited:?}");
    assert_eq!(http::get(&proxy.admin(), "/healthz").unwrap().0, 200);
}

#[test]
fn conflicting_content_length_and_transfer_encoding_cannot_smuggle() {
    let up = Scripted::start(|s, req| {
        upstream::json(
            s,
            200,
            &serde_json::json!({"path": req.path, "body": String::from_utf8_lossy(&req.body)})
                .to_string(),
        );
    });
    let proxy = Llamatap::start(&up.url(), &[]);
    let mut s = TcpStream::connect(proxy.addr()).unwrap();
    use std::io::{Read, Write};
    // Content-Length covers the chunked body only partly; a proxy that
    // believed it would read "GET /smuggled" as a second request.
    let smuggle = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(smuggle.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let paths: Vec<String> = up
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert!(
        !paths.iter().any(|p| p == "/smuggled"),
        "smuggled request reached the upstream: {paths:?}"
    );
    assert!(!text.contains("/smuggled"), "{text}");
    assert_eq!(
        text.matches("HTTP/1.1 ").count(),
        1,
        "one response, then the connection closes: {text}"
    );
}

#[test]
fn oversized_and_malformed_traceparent_are_ignored_safely() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let up = Scripted::start(move |s, req| {
        s2.lock()
            .unwrap()
            .push(req.header("traceparent").map(str::to_string));
        upstream::json(s, 200, "{}");
    });
    let (otlp_url, _spans) = common::otlp::http_receiver();
    let proxy = Llamatap::start(
        &up.url(),
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let huge = format!("00-{}-00f067aa0ba902b7-01", "a".repeat(8000));
    let huge_state = format!("k={}", "v".repeat(8000));
    for (tp, ts) in [
        (huge.as_str(), "a=b"),
        ("00-zz-zz-zz", huge_state.as_str()),
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            ",,,=",
        ),
    ] {
        let mut r = http::send(
            &proxy.addr(),
            "POST",
            "/v1/chat/completions",
            &[("traceparent", tp), ("tracestate", ts)],
            b"{}",
        )
        .unwrap();
        assert_eq!(r.head.status, 200);
        r.read_all().unwrap();
    }
    for tp in seen.lock().unwrap().iter() {
        let tp = tp.as_deref().unwrap();
        assert_eq!(tp.len(), 55, "a fresh traceparent goes upstream: {tp}");
    }
}
