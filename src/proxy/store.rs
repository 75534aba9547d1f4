//! The shared store of per-minute counts: a minimal Redis (RESP2) client over
//! Tokio TCP, so that several llamatap replicas enforce one limit.
//!
//! Keys are `llamatap:{tenant}:{window}:req` and `…:tok` (the window is the
//! minute since the epoch, [`crate::tenant::window`]); each lives two
//! minutes. A request's admission is one round trip (`INCR` the request
//! count, set its expiry, `GET` the token count, pipelined); a token charge
//! is `INCRBY` plus expiry, sent from a task of its own.
//!
//! Every call is bounded by `auth.store.timeout_ms`. After a failure the
//! store is left alone for [`RETRY_AFTER`]: calls fail at once, so an
//! unreachable or black-holing Redis costs a request nothing, and one probe
//! per second finds it again. Changes of state (unreachable, reachable
//! again) are logged once each. Deliberately not here: AUTH, TLS, Sentinel
//! and Cluster redirections; what a failure means for a request
//! (`on_error`) is [`super::tenant`]'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use crate::config::Store as StoreConfig;

/// How long the store is left alone after a failure.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Seconds a window's counters live in Redis (two windows).
const KEY_TTL_SECONDS: &str = "120";
/// Idle connections kept.
const MAX_IDLE: usize = 8;
/// Longest reply line read (a count or an error message).
const MAX_LINE: usize = 512;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Recently failed: not tried again yet.
    #[error("not retried yet after a failure")]
    Backoff,
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connect, read or write failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Redis answered an error or something unexpected.
    #[error("unexpected reply: {0}")]
    Reply(String),
}

/// One RESP2 reply (arrays are not needed).
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Simple,
}

/// The store client.
pub struct Store {
    cfg: StoreConfig,
    idle: Mutex<Vec<BufStream<TcpStream>>>,
    retry_at: Mutex<Option<Instant>>,
    up: AtomicBool,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Store {
    /// A client for `cfg`; nothing is connected until the first call.
    /// `gauge` is set to 1 or 0 with the state.
    pub fn new(cfg: StoreConfig, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        Store {
            cfg,
            idle: Mutex::new(Vec::new()),
            retry_at: Mutex::new(None),
            up: AtomicBool::new(true),
            gauge,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// Whether the last call succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Counts one request of `tenant` in `window`; the requests counted
    /// (this one included) and the tokens charged in that window.
    pub async fn admit(&self, tenant: &str, window: u64) -> Result<(u64, u64), StoreError> {
        let req = key(tenant, window, "req");
        let tok = key(tenant, window, "tok");
        let replies = self
            .call(&[
                &[b"INCR", req.as_bytes()],
                &[b"EXPIRE", req.as_bytes(), KEY_TTL_SECONDS.as_bytes()],
                &[b"GET", tok.as_bytes()],
            ])
            .await?;
        let requests = match replies.first() {
            Some(Reply::Int(n)) => u64::try_from(*n).unwrap_or(0),
            other => return Err(StoreError::Reply(format!("{other:?}"))),
        };
        let tokens = match replies.get(2) {
            Some(Reply::Bulk(None)) => 0,
            Some(Reply::Bulk(Some(b))) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map(|n| u64::try_from(n).unwrap_or(0))
                .ok_or_else(|| StoreError::Reply("token count is not a number".into()))?,
            other => return Err(StoreError::Reply(format!("{other:?}"))),
        };
        Ok((requests, tokens))
    }

    /// Adds `delta` to `tenant`'s `kind` (`req` or `tok`) count of `window`.
    pub async fn add(
        &self,
        tenant: &str,
        window: u64,
        kind: &str,
        delta: i64,
    ) -> Result<(), StoreError> {
        let k = key(tenant, window, kind);
        let d = delta.to_string();
        self.call(&[
            &[b"INCRBY", k.as_bytes(), d.as_bytes()],
            &[b"EXPIRE", k.as_bytes(), KEY_TTL_SECONDS.as_bytes()],
        ])
        .await
        .map(|_| ())
    }

    /// Sends `commands` pipelined on one connection and reads a reply each,
    /// within the timeout; records the store's state.
    async fn call(&self, commands: &[&[&[u8]]]) -> Result<Vec<Reply>, StoreError> {
        if self
            .retry_at
            .lock()
            .ok()
            .and_then(|r| *r)
            .is_some_and(|at| Instant::now() < at)
        {
            return Err(StoreError::Backoff);
        }
        let timeout = self.cfg.timeout;
        let result = match tokio::time::timeout(timeout, self.exchange(commands)).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(timeout)),
        };
        match &result {
            Ok(_) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    self.gauge.set(1);
                    tracing::info!(
                        store = self.cfg.address.as_str(),
                        "rate-limit store reachable again; limits are shared across replicas"
                    );
                }
            }
            Err(e) => {
                if let Ok(mut r) = self.retry_at.lock() {
                    *r = Some(Instant::now() + RETRY_AFTER);
                }
                if self.up.swap(false, Ordering::Relaxed) {
                    self.gauge.set(0);
                    let fallback = match self.cfg.on_error {
                        crate::config::OnError::Allow => {
                            "each replica now enforces the limits on its own (on_error = allow)"
                        }
                        crate::config::OnError::Deny => {
                            "limited tenants are refused with 503 until it is back (on_error = deny)"
                        }
                    };
                    tracing::warn!(
                        store = self.cfg.address.as_str(),
                        "rate-limit store unreachable ({e}); {fallback}"
                    );
                }
            }
        }
        result
    }

    /// One exchange on an idle connection or a new one; the connection goes
    /// back to the pool only after a complete exchange (a cancelled one is
    /// dropped with its half-read replies).
    async fn exchange(&self, commands: &[&[&[u8]]]) -> Result<Vec<Reply>, StoreError> {
        let pooled = self.idle.lock().ok().and_then(|mut v| v.pop());
        let mut conn = match pooled {
            Some(c) => c,
            None => {
                let s = TcpStream::connect(self.cfg.address.as_str()).await?;
                s.set_nodelay(true)?;
                BufStream::new(s)
            }
        };
        let mut out = Vec::with_capacity(128);
        for c in commands {
            encode(&mut out, c);
        }
        conn.write_all(&out).await?;
        conn.flush().await?;
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            replies.push(read_reply(&mut conn).await?);
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        Ok(replies)
    }
}

/// `llamatap:{tenant}:{window}:{kind}` (the braces keep a tenant's keys in
/// one Redis Cluster slot).
fn key(tenant: &str, window: u64, kind: &str) -> String {
    format!("llamatap:{{{tenant}}}:{window}:{kind}")
}

/// Appends one command as a RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

async fn read_line(conn: &mut BufStream<TcpStream>) -> Result<String, StoreError> {
    let mut line = Vec::with_capacity(32);
    let n = (&mut *conn)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .await?;
    if n == 0 {
        return Err(StoreError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    if !line.ends_with(b"\r\n") {
        return Err(StoreError::Reply("reply line too long or cut".into()));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| StoreError::Reply("reply is not UTF-8".into()))
}

async fn read_reply(conn: &mut BufStream<TcpStream>) -> Result<Reply, StoreError> {
    let line = read_line(conn).await?;
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        ":" => rest
            .parse()
            .map(Reply::Int)
            .map_err(|_| StoreError::Reply(line.clone())),
        "+" => Ok(Reply::Simple),
        "-" => Err(StoreError::Reply(line)),
        "$" => {
            let n: i64 = rest.parse().map_err(|_| StoreError::Reply(line.clone()))?;
            if n < 0 {
                return Ok(Reply::Bulk(None));
            }
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if n > MAX_LINE {
                return Err(StoreError::Reply("bulk reply too long".into()));
            }
            let mut buf = vec![0u8; n + 2];
            conn.read_exact(&mut buf).await?;
            buf.truncate(n);
            Ok(Reply::Bulk(Some(buf)))
        }
        _ => Err(StoreError::Reply(line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_resp_arrays() {
        let mut out = Vec::new();
        encode(&mut out, &[b"GET", b"llamatap:{a}:1:tok"]);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$18\r\nllamatap:{a}:1:tok\r\n");
        assert_eq!(key("alice", 7, "req"), "llamatap:{alice}:7:req");
    }
}
