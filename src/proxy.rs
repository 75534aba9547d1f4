//! The Pingora proxy: every request to llama-server unchanged, every stream
//! unbuffered, and the moments of each answer observed on the way.
//!
//! Each hook is short and delegates: request facts to [`crate::request`],
//! body observation to [`crate::observe`], error shapes to [`errors`], and
//! everything recorded to [`crate::telemetry`] in `logging`. Hang-ups are left
//! to Pingora's default (`abort_on_close`): the upstream connection is dropped,
//! never pooled, the moment the client goes.

pub mod admission;
mod cachebreak;
pub mod client;
pub mod context;
pub mod errors;
pub mod fleet;
mod forward;
mod guard;
mod outcome;
mod reply;
mod request_head;
mod spare;
pub mod store;
pub mod tenant;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, ErrorType, Result};

use crate::config::Config;
use crate::observe::{StreamEnd, StreamObserver};
use crate::record::Outcome;
use crate::request::{self, Route};
use crate::telemetry::logs;
use crate::telemetry::spans::Tracing;
use crate::telemetry::Telemetry;
use context::RequestCtx;
use fleet::Fleet;
use outcome::{unsent, unwell_answer};
use reply::{refuse, write_error, ErrorReply};

/// The llamatap proxy service.
pub struct LlamaProxy {
    config: Arc<Config>,
    telemetry: Arc<Telemetry>,
    fleet: Arc<Fleet>,
    /// The direct path's connector ([`forward`]; never pooled), with a
    /// connected, never-used connection per upstream.
    spares: Arc<spare::Spares>,
    /// Tenant limits: per-tenant counts and the optional shared store.
    limiter: Arc<tenant::Limiter>,
    /// Recent conversations, for the cache-break diagnosis.
    breaks: Arc<cachebreak::Breaks>,
    /// The admission queue (`[queue]`).
    admission: Arc<admission::Admission>,
}

impl LlamaProxy {
    /// A proxy for `config`'s upstreams.
    pub fn new(config: Arc<Config>, telemetry: Arc<Telemetry>, fleet: Arc<Fleet>) -> Self {
        let spares = Arc::new(spare::Spares::new(
            fleet.capacity(),
            config.pool_idle_timeout,
        ));
        let limiter = Arc::new(tenant::Limiter::new(
            &config,
            telemetry.metrics.tenants.store_up.clone(),
        ));
        let breaks = Arc::new(cachebreak::Breaks::new(config.telemetry.capture_content));
        let metrics = telemetry
            .metrics_enabled
            .then(|| telemetry.metrics.queue.clone());
        let admission = admission::Admission::new(&config, fleet.clone(), metrics);
        LlamaProxy {
            config,
            telemetry,
            fleet,
            spares,
            limiter,
            breaks,
            admission,
        }
    }

    /// The peer at the last resolved address: a `SocketAddr`, so building it
    /// never looks a name up.
    fn peer(&self, address: SocketAddr) -> HttpPeer {
        let mut peer = HttpPeer::new(address, false, String::new());
        let o = &mut peer.options;
        o.connection_timeout = Some(self.config.connect_timeout);
        o.total_connection_timeout = Some(self.config.connect_timeout);
        o.read_timeout = Some(self.config.read_timeout);
        o.write_timeout = Some(self.config.write_timeout);
        o.idle_timeout = Some(self.config.pool_idle_timeout);
        peer
    }
}

/// The path of the request target as it came (Pingora's `raw_path`, up to
/// any `?`), for the record: the URI roots a target that is not
/// origin-form at `/`, which would hide what was asked for.
fn logged_path(req: &RequestHeader) -> String {
    let raw = req.raw_path();
    let end = memchr::memchr2(b'?', b'#', raw).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

fn header<'a>(h: &'a RequestHeader, name: &str) -> Option<&'a [u8]> {
    h.headers.get(name).map(|v| v.as_bytes())
}

fn is_event_stream(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

fn is_json(resp: &ResponseHeader) -> bool {
    resp.headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"))
}

#[async_trait]
impl ProxyHttp for LlamaProxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new()
    }

    /// No downstream modules. Pingora's default adds a disabled compression
    /// module, which would still run on every forwarded chunk; llamatap never
    /// compresses or decompresses, bodies pass as they are.
    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    /// Runs first for each request: classify the route, start the spans.
    /// Routes that can stream are then forwarded here, by [`forward`];
    /// every other request goes on to Pingora's proxy loop.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let req = session.req_header();
        // The target as it goes upstream, not `uri.path()`: a target that
        // is not origin-form is rooted at `/` in the URI but forwarded, and
        // routed by llama-server, as it came.
        ctx.route = Route::from_target(req.raw_path());
        let direct = forward::eligible(session, ctx);
        if !direct || self.fleet.is_fleet() || self.admission.enabled() {
            // Keep (up to Pingora's 64 KiB) the body as it is forwarded, so
            // that a request sent on a pooled connection the upstream had
            // already closed can be sent again (see error_while_proxy), and
            // so that a body read before routing is forwarded whole.
            session.enable_retry_buffering();
        }
        let req = session.req_header();
        ctx.started = true;
        self.telemetry.request_started();
        if let Some(t) = &self.telemetry.tracing {
            let span = t.start_request(
                header(req, "traceparent"),
                header(req, "tracestate"),
                ctx.received_wall,
            );
            ctx.log_span = logs::request_span(&span);
            ctx.span = Some(Box::new(span));
        }
        // The steps before forwarding are boxed, so that the hook's own
        // future, which a held stream keeps, is the size of the forwarding
        // loop, not of the largest step.
        match guard::check(req, ctx.route, &self.config) {
            Ok(id) => ctx.tenant = id,
            Err(r) => {
                Box::pin(refuse(session, ctx, r)).await;
                return Ok(true);
            }
        }
        if !guard::public(ctx.route, &req.method)
            && Box::pin(tenant::admit(session, ctx, &self.limiter, &self.telemetry)).await
        {
            return Ok(true);
        }
        if self.fleet.is_fleet()
            && Box::pin(fleet::steps::prepare(
                session,
                ctx,
                &self.fleet,
                &self.config,
            ))
            .await?
        {
            return Ok(true);
        }
        if Box::pin(admission::wait(session, ctx, &self.admission)).await? {
            return Ok(true);
        }
        if direct {
            forward::run(self, session, ctx).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Each attempt asks the fleet for an upstream (see [`fleet::steps`]); a
    /// retry never goes back to one that already failed.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        ctx.upstream_attempts += 1;
        // A retry replays the body from its start.
        ctx.body.clear();
        ctx.body_truncated = false;
        ctx.request_bytes = 0;
        if ctx.upstream_attempts == 1 {
            admission::wait_for_affine(&self.admission, &self.fleet, ctx).await;
        }
        let address = fleet::steps::choose(&self.fleet, ctx)?;
        Ok(Box::new(self.peer(address)))
    }

    /// The upstream refused or did not answer the connect: eject it for a
    /// while, and try another one that can serve the request (the request
    /// has not reached any llama-server).
    fn fail_to_connect(
        &self,
        session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(i) = ctx.member {
            self.fleet.eject(i);
            ctx.routed.ejected = true;
            let again = self.fleet.is_fleet()
                && self
                    .fleet
                    .can_fail_over(ctx.request.model.as_deref(), i, &ctx.routed.tried);
            if again {
                ctx.routed.tried.push(i);
                e.set_retry(true);
            }
            // The one line about this failed connect (Pingora's own about
            // the request is suppressed, see `suppress_error_log`).
            let _in = ctx.log_span.enter();
            let name = self.fleet.member(i).map(|m| m.upstream.name.clone());
            let req = session.req_header();
            tracing::warn!(
                upstream = name.as_deref().unwrap_or(""),
                "{} {}: connect failed ({e}); upstream ejected, {}",
                req.method,
                errors::bounded_path(req.uri.path()),
                if again {
                    "trying another"
                } else {
                    "the request fails"
                }
            );
        }
        e
    }

    /// Headers are built: shape them for llama-server (see [`request_head`])
    /// and hand the trace context on.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let member = ctx.member.and_then(|i| self.fleet.member(i));
        let base = member
            .as_ref()
            .map_or("", |m| m.upstream.base_path.as_str());
        request_head::shape(upstream_request, ctx, base, &self.config)?;
        if let (Some(t), Some(span)) = (&self.telemetry.tracing, ctx.span.as_deref_mut()) {
            request_head::trace(upstream_request, t, span)?;
        }
        Ok(())
    }

    /// Each request body chunk passes unchanged; a bounded copy is kept to read the model.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(b) = body.as_ref() {
            ctx.request_bytes += b.len() as u64;
            if ctx.request_bytes > self.config.max_body_bytes {
                return Err(errors::too_large());
            }
        }
        if ctx.route.operation_name().is_none() {
            return Ok(());
        }
        if let Some(b) = body {
            let limit = self.config.telemetry.max_inspect_bytes;
            if !ctx.body_truncated && ctx.body.len() + b.len() <= limit {
                ctx.body.extend_from_slice(b);
            } else {
                ctx.body_truncated = true;
                ctx.body = Vec::new();
            }
        }
        if end_of_stream && !ctx.body_truncated && !ctx.body.is_empty() {
            if ctx.routed.prompt.is_none() {
                // One parse gives the facts and the prompt's digest.
                let capture = self.breaks.capture();
                let (facts, prompt) = cachebreak::inspect(ctx.route, &ctx.body, capture);
                ctx.request = facts;
                ctx.routed.prompt = prompt;
            } else {
                ctx.request = request::inspect_body(&ctx.body);
            }
            ctx.body = Vec::new();
        }
        Ok(())
    }

    /// Upstream headers arrived: note the moment and how to watch the body.
    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.upstream_headers = Some(Instant::now());
        ctx.status = Some(upstream_response.status.as_u16());
        if let Some(i) = ctx.member {
            let status = upstream_response.status.as_u16();
            if unwell_answer(status, ctx.route) {
                self.fleet.eject(i);
                ctx.routed.ejected = true;
            } else if status < 500 {
                self.fleet.succeeded(i);
            }
        }
        let format = ctx.format();
        if is_event_stream(upstream_response) {
            ctx.streaming = true;
            ctx.stream_counted = true;
            self.telemetry.stream_active(true);
            if let Some(f) = format {
                let t = &self.config.telemetry;
                ctx.observer = Some(Box::new(StreamObserver::new(
                    f,
                    t.max_event_bytes,
                    t.capture_content,
                )));
            }
        } else if format.is_some() && is_json(upstream_response) {
            ctx.json_body = Some(Vec::new());
        }
        Ok(())
    }

    /// Downstream headers: keep event streams unbuffered by any hop in front,
    /// and hand the trace id back.
    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if ctx.streaming {
            if resp.headers.get("x-accel-buffering").is_none() {
                resp.insert_header("X-Accel-Buffering", "no")?;
            }
            if resp.headers.get(http::header::CACHE_CONTROL).is_none() {
                resp.insert_header("Cache-Control", "no-cache")?;
            }
        }
        if let Some(span) = &ctx.span {
            resp.insert_header("traceresponse", Tracing::traceresponse(span))?;
        }
        for (name, value) in crate::tenant::window::quota_headers(&ctx.quota) {
            resp.insert_header(name, value)?;
        }
        Ok(())
    }

    /// Each body chunk is forwarded as it is; the observer only reads it.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        let now = Instant::now();
        if let Some(b) = body.as_ref() {
            ctx.response_bytes += b.len() as u64;
            if let Some(o) = ctx.observer.as_mut() {
                o.on_chunk(b, now);
            } else if let Some(j) = ctx.json_body.as_mut() {
                if j.len() + b.len() <= self.config.telemetry.max_inspect_bytes {
                    j.extend_from_slice(b);
                } else {
                    ctx.json_body = None;
                }
            }
        }
        if end_of_stream {
            ctx.ended = Some(now);
            if let Some(o) = ctx.observer.take() {
                ctx.stream_facts = Some(Box::new(o.finish(now, StreamEnd::Complete)));
            }
        }
        Ok(None)
    }

    /// A fatal error: answer with an OpenAI-shaped error, or end a started
    /// event stream with an error event (never a silent cut, never `[DONE]`).
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let f = errors::classify(e);
        let upstream = ctx
            .member
            .and_then(|i| self.fleet.member(i))
            .map(|m| m.upstream.name.clone());
        // The log line and the span name the upstream; the client hears a
        // plain reason.
        let msg = errors::message(&f, e);
        ctx.ended.get_or_insert_with(Instant::now);
        ctx.failure = Some((
            f.outcome,
            f.code,
            errors::message_naming(&f, e, upstream.as_deref()),
        ));
        let mut code = f.status;
        if f.status != 0 {
            if session.as_downstream().response_written().is_none() {
                let reply = ErrorReply {
                    status: f.status,
                    kind: f.kind,
                    code: f.code,
                    message: &msg,
                };
                write_error(session, ctx, reply).await;
            } else if ctx.streaming {
                let mid = ctx.observer.as_ref().is_some_and(|o| o.mid_event());
                let event = errors::sse_error_event(&msg, f.kind, f.code, mid);
                let ds = session.as_downstream_mut();
                let _ = ds.write_response_body(Bytes::from(event), true).await;
                code = ctx.status.unwrap_or(200);
            }
        }
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// llama-server closes its connection right after a streamed answer,
    /// without `Connection: close`; a request that took that connection from
    /// the pool before the close arrived fails before any response byte.
    /// Retry on a new connection only when the request provably never reached
    /// llama-server whole: reused connection, no response yet, closed or
    /// reset, the body still buffered, and nothing of the request usable
    /// written (see [`unsent`]). A request llama-server may have started is
    /// never sent twice: it fails with 502.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        let stale = client_reused
            && ctx.upstream_headers.is_none()
            && !session.as_ref().retry_buffer_truncated()
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            )
            && unsent(session, e.etype());
        e.set_retry(stale);
        e
    }

    /// Pingora's own error line about a request ("Fail to proxy: …") ends
    /// with this: its summary, and the trace id when tracing is on.
    fn request_summary(&self, session: &Session, ctx: &RequestCtx) -> String {
        let summary = session.as_ref().request_summary();
        match &ctx.span {
            Some(span) => format!("{summary}, trace_id={}", Tracing::trace_id(span)),
            None => summary,
        }
    }

    /// Client hang-ups are normal traffic, not errors worth a log line.
    /// A failed connect was logged once already, naming the upstream (see
    /// `fail_to_connect`).
    fn suppress_error_log(&self, _session: &Session, ctx: &RequestCtx, error: &Error) -> bool {
        let hangup = error.esource() == &ErrorSource::Downstream
            && matches!(
                error.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            );
        let connect = ctx.routed.ejected
            && matches!(
                error.etype(),
                ErrorType::ConnectRefused
                    | ErrorType::ConnectTimedout
                    | ErrorType::ConnectError
                    | ErrorType::SocketError
            );
        hangup || connect
    }

    /// The request is over: one record for metrics, spans and the latency page.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        if !ctx.started {
            return;
        }
        if ctx.stream_counted {
            ctx.stream_counted = false;
            self.telemetry.stream_active(false);
        }
        let (outcome, error) = outcome::outcome(e, ctx);
        let req = session.req_header();
        let method = req.method.as_str().to_string();
        let path = logged_path(req);
        let client = session.client_addr().map(|a| a.to_string());
        let mut rec = ctx.record(method, path, outcome, error, client);
        rec.upstream = fleet::steps::finish(&self.fleet, ctx, &rec);
        rec.cache_break =
            self.breaks
                .finish(ctx.routed.prompt.take(), ctx.session, ctx.tenant, &rec);
        tenant::finish(&self.limiter, ctx, &mut rec);
        // The queue's slot is free: the next request is dispatched.
        ctx.admission = None;
        if e.is_none() && rec.outcome == Outcome::UpstreamError {
            // Pingora logged nothing (the HTTP exchange itself went well):
            // an upstream 5xx, an error event in the stream, a cut stream.
            let _in = ctx.log_span.enter();
            tracing::warn!(
                error.type = rec.error_type.unwrap_or(""),
                "{} {}: {}",
                rec.method,
                rec.path,
                rec.error_message.as_deref().unwrap_or("")
            );
        }
        self.telemetry
            .request_finished(&rec, ctx.span.take().map(|s| *s));
    }
}
