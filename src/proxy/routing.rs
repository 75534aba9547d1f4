//! Routing in the proxy hooks: what the hooks do before and after
//! the router's pure decision ([`llamatap_policy::router`]).
//!
//! - [`prepare`] (in `request_filter`, several upstreams only): reads the
//!   request body before an upstream is chosen, when Pingora can replay it
//!   (see below), for the model and the prompt's prefix chain; answers
//!   `GET /v1/models` with the models servable now; refuses a model no
//!   upstream serves (404), a request naming none where several are
//!   served (400), or a model none healthy serves now (503).
//! - [`choose`] (in [`super::Steps::peer`], every attempt): asks the fleet,
//!   excluding upstreams that already failed this request.
//! - [`finish`] (in `logging`): releases the upstream's load, teaches the
//!   router from llama-server's `cache_n`, and returns the routing facts.
//!
//! Body pre-read limit: the forwarding loop sends first what was read into
//! Pingora's retry buffer, which holds 64 KiB; a larger pre-read would be
//! lost. So a
//! body whose `Content-Length` is at most 64 KiB (and at most
//! `telemetry.max_inspect_bytes`) is read whole; any other body is read one
//! network read deep (always within the buffer), and the model and the
//! complete messages in that part are used. Either way every byte is then
//! forwarded unchanged.

use std::net::SocketAddr;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::answer::End;
use super::context::RequestCtx;
use super::errors;
use crate::config::Config;
use crate::fleet::watch::HEALTH_INTERVAL;
use crate::fleet::{Fleet, NoRoute};
use crate::replay;
use llamatap_policy::cachebreak::PromptDigest;
use llamatap_policy::router::{session_key, Chain, Observation, Reason};
use llamatap_telemetry::record::{bounded, Outcome, RequestRecord, UpstreamFacts};
use llamatap_telemetry::spans::Tracing;
use llamatap_wire::request;

/// Longest model name echoed in an error message, bytes.
const MAX_ECHOED_MODEL: usize = 128;

/// Reads what routing needs before the upstream is chosen; `Ok(true)` when
/// llamatap answered the request itself.
pub async fn prepare(
    session: &mut Session,
    ctx: &mut RequestCtx,
    fleet: &Fleet,
    config: &Config,
) -> Result<bool> {
    let req = session.req_header();
    if let Some(h) = fleet.session_header() {
        ctx.who.session = req.headers.get(h).map(|v| session_key(v.as_bytes()));
    }
    if req.method == http::Method::GET && req.uri.path() == "/v1/models" {
        if fleet.models().is_empty() {
            // No model list read yet: the upstream answers.
            return Ok(false);
        }
        // What can be served now: the models of upstreams not down.
        answer(session, ctx, 200, models_body(&fleet.servable_models())).await;
        return Ok(true);
    }
    if ctx.asked.route.operation_name().is_none() {
        return Ok(false);
    }
    // The client may wait for `100 Continue` before it sends the body read
    // here.
    super::downstream::answer_continue(session, ctx).await?;
    let limit = config.telemetry.max_inspect_bytes.min(replay::LIMIT);
    let (body, whole) = replay::read_ahead(session, limit).await?;
    if body.is_empty() {
        return Ok(false);
    }
    ctx.asked.request = request::inspect_body(&body);
    if whole {
        // One parse for the chain and the cache-break digest.
        let json = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&body);
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) {
            ctx.attempt.routed.chain = Chain::from_json(ctx.asked.route, &value);
            ctx.attempt.routed.prompt =
                PromptDigest::from_json(ctx.asked.route, &value, config.telemetry.capture_content);
        }
    }
    if let Err(NoRoute::UnknownModel { available }) =
        fleet.check_model(ctx.asked.request.model.as_deref())
    {
        let asked = bounded(
            ctx.asked.request.model.as_deref().unwrap_or(""),
            MAX_ECHOED_MODEL,
        );
        let message = format!(
            "model {asked:?} is not served here; available: {}",
            available.join(", ")
        );
        ctx.seen.failure = Some((Outcome::ClientError, "model_not_found", message.clone()));
        let body = errors::json_body(&message, "invalid_request_error", "model_not_found");
        answer(session, ctx, 404, body).await;
        return Ok(true);
    }
    if whole && ctx.asked.request.model.is_none() && fleet.serves_several_models() {
        // Several models and none named: which one would answer is a
        // guess, so refuse as llama-server's router mode does.
        let message = format!(
            "this endpoint serves several models; name one in \"model\": {}",
            fleet.models().join(", ")
        );
        ctx.seen.failure = Some((Outcome::ClientError, "model_required", message.clone()));
        let body = errors::json_body(&message, "invalid_request_error", "model_required");
        answer(session, ctx, 400, body).await;
        return Ok(true);
    }
    if let Err(NoRoute::Unavailable { why }) = fleet.unavailable(ctx.asked.request.model.as_deref())
    {
        // The client hears a plain reason; which members are down and why
        // (addresses, DNS names, lookup errors) goes to the log line, the
        // span and `/readyz` on the admin listener.
        let plain = match ctx.asked.request.model.as_deref() {
            Some(m) => format!(
                "model {:?} has no healthy upstream now; retry later",
                bounded(m, MAX_ECHOED_MODEL)
            ),
            None => "no upstream is healthy now; retry later".to_string(),
        };
        let detailed = format!("{} ({why})", plain.trim_end_matches("; retry later"));
        ctx.seen.failure = Some((Outcome::UpstreamError, "model_unavailable", detailed));
        let body = errors::json_body(&plain, "upstream_error", "model_unavailable");
        answer(session, ctx, 503, body).await;
        return Ok(true);
    }
    Ok(false)
}

/// Picks the upstream of this attempt and counts it in that upstream's
/// load. An upstream whose connect failed (in `ctx.attempt.routed.tried`) is not chosen
/// again; one whose pooled connection turned out stale may be.
pub fn choose(fleet: &Fleet, ctx: &mut RequestCtx) -> Result<SocketAddr> {
    let freed = ctx.attempt.routed.freed.take();
    if let Some(previous) = ctx.attempt.member.take() {
        if freed.is_none() {
            fleet.release(previous);
        }
    }
    ctx.attempt.routed.ejected = false;
    let model = ctx.asked.request.model.as_deref();
    let held = crate::conversations::pinned(
        fleet,
        ctx.conversation.as_deref(),
        model,
        &ctx.attempt.routed.tried,
    )?;
    let (chain, session, tried) = (
        &ctx.attempt.routed.chain,
        ctx.who.session,
        &ctx.attempt.routed.tried,
    );
    let plan = &ctx.attempt.routed.ttft;
    let avoid: Vec<usize> = plan.avoid.iter().chain(&plan.steered).copied().collect();
    let left_out = if !plan.avoid.is_empty() {
        Reason::TtftSlo
    } else {
        Reason::TtftSteer
    };
    let choose = |full: &[usize]| {
        // The member holding the request's conversation: a replay's
        // whatever its load, a follow-up's while it has a slot.
        if let Some(p) = held.filter(|p| p.strict || !full.contains(&p.member)) {
            return fleet.pin(p.member).ok_or(NoRoute::Exhausted);
        }
        // The admission queue leaves out upstreams without a free slot; a
        // TTFT objective (or, without one, the steering) those predicted
        // over it, while another is left.
        let exclude: Vec<usize> = tried.iter().chain(full).copied().collect();
        let slo: Vec<usize> = exclude.iter().chain(&avoid).copied().collect();
        match fleet.choose(model, chain, session, &slo) {
            Err(_) if !avoid.is_empty() => fleet.choose(model, chain, session, &exclude),
            // A first attempt steered by the objective (or the
            // prediction) says so.
            Ok(mut d) if !avoid.is_empty() && tried.is_empty() => {
                d.reason = left_out;
                Ok(d)
            }
            chosen => chosen,
        }
    };
    let ticket = ctx.admission.as_deref_mut().and_then(|h| h.ticket.as_mut());
    let chosen = match ticket {
        Some(t) => t.route(choose, |d| d.upstream),
        None => choose(&[]),
    };
    let decision = chosen.map_err(|_| {
        Error::explain(
            ErrorType::ConnectNoRoute,
            "no upstream left that can serve the request",
        )
    })?;
    ctx.attempt.member = Some(decision.upstream);
    ctx.attempt.routed.decision = Some(decision);
    let member = fleet
        .member(decision.upstream)
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "routed to an unknown upstream"))?;
    member
        .address()
        .ok_or_else(|| errors::unresolved(&member.upstream.address))
}

/// The attempt's answer ended upstream (the end of its body was read):
/// its member's slot is free, so it leaves the member's load now, before
/// the client has the last bytes and `logging` runs, and then gives its
/// admission slot back (the queue dispatches the next request): a request
/// the client sends on that end is neither counted nor queued behind it.
pub fn answer_ended(fleet: &Fleet, ctx: &mut RequestCtx) {
    let Some(i) = ctx.attempt.member else {
        return;
    };
    if ctx.attempt.routed.freed.is_none() {
        if let Some(m) = fleet.member(i) {
            ctx.attempt.routed.freed = Some(m);
            fleet.release(i);
        }
    }
    // Last: the request it dispatches sees the member's load without it.
    if let Some(h) = ctx.admission.as_deref_mut() {
        h.give_back();
    }
}

/// The request is over: release the upstream (unless its answer's end
/// did), eject it when `cause` (what
/// failed, when an error ended the request) says so, learn from `cache_n`,
/// and describe the routing for telemetry.
pub fn finish(
    fleet: &Fleet,
    ctx: &mut RequestCtx,
    rec: &RequestRecord,
    end: &End,
) -> Option<UpstreamFacts> {
    let i = ctx.attempt.member.take()?;
    // Read before the release: a draining member may leave once it is idle.
    let member = match ctx.attempt.routed.freed.take() {
        Some(m) => Some(m),
        None => {
            let m = fleet.member(i);
            fleet.release(i);
            m
        }
    };
    if end.ejects(ctx.attempt.routed.ejected) {
        fleet.eject(i);
    }
    let decision = ctx.attempt.routed.decision.take()?;
    let member = member?;
    let prediction = match (rec.cached_input_tokens(), rec.input_tokens()) {
        (Some(cached), Some(prompt)) if rec.outcome == Outcome::Ok => fleet
            .observe(
                i,
                &ctx.attempt.routed.chain,
                &decision.prediction,
                cached,
                prompt,
            )
            .and_then(observation_label),
        _ => None,
    };
    Some(UpstreamFacts {
        name: member.upstream.name.clone(),
        host: member.upstream.host.clone(),
        port: member.upstream.port,
        policy: fleet.policy(),
        reason: decision.reason.as_str(),
        failovers: u32::try_from(ctx.attempt.routed.tried.len()).unwrap_or(u32::MAX),
        predicted_cached_tokens: decision.prediction.tokens,
        prediction,
    })
}

fn observation_label(o: Observation) -> Option<&'static str> {
    match o {
        Observation::Unmeasured => None,
        Observation::Cold => Some("cold"),
        Observation::Unpredicted { .. } => Some("unpredicted"),
        Observation::Confirmed { .. } => Some("confirmed"),
        Observation::Shortfall { .. } => Some("shortfall"),
    }
}

/// The OpenAI-shaped model list of the whole fleet.
fn models_body(models: &[String]) -> Vec<u8> {
    let data: Vec<serde_json::Value> = models
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "llamacpp"}))
        .collect();
    serde_json::json!({"object": "list", "data": data})
        .to_string()
        .into_bytes()
}

/// Writes a JSON answer of llamatap's own. A 200 keeps the client's
/// connection open; an error closes it (the request body may be unread).
/// A 503 says when to retry: the next health check.
async fn answer(session: &mut Session, ctx: &mut RequestCtx, status: u16, body: Vec<u8>) {
    ctx.seen.status = Some(status);
    ctx.seen.ended = Some(std::time::Instant::now());
    let Ok(mut resp) = ResponseHeader::build(status, Some(4)) else {
        return;
    };
    let _ = resp.insert_header("Content-Type", "application/json");
    let _ = resp.insert_header("Content-Length", body.len().to_string());
    if status == 503 {
        let _ = resp.insert_header("Retry-After", HEALTH_INTERVAL.as_secs().to_string());
    }
    if let Some(span) = &ctx.seen.span {
        let _ = resp.insert_header("traceresponse", Tracing::traceresponse(span));
    }
    let ds = session.as_downstream_mut();
    if status == 200 {
        if ds.write_response_header(Box::new(resp)).await.is_ok() {
            let _ = ds.write_response_body(Bytes::from(body), true).await;
        }
    } else {
        let _ = ds.write_error_response(resp, Bytes::from(body)).await;
    }
}

#[cfg(test)]
mod tests;
