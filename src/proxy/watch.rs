//! Watches the upstream in the background: resolves its address, checks
//! `/health` (for `/readyz` and `llamatap_upstream_up`) and reads `/v1/models`
//! (the allowed `model` labels). One small HTTP/1.1 GET at a time, with a
//! timeout; never on a request's path. Name lookups happen here (and once at
//! start-up), never on a request's path: requests only read the last
//! resolved address.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Upstream;
use crate::telemetry::models::parse_model_list;
use crate::telemetry::Telemetry;

/// How often `/health` is checked.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// Timeout of one check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest response read from a check.
const MAX_CHECK_BYTES: usize = 1 << 20;

/// What the proxy knows about its upstream.
#[derive(Debug)]
pub struct UpstreamState {
    upstream: Upstream,
    resolved: RwLock<Option<SocketAddr>>,
    ready: AtomicBool,
}

impl UpstreamState {
    /// State for `upstream`, resolved once now (a failure is retried by the watcher).
    pub fn new(upstream: Upstream) -> Self {
        let resolved = resolve(&upstream.address);
        UpstreamState {
            upstream,
            resolved: RwLock::new(resolved),
            ready: AtomicBool::new(false),
        }
    }

    /// The address to connect to, as last resolved; `None` while the host
    /// name has never resolved.
    pub fn address(&self) -> Option<SocketAddr> {
        self.resolved.read().ok().and_then(|g| *g)
    }

    /// The last health check passed.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The configured upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }
}

/// The first address `host:port` resolves to (a blocking lookup).
fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok().and_then(|mut a| a.next())
}

/// The background service.
pub struct UpstreamWatch {
    state: Arc<UpstreamState>,
    telemetry: Arc<Telemetry>,
    model_refresh: Duration,
}

impl UpstreamWatch {
    /// A watcher updating `state` and the model labels in `telemetry`.
    pub fn new(
        state: Arc<UpstreamState>,
        telemetry: Arc<Telemetry>,
        model_refresh: Duration,
    ) -> Self {
        UpstreamWatch {
            state,
            telemetry,
            model_refresh,
        }
    }

    async fn check(&self, models_due: bool) -> bool {
        let name = self.state.upstream.address.clone();
        if let Some(a) = tokio::task::spawn_blocking(move || resolve(&name))
            .await
            .ok()
            .flatten()
        {
            if let Ok(mut g) = self.state.resolved.write() {
                *g = Some(a);
            }
        }
        let Some(target) = self.state.address() else {
            self.state.ready.store(false, Ordering::Relaxed);
            self.telemetry.metrics.upstream_up.set(0);
            return false;
        };
        let host = &self.state.upstream.address;
        let base = &self.state.upstream.base_path;
        let healthy = matches!(
            get(target, host, &format!("{base}/health")).await,
            Some((200, _))
        );
        self.state.ready.store(healthy, Ordering::Relaxed);
        self.telemetry.metrics.upstream_up.set(i64::from(healthy));
        if healthy && models_due {
            if let Some((200, body)) = get(target, host, &format!("{base}/v1/models")).await {
                let names = parse_model_list(&body);
                if !names.is_empty() {
                    self.telemetry.models.replace(names);
                    self.telemetry
                        .metrics
                        .set_models(&self.telemetry.models.list());
                    return true;
                }
            }
            return false;
        }
        models_due
    }
}

#[async_trait]
impl BackgroundService for UpstreamWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut last_models: Option<Instant> = None;
        loop {
            let due = last_models.is_none_or(|t| t.elapsed() >= self.model_refresh);
            if self.check(due).await && due {
                last_models = Some(Instant::now());
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(HEALTH_INTERVAL) => {}
            }
        }
    }
}

/// A minimal GET to `addr` (`host` names it in the `Host` header): status and
/// body, or `None` on any failure or timeout.
async fn get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    tokio::time::timeout(CHECK_TIMEOUT, get_inner(addr, host, path))
        .await
        .ok()
        .flatten()
}

async fn get_inner(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: llamatap\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > MAX_CHECK_BYTES {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    parse_response(&buf)
}

/// Splits a raw HTTP/1.1 response (Content-Length, chunked or read-to-close).
pub fn parse_response(raw: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Some((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_str = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some((status, out));
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}
