//! The plain-request phase: answers that do not stream (`POST /tokenize`,
//! `GET /health`) against a real llama-server, one after another on one
//! kept-alive client connection per side, so that what a side does with its
//! upstream connection (a new one per request, a ready spare, or a pooled
//! one) shows in the latency and in llama-server's CPU time.
//!
//! Each round runs every side once, the order rotating, after one round
//! that is not counted. Per side: latency per route (the client's wall time
//! from the request's first byte to the answer's last), the proxy's CPU and
//! llama-server's CPU per request (from /proc, across the side's requests
//! only), errors and client reconnects.
//!
//! Not here: streaming (the latency phase) or concurrency (one request at a
//! time, so each number is one request's own cost).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::{header_end, Chunked, Head};
use crate::procs;

/// One side of the comparison.
pub struct Side {
    /// Its name in the results.
    pub name: String,
    /// Where the client connects.
    pub addr: SocketAddr,
    /// The proxy's root pid (`None` for direct).
    pub pid: Option<u32>,
}

/// The two requests, alternated.
const TOKENIZE_BODY: &[u8] =
    br#"{"content":"The quick brown fox jumps over the lazy dog, twice."}"#;

/// A client connection kept alive across requests.
struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    reconnects: u64,
}

impl Conn {
    fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
            reconnects: 0,
        }
    }

    /// Sends one request and reads its whole answer; `(status, body)`.
    async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), String> {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = s.set_nodelay(true);
            self.stream = Some(s);
            self.reconnects += 1;
            self.buf.clear();
        }
        let Some(s) = self.stream.as_mut() else {
            return Err("no connection".into());
        };
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        s.write_all(&req).await.map_err(|e| format!("write: {e}"))?;
        let mut tmp = [0u8; 16 * 1024];
        let end = loop {
            if let Some(e) = header_end(&self.buf) {
                break e;
            }
            match s.read(&mut tmp).await {
                Ok(0) => return Err("closed before the head".into()),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        };
        let head = Head::parse(&self.buf[..end - 4]).ok_or("bad head")?;
        let status: u16 = head.second.parse().map_err(|_| "bad status")?;
        self.buf.drain(..end);
        let mut out = Vec::new();
        if head.chunked() {
            let mut d = Chunked::default();
            loop {
                let used = d.decode(&self.buf, &mut out)?;
                self.buf.drain(..used);
                if d.done {
                    break;
                }
                match s.read(&mut tmp).await {
                    Ok(0) => return Err("closed mid-body".into()),
                    Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
        } else if let Some(len) = head.content_length() {
            while self.buf.len() < len {
                match s.read(&mut tmp).await {
                    Ok(0) => return Err("closed mid-body".into()),
                    Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
            out.extend(self.buf.drain(..len));
        } else {
            return Err("an answer framed by close".into());
        }
        if head.close() {
            self.stream = None;
        }
        Ok((status, out))
    }
}

struct Acc {
    tokenize: Histogram<u64>,
    health: Histogram<u64>,
    proxy_cpu: f64,
    upstream_cpu: f64,
    requests: u64,
    errors: u64,
    samples: Vec<String>,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

fn summary(h: &Histogram<u64>) -> Value {
    let q = |x: f64| (!h.is_empty()).then(|| h.value_at_quantile(x) as f64 / 1000.0);
    json!({"n": h.len(), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
           "mean_us": (!h.is_empty()).then(|| h.mean() / 1000.0)})
}

/// One side's requests for one round: `per_round` requests, alternating
/// `/tokenize` and `/health`; recorded unless `warm`.
async fn batch(
    conn: &mut Conn,
    side: &Side,
    upstream_pid: u32,
    per_round: usize,
    acc: &mut Acc,
    warm: bool,
) {
    let cpu = |pid: Option<u32>| pid.map(procs::tree_cpu_secs).unwrap_or(0.0);
    let (p0, u0) = (cpu(side.pid), procs::tree_cpu_secs(upstream_pid));
    for i in 0..per_round {
        let tokenize = i % 2 == 0;
        let t = Instant::now();
        let r = if tokenize {
            conn.request("POST", "/tokenize", TOKENIZE_BODY).await
        } else {
            conn.request("GET", "/health", b"").await
        };
        let ns = t.elapsed().as_nanos() as u64;
        let ok = match &r {
            Ok((200, body)) if tokenize => body.windows(8).any(|w| w == b"\"tokens\""),
            Ok((200, _)) => true,
            _ => false,
        };
        if warm {
            continue;
        }
        acc.requests += 1;
        if !ok {
            acc.errors += 1;
            conn.stream = None;
            if acc.samples.len() < 5 {
                acc.samples.push(match r {
                    Ok((s, b)) => {
                        format!("{s}: {}", String::from_utf8_lossy(&b[..b.len().min(200)]))
                    }
                    Err(e) => e,
                });
            }
        } else if tokenize {
            let _ = acc.tokenize.record(ns.max(1));
        } else {
            let _ = acc.health.record(ns.max(1));
        }
    }
    if !warm {
        acc.proxy_cpu += cpu(side.pid) - p0;
        acc.upstream_cpu += procs::tree_cpu_secs(upstream_pid) - u0;
    }
}

/// Runs the phase over `sides` in front of the llama-server `upstream_pid`.
pub async fn run(sides: &[Side], upstream_pid: u32, rounds: usize, per_round: usize) -> Value {
    let mut conns: Vec<Conn> = sides.iter().map(|s| Conn::new(s.addr)).collect();
    let mut accs: Vec<Acc> = sides
        .iter()
        .map(|_| Acc {
            tokenize: hist(),
            health: hist(),
            proxy_cpu: 0.0,
            upstream_cpu: 0.0,
            requests: 0,
            errors: 0,
            samples: Vec::new(),
        })
        .collect();
    let started = Instant::now();
    for round in 0..=rounds {
        for k in 0..sides.len() {
            let i = (k + round) % sides.len();
            batch(
                &mut conns[i],
                &sides[i],
                upstream_pid,
                per_round,
                &mut accs[i],
                round == 0,
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut out = json!({
        "rounds": rounds,
        "requests_per_side_per_round": per_round,
        "duration_s": started.elapsed().as_secs_f64(),
        "sides": {},
    });
    for ((side, acc), conn) in sides.iter().zip(&accs).zip(&conns) {
        let n = acc.requests.max(1) as f64;
        out["sides"][&side.name] = json!({
            "tokenize": summary(&acc.tokenize),
            "health": summary(&acc.health),
            "requests": acc.requests,
            "errors": acc.errors,
            "error_samples": acc.samples,
            "client_connections": conn.reconnects,
            "proxy_cpu_us_per_request": side.pid.map(|_| acc.proxy_cpu * 1e6 / n),
            "upstream_cpu_us_per_request": acc.upstream_cpu * 1e6 / n,
        });
    }
    out
}

/// The phase's table, with each side's added latency over `direct`'s p50.
pub fn markdown(r: &Value) -> String {
    let mut s = format!(
        "\nPlain requests against the real llama-server ({} rounds of {} requests per side, `/tokenize` and `/health` alternating, one kept-alive client connection):\n\n\
         | side | /tokenize p50 / p99 µs | added p50 | /health p50 / p99 µs | added p50 | proxy CPU µs/req | llama-server CPU µs/req | errors | client connections |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        r["rounds"], r["requests_per_side_per_round"]
    );
    let f = |v: &Value| {
        v.as_f64()
            .map(|x| format!("{x:.0}"))
            .unwrap_or_else(|| "-".into())
    };
    let direct = &r["sides"]["direct"];
    let added = |v: &Value, route: &str| match (
        v[route]["p50_us"].as_f64(),
        direct[route]["p50_us"].as_f64(),
    ) {
        (Some(a), Some(b)) => format!("{:+.0}", a - b),
        _ => "-".into(),
    };
    if let Some(sides) = r["sides"].as_object() {
        for (name, v) in sides {
            s += &format!(
                "| {name} | {} / {} | {} | {} / {} | {} | {} | {} | {} | {} |\n",
                f(&v["tokenize"]["p50_us"]),
                f(&v["tokenize"]["p99_us"]),
                added(v, "tokenize"),
                f(&v["health"]["p50_us"]),
                f(&v["health"]["p99_us"]),
                added(v, "health"),
                f(&v["proxy_cpu_us_per_request"]),
                f(&v["upstream_cpu_us_per_request"]),
                v["errors"],
                v["client_connections"],
            );
        }
    }
    s
}
