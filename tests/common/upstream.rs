//! A scripted fake upstream, for what a real llama-server cannot be made to do:
//! exact byte cuts, drips, deaths mid-stream, garbage, and timing the moment
//! the proxy closes its connection.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request as the upstream received it.
#[derive(Debug, Clone)]
pub struct ReqInfo {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl ReqInfo {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The requests an upstream received (llamatap's own checks left out).
pub type Log = Arc<Mutex<Vec<ReqInfo>>>;

type ConnHandler = dyn Fn(TcpStream, &Log) + Send + Sync;

/// The fake upstream.
pub struct Scripted {
    pub addr: String,
    pub requests: Log,
}

impl Scripted {
    /// Serves every request with `handler`; a connection is kept until the
    /// client closes it or sends `Connection: close`.
    pub fn start(handler: impl Fn(&mut TcpStream, &ReqInfo) + Send + Sync + 'static) -> Scripted {
        Self::start_at(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
    }

    /// Hands every connection to `handler`, which owns it: it reads requests
    /// with [`next_request`] and decides how the connection ends (kept,
    /// closed, reset).
    pub fn start_conn(handler: impl Fn(TcpStream, &Log) + Send + Sync + 'static) -> Scripted {
        Self::start_conn_at(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
    }

    /// As [`Scripted::start`], on a listener of the caller's (another
    /// loopback address, a given port).
    pub fn start_at(
        listener: TcpListener,
        handler: impl Fn(&mut TcpStream, &ReqInfo) + Send + Sync + 'static,
    ) -> Scripted {
        Self::start_conn_at(listener, move |mut s, log| {
            while let Some(req) = next_request(&mut s, log) {
                handler(&mut s, &req);
                if req
                    .header("connection")
                    .is_some_and(|c| c.eq_ignore_ascii_case("close"))
                {
                    break;
                }
            }
        })
    }

    /// As [`Scripted::start_conn`], on a listener of the caller's.
    pub fn start_conn_at(
        listener: TcpListener,
        handler: impl Fn(TcpStream, &Log) + Send + Sync + 'static,
    ) -> Scripted {
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<ConnHandler> = Arc::new(handler);
        let log = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(s) = conn else { continue };
                let h = handler.clone();
                let log = log.clone();
                std::thread::spawn(move || {
                    s.set_nodelay(true).ok();
                    h(s, &log);
                });
            }
        });
        Scripted { addr, requests }
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The next request on `s` that is not one of llamatap's own background
/// checks (those get a healthy llama-server's answers), logged. None on EOF
/// or once a check asked for `Connection: close`.
pub fn next_request(s: &mut TcpStream, log: &Log) -> Option<ReqInfo> {
    loop {
        let req = read_request(s)?;
        let (status, answer) = match req.path.as_str() {
            "/health" => (200, r#"{"status":"ok"}"#),
            "/v1/models" => (
                200,
                r#"{"object":"list","data":[{"id":"tiny.gguf","object":"model"}]}"#,
            ),
            // llama-server started without --metrics.
            "/metrics" => (
                501,
                r#"{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with `--metrics`","type":"not_supported_error"}}"#,
            ),
            _ => {
                log.lock().unwrap().push(req.clone());
                return Some(req);
            }
        };
        json(s, status, answer);
        if req
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
        {
            return None;
        }
    }
}

/// Reads a request's head only (up to the blank line), leaving any body unread.
pub fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Closes with a TCP reset (RST), not a FIN.
pub fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
}

/// Reads one request (Content-Length or chunked body). None on EOF or error.
pub fn read_request(s: &mut TcpStream) -> Option<ReqInfo> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut info = ReqInfo {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let mut rest = buf[end + 4..].to_vec();
    if let Some(len) = info
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        while rest.len() < len {
            let n = s.read(&mut tmp).ok()?;
            if n == 0 {
                return None;
            }
            rest.extend_from_slice(&tmp[..n]);
        }
        info.body = rest[..len].to_vec();
    } else if info
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            if let Some(p) = rest.windows(2).position(|w| w == b"\r\n") {
                let size =
                    usize::from_str_radix(String::from_utf8_lossy(&rest[..p]).trim(), 16).ok()?;
                if rest.len() >= p + 2 + size + 2 {
                    info.body.extend_from_slice(&rest[p + 2..p + 2 + size]);
                    rest.drain(..p + 4 + size);
                    if size == 0 {
                        break;
                    }
                    continue;
                }
            }
            let n = s.read(&mut tmp).ok()?;
            if n == 0 {
                return None;
            }
            rest.extend_from_slice(&tmp[..n]);
        }
    }
    Some(info)
}

/// Writes SSE response headers (chunked).
pub fn sse_head(s: &mut TcpStream) {
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nServer: llama.cpp\r\n\r\n");
}

/// Writes one chunk.
pub fn chunk(s: &mut TcpStream, data: &[u8]) -> bool {
    if data.is_empty() {
        return true;
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    s.write_all(&out).and_then(|_| s.flush()).is_ok()
}

/// Ends a chunked body.
pub fn end_chunks(s: &mut TcpStream) {
    let _ = s.write_all(b"0\r\n\r\n");
}

/// A whole JSON response with Content-Length.
pub fn json(s: &mut TcpStream, status: u16, body: &str) {
    let _ = s.write_all(
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// Blocks until the peer closes the connection; returns when (None after `timeout`).
pub fn wait_closed(s: &mut TcpStream, timeout: Duration) -> Option<Instant> {
    s.set_read_timeout(Some(Duration::from_millis(20))).ok();
    let start = Instant::now();
    let mut tmp = [0u8; 1024];
    while start.elapsed() < timeout {
        match s.read(&mut tmp) {
            Ok(0) => return Some(Instant::now()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(Instant::now()),
        }
    }
    None
}

/// An OpenAI chat chunk event carrying `content`.
pub fn chat_event(content: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"finish_reason":null,"index":0,"delta":{"content":content}}],"created":1,"id":"chatcmpl-test","model":"tiny.gguf","object":"chat.completion.chunk"})
    )
}

/// The role-only first event.
pub fn chat_role_event() -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"chatcmpl-test","model":"tiny.gguf","object":"chat.completion.chunk"})
    )
}

/// The final event with timings.
pub fn chat_final_event(prompt_n: u64, cache_n: u64, predicted_n: u64) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"chatcmpl-test","model":"tiny.gguf","object":"chat.completion.chunk",
            "timings":{"cache_n":cache_n,"prompt_n":prompt_n,"prompt_ms":12.5,"prompt_per_token_ms":1.0,"prompt_per_second":1000.0,"predicted_n":predicted_n,"predicted_ms":30.0,"predicted_per_token_ms":1.0,"predicted_per_second":100.0}})
    )
}
