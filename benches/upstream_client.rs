//! llamatap's own upstream HTTP/1 client ([`Exchange`], on a Pingora
//! `Stream`) next to hyper 1's `client::conn::http1` (on `TokioIo`), side by
//! side against one loopback upstream that answers as llama-server does: a
//! chunked `text/event-stream` of OpenAI chat chunk events (about 250 bytes
//! each), one HTTP chunk and one write per event, then `data: [DONE]`, the
//! last chunk, and a close.
//!
//! Each iteration connects, sends `POST /v1/chat/completions` with a small
//! JSON body and `Connection: close`, reads the head and every body piece to
//! the end, and checks that the body bytes read are the bytes the upstream
//! sent. `upstream_client_1000_events` gives the cost per event,
//! `upstream_client_1_event` the cost per request (connect, head, one event).
//! Both clients run on one current-thread runtime on the bench thread
//! (hyper's connection task is spawned on it), the upstream on a thread and
//! a current-thread runtime of its own. `tcp_read_to_eof` reads the same
//! answer with no HTTP at all: the floor that the upstream and the kernel
//! set. Each client's CPU time on the bench thread per event goes to stderr.
//!
//! Before the groups, the memory a stream held between two events keeps in
//! each client: 1,000 streams held at once, each a task parked on its next
//! read, as resident memory (VmRSS) less that of 1,000 plain sockets held
//! the same way. It goes to stderr. The allocator is jemalloc, as in the
//! binary (unless built without the `jemalloc` feature).
//!
//! cargo bench --bench upstream_client

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::Cell;
use std::hint::black_box;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::header;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use llamatap::upstream::client::Exchange;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const WORDS: [&str; 8] = [" word", " the", " llama", ",", " é", "\\n", " quick", " 🦙"];
const PATH: &str = "/v1/chat/completions";
const REQUEST_BODY: &[u8] = br#"{"model":"tiny.gguf","stream":true,"messages":[{"role":"user","content":"Tell me about llamas."}]}"#;
/// Streams held at once for the memory figure (a few under `cargo test`).
const HELD: usize = 1000;

// === The upstream ===

/// What the upstream writes, one `write_all` per element: the head, one
/// chunk per event, the `[DONE]` chunk and the last chunk.
struct Answer {
    writes: Vec<Bytes>,
    /// The body bytes a client reads: the events and `[DONE]`.
    body_len: usize,
    /// Every byte on the wire.
    wire_len: usize,
}

/// One llama-server chat chunk event, as the wire carries it (as
/// `benches/sse.rs`).
fn event(i: usize) -> String {
    format!(
        "data: {{\"choices\":[{{\"finish_reason\":null,\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}],\
         \"created\":{},\"id\":\"chatcmpl-Zk3mQ8vR2tLw9XcY7bN4pJ6hF1sD0aGe\",\"model\":\"tiny.gguf\",\
         \"system_fingerprint\":\"b0-unknown\",\"object\":\"chat.completion.chunk\"}}\n\n",
        WORDS[i % WORDS.len()],
        1_764_493_200 + i / 50,
    )
}

/// `data` as one HTTP chunk.
fn chunk(data: &[u8]) -> Bytes {
    let mut c = BytesMut::with_capacity(data.len() + 12);
    c.put_slice(format!("{:x}\r\n", data.len()).as_bytes());
    c.put_slice(data);
    c.put_slice(b"\r\n");
    c.freeze()
}

impl Answer {
    fn new(events: usize) -> Self {
        let mut writes = vec![Bytes::from_static(
            b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n\
              Content-Type: text/event-stream\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\n\r\n",
        )];
        let mut body_len = 0;
        for i in 0..events {
            let e = event(i);
            body_len += e.len();
            writes.push(chunk(e.as_bytes()));
        }
        let done = b"data: [DONE]\n\n";
        body_len += done.len();
        writes.push(chunk(done));
        writes.push(Bytes::from_static(b"0\r\n\r\n"));
        let wire_len = writes.iter().map(Bytes::len).sum();
        Answer {
            writes,
            body_len,
            wire_len,
        }
    }

    /// What a held stream is sent: the head and the first event.
    fn held(&self) -> &[Bytes] {
        &self.writes[..2]
    }

    /// The first event's body bytes.
    fn first_event_len(&self) -> usize {
        event(0).len()
    }
}

/// Starts the upstream on a thread of its own (a current-thread runtime),
/// one listener per answer; the addresses. A held answer stops after its
/// first event and waits for the client to close.
fn start_upstream(answers: Vec<(Arc<Answer>, bool)>) -> Vec<SocketAddr> {
    let listeners: Vec<std::net::TcpListener> = answers
        .iter()
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    let addrs = listeners
        .iter()
        .map(|l| l.local_addr().expect("local address"))
        .collect();
    std::thread::Builder::new()
        .name("upstream".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("upstream runtime");
            rt.block_on(async move {
                for (listener, (answer, held)) in listeners.into_iter().zip(answers) {
                    listener.set_nonblocking(true).expect("non-blocking");
                    let listener = TcpListener::from_std(listener).expect("listener");
                    tokio::spawn(accept(listener, answer, held));
                }
                std::future::pending::<()>().await;
            });
        })
        .expect("upstream thread");
    addrs
}

async fn accept(listener: TcpListener, answer: Arc<Answer>, held: bool) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(serve(sock, answer.clone(), held));
            }
            Err(e) => eprintln!("upstream: accept: {e}"),
        }
    }
}

/// Reads the request whole, then writes the answer, each piece with its own
/// `write_all` (as llama-server flushes each token), and closes.
async fn serve(mut sock: TcpStream, answer: Arc<Answer>, held: bool) {
    let served = async {
        sock.set_nodelay(true)?;
        read_request(&mut sock).await?;
        let writes = if held { answer.held() } else { &answer.writes };
        for w in writes {
            sock.write_all(w).await?;
        }
        if held {
            // Until the client closes.
            let _closed = sock.read(&mut [0u8; 1]).await?;
        }
        io::Result::Ok(())
    };
    if let Err(e) = served.await {
        eprintln!("upstream: {e}");
    }
}

/// Reads a `POST /v1/chat/completions` head and its `Content-Length` body.
async fn read_request(sock: &mut TcpStream) -> io::Result<()> {
    let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "closed before the request");
    let mut buf = Vec::with_capacity(4096);
    let whole = loop {
        if sock.read_buf(&mut buf).await? == 0 {
            return Err(eof());
        }
        let mut fields = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut fields);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                if req.method != Some("POST") || req.path != Some(PATH) {
                    return Err(io::Error::other("not POST /v1/chat/completions"));
                }
                let body = req
                    .headers
                    .iter()
                    .find(|f| f.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|f| {
                        std::str::from_utf8(f.value)
                            .ok()?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
                    .ok_or_else(|| io::Error::other("no Content-Length"))?;
                break len + body;
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    };
    while buf.len() < whole {
        if sock.read_buf(&mut buf).await? == 0 {
            return Err(eof());
        }
    }
    Ok(())
}

// === The clients ===

async fn connect(addr: SocketAddr) -> TcpStream {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("TCP_NODELAY");
    tcp
}

/// The request as llamatap writes it (`proxy::forward`): a Pingora head
/// made into bytes, the body in the same write.
fn wire_request() -> BytesMut {
    let mut req = RequestHeader::build("POST", PATH.as_bytes(), Some(4)).expect("head");
    req.set_version(http::Version::HTTP_11);
    req.insert_header(header::HOST, "127.0.0.1").expect("Host");
    req.insert_header(header::CONTENT_TYPE, "application/json")
        .expect("Content-Type");
    req.insert_header(header::CONTENT_LENGTH, REQUEST_BODY.len())
        .expect("Content-Length");
    req.insert_header(header::CONNECTION, "close")
        .expect("Connection");
    let mut out = http_req_header_to_wire(&req).expect("request head");
    out.put_slice(REQUEST_BODY);
    out
}

/// The same request for hyper (which adds the `Content-Length`).
fn hyper_request() -> http::Request<Full<Bytes>> {
    http::Request::post(PATH)
        .header(header::HOST, "127.0.0.1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONNECTION, "close")
        .body(Full::new(Bytes::from_static(REQUEST_BODY)))
        .expect("request")
}

/// llamatap's client: connects, sends the request, reads the final head.
async fn exchange_head(addr: SocketAddr) -> Exchange {
    let stream: Stream = Box::new(L4Stream::from(connect(addr).await));
    let mut up = Exchange::new(stream);
    up.write(&wire_request(), None).await.expect("request");
    loop {
        let head = up.read_header(None).await.expect("response head");
        if !head.status.is_informational() {
            assert_eq!(head.status, 200);
            return up;
        }
    }
}

/// hyper's client: connects, spawns the connection task, sends the
/// request, waits for the head.
async fn hyper_head(addr: SocketAddr) -> (Incoming, JoinHandle<hyper::Result<()>>) {
    let io = TokioIo::new(connect(addr).await);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .expect("handshake");
    let conn = tokio::spawn(conn);
    let resp = sender
        .send_request(hyper_request())
        .await
        .expect("response head");
    assert_eq!(resp.status(), 200);
    (resp.into_body(), conn)
}

#[derive(Clone, Copy)]
enum Client {
    Exchange,
    Hyper,
    Raw,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Exchange => "llamatap_exchange",
            Client::Hyper => "hyper_http1",
            Client::Raw => "tcp_read_to_eof",
        }
    }

    /// The bytes one exchange must count: the body, or every byte for the
    /// plain read.
    fn expected(self, answer: &Answer) -> usize {
        match self {
            Client::Exchange | Client::Hyper => answer.body_len,
            Client::Raw => answer.wire_len,
        }
    }

    /// One whole exchange; the bytes read.
    async fn once(self, addr: SocketAddr, buf: &mut [u8]) -> usize {
        let mut bytes = 0;
        match self {
            Client::Exchange => {
                let mut up = exchange_head(addr).await;
                while !up.is_body_done() {
                    match up.read_body().await.expect("body") {
                        Some(piece) => bytes += piece.len(),
                        None => break,
                    }
                }
            }
            Client::Hyper => {
                let (mut body, conn) = hyper_head(addr).await;
                while let Some(frame) = body.frame().await {
                    if let Some(data) = frame.expect("body").data_ref() {
                        bytes += data.len();
                    }
                }
                conn.await.expect("connection task").expect("connection");
            }
            Client::Raw => {
                let mut tcp = connect(addr).await;
                tcp.write_all(&wire_request()).await.expect("request");
                loop {
                    match tcp.read(buf).await.expect("read") {
                        0 => break,
                        n => bytes += n,
                    }
                }
            }
        }
        bytes
    }
}

// === Memory of a held stream ===

/// Aborts the task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A plain socket that has read the head and the first event, parked on
/// its next read.
async fn hold_raw(addr: SocketAddr, answer: Arc<Answer>, ready: UnboundedSender<()>) {
    let first: usize = answer.held().iter().map(Bytes::len).sum();
    let mut tcp = Box::pin(async {
        let mut tcp = connect(addr).await;
        tcp.write_all(&wire_request()).await.expect("request");
        tcp
    })
    .await;
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < first {
        match tcp.read(&mut buf).await.expect("read") {
            0 => panic!("the upstream closed a held stream"),
            n => got += n,
        }
    }
    let _ = ready.send(());
    drop(ready);
    let _ = tcp.read(&mut buf).await;
}

/// llamatap's client, the first event read, parked on the next.
async fn hold_exchange(addr: SocketAddr, answer: Arc<Answer>, ready: UnboundedSender<()>) {
    let first = answer.first_event_len();
    let mut up = Box::pin(exchange_head(addr)).await;
    let mut got = 0;
    while got < first {
        got += up.read_body().await.expect("body").expect("an event").len();
    }
    let _ = ready.send(());
    drop(ready);
    let _ = up.read_body().await;
}

/// hyper's client, the first event read, parked on the next (its
/// connection task parked on its read).
async fn hold_hyper(addr: SocketAddr, answer: Arc<Answer>, ready: UnboundedSender<()>) {
    let first = answer.first_event_len();
    let (mut body, conn) = Box::pin(hyper_head(addr)).await;
    let _conn = AbortOnDrop(conn);
    let mut got = 0;
    while got < first {
        let frame = body.frame().await.expect("an event").expect("body");
        got += frame.data_ref().map_or(0, Bytes::len);
    }
    let _ = ready.send(());
    drop(ready);
    let _ = body.frame().await;
}

/// The resident memory of this process, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Opens `n` streams of `client`'s kind, one after another, each held
/// between its first and second event by a task of its own.
async fn hold(
    client: Client,
    n: usize,
    addr: SocketAddr,
    answer: &Arc<Answer>,
) -> Vec<JoinHandle<()>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (a, tx) = (answer.clone(), tx.clone());
        tasks.push(match client {
            Client::Raw => tokio::spawn(hold_raw(addr, a, tx)),
            Client::Exchange => tokio::spawn(hold_exchange(addr, a, tx)),
            Client::Hyper => tokio::spawn(hold_hyper(addr, a, tx)),
        });
        rx.recv().await.expect("a held stream");
    }
    tasks
}

/// Holds `held` streams of each kind at once (plain sockets first, then
/// llamatap's client, then hyper's) and prints what each client's stream
/// adds to the resident memory beyond a plain socket's. A few of each are
/// held and let go first, so that what is made once (the allocator's
/// arenas and caches, the runtimes' first growth) is not counted.
fn held_memory(rt: &Runtime, addr: SocketAddr, answer: &Arc<Answer>, held: usize) {
    rt.block_on(async {
        let kinds = [Client::Raw, Client::Exchange, Client::Hyper];
        for client in kinds {
            for task in hold(client, 16, addr, answer).await {
                task.abort();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut tasks = Vec::new();
        let mut rss = vec![rss_kib()];
        for client in kinds {
            tasks.push(hold(client, held, addr, answer).await);
            rss.push(rss_kib());
        }
        for task in tasks.iter().flatten() {
            task.abort();
        }
        let per_stream = |i: usize| (rss[i + 1] as f64 - rss[i] as f64) * 1024.0 / held as f64;
        let raw = per_stream(0);
        eprintln!(
            "held streams ({held} of each at once, resident memory per stream): \
             plain socket and its task (with the upstream's side) {raw:.0} B; \
             llamatap_exchange {:+.0} B; hyper_http1 {:+.0} B",
            per_stream(1) - raw,
            per_stream(2) - raw,
        );
        // Let the upstream see the closes.
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
}

// === The groups ===

/// The CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

fn group(
    c: &mut Criterion,
    rt: &Runtime,
    events: usize,
    addr: SocketAddr,
    answer: &Answer,
    time: Duration,
) {
    let name = format!(
        "upstream_client_{events}_event{}",
        if events == 1 { "" } else { "s" }
    );
    let mut group = c.benchmark_group(&name);
    group.throughput(Throughput::Elements(events as u64));
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(time);
    for client in [Client::Exchange, Client::Hyper, Client::Raw] {
        let cpu = Cell::new(Duration::ZERO);
        let runs = Cell::new(0u64);
        group.bench_function(client.name(), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut buf = vec![0u8; 64 * 1024];
                    let expected = client.expected(answer);
                    let cpu_before = thread_cpu();
                    let start = Instant::now();
                    for _ in 0..iters {
                        let n = client.once(addr, &mut buf).await;
                        assert_eq!(n, expected, "{} read {n} bytes", client.name());
                        black_box(n);
                    }
                    let took = start.elapsed();
                    cpu.set(cpu.get() + thread_cpu().saturating_sub(cpu_before));
                    runs.set(runs.get() + iters);
                    took
                })
            });
        });
        if runs.get() > 0 {
            eprintln!(
                "{name}/{}: bench thread CPU {:.3} µs per event over {} requests",
                client.name(),
                cpu.get().as_secs_f64() * 1e6 / (runs.get() as f64 * events as f64),
                runs.get(),
            );
        }
    }
    group.finish();
}

fn bench(c: &mut Criterion) {
    let many = Arc::new(Answer::new(1000));
    let one = Arc::new(Answer::new(1));
    let addrs = start_upstream(vec![
        (many.clone(), false),
        (one.clone(), false),
        (one.clone(), true),
    ]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    // `cargo test --all-targets` runs each benchmark once: hold a few there.
    let held = if std::env::args().any(|a| a == "--bench") {
        HELD
    } else {
        10
    };
    held_memory(&rt, addrs[2], &one, held);
    group(c, &rt, 1000, addrs[0], &many, Duration::from_secs(6));
    group(c, &rt, 1, addrs[1], &one, Duration::from_secs(4));
}

criterion_group!(benches, bench);
criterion_main!(benches);
