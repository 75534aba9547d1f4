//! Watches every upstream in the background: resolves its address, checks
//! `/health` (readiness, `llamatap_upstream_up`), reads its model list
//! (`/v1/models`, else llama-server's router-mode `/models`), its idle
//! slots (`/slots`) and its own `llamacpp:*` metrics (`/metrics`, when it
//! runs with `--metrics`; re-exported by [`crate::telemetry::reexport`]).
//! One small HTTP/1.1 GET at a time per upstream, with a timeout; never on
//! a request's path, so a slow DNS server or a dead upstream never holds a
//! request up.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::fleet::Fleet;
use crate::llamacpp;
use crate::telemetry::models::parse_model_list;
use crate::telemetry::Telemetry;

/// How often each upstream's `/health` is checked. A recovered upstream
/// rejoins within one interval (two, counting the check in progress).
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// Timeout of one check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest response read from a check.
const MAX_CHECK_BYTES: usize = 1 << 20;

/// The first address `host:port` resolves to (a blocking lookup).
fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok().and_then(|mut a| a.next())
}

/// The background service.
pub struct UpstreamWatch {
    fleet: Arc<Fleet>,
    telemetry: Arc<Telemetry>,
    model_refresh: Duration,
}

impl UpstreamWatch {
    /// A watcher updating `fleet` and the model labels in `telemetry`.
    pub fn new(fleet: Arc<Fleet>, telemetry: Arc<Telemetry>, model_refresh: Duration) -> Self {
        UpstreamWatch {
            fleet,
            telemetry,
            model_refresh,
        }
    }

    /// Resolves every upstream once, before the listeners open, so that a
    /// name that resolves is usable from the first request.
    pub fn resolve_now(fleet: &Fleet) {
        for m in fleet.members() {
            if let Some(a) = resolve(&m.upstream.address) {
                m.set_address(a);
            }
        }
    }

    /// Publishes (or, with `None`, removes) the `llamacpp:*` series of member `i`.
    fn publish_metrics(&self, i: usize, families: Option<Vec<llamacpp::Family>>) {
        let Some(m) = self.fleet.member(i) else {
            return;
        };
        let series = &self.telemetry.metrics.llamacpp;
        match families {
            Some(f) => series.set(&m.upstream.name, f),
            None => series.clear(&m.upstream.name),
        }
    }

    /// Publishes the fleet's model names as the allowed `model` labels.
    fn publish_models(&self) {
        let served: Vec<(String, Vec<String>)> = self
            .fleet
            .members()
            .iter()
            .map(|m| (m.upstream.name.clone(), m.models()))
            .collect();
        self.telemetry.publish_models(&served);
    }
}

/// What one round of checks of an upstream learnt.
struct Checked {
    /// Its `/health` answered 200.
    healthy: bool,
    /// Its model list was read.
    models: bool,
    /// Its `llamacpp:*` families, `None` when it is down or serves no
    /// metrics (its re-exported series are then removed).
    metrics: Option<Vec<llamacpp::Family>>,
}

/// One round of checks of member `i`. The model list is read when
/// `models_due`; `/metrics` when `metrics_due`.
async fn check(fleet: Arc<Fleet>, i: usize, models_due: bool, metrics_due: bool) -> Checked {
    let mut out = Checked {
        healthy: false,
        models: false,
        metrics: None,
    };
    let Some(m) = fleet.member(i) else {
        return out;
    };
    let addr = m.upstream.address.clone();
    if let Some(a) = tokio::task::spawn_blocking(move || resolve(&addr))
        .await
        .ok()
        .flatten()
    {
        m.set_address(a);
    }
    let Some(target) = m.address() else {
        let _ = m.set_healthy(false);
        return out;
    };
    let host = m.upstream.address.as_str();
    let base = &m.upstream.base_path;
    // 503 ("loading model") and anything else but 200 is not ready.
    let healthy = matches!(
        get(target, host, &format!("{base}/health")).await,
        Some((200, _))
    );
    if m.set_healthy(healthy) {
        fleet.rejoined(i);
    }
    if !healthy {
        return out;
    }
    out.healthy = true;
    if fleet.is_fleet() {
        let idle = match get(target, host, &format!("{base}/slots")).await {
            Some((200, body)) => idle_slots(&body),
            _ => None,
        };
        m.set_idle_slots(idle);
    }
    if metrics_due {
        out.metrics = match get(target, host, &format!("{base}/metrics")).await {
            Some((200, body)) => Some(llamacpp::parse(&body)),
            _ => None,
        };
    }
    if !models_due {
        return out;
    }
    for path in ["/v1/models", "/models"] {
        if let Some((200, body)) = get(target, host, &format!("{base}{path}")).await {
            let names = parse_model_list(&body);
            if !names.is_empty() {
                fleet.set_models(i, names);
                out.models = true;
                return out;
            }
        }
    }
    out
}

/// Idle slots in a `/slots` answer (an array of slots with `is_processing`).
fn idle_slots(body: &[u8]) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let slots = v.as_array()?;
    let idle = slots
        .iter()
        .filter(|s| s.get("is_processing").and_then(|p| p.as_bool()) == Some(false))
        .count();
    u32::try_from(idle).ok()
}

#[async_trait]
impl BackgroundService for UpstreamWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let n = self.fleet.members().len();
        let mut last_models: Vec<Option<Instant>> = vec![None; n];
        // An upstream without `--metrics` answers /metrics with an error:
        // it is asked again only with its model list, not every round.
        let mut serves_metrics: Vec<bool> = vec![true; n];
        loop {
            let mut round = JoinSet::new();
            for (i, last) in last_models.iter().enumerate() {
                let due = last.is_none_or(|t| t.elapsed() >= self.model_refresh);
                let metrics_due = due || serves_metrics.get(i).copied().unwrap_or(true);
                let fleet = self.fleet.clone();
                round.spawn(async move { (i, check(fleet, i, due, metrics_due).await) });
            }
            let mut read_models = false;
            while let Some(done) = round.join_next().await {
                let Ok((i, checked)) = done else {
                    continue;
                };
                if checked.models {
                    if let Some(slot) = last_models.get_mut(i) {
                        *slot = Some(Instant::now());
                    }
                    read_models = true;
                }
                if let Some(slot) = serves_metrics.get_mut(i) {
                    // Down: asked again as soon as it is back.
                    *slot = !checked.healthy || checked.metrics.is_some();
                }
                self.publish_metrics(i, checked.metrics);
            }
            if read_models {
                self.publish_models();
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
