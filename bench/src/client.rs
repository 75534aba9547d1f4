//! The load generator's client: one task per stream, open loop (streams start
//! on a fixed schedule whether or not earlier ones finished), a raw HTTP/1.1
//! reader that stamps every read on CLOCK_MONOTONIC and counts how many SSE
//! events each read completed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::clock::mono_ns;
use crate::events::classify;
use crate::http::{header_end, Chunked, Head};

/// Where streams go.
#[derive(Debug, Clone)]
pub struct Target {
    /// Variant name.
    pub name: String,
    /// Listener address.
    pub addr: SocketAddr,
    /// `model` in the request body.
    pub model: String,
    /// `Authorization` header value, if the target needs one (LiteLLM's master key).
    pub auth: Option<String>,
}

/// Idle keep-alive connections to one target.
#[derive(Default)]
pub struct Pool(Mutex<Vec<TcpStream>>);

impl Pool {
    fn take(&self) -> Option<TcpStream> {
        self.0.lock().ok()?.pop()
    }
    fn put(&self, s: TcpStream) {
        if let Ok(mut g) = self.0.lock() {
            g.push(s);
        }
    }
    /// Closes every idle connection.
    pub fn clear(&self) {
        if let Ok(mut g) = self.0.lock() {
            g.clear();
        }
    }
}

/// Live counters, polled while streams are held.
#[derive(Default)]
pub struct Counters {
    /// Streams started.
    pub started: AtomicU64,
    /// Streams that received their first content event.
    pub streaming: AtomicU64,
    /// Streams that ended in an error.
    pub errors: AtomicU64,
    /// Data events received.
    pub events: AtomicU64,
}

/// What one stream saw.
#[derive(Debug, Clone, Default)]
pub struct StreamRec {
    /// Bench id (in the request body).
    pub id: u64,
    /// Request start (before connect or pool take).
    pub t_start: u64,
    /// A new connection was opened for it.
    pub new_conn: bool,
    /// Arrival of the first content event.
    pub first_content: Option<u64>,
    /// Upstream's request-arrival stamp (from the role event, if it survived).
    pub t_req: Option<u64>,
    /// Content events: (arrival, send stamp if the event carried one).
    pub content: Vec<(u64, Option<u64>)>,
    /// Data events received (role, content, final, [DONE], anything).
    pub data_events: u64,
    /// Extra events that arrived in a read together with another one.
    pub merged: u64,
    /// Reads that completed more than one event.
    pub merged_reads: u64,
    /// Reads of body bytes.
    pub reads: u64,
    /// `[DONE]` and the end of the body arrived.
    pub complete: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// When the client hung up (hold mode).
    pub closed_at: Option<u64>,
    /// Last data event arrival.
    pub last_arrival: Option<u64>,
}

/// How one stream is run.
#[derive(Clone)]
pub struct StreamOpts {
    /// `max_tokens` asked (informational; the upstream's pace decides).
    pub max_tokens: usize,
    /// Give up after this long.
    pub timeout: Duration,
    /// Record each content event's arrival (off for huge hold runs).
    pub record_events: bool,
}

fn request(t: &Target, id: u64, max_tokens: usize) -> Vec<u8> {
    let body = format!(
        "{{\"model\":\"{}\",\"stream\":true,\"max_tokens\":{max_tokens},\"messages\":[{{\"role\":\"user\",\"content\":\"bench-id:{id} What is the weather in Paris tomorrow?\"}}]}}",
        t.model
    );
    let auth = t
        .auth
        .as_ref()
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        t.addr,
        body.len()
    )
    .into_bytes()
}

enum Framing {
    Chunked(Chunked),
    Length(usize),
    Close,
}

/// Runs one stream to its end, its timeout, or (with `hangup`: a receiver and
/// this stream's index) until the receiver's value exceeds its index, when it
/// stamps the moment and drops the socket.
pub async fn run_stream(
    t: &Target,
    pool: Option<&Pool>,
    id: u64,
    opts: &StreamOpts,
    hangup: Option<(watch::Receiver<u64>, u64)>,
    ctr: &Counters,
) -> StreamRec {
    ctr.started.fetch_add(1, Ordering::Relaxed);
    let mut rec = StreamRec {
        id,
        t_start: mono_ns(),
        ..Default::default()
    };
    let mut hangup = hangup;
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let req = request(t, id, opts.max_tokens);
    let mut attempt = 0;
    // A pooled connection the server closed while idle fails before any
    // response byte: retry once on a new connection, as HTTP clients do.
    'retry: loop {
        let mut sock = loop {
            attempt += 1;
            let (mut s, reused) = match pool.and_then(Pool::take) {
                Some(s) => (s, true),
                None => match tokio::time::timeout_at(deadline, TcpStream::connect(t.addr)).await {
                    Ok(Ok(s)) => (s, false),
                    Ok(Err(e)) => return fail(rec, ctr, format!("connect: {e}")),
                    Err(_) => return fail(rec, ctr, "connect: timeout".into()),
                },
            };
            let _ = s.set_nodelay(true);
            rec.new_conn = !reused;
            match s.write_all(&req).await {
                Ok(()) => break s,
                Err(_) if reused && attempt < 3 => continue,
                Err(e) => return fail(rec, ctr, format!("write: {e}")),
            }
        };
        let mut buf = vec![0u8; 16 * 1024];
        let mut head_buf: Vec<u8> = Vec::new();
        let mut framing: Option<Framing> = None;
        let mut sse: Vec<u8> = Vec::with_capacity(4096);
        let mut scan = 0usize;
        let mut got_bytes = false;
        loop {
            let read = async {
                match &mut hangup {
                    Some((h, index)) => {
                        let index = *index;
                        tokio::select! {
                            r = sock.read(&mut buf) => Some(r),
                            _ = h.wait_for(|v| *v > index) => None,
                        }
                    }
                    None => Some(sock.read(&mut buf).await),
                }
            };
            let r = match tokio::time::timeout_at(deadline, read).await {
                Err(_) => return fail(rec, ctr, "timeout".into()),
                Ok(None) => {
                    rec.closed_at = Some(mono_ns());
                    drop(sock);
                    return rec;
                }
                Ok(Some(r)) => r,
            };
            let t_arr = mono_ns();
            let n = match r {
                Ok(0) | Err(_) if !got_bytes && !rec.new_conn && attempt < 3 => {
                    attempt += 1;
                    continue 'retry;
                }
                Ok(0) => {
                    if matches!(framing, Some(Framing::Close)) && rec.complete {
                        return rec;
                    }
                    let what = if got_bytes {
                        "eof mid-stream"
                    } else {
                        "eof before response"
                    };
                    return fail(rec, ctr, what.into());
                }
                Ok(n) => n,
                Err(e) => return fail(rec, ctr, format!("read: {e}")),
            };
            got_bytes = true;
            let mut input: &[u8] = &buf[..n];
            if framing.is_none() {
                head_buf.extend_from_slice(input);
                let Some(end) = header_end(&head_buf) else {
                    continue;
                };
                let Some(head) = Head::parse(&head_buf[..end - 4]) else {
                    return fail(rec, ctr, "bad response head".into());
                };
                if head.second != "200" {
                    return fail(rec, ctr, format!("status {}", head.second));
                }
                framing = Some(if head.chunked() {
                    Framing::Chunked(Chunked::default())
                } else if let Some(l) = head.content_length() {
                    Framing::Length(l)
                } else {
                    Framing::Close
                });
                let body_from = end - (head_buf.len() - n);
                input = &buf[body_from..n];
                head_buf = Vec::new();
            }
            let mut ended = false;
            match framing.as_mut() {
                Some(Framing::Chunked(d)) => {
                    if let Err(e) = d.decode(input, &mut sse) {
                        return fail(rec, ctr, format!("chunked: {e}"));
                    }
                    ended = d.done;
                }
                Some(Framing::Length(left)) => {
                    let take = (*left).min(input.len());
                    sse.extend_from_slice(&input[..take]);
                    *left -= take;
                    ended = *left == 0;
                }
                Some(Framing::Close) | None => sse.extend_from_slice(input),
            }
            if input.is_empty() && !ended {
                continue;
            }
            rec.reads += 1;
            // Complete events in this read.
            let mut in_read = 0u64;
            let mut consumed = 0usize;
            while let Some(p) = memchr::memmem::find(&sse[scan..], b"\n\n") {
                let end = scan + p;
                let ev = &sse[consumed..end];
                let seen = classify(ev);
                consumed = end + 2;
                scan = consumed;
                if !seen.data {
                    continue;
                }
                in_read += 1;
                rec.data_events += 1;
                rec.last_arrival = Some(t_arr);
                if seen.t_req_ns.is_some() {
                    rec.t_req = seen.t_req_ns;
                }
                if seen.error {
                    rec.error = Some("error event".into());
                }
                if seen.content {
                    if rec.first_content.is_none() {
                        rec.first_content = Some(t_arr);
                        ctr.streaming.fetch_add(1, Ordering::Relaxed);
                    }
                    if opts.record_events {
                        rec.content.push((t_arr, seen.t_ns));
                    }
                }
                if seen.done {
                    rec.complete = true;
                }
            }
            if consumed > 0 {
                sse.drain(..consumed);
            }
            scan = sse.len().saturating_sub(1);
            ctr.events.fetch_add(in_read, Ordering::Relaxed);
            if in_read > 1 {
                rec.merged += in_read - 1;
                rec.merged_reads += 1;
            }
            if ended {
                if !rec.complete {
                    return fail(rec, ctr, "ended without [DONE]".into());
                }
                if let Some(p) = pool {
                    p.put(sock);
                }
                if rec.error.is_some() {
                    ctr.errors.fetch_add(1, Ordering::Relaxed);
                }
                return rec;
            }
        }
    }
}

fn fail(mut rec: StreamRec, ctr: &Counters, e: String) -> StreamRec {
    ctr.errors.fetch_add(1, Ordering::Relaxed);
    rec.error = Some(e);
    rec
}

/// Open-loop load: stream `i` starts at `i / rate` seconds, whatever happened
/// to the others. Returns every stream's record once all have ended.
pub async fn open_loop(
    t: Arc<Target>,
    pool: Arc<Pool>,
    rate: f64,
    duration: Duration,
    id_base: u64,
    opts: StreamOpts,
    ctr: Arc<Counters>,
) -> Vec<StreamRec> {
    let n = (rate * duration.as_secs_f64()).round() as u64;
    let start = tokio::time::Instant::now();
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        let (t, pool, opts, ctr) = (t.clone(), pool.clone(), opts.clone(), ctr.clone());
        handles.push(tokio::spawn(async move {
            run_stream(&t, Some(&pool), id_base + i, &opts, None, &ctr).await
        }));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(r) = h.await {
            out.push(r);
        }
    }
    out
}

/// Streams held open until told to hang up, each on its own new connection.
pub struct Held {
    /// Their tasks.
    pub handles: Vec<tokio::task::JoinHandle<StreamRec>>,
    /// Counters.
    pub ctr: Arc<Counters>,
    tx: watch::Sender<u64>,
}

impl Held {
    /// Nothing held yet.
    pub fn new() -> Held {
        Held {
            handles: Vec::new(),
            ctr: Arc::new(Counters::default()),
            tx: watch::channel(0).0,
        }
    }

    /// Opens `n` more streams at `rate` per second.
    pub async fn open(
        &mut self,
        t: &Arc<Target>,
        n: u64,
        rate: f64,
        id_base: u64,
        opts: &StreamOpts,
    ) {
        let start = tokio::time::Instant::now();
        for i in 0..n {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            let index = self.handles.len() as u64;
            let (t, opts, ctr, rx) = (
                t.clone(),
                opts.clone(),
                self.ctr.clone(),
                self.tx.subscribe(),
            );
            self.handles.push(tokio::spawn(async move {
                run_stream(&t, None, id_base + index, &opts, Some((rx, index)), &ctr).await
            }));
        }
    }

    /// Hangs up the first `k` streams one at a time, `every` apart.
    pub async fn hang_up_one_by_one(&self, k: u64, every: Duration) {
        let start = tokio::time::Instant::now();
        for i in 1..=k {
            tokio::time::sleep_until(start + every * i as u32).await;
            let _ = self.tx.send(i);
        }
    }

    /// Hangs up every remaining stream at once; returns all records.
    pub async fn hang_up(self) -> Vec<StreamRec> {
        let _ = self.tx.send(u64::MAX);
        let mut out = Vec::with_capacity(self.handles.len());
        for h in self.handles {
            if let Ok(r) = h.await {
                out.push(r);
            }
        }
        out
    }
}

impl Default for Held {
    fn default() -> Self {
        Self::new()
    }
}
