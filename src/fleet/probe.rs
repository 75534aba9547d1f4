//! One GET to an upstream for llamatap's own checks (`/health`, `/slots`,
//! `/metrics`, the model list), on the same HTTP/1 client the streaming
//! routes use ([`crate::upstream::client`]): the same head parser, the same
//! `Content-Length` / chunked / close framing, the same limits.
//!
//! Every call is bounded as a whole by its timeout (connect, write, head and
//! body together) and reads at most [`MAX_BODY_BYTES`]. Deliberately not:
//! keep-alive (each check asks for `Connection: close`), redirects, TLS.

use std::net::SocketAddr;
use std::time::Duration;

use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;

use crate::upstream::client::Exchange;

/// Largest body read from a check.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Why a check got no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeError {
    /// The connect was refused: nothing listens there.
    Refused,
    /// No answer within the timeout.
    TimedOut,
    /// Any other failure, described.
    Failed(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Refused => f.write_str("connection refused"),
            ProbeError::TimedOut => f.write_str("no answer in time"),
            ProbeError::Failed(why) => f.write_str(why),
        }
    }
}

/// `GET path` on `addr` (`host` names it in the `Host` header): the status
/// and the body, within `timeout`.
pub async fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), ProbeError> {
    tokio::time::timeout(timeout, exchange(addr, host, path))
        .await
        .map_err(|_| ProbeError::TimedOut)?
}

async fn exchange(addr: SocketAddr, host: &str, path: &str) -> Result<(u16, Vec<u8>), ProbeError> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ProbeError::Refused,
            _ => ProbeError::Failed(format!("connect: {e}")),
        })?;
    let _ = tcp.set_nodelay(true);
    let stream: Stream = Box::new(L4Stream::from(tcp));
    let mut up = Exchange::new(stream);
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: llamatap\r\n\r\n"
    );
    let failed = |e: Box<pingora::Error>| ProbeError::Failed(e.to_string());
    up.write(head.as_bytes(), None).await.map_err(failed)?;
    let status = loop {
        let header = up.read_header(None).await.map_err(failed)?;
        if !header.status.is_informational() {
            break header.status.as_u16();
        }
    };
    let mut body = Vec::new();
    while !up.is_body_done() {
        match up.read_body().await.map_err(failed)? {
            Some(piece) => {
                if body.len() + piece.len() > MAX_BODY_BYTES {
                    return Err(ProbeError::Failed(format!(
                        "{path} answered more than {MAX_BODY_BYTES} bytes"
                    )));
                }
                body.extend_from_slice(&piece);
            }
            None => break,
        }
    }
    Ok((status, body))
}
