//! A fast scripted llama-server stand-in for the streaming benchmark.
//!
//! `POST /v1/chat/completions` with `"stream":true` answers at once with
//! headers and the role-only event, waits the prefill delay, then sends one
//! token event per interval, a final event with `timings`, and `[DONE]`: each
//! event a separate write of one HTTP chunk, stamped `"t_ns"` with its send
//! time on CLOCK_MONOTONIC. While streaming it watches the socket, and records
//! the moment it sees the peer close (a hang-up reaching the upstream).
//!
//! Control (used by `llamatap-bench`):
//! - `POST /_bench/pace` `{"prefill_ms":10,"interval_us":20000,"tokens":64,"log":true}`
//! - `GET /_bench/closes`: `[[bench_id, t_ns, events_sent], ...]` since the last call
//! - `GET /_bench/stamps`: `{"id":[t_req_ns, token stamps...]}` when `log` is on
//! - `GET /_bench/stats`: streams and events served
//! - `POST /_bench/abort`: ends every stream in progress (leftovers of a
//!   proxy that never closed its upstream connections), not counted as closes
//!
//! A request names its stream with `bench-id:N` anywhere in its body (the
//! client puts it in the user message, which every proxy forwards).
//! `bench-cut:K` there makes the stream end after `K` token events, the
//! connection closed with no last event (an upstream dying mid-answer).
//!
//! For stream continuation: `POST /apply-template` answers a fixed
//! rendering, and `POST /completion` streams `n_predict` native events at
//! the same pace (then the `stop` event with `timings`).
//!
//! After a streamed answer it closes the connection, as llama-server does
//! (it ends every streamed answer with a close, `Connection: close` asked or
//! not); `--keepalive-after-stream` keeps it open for the next request.
//!
//! Usage: `sse-upstream [--listen 127.0.0.1:0] [--threads 1]
//! [--keepalive-after-stream]`; prints `listening on ADDR` on stdout once ready.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llamatap_bench::clock::mono_ns;
use llamatap_bench::events;
use llamatap_bench::http::{header_end, put_chunk, Chunked, Head};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Pace {
    prefill_ms: u64,
    interval_us: u64,
    tokens: usize,
    #[serde(default)]
    log: bool,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            prefill_ms: 10,
            interval_us: 20_000,
            tokens: 64,
            log: false,
        }
    }
}

#[derive(Default)]
struct Shared {
    pace: Mutex<Pace>,
    closes: Mutex<Vec<(u64, u64, u64)>>,
    stamps: Mutex<HashMap<u64, Vec<u64>>>,
    streams: AtomicU64,
    events: AtomicU64,
    open: AtomicU64,
    abort: tokio::sync::Notify,
    keepalive_after_stream: bool,
}

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut threads = 1usize;
    let mut keepalive_after_stream = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().unwrap_or(listen),
            "--threads" => threads = args.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            "--keepalive-after-stream" => keepalive_after_stream = true,
            _ => {
                eprintln!(
                    "usage: sse-upstream [--listen ADDR] [--threads N] [--keepalive-after-stream]"
                );
                std::process::exit(2);
            }
        }
    }
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .expect("runtime");
    rt.block_on(async move {
        let l = TcpListener::bind(&listen).await.expect("bind");
        println!("listening on {}", l.local_addr().expect("addr"));
        let _ = std::io::stdout().flush();
        let sh = Arc::new(Shared {
            keepalive_after_stream,
            ..Shared::default()
        });
        loop {
            let Ok((s, _)) = l.accept().await else {
                // EMFILE and friends: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            let sh = sh.clone();
            tokio::spawn(async move {
                sh.open.fetch_add(1, Ordering::Relaxed);
                conn(s, &sh).await;
                sh.open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
}

struct Req {
    head: Head,
    body: Vec<u8>,
}

async fn read_req(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Req> {
    let mut tmp = [0u8; 8192];
    let end = loop {
        if let Some(e) = header_end(buf) {
            break e;
        }
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = Head::parse(&buf[..end - 4])?;
    buf.drain(..end);
    let mut body = Vec::new();
    if head.chunked() {
        let mut d = Chunked::default();
        loop {
            let used = d.decode(buf, &mut body).ok()?;
            buf.drain(..used);
            if d.done {
                break;
            }
            let n = s.read(&mut tmp).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
    } else {
        let len = head.content_length().unwrap_or(0);
        while buf.len() < len {
            let n = s.read(&mut tmp).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        body = buf.drain(..len).collect();
    }
    Some(Req { head, body })
}

async fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &[u8]) -> bool {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nServer: llama.cpp\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    s.write_all(&out).await.is_ok()
}

fn bench_id(body: &[u8]) -> Option<u64> {
    marker(body, b"bench-id:")
}

fn bench_cut(body: &[u8]) -> Option<usize> {
    marker(body, b"bench-cut:")
}

/// The number written right after `name` in `body`.
fn marker<N: std::str::FromStr>(body: &[u8], name: &[u8]) -> Option<N> {
    let at = memchr::memmem::find(body, name)? + name.len();
    let digits: Vec<u8> = body[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
Server: llama.cpp\r\nX-Accel-Buffering: no\r\n\r\n";

/// The role event and `pace.tokens` token events, then the connection
/// closes: no last event, no `[DONE]`, no end of the chunked body.
async fn cut_stream(s: &mut TcpStream, t_req: u64, pace: Pace) {
    let mut out = STREAM_HEAD.to_vec();
    let mut ev = Vec::with_capacity(512);
    events::role(&mut ev, t_req, mono_ns());
    put_chunk(&mut out, &ev);
    if s.write_all(&out).await.is_err() {
        return;
    }
    let every = Duration::from_micros(pace.interval_us);
    tokio::time::sleep(Duration::from_millis(pace.prefill_ms)).await;
    for k in 0..pace.tokens {
        out.clear();
        ev.clear();
        events::token(&mut ev, k, mono_ns());
        put_chunk(&mut out, &ev);
        if s.write_all(&out).await.is_err() {
            return;
        }
        tokio::time::sleep(every).await;
    }
}

/// `n` native events at the pace's interval, then the `stop` event.
async fn native(s: &mut TcpStream, n: usize, pace: Pace) {
    let mut out = STREAM_HEAD.to_vec();
    if s.write_all(&out).await.is_err() {
        return;
    }
    let every = Duration::from_micros(pace.interval_us);
    tokio::time::sleep(Duration::from_millis(pace.prefill_ms)).await;
    for k in 0..n {
        out.clear();
        let w = events::WORDS[k % events::WORDS.len()];
        let ev = format!(
            "data: {{\"index\":0,\"content\":\"{w}\",\"tokens\":[{k}],\"stop\":false,\"id_slot\":-1,\"tokens_predicted\":{},\"tokens_evaluated\":20}}\n\n",
            k + 1
        );
        put_chunk(&mut out, ev.as_bytes());
        if s.write_all(&out).await.is_err() {
            return;
        }
        tokio::time::sleep(every).await;
    }
    out.clear();
    let last = format!(
        "data: {{\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":0,\"stop\":true,\"model\":\"tiny.gguf\",\"tokens_predicted\":{n},\"tokens_evaluated\":20,\"stop_type\":\"limit\",\"timings\":{{\"cache_n\":12,\"prompt_n\":8,\"prompt_ms\":1.0,\"predicted_n\":{n},\"predicted_ms\":1.0}}}}\n\n"
    );
    put_chunk(&mut out, last.as_bytes());
    out.extend_from_slice(b"0\r\n\r\n");
    let _ = s.write_all(&out).await;
}

async fn conn(mut s: TcpStream, sh: &Shared) {
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    while let Some(req) = read_req(&mut s, &mut buf).await {
        let t_req = mono_ns();
        let path = req.head.second.split('?').next().unwrap_or("").to_string();
        let keep = match (req.head.first.as_str(), path.as_str()) {
            ("GET", "/health") => respond(&mut s, "200 OK", "application/json", br#"{"status":"ok"}"#).await,
            ("GET", "/v1/models") | ("GET", "/models") => {
                respond(
                    &mut s,
                    "200 OK",
                    "application/json",
                    br#"{"object":"list","data":[{"id":"tiny.gguf","object":"model","created":1764493200,"owned_by":"llamacpp"}]}"#,
                )
                .await
            }
            ("POST", "/_bench/pace") => match serde_json::from_slice::<Pace>(&req.body) {
                Ok(p) => {
                    *sh.pace.lock().unwrap() = p;
                    respond(&mut s, "200 OK", "application/json", b"{}").await
                }
                Err(e) => respond(&mut s, "400 Bad Request", "text/plain", e.to_string().as_bytes()).await,
            },
            ("GET", "/_bench/closes") => {
                let v = std::mem::take(&mut *sh.closes.lock().unwrap());
                let body = serde_json::to_vec(&v).unwrap_or_default();
                respond(&mut s, "200 OK", "application/json", &body).await
            }
            ("GET", "/_bench/stamps") => {
                let v = std::mem::take(&mut *sh.stamps.lock().unwrap());
                let body = serde_json::to_vec(&v).unwrap_or_default();
                respond(&mut s, "200 OK", "application/json", &body).await
            }
            ("POST", "/_bench/abort") => {
                sh.abort.notify_waiters();
                respond(&mut s, "200 OK", "application/json", b"{}").await
            }
            ("GET", "/_bench/stats") => {
                let body = format!(
                    "{{\"streams\":{},\"events\":{},\"open_connections\":{}}}",
                    sh.streams.load(Ordering::Relaxed),
                    sh.events.load(Ordering::Relaxed),
                    sh.open.load(Ordering::Relaxed)
                );
                respond(&mut s, "200 OK", "application/json", body.as_bytes()).await
            }
            ("POST", "/apply-template") => {
                respond(&mut s, "200 OK", "application/json", br#"{"prompt":"<|user|>\nbench<|end|>\n<|assistant|>\n"}"#).await
            }
            ("POST", "/completion") => {
                let n = serde_json::from_slice::<serde_json::Value>(&req.body)
                    .ok()
                    .and_then(|v| v["n_predict"].as_u64())
                    .unwrap_or(16) as usize;
                let pace = *sh.pace.lock().unwrap();
                native(&mut s, n, pace).await;
                false
            }
            ("POST", p) if p.ends_with("/chat/completions") => {
                let streaming = memchr::memmem::find(&req.body, b"\"stream\":true").is_some()
                    || memchr::memmem::find(&req.body, b"\"stream\": true").is_some();
                let pace = *sh.pace.lock().unwrap();
                if streaming {
                    let pace = match bench_cut(&req.body) {
                        Some(k) => Pace { tokens: k, ..pace },
                        None => pace,
                    };
                    if bench_cut(&req.body).is_some() {
                        cut_stream(&mut s, t_req, pace).await;
                        false
                    } else {
                        stream(&mut s, &mut buf, bench_id(&req.body), t_req, pace, sh).await
                            && sh.keepalive_after_stream
                    }
                } else {
                    let body = br#"{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Sure."}}],"created":1764493200,"model":"tiny.gguf","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":12,"total_tokens":14},"id":"chatcmpl-x"}"#;
                    respond(&mut s, "200 OK", "application/json", body).await
                }
            }
            _ => respond(&mut s, "404 Not Found", "application/json", br#"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#).await,
        };
        if !keep || req.head.close() {
            return;
        }
    }
}

/// Streams one answer; false if the connection is gone (or must close).
async fn stream(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    id: Option<u64>,
    t_req: u64,
    pace: Pace,
    sh: &Shared,
) -> bool {
    sh.streams.fetch_add(1, Ordering::Relaxed);
    let sent = AtomicU64::new(0);
    let (mut r, mut w) = s.split();
    let watch = async {
        let mut tmp = [0u8; 1024];
        loop {
            match r.read(&mut tmp).await {
                Ok(0) | Err(_) => return mono_ns(),
                // A pipelined next request: keep it for later.
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    };
    let send = async {
        let mut out = Vec::with_capacity(1024);
        let mut ev = Vec::with_capacity(512);
        out.extend_from_slice(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
Server: llama.cpp\r\nX-Accel-Buffering: no\r\nKeep-Alive: timeout=5, max=100000\r\n\r\n",
        );
        events::role(&mut ev, t_req, mono_ns());
        put_chunk(&mut out, &ev);
        w.write_all(&out).await?;
        sent.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let prefill = Duration::from_millis(pace.prefill_ms);
        let every = Duration::from_micros(pace.interval_us);
        let mut log = pace.log.then(|| {
            let mut v = Vec::with_capacity(pace.tokens + 1);
            v.push(t_req);
            v
        });
        // Events are sent apart: at their nominal times, but never closer than
        // half an interval after the previous one (a late timer does not make
        // the upstream itself send a burst).
        let min_gap = every / 2;
        let mut last_sent = start;
        for k in 0..pace.tokens {
            let nominal = start + prefill + every * k as u32;
            let at = if k == 0 {
                nominal
            } else {
                nominal.max(last_sent + min_gap)
            };
            tokio::time::sleep_until(at).await;
            last_sent = Instant::now();
            out.clear();
            ev.clear();
            let t = mono_ns();
            events::token(&mut ev, k, t);
            put_chunk(&mut out, &ev);
            w.write_all(&out).await?;
            sent.fetch_add(1, Ordering::Relaxed);
            if let Some(l) = log.as_mut() {
                l.push(t);
            }
        }
        let after = (start + prefill + every * pace.tokens as u32).max(last_sent + min_gap);
        tokio::time::sleep_until(after).await;
        let last_at = Instant::now();
        out.clear();
        ev.clear();
        let interval_ms = pace.interval_us as f64 / 1000.0;
        events::last(
            &mut ev,
            pace.tokens,
            pace.prefill_ms as f64,
            interval_ms,
            mono_ns(),
        );
        put_chunk(&mut out, &ev);
        w.write_all(&out).await?;
        tokio::time::sleep_until((after + every).max(last_at + min_gap)).await;
        out.clear();
        put_chunk(&mut out, events::DONE);
        out.extend_from_slice(b"0\r\n\r\n");
        w.write_all(&out).await?;
        sent.fetch_add(2, Ordering::Relaxed);
        if let (Some(id), Some(l)) = (id, log) {
            sh.stamps.lock().unwrap().insert(id, l);
        }
        Ok::<(), std::io::Error>(())
    };
    let res = tokio::select! {
        r = send => r.map_err(|_| mono_ns()),
        t = watch => Err(t),
        _ = sh.abort.notified() => {
            sh.events.fetch_add(sent.load(Ordering::Relaxed), Ordering::Relaxed);
            return false;
        }
    };
    let n = sent.load(Ordering::Relaxed);
    sh.events.fetch_add(n, Ordering::Relaxed);
    match res {
        Ok(()) => true,
        Err(t) => {
            sh.closes
                .lock()
                .unwrap()
                .push((id.unwrap_or(u64::MAX), t, n));
            false
        }
    }
}
