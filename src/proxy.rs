//! The Pingora proxy: every request to llama-server unchanged, every stream
//! unbuffered, and the moments of each answer observed on the way.
//!
//! Pingora accepts, parses and keeps client connections; three hooks do the
//! rest. `request_filter` runs the steps before forwarding (guard, tenant
//! limits, routing, the queue) and then forwards the request itself
//! ([`forward`], the one forwarding loop, on llamatap's own upstream client);
//! `fail_to_proxy` answers an error in the OpenAI shape; `logging` records
//! the request. Pingora's own proxy loop and its upstream client are never
//! used: `upstream_peer` is unreachable.
//!
//! Each hook is short and delegates: request facts to [`llamatap_wire::request`],
//! body observation to [`llamatap_telemetry::observe`], error shapes to [`errors`], and
//! everything recorded to [`llamatap_telemetry`] in `logging`. A client
//! hang-up drops the upstream connection (never pooled) the moment it is
//! seen.

mod answer;
mod attempt;
mod bodies;
mod cachebreak;
mod charge;
pub mod context;
mod continuable;
mod conversation;
mod copied;
mod downstream;
pub mod errors;
mod forward;
mod guard;
mod lookup;
pub mod moves;
mod outcome;
mod predict;
mod progress;
mod promises;
mod reply;
mod request_head;
mod routing;
mod sequence;
mod steps;
pub mod tenant;

use std::sync::Arc;

use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::modules::http::HttpModules;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, Result};

use crate::admission;
use crate::config::Config;
use crate::fleet::Fleet;
use context::RequestCtx;
use llamatap_policy::conversation::copies::Kept;
use llamatap_telemetry::logs;
use llamatap_telemetry::record::Outcome;
use llamatap_telemetry::spans::Tracing;
use llamatap_telemetry::Telemetry;
use llamatap_wire::request::Route;
use reply::refuse;
pub use steps::Steps;

/// The llamatap proxy service: Pingora's hooks over the request's
/// [`Steps`].
pub struct LlamaProxy {
    steps: Steps,
}

impl LlamaProxy {
    /// A proxy for `config`'s upstreams.
    pub fn new(config: Arc<Config>, telemetry: Arc<Telemetry>, fleet: Arc<Fleet>) -> Self {
        LlamaProxy {
            steps: Steps::new(config, telemetry, fleet),
        }
    }

    /// The answers that can be told to move, for the drain watch.
    pub fn moves(&self) -> Arc<moves::Moves> {
        Arc::clone(&self.steps.moves)
    }

    /// The admission queue, for the shared slots' sync task.
    pub fn admission(&self) -> Arc<admission::Admission> {
        Arc::clone(&self.steps.admission)
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

impl LlamaProxy {
    /// Reads the request's conversation and its holder
    /// ([`crate::conversations`]); `true` when a replay or stop was
    /// answered (from llamatap's copy, or with an error) because its holder
    /// is gone; an error is the copy's rest's, which could not come.
    async fn conversation(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let scope = conversation::scope(ctx, &self.steps.config);
        let steps = &self.steps;
        let req = session.req_header();
        let mut claim = steps
            .conversations
            .claim(req, ctx.asked.route, scope.as_ref())
            .await;
        if let Some(c) = claim.as_deref_mut() {
            let key = steps.config.upstream_api_key.as_ref();
            let auth = match key {
                Some(k) => Some(format!("Bearer {}", k.expose())),
                None if !steps.config.tenants.auth_required() => req
                    .headers
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                None => None,
            };
            let (fleet, spares, config) = (&steps.fleet, &steps.spares, &steps.config);
            let find = steps
                .conversations
                .discover(c, fleet, spares, config, auth.as_deref());
            Box::pin(find).await;
        }
        let lost = claim
            .as_deref()
            .and_then(|c| crate::conversations::lost(&self.steps.fleet, c));
        ctx.conversation = claim;
        let Some(message) = lost else {
            return Ok(false);
        };
        if Box::pin(copied::serve(&self.steps, session, ctx, &message)).await? {
            return Ok(true);
        }
        ctx.seen.ended = Some(std::time::Instant::now());
        ctx.seen.failure = Some((Outcome::UpstreamError, "conversation_lost", message.clone()));
        let reply = reply::ErrorReply {
            status: 502,
            kind: "upstream_error",
            code: "conversation_lost",
            message: &message,
        };
        reply::write_error(session, ctx, reply).await;
        Ok(true)
    }
}

fn header<'a>(h: &'a RequestHeader, name: &str) -> Option<&'a [u8]> {
    h.headers.get(name).map(|v| v.as_bytes())
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

    /// Runs first for each request: classify the route, start the spans,
    /// run the steps before forwarding, and forward ([`forward`]). Always
    /// answers by itself (`Ok(true)`); an error goes to `fail_to_proxy`.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let req = session.req_header();
        // The target as it goes upstream, not `uri.path()`: a target that
        // is not origin-form is rooted at `/` in the URI but forwarded, and
        // routed by llama-server, as it came.
        ctx.asked.route = Route::from_target(req.raw_path());
        if self.steps.fleet.is_fleet() || self.steps.admission.enabled() {
            // Keep (up to Pingora's 64 KiB) what is read of the body before
            // routing, so that it is forwarded whole.
            session.enable_retry_buffering();
        }
        let req = session.req_header();
        ctx.asked.started = true;
        self.steps.telemetry.request_started();
        if let Some(t) = &self.steps.telemetry.tracing {
            let span = t.start_request(
                header(req, "traceparent"),
                header(req, "tracestate"),
                ctx.asked.received_wall,
            );
            ctx.seen.log_span = logs::request_span(&span);
            ctx.seen.span = Some(Box::new(span));
        }
        // The steps before forwarding are boxed, so that the hook's own
        // future, which a held stream keeps, is the size of the forwarding
        // loop, not of the largest step.
        match guard::check(req, ctx.asked.route, &self.steps.config) {
            Ok(id) => ctx.who.tenant = id,
            Err(r) => {
                Box::pin(refuse(session, ctx, r)).await;
                return Ok(true);
            }
        }
        if !guard::public(ctx.asked.route, req)
            && Box::pin(tenant::admit(
                session,
                ctx,
                &self.steps.limiter,
                &self.steps.telemetry,
            ))
            .await
        {
            return Ok(true);
        }
        if Box::pin(self.conversation(session, ctx)).await? {
            return Ok(true);
        }
        if self.steps.fleet.is_fleet()
            && Box::pin(routing::prepare(
                session,
                ctx,
                &self.steps.fleet,
                &self.steps.config,
            ))
            .await?
        {
            return Ok(true);
        }
        let s = &self.steps;
        let slos = &s.config.queue.slo;
        let using = (&*s.predictor, &*s.fleet, &*s.moves);
        if Box::pin(predict::admit(session, ctx, using, slos, &s.admission)).await? {
            return Ok(true);
        }
        if let Some(r) = Box::pin(queue(session, ctx, &self.steps.admission)).await? {
            if r.outcome == Outcome::Rejected {
                let req = session.req_header();
                predict::queue_refused(req, ctx, (&s.predictor, &s.fleet), &s.admission);
            }
            Box::pin(reply::write_refusal(session, ctx, &r)).await;
            return Ok(true);
        }
        if lookup::answers(session, &self.steps.config, &self.steps.fleet) {
            // A tenant's stream lookup: its ids scoped, the answer filtered.
            Box::pin(lookup::lookup(&self.steps, session, ctx)).await?;
            return Ok(true);
        }
        forward::run(&self.steps, session, ctx).await?;
        Ok(true)
    }

    /// Never called: `request_filter` answers every request ([`forward`]
    /// connects to the upstream itself), so Pingora's proxy loop never
    /// starts. Should that change, the request fails with a 502, not a
    /// panic.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        Error::e_explain(
            pingora::ErrorType::InternalError,
            "Pingora's proxy loop is not used: request_filter forwards every request",
        )
    }

    /// A fatal error: answer with an OpenAI-shaped error, or end a started
    /// event stream with an error event (never a silent cut, never `[DONE]`).
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let upstream = ctx
            .attempt
            .member
            .and_then(|i| self.steps.fleet.member(i))
            .map(|m| m.upstream.name.clone());
        reply::fail(session, e, ctx, upstream.as_deref()).await
    }

    /// Pingora's own error line about a request ("Fail to proxy: …") ends
    /// with this: its summary, and the trace id when tracing is on.
    fn request_summary(&self, session: &Session, ctx: &RequestCtx) -> String {
        let summary = session.as_ref().request_summary();
        match &ctx.seen.span {
            Some(span) => format!("{summary}, trace_id={}", Tracing::trace_id(span)),
            None => summary,
        }
    }

    /// Client hang-ups are normal traffic, not errors worth a log line.
    /// A failed connect was logged once already, naming the upstream (see
    /// [`Steps::connect_failed`]).
    fn suppress_error_log(&self, _session: &Session, ctx: &RequestCtx, error: &Error) -> bool {
        outcome::quiet(ctx, error)
    }

    /// The request is over: one record for metrics, spans and the latency page.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        if !ctx.asked.started {
            return;
        }
        if ctx.seen.stream_counted {
            ctx.seen.stream_counted = false;
            self.steps.telemetry.stream_active(false);
        }
        if let Some(mut c) = ctx.conversation.take() {
            let member = ctx.attempt.member.and_then(|i| self.steps.fleet.member(i));
            let answered = ctx.seen.streaming && ctx.seen.status == Some(200);
            let facts = ctx.seen.stream_facts.as_deref();
            let facts = facts.or_else(|| ctx.seen.observer.as_ref().map(|o| o.facts()));
            let complete = facts.is_some_and(|f| f.done);
            // A cut answer's request is kept with its copy, for its rest.
            let kept = ctx.resume.as_deref().filter(|_| !complete).map(|r| Kept {
                route: ctx.asked.route,
                body: r.body.to_vec(),
            });
            let conversations = &self.steps.conversations;
            conversations.finish(&mut c, member.as_deref(), (answered, complete), kept);
            ctx.conversation = Some(c);
        }
        // How it ended decides the record, ejection and the charge.
        let end = answer::settle(e, ctx);
        let req = session.req_header();
        let method = req.method.as_str().to_string();
        let path = logged_path(req);
        let client = session.client_addr().map(|a| a.to_string());
        let mut rec = ctx.record(method, path, end.outcome(), end.error(), client);
        predict::finish((&self.steps.predictor, &self.steps.fleet), ctx, &mut rec);
        rec.upstream = routing::finish(&self.steps.fleet, ctx, &rec, &end);
        rec.cache_break = self.steps.breaks.finish(
            ctx.attempt.routed.prompt.take(),
            ctx.who.session,
            ctx.who.tenant,
            &rec,
        );
        tenant::finish(&self.steps.limiter, ctx, &mut rec, &end);
        // The queue's slot is free: the next request is dispatched.
        ctx.admission = None;
        if e.is_none() && rec.outcome == Outcome::UpstreamError {
            // Pingora logged nothing (the HTTP exchange itself went well):
            // an upstream 5xx, an error event in the stream, a cut stream.
            let _in = ctx.seen.log_span.enter();
            tracing::warn!(
                error.type = rec.error_type.unwrap_or(""),
                "{} {}: {}",
                rec.method,
                rec.path,
                rec.error_message.as_deref().unwrap_or("")
            );
        }
        self.steps
            .telemetry
            .request_finished(&rec, ctx.seen.span.take().map(|s| *s));
    }
}

/// The admission queue's wait, for a request that uses a slot
/// ([`admission::wait`]).
async fn queue(
    session: &mut Session,
    ctx: &mut RequestCtx,
    admission: &Arc<admission::Admission>,
) -> Result<Option<admission::Refusal>> {
    if !ctx.asked.route.uses_slot() {
        return Ok(None);
    }
    let asking = admission::Asking {
        tenant: ctx.who.tenant,
        received: ctx.asked.received,
        model: ctx.asked.request.model.as_deref(),
    };
    admission::wait(session, asking, &mut ctx.admission, admission).await
}
