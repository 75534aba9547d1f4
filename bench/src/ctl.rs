//! One-shot HTTP/1.1 requests (Connection: close) for control calls, health
//! checks and metric scrapes; plus the OTLP/HTTP sink llamatap exports to.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http::{header_end, Chunked, Head};

/// Sends one request; returns status and body. Times out after 10 s.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        s.write_all(&req).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let end = header_end(&raw)?;
        let head = Head::parse(&raw[..end - 4])?;
        let status = head.second.parse().ok()?;
        let rest = &raw[end..];
        let body = if head.chunked() {
            let mut out = Vec::new();
            Chunked::default().decode(rest, &mut out).ok()?;
            out
        } else {
            rest.to_vec()
        };
        Some((status, body))
    })
    .await
    .ok()
    .flatten()
}

/// GET.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, Vec<u8>)> {
    request(addr, "GET", path, b"").await
}

/// What the OTLP sink received.
#[derive(Default)]
pub struct SinkStats {
    /// Export requests.
    pub requests: AtomicU64,
    /// Body bytes.
    pub bytes: AtomicU64,
}

/// An OTLP/HTTP sink: answers every POST with 200 and an empty protobuf
/// `ExportTraceServiceResponse`, counting requests and bytes.
pub async fn otlp_sink(l: TcpListener, stats: Arc<SinkStats>) {
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let stats = stats.clone();
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut tmp = vec![0u8; 64 * 1024];
            loop {
                let end = loop {
                    if let Some(e) = header_end(&buf) {
                        break e;
                    }
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                };
                let Some(head) = Head::parse(&buf[..end - 4]) else {
                    return;
                };
                buf.drain(..end);
                if head.chunked() {
                    let mut d = Chunked::default();
                    let mut body = Vec::new();
                    loop {
                        let Ok(used) = d.decode(&buf, &mut body) else {
                            return;
                        };
                        buf.drain(..used);
                        if d.done {
                            break;
                        }
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    stats.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                } else {
                    let len = head.content_length().unwrap_or(0);
                    while buf.len() < len {
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    buf.drain(..len);
                    stats.bytes.fetch_add(len as u64, Ordering::Relaxed);
                }
                stats.requests.fetch_add(1, Ordering::Relaxed);
                let resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                if s.write_all(resp).await.is_err() || head.close() {
                    return;
                }
            }
        });
    }
}
