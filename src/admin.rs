//! The admin listener: llamatap's own endpoints, apart from the proxied ones.
//!
//! - `/healthz`: 200 while the process serves.
//! - `/readyz`: 200 when at least one upstream's `/health` answered 200 at
//!   the last check and its model list was read, and every model the fleet
//!   serves has such an upstream; else 503 naming what is missing.
//! - `/metrics`: Prometheus exposition: OpenMetrics (with exemplars) when
//!   the scraper's `Accept` asks for it, the classic text format otherwise.
//! - `/latency`: the latency page; `/latency.json`: its data.
//!
//! It binds to loopback by default; it never proxies anything.

pub mod page;

use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::admission::SharedSlots;
use crate::fleet::Fleet;
use llamatap_telemetry::exposition::Exposition;
use llamatap_telemetry::Telemetry;

/// The admin HTTP app.
pub struct AdminApp {
    telemetry: Arc<Telemetry>,
    fleet: Arc<Fleet>,
    jaeger_url: Option<String>,
    /// The queue's shared slots, whose state `/readyz` shows.
    slots: Option<SharedSlots>,
}

impl AdminApp {
    /// An admin app over shared telemetry and upstream state.
    pub fn new(telemetry: Arc<Telemetry>, fleet: Arc<Fleet>, jaeger_url: Option<String>) -> Self {
        AdminApp {
            telemetry,
            fleet,
            jaeger_url,
            slots: None,
        }
    }

    /// Shows the state of the queue's shared `slots` in `/readyz`.
    pub fn with_slots(mut self, slots: Option<SharedSlots>) -> Self {
        self.slots = slots;
        self
    }
}

impl AdminApp {
    /// Sets the per-upstream gauges from the fleet's state, at scrape time.
    fn refresh_fleet_gauges(&self) {
        let f = &self.telemetry.metrics.upstreams;
        self.fleet
            .each_member(|m| f.set_state(&m.upstream.name, m.healthy(), m.in_flight()));
    }
}

fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut r = Response::new(body);
    *r.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    let len = r.body().len();
    r.headers_mut()
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    r
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let path = session.req_header().uri.path().to_string();
        match path.as_str() {
            "/healthz" => reply(200, "text/plain; charset=utf-8", b"ok\n".to_vec()),
            "/readyz" => match self.fleet.readiness() {
                Ok(()) => {
                    let mut body = b"ready\n".to_vec();
                    if let Some(s) = &self.slots {
                        body.extend_from_slice(format!("{}\n", s.status()).as_bytes());
                    }
                    reply(200, "text/plain; charset=utf-8", body)
                }
                Err(why) => reply(
                    503,
                    "text/plain; charset=utf-8",
                    format!("not ready: {why}\n").into_bytes(),
                ),
            },
            "/metrics" => {
                self.refresh_fleet_gauges();
                let accept = session
                    .req_header()
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                let format = Exposition::negotiate(accept);
                reply(
                    200,
                    format.content_type(),
                    self.telemetry.metrics.render(format),
                )
            }
            "/latency" | "/" => {
                let recent = self.telemetry.recent.snapshot();
                let tracing = self.telemetry.tracing.is_some();
                let html = page::render(&recent, self.jaeger_url.as_deref(), tracing);
                reply(200, "text/html; charset=utf-8", html.into_bytes())
            }
            "/latency.json" => {
                let recent = self.telemetry.recent.snapshot();
                reply(200, "application/json", page::json(&recent).into_bytes())
            }
            _ => reply(
                404,
                "application/json",
                br#"{"error":{"message":"not found","type":"invalid_request_error","code":"not_found"}}"#.to_vec(),
            ),
        }
    }
}
