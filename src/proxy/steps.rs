//! The steps of a request around its upstream exchange, which the
//! forwarding loop ([`super::forward`]) calls in order; these never call a
//! hook, and nothing below them calls back into the proxy.
//!
//! - [`Steps::peer`]: one attempt's upstream (the affinity wait on the
//!   first, the routing decision, the wait that keeps earlier TTFT
//!   objectives ([`promises`]), the peer);
//! - [`Steps::connect_failed`]: a refused or timed-out connect (ejection,
//!   failover);
//! - [`Steps::upstream_request`]: the request head llama-server gets;
//! - [`Steps::request_chunk`], [`Steps::response_chunk`]: what is kept of
//!   each body as it passes, unchanged;
//! - [`Steps::upstream_response`], [`Steps::downstream_response`]: the
//!   answer's head as it comes, and as the client gets it.
//!
//! Deliberately not here: the steps before forwarding (guard, tenant
//! limits, routing's pre-read, the queue: `request_filter`), and those
//! after it (failures and `logging`), which Pingora's hooks run.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, Result};

use super::cachebreak::Breaks;
use super::context::RequestCtx;
use super::moves::Moves;
use super::{attempt, bodies, conversation, predict, promises, request_head, routing, tenant};
use crate::admission::{self, Secured};
use crate::config::Config;
use crate::conversations::Conversations;
use crate::fleet::Fleet;
use crate::upstream::client::Exchange;
use crate::upstream::spare::Spares;
use llamatap_telemetry::spans::Tracing;
use llamatap_telemetry::Telemetry;

/// What every request's steps use, built once for the process.
pub struct Steps {
    pub(super) config: Arc<Config>,
    pub(super) telemetry: Arc<Telemetry>,
    pub(super) fleet: Arc<Fleet>,
    /// The forwarding loop's connector ([`super::forward`]; never pooled),
    /// with a connected, never-used connection per upstream.
    pub(super) spares: Arc<Spares>,
    /// Tenant limits: per-tenant counts and the optional shared store.
    pub(super) limiter: Arc<tenant::Limiter>,
    /// Recent conversations, for the cache-break diagnosis.
    pub(super) breaks: Arc<Breaks>,
    /// The admission queue (`[queue]`).
    pub(super) admission: Arc<admission::Admission>,
    /// The answers that can be told to move (drain, pre-emption).
    pub(super) moves: Arc<Moves>,
    /// Which member holds which resumable stream.
    pub(super) conversations: Arc<Conversations>,
    /// The TTFT predictor ([`crate::ttft`]).
    pub(super) predictor: Arc<crate::ttft::Predictor>,
}

impl Steps {
    /// The steps of `config`'s proxy over `fleet`.
    pub fn new(config: Arc<Config>, telemetry: Arc<Telemetry>, fleet: Arc<Fleet>) -> Self {
        let spares = Arc::new(Spares::new(fleet.capacity(), config.pool_idle_timeout));
        let keeps_promises = config.ttft.keep_promises;
        let limiter = Arc::new(tenant::Limiter::new(
            &config,
            telemetry.metrics.tenants.store_up.clone(),
        ));
        let breaks = Arc::new(Breaks::new(config.telemetry.capture_content));
        let metrics = telemetry
            .metrics_enabled
            .then(|| telemetry.metrics.queue.clone());
        let moves = Moves::new();
        let admission = admission::Admission::new(
            &config,
            fleet.clone(),
            metrics,
            Arc::clone(&moves),
            limiter.store(),
        );
        let shared = (config.queue.shared && fleet.is_fleet())
            .then(|| limiter.store())
            .flatten();
        let conversations = Arc::new(Conversations::new(shared));
        Steps {
            conversations,
            config,
            telemetry,
            fleet,
            spares,
            limiter,
            breaks,
            admission,
            moves,
            predictor: Arc::new(crate::ttft::Predictor::new(keeps_promises)),
        }
    }

    /// One attempt's upstream: the first waits (bounded) for the upstream
    /// holding its prefix when the queue says so; each asks the fleet
    /// ([`routing::choose`]), and a retry never goes back to one that
    /// already failed.
    pub async fn peer(&self, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        ctx.attempt.count += 1;
        let first = ctx.attempt.count == 1
            && ctx.who.session.is_none()
            && ctx.attempt.routed.tried.is_empty();
        if let Some(held) = ctx.admission.as_deref_mut().filter(|_| first) {
            admission::wait_for_affine(
                &self.admission,
                &self.fleet,
                held,
                &ctx.attempt.routed.chain,
            )
            .await;
        }
        let steer = self.config.routing.ttft_steer_percent;
        predict::steer(&self.predictor, &self.fleet, ctx, steer);
        let address = routing::choose(&self.fleet, ctx)?;
        predict::dispatched(&self.predictor, &self.fleet, ctx);
        if let Some(waited) = promises::keep(&self.predictor, ctx).await {
            let plan = &mut ctx.attempt.routed.ttft;
            plan.held = Some(plan.held.unwrap_or_default() + waited);
            // Sent now: predicted again, with the prompts ahead done.
            predict::dispatched(&self.predictor, &self.fleet, ctx);
        }
        Ok(Box::new(attempt::peer(&self.config, address)))
    }

    /// With shared slots, the slot of the attempt's upstream is leased
    /// before it connects ([`admission::secure`]): `peer` again, or the
    /// peer of the upstream it was routed to instead when another replica
    /// took that slot.
    pub async fn lease(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        mut peer: Box<HttpPeer>,
    ) -> Result<Box<HttpPeer>> {
        loop {
            let Some(held) = ctx.admission.as_deref_mut() else {
                return Ok(peer);
            };
            match admission::secure(session, held, &self.admission, &self.fleet).await? {
                Secured::Kept => return Ok(peer),
                Secured::Reroute => {
                    let address = routing::choose(&self.fleet, ctx)?;
                    predict::dispatched(&self.predictor, &self.fleet, ctx);
                    peer = Box::new(attempt::peer(&self.config, address));
                }
            }
        }
    }

    /// Connects to the upstream the routing picks, on its spare connection
    /// when one is ready ([`crate::upstream::spare`]); a refused or
    /// timed-out connect fails over as [`Steps::connect_failed`] decides.
    pub async fn connect(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<(Exchange, Box<HttpPeer>)> {
        loop {
            let peer = self.peer(ctx).await?;
            let peer = self.lease(session, ctx, peer).await?;
            match self.reconnect(ctx, &peer).await {
                Ok(up) => return Ok((up, peer)),
                Err(mut e) => {
                    e.as_up();
                    let e = self.connect_failed(session, ctx, e);
                    if !e.retry() {
                        return Err(e.into_up());
                    }
                }
            }
        }
    }

    /// A connection to the attempt's `peer`, already chosen: its spare,
    /// or a new one (a second request of the same attempt, such as a
    /// continuation's `/completion` after its `/apply-template`).
    pub async fn reconnect(&self, ctx: &RequestCtx, peer: &HttpPeer) -> Result<Exchange> {
        let member = ctx.attempt.member.unwrap_or(0);
        if let Some(stream) = self.spares.take(member, peer).await {
            self.spares.refill(member, peer);
            return Ok(Exchange::new(stream));
        }
        let stream = self.spares.connect(peer).await?;
        self.spares.refill(member, peer);
        Ok(Exchange::new(stream))
    }

    /// The attempt's connect failed ([`attempt::connect_failed`]).
    pub fn connect_failed(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        e: Box<Error>,
    ) -> Box<Error> {
        attempt::connect_failed(&self.fleet, session, ctx, e)
    }

    /// The request head as llama-server gets it ([`request_head`]), with
    /// the tenant's conversation ids scoped ([`conversation`]) and the
    /// trace context handed on.
    pub fn upstream_request(&self, req: &mut RequestHeader, ctx: &mut RequestCtx) -> Result<()> {
        let member = ctx.attempt.member.and_then(|i| self.fleet.member(i));
        let base = member
            .as_ref()
            .map_or("", |m| m.upstream.base_path.as_str());
        conversation::scope_head(req, ctx, &self.config)?;
        request_head::shape(req, ctx, base, &self.config)?;
        if let (Some(t), Some(span)) = (&self.telemetry.tracing, ctx.seen.span.as_deref_mut()) {
            request_head::trace(req, t, span)?;
        }
        Ok(())
    }

    /// A request body chunk, passed unchanged ([`bodies::request_chunk`]).
    pub fn request_chunk(
        &self,
        ctx: &mut RequestCtx,
        body: Option<&Bytes>,
        end_of_stream: bool,
    ) -> Result<()> {
        bodies::request_chunk(ctx, body, end_of_stream, &self.config, &self.breaks)
    }

    /// The upstream's answer head arrived: its moment, what it says of the
    /// upstream, and how its body is watched.
    pub fn upstream_response(&self, resp: &ResponseHeader, ctx: &mut RequestCtx) {
        ctx.seen.upstream_headers = Some(Instant::now());
        let status = resp.status.as_u16();
        ctx.seen.status = Some(status);
        attempt::answered(&self.fleet, ctx, status);
        bodies::watch(ctx, resp, &self.config, &self.telemetry);
        if let Some(c) = ctx.conversation.as_deref() {
            let member = ctx.attempt.member.and_then(|i| self.fleet.member(i));
            self.conversations
                .answered(c, member.as_deref(), status, ctx.seen.streaming);
        }
    }

    /// The head the client gets: event streams kept unbuffered by any hop
    /// in front, the trace id handed back, the tenant's quota headers.
    pub fn downstream_response(&self, resp: &mut ResponseHeader, ctx: &RequestCtx) -> Result<()> {
        if ctx.seen.streaming {
            if resp.headers.get("x-accel-buffering").is_none() {
                resp.insert_header("X-Accel-Buffering", "no")?;
            }
            if resp.headers.get(http::header::CACHE_CONTROL).is_none() {
                resp.insert_header("Cache-Control", "no-cache")?;
            }
        }
        if let Some(span) = &ctx.seen.span {
            resp.insert_header("traceresponse", Tracing::traceresponse(span))?;
        }
        for (name, value) in llamatap_policy::tenant::window::quota_headers(&ctx.who.quota) {
            resp.insert_header(name, value)?;
        }
        predict::head(resp, ctx)
    }

    /// An answer body chunk, passed unchanged ([`bodies::response_chunk`]).
    pub fn response_chunk(&self, ctx: &mut RequestCtx, body: Option<&Bytes>, end_of_stream: bool) {
        if let (Some(c), Some(b), Some(200)) =
            (ctx.conversation.as_deref_mut(), body, ctx.seen.status)
        {
            c.see(b);
        }
        bodies::response_chunk(ctx, body, end_of_stream, &self.config);
    }
}
