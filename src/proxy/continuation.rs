//! Continuing an answer its upstream cut: when a chat-completions stream's
//! llama-server dies, resets or stalls mid-answer, the answer goes on from
//! another llama-server serving the model, and the client sees one stream.
//!
//! The target renders the conversation (`POST /apply-template`, the
//! client's body unchanged), then generates the rest (`POST /completion`,
//! prompt = the rendered conversation followed by the text the client
//! already has, the client's sampling fields and stop strings carried
//! over, `n_predict` = its limit less the tokens it has). Each native event
//! is re-wrapped as a chat chunk of the client's own stream (same `id`,
//! `created`, `model`, choice index), then the finish chunk, the usage
//! chunk when the client asked for one, and `[DONE]`. What was written goes
//! through the observer like any upstream byte, so the transcript, TTFT and
//! the first sentence carry across the cut, and a continuation can itself
//! be continued (up to `continuation.max_per_answer`).
//!
//! Besides a cut, an answer continues when it is told to move
//! ([`super::moves`]): its member drained (it goes on from another), or a
//! more urgent request took its slot (it waits at the head of its class's
//! queue, then goes on from whichever upstream the queue grants).
//!
//! Deliberately not here: what can be continued and the JSON shapes
//! ([`crate::continuation`], pure); noticing the cut ([`super::forward`]);
//! deciding which answer moves ([`super::moves`], the queue).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::proxy::Session;
use pingora::upstreams::peer::{HttpPeer, Peer};
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;
use super::moves::{Answer, Registration, Signal};
use super::{attempt, downstream, request_head, routing, Steps};
use crate::admission;
use crate::continuation::{self as plan, AnswerUsage, Plan, Sent, Shape, StreamIds};
use crate::fleet::watch::HEALTH_TIMEOUT;
use crate::llama::{self, StreamFormat};
use crate::request::Route;
use crate::sse::SseReader;
use crate::telemetry::continuation::{ContinuationResult, Continued, Reason, MAX_KEPT};
use crate::upstream::client::Exchange;

/// Largest `/apply-template` answer read.
const MAX_TEMPLATE_ANSWER: usize = 8 << 20;
/// Largest native event read from the continuation.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// What a continuable request keeps while its answer streams.
#[derive(Debug, Default)]
pub struct Resume {
    /// The request body as received (kept only when within
    /// `telemetry.max_inspect_bytes`).
    pub body: Bytes,
    /// Continuations so far (the telemetry's record of each).
    pub log: Vec<Continued>,
    /// Continuations done.
    pub count: u32,
    /// Pauses (pre-emptions) so far.
    pub pauses: u32,
}

/// How one attempt at continuing ended, short of the answer's end.
enum Stop {
    /// Not continuable in meaning, or no target: the client gets the error
    /// event of the original cut.
    Refused(ContinuationResult, &'static str),
    /// The continuation's own upstream failed after its first token; it may
    /// be continued again.
    Cut(Reason, Box<Error>),
    /// The client hung up or its connection failed: nothing to continue.
    Client(Box<Error>),
}

/// The answer was cut (`cause`) for `reason`: its upstream died or stalled,
/// its member drained, or its slot was taken (then it waits in the queue
/// first). Continues it when it can (`Ok` once the client has the whole
/// answer); otherwise returns `cause`, and the client gets the error event
/// as before.
pub(super) async fn resume(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    mut reason: Reason,
    mut cause: Box<Error>,
) -> Result<()> {
    loop {
        let cut = Instant::now();
        if !armed(steps, ctx) {
            // Continued as often as allowed: this cut ends the answer.
            return Err(cause);
        }
        let from = member_name(steps, ctx);
        let before = ctx.observer.as_ref().map_or(0, |o| o.facts().token_events);
        let mut entry = Continued {
            at: cut.saturating_duration_since(ctx.received),
            reason,
            result: ContinuationResult::Continued,
            why: None,
            from,
            to: None,
            tokens_before: before,
            reprefilled: None,
            pause: Duration::ZERO,
            cached: None,
            generated: None,
        };
        if reason == Reason::Preempted {
            // Its slot went to a more urgent request: it waits at the head
            // of its class's queue (a hang-up ends it there).
            if let Some(r) = ctx.resume.as_deref_mut() {
                r.pauses += 1;
            }
            if let Err(e) = admission::requeue(session, ctx, &steps.admission).await {
                entry.pause = cut.elapsed();
                entry.result = ContinuationResult::Failed;
                entry.why = Some("client_left");
                log(ctx, entry);
                return Err(e);
            }
        }
        match once(steps, session, ctx, cut, &mut entry).await {
            Ok(()) => {
                log(ctx, entry);
                return Ok(());
            }
            Err(Stop::Client(e)) => {
                if entry.pause.is_zero() {
                    // The client left before the rest began.
                    entry.result = ContinuationResult::Failed;
                    entry.why = Some("client_left");
                    entry.pause = cut.elapsed();
                }
                log(ctx, entry);
                return Err(e);
            }
            Err(Stop::Refused(result, why)) => {
                entry.result = result;
                entry.why = Some(why);
                entry.pause = cut.elapsed();
                log(ctx, entry);
                return Err(cause);
            }
            Err(Stop::Cut(next, e)) => {
                // It went on, then its own upstream failed: count it, and
                // try again from where the client is now.
                log(ctx, entry);
                reason = next;
                cause = e;
            }
        }
    }
}

/// The attempt's upstream closed or reset its connection before the
/// answer's head: nothing reached the client, so a continuable stream
/// starts again from zero tokens on another member, with the body it
/// sent. Returns that body when it does (the member is ejected and not
/// chosen again, and the continuation is counted); `None` when the error
/// stands (not an upstream's death, not continuable, continued as often as
/// allowed, its body not kept, or no other member).
pub(super) fn before_head(steps: &Steps, ctx: &mut RequestCtx, e: &Error) -> Option<Bytes> {
    let died = e.esource() == &pingora::ErrorSource::Upstream
        && matches!(
            e.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError
        );
    if !died || ctx.request.stream != Some(true) || !armed(steps, ctx) || !elsewhere(steps, ctx) {
        return None;
    }
    let body = ctx.resume.as_ref().map(|r| r.body.clone())?;
    if body.is_empty() {
        return None;
    }
    let from = member_name(steps, ctx);
    if let Some(i) = ctx.member {
        steps.fleet.eject(i);
        ctx.routed.ejected = true;
        if !ctx.routed.tried.contains(&i) {
            ctx.routed.tried.push(i);
        }
    }
    // The next attempt's head and first token count from the request's
    // arrival, as before.
    ctx.upstream_headers = None;
    log(
        ctx,
        Continued {
            at: ctx.received.elapsed(),
            reason: Reason::UpstreamDied,
            result: ContinuationResult::Continued,
            why: None,
            from,
            to: None,
            tokens_before: 0,
            reprefilled: None,
            pause: Duration::ZERO,
            cached: None,
            // The next attempt's own answer reports what it generated.
            generated: None,
        },
    );
    Some(body)
}

/// The answer's member still answers its `/health` (within the health
/// checks' own limit, [`HEALTH_TIMEOUT`]): its silence is another request's
/// work, not a stall.
pub(super) async fn member_alive(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(i) = ctx.member else {
        return false;
    };
    steps.fleet.answers_health(i, HEALTH_TIMEOUT).await
}

/// Whether `ctx` may be continued at all (checked before the cut is
/// handled): on, a chat stream whose body was kept, attempts left.
pub(super) fn armed(steps: &Steps, ctx: &RequestCtx) -> bool {
    steps.config.continuation.enabled
        && ctx
            .resume
            .as_ref()
            .is_some_and(|r| r.count < steps.config.continuation.max_per_answer)
}

/// The answer could be told to move: drained (in a fleet) or paused (its
/// class is preemptible and its pauses are not spent).
pub(super) fn movable(steps: &Steps, ctx: &RequestCtx) -> bool {
    steps.fleet.is_fleet() || pausable(steps, ctx)
}

/// Its class's answers may be paused, and its own pauses are not spent.
fn pausable(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(held) = ctx.admission.as_deref() else {
        return false;
    };
    let class = held.class as usize;
    held.ticket.is_some()
        && steps
            .config
            .queue
            .preemptible
            .get(class)
            .is_some_and(|p| *p)
        && ctx
            .resume
            .as_ref()
            .is_some_and(|r| r.pauses < steps.config.continuation.max_pauses)
}

/// The answer can be continued from where its client is now (checked when
/// it is told to move, before its upstream is closed).
pub(super) fn can_move(ctx: &RequestCtx) -> bool {
    let finished = ctx
        .observer
        .as_ref()
        .is_some_and(|o| o.facts().done || !o.facts().finish_reasons.is_empty());
    !finished && what_to_continue(ctx).is_ok()
}

/// Registers a movable answer past its first token.
pub(super) fn register(steps: &Steps, ctx: &RequestCtx, signal: Arc<Signal>) -> Registration {
    let answer = Answer {
        member: ctx.member.unwrap_or(usize::MAX),
        model: ctx.request.model.clone(),
        class: ctx.admission.as_deref().map_or(0, |h| h.class as usize),
        pausable: pausable(steps, ctx),
        since: ctx.received,
    };
    steps.moves.register(answer, signal)
}

/// Another upstream could take the answer now.
pub(super) fn elsewhere(steps: &Steps, ctx: &RequestCtx) -> bool {
    let Some(i) = ctx.member else {
        return false;
    };
    steps.fleet.is_fleet()
        && steps
            .fleet
            .can_fail_over(ctx.request.model.as_deref(), i, &ctx.routed.tried)
}

fn log(ctx: &mut RequestCtx, entry: Continued) {
    if let Some(r) = ctx.resume.as_deref_mut() {
        if entry.result == ContinuationResult::Continued {
            r.count += 1;
        }
        if r.log.len() < MAX_KEPT {
            r.log.push(entry);
        }
    }
}

fn member_name(steps: &Steps, ctx: &RequestCtx) -> Option<String> {
    let i = ctx.member?;
    steps.fleet.member(i).map(|m| m.upstream.name.clone())
}

/// One continuation: checks, a target, the template, the rest of the answer.
async fn once(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    cut: Instant,
    entry: &mut Continued,
) -> std::result::Result<(), Stop> {
    use ContinuationResult::{Failed, NotContinuable};
    let sofar = what_to_continue(ctx).map_err(|why| Stop::Refused(NotContinuable, why))?;
    let finished = ctx
        .observer
        .as_ref()
        .is_some_and(|o| !o.facts().finish_reasons.is_empty() || o.facts().done);
    if finished {
        // Only the end was lost (`[DONE]`, and the usage chunk when asked
        // for, whose prompt count is not known here): the text is whole.
        let tail = match sofar.ids {
            Some(_) => b"data: [DONE]\n\n".to_vec(),
            None => Vec::new(),
        };
        write(steps, session, ctx, tail, true)
            .await
            .map_err(Stop::Client)?;
        entry.why = Some("finished");
        return Ok(());
    }
    entry.tokens_before = sofar.tokens;
    if sofar.plan.remaining(sofar.tokens) == Some(0) {
        // Every token asked for was sent: the answer ends here (without a
        // usage chunk, whose prompt count is not known here).
        let tail = match &sofar.ids {
            Some(ids) => ids.finish_events("length", None),
            None => plan::native_end(sofar.tokens),
        };
        write(steps, session, ctx, tail, true)
            .await
            .map_err(Stop::Client)?;
        entry.why = Some("limit_reached");
        return Ok(());
    }
    // A paused answer may go on from the same member (the queue granted
    // it a slot); any other goes elsewhere.
    let paused = entry.reason == Reason::Preempted;
    if !paused && !elsewhere(steps, ctx) {
        return Err(Stop::Refused(Failed, "no_other_upstream"));
    }
    if let Some(i) = ctx.member.filter(|_| !paused) {
        // The member that cut the answer is ejected (a drained one is on
        // its way out already); neither is chosen again.
        if matches!(entry.reason, Reason::UpstreamDied | Reason::Stalled) {
            steps.fleet.eject(i);
            ctx.routed.ejected = true;
        }
        if !ctx.routed.tried.contains(&i) {
            ctx.routed.tried.push(i);
        }
    }
    let address =
        routing::choose(&steps.fleet, ctx).map_err(|_| Stop::Refused(Failed, "no_upstream"))?;
    // With shared slots, the target's slot is leased first (routed again
    // when another replica took it).
    let secured = crate::admission::secure(session, ctx, &steps.admission, &steps.fleet).await;
    let address = match secured.map_err(|e| match e.etype() {
        pingora::ErrorType::ConnectNoRoute => Stop::Refused(Failed, "no_upstream"),
        _ => Stop::Client(e),
    })? {
        Some(a) => a,
        None => address,
    };
    entry.to = member_name(steps, ctx);
    let peer = attempt::peer(&steps.config, address);
    let base = ctx
        .member
        .and_then(|i| steps.fleet.member(i))
        .map(|m| m.upstream.base_path.clone())
        .unwrap_or_default();
    let host = peer.address().to_string();
    let to = (host.as_str(), base.as_str());
    let failed = |_| Stop::Refused(Failed, "target_failed");
    // The target renders and prefills while the client is watched: a
    // hang-up drops the target's connection at once (it cancels).
    let (sofar_ref, peer_ref) = (&sofar, &peer);
    let ctx_ref: &RequestCtx = ctx;
    let mut up = watching(session, async move {
        let peer = peer_ref;
        let rendered = if sofar_ref.plan.needs_template() {
            let r = render(steps, ctx_ref, peer, to, &plan_body(ctx_ref)).await;
            Some(r.map_err(|_| Stop::Refused(Failed, "template_failed"))?)
        } else {
            None
        };
        let sent = Sent {
            text: &sofar_ref.text,
            ids: sofar_ref.token_ids.as_deref(),
            tokens: sofar_ref.tokens,
        };
        let body = sofar_ref.plan.completion_body(rendered.as_deref(), &sent);
        let mut up = exchange(steps, ctx_ref, peer).await.map_err(failed)?;
        let head = post(ctx_ref, &steps.config, to, "/completion", &body).map_err(failed)?;
        up.write(&head, peer.options.write_timeout)
            .await
            .map_err(failed)?;
        let header = up
            .read_header(peer.options.read_timeout)
            .await
            .map_err(failed)?;
        if header.status.as_u16() != 200 {
            return Err(Stop::Refused(Failed, "target_refused"));
        }
        Ok(up)
    })
    .await?;
    stream_rest(steps, session, ctx, &mut up, &peer, &sofar, cut, entry).await
}

/// Runs `work` while watching the client: a hang-up ends it at once, and
/// what `work` holds (a connection to the target) is dropped with it.
async fn watching<T>(
    session: &mut Session,
    work: impl std::future::Future<Output = std::result::Result<T, Stop>>,
) -> std::result::Result<T, Stop> {
    tokio::select! {
        biased;
        r = work => r,
        r = session.as_downstream_mut().read_body_or_idle(true) => {
            let e = r.err().unwrap_or_else(|| Error::new(ErrorType::ConnectionClosed));
            Err(Stop::Client(e.into_down()))
        }
    }
}

/// What the client has of the answer, and how to go on.
struct SoFar {
    plan: Plan,
    /// The ids of the client's stream; `None`: a native stream.
    ids: Option<StreamIds>,
    text: String,
    /// The token ids of `text`, when every event carried them.
    token_ids: Option<Vec<u32>>,
    /// Tokens sent (the ids' count when known, else the token events).
    tokens: u64,
}

/// The continuation's shape for a route; `None`: not continued.
pub(super) fn shape_of(route: Route) -> Option<Shape> {
    match route {
        Route::ChatCompletions => Some(Shape::Chat),
        Route::Completions => Some(Shape::Completions),
        Route::Completion => Some(Shape::Native),
        _ => None,
    }
}

/// What the client has and how to go on, or why the answer cannot.
fn what_to_continue(ctx: &RequestCtx) -> std::result::Result<SoFar, &'static str> {
    let body = &ctx.resume.as_ref().ok_or("not_kept")?.body;
    let shape = shape_of(ctx.route).ok_or("not_kept")?;
    let plan = plan::plan_for(shape, body).map_err(|r| r.as_str())?;
    let observer = ctx.observer.as_ref().ok_or("not_observed")?;
    if observer.mid_event() {
        return Err("cut_mid_event");
    }
    if observer.facts().error.is_some() {
        return Err("upstream_error_event");
    }
    if observer.facts().skipped_events > 0 {
        // An event too large to read (`telemetry.max_event_bytes`) went to
        // the client unread: the transcript lacks its text.
        return Err("event_skipped");
    }
    let t = observer.transcript().ok_or("not_observed")?;
    if t.hidden {
        return Err("hidden_tokens");
    }
    if t.overflow {
        return Err("text_too_long");
    }
    let ids = match shape {
        Shape::Native => None,
        _ => Some(
            t.first_event
                .as_deref()
                .and_then(plan::stream_ids)
                .ok_or("no_stream_ids")?,
        ),
    };
    let token_ids = t.ids.clone().filter(|i| !i.is_empty() || t.text.is_empty());
    let tokens = token_ids
        .as_ref()
        .map_or(observer.facts().token_events, |i| {
            u64::try_from(i.len()).unwrap_or(u64::MAX)
        });
    Ok(SoFar {
        plan,
        ids,
        text: t.text.clone(),
        token_ids,
        tokens,
    })
}

fn plan_body(ctx: &RequestCtx) -> Bytes {
    ctx.resume
        .as_ref()
        .map(|r| r.body.clone())
        .unwrap_or_default()
}

/// A connection to `peer` (its spare, or a new one).
async fn exchange(steps: &Steps, ctx: &RequestCtx, peer: &HttpPeer) -> Result<Exchange> {
    let member = ctx.member.unwrap_or(0);
    if let Some(stream) = steps.spares.take(member, peer).await {
        steps.spares.refill(member, peer);
        return Ok(Exchange::new(stream));
    }
    let stream = steps.spares.connect(peer).await?;
    steps.spares.refill(member, peer);
    Ok(Exchange::new(stream))
}

/// A `POST` of a JSON body to `path` on the target, head and body in one
/// buffer, shaped as every request llamatap sends upstream.
fn post(
    ctx: &RequestCtx,
    config: &crate::config::Config,
    (host, base): (&str, &str),
    path: &str,
    body: &[u8],
) -> Result<Vec<u8>> {
    let mut req = RequestHeader::build("POST", path.as_bytes(), None)?;
    req.insert_header("Host", host)?;
    req.insert_header("Content-Type", "application/json")?;
    req.insert_header("Content-Length", body.len().to_string())?;
    request_head::shape(&mut req, ctx, base, config)?;
    let mut out = http_req_header_to_wire(&req)
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "invalid continuation request"))?;
    out.extend_from_slice(body);
    Ok(out.to_vec())
}

/// The conversation rendered by the target's `/apply-template`.
async fn render(
    steps: &Steps,
    ctx: &RequestCtx,
    peer: &HttpPeer,
    to: (&str, &str),
    body: &[u8],
) -> Result<String> {
    let mut up = exchange(steps, ctx, peer).await?;
    let head = post(ctx, &steps.config, to, "/apply-template", body)?;
    up.write(&head, peer.options.write_timeout).await?;
    let header = up.read_header(peer.options.read_timeout).await?;
    if header.status.as_u16() != 200 {
        return Err(Error::explain(
            ErrorType::HTTPStatus(header.status.as_u16()),
            "apply-template refused",
        ));
    }
    let mut answer = Vec::new();
    while let Some(piece) = tokio::time::timeout(
        peer.options
            .read_timeout
            .unwrap_or(Duration::from_secs(600)),
        up.read_body(),
    )
    .await
    .map_err(|_| Error::explain(ErrorType::ReadTimedout, "apply-template answer"))??
    {
        answer.extend_from_slice(&piece);
        if answer.len() > MAX_TEMPLATE_ANSWER {
            return Err(Error::explain(
                ErrorType::InternalError,
                "apply-template answer too large",
            ));
        }
    }
    plan::rendered_prompt(&answer)
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "apply-template answer unreadable"))
}

/// Writes `bytes` to the client as part of the answer, through the observer.
async fn write(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    bytes: Vec<u8>,
    end: bool,
) -> Result<()> {
    let b = Bytes::from(bytes);
    steps.response_chunk(ctx, Some(&b), end);
    downstream::body(session, b, end, steps.config.client_write_timeout).await?;
    if end {
        ctx.terminal_sent = true;
    }
    Ok(())
}

/// Reads the continuation's native events and writes them to the client in
/// its stream's format, watching the client for a hang-up and the target
/// for a stall.
#[allow(clippy::too_many_arguments)]
async fn stream_rest(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    up: &mut Exchange,
    peer: &HttpPeer,
    sofar: &SoFar,
    cut: Instant,
    entry: &mut Continued,
) -> std::result::Result<(), Stop> {
    let mut reader = SseReader::new(MAX_EVENT_BYTES);
    let first_wait = peer
        .options
        .read_timeout
        .unwrap_or(Duration::from_secs(600));
    let stall = steps.config.continuation.stall;
    let mut first = true;
    let mut heard = Instant::now();
    loop {
        let wait = if first { first_wait } else { stall };
        let chunk = tokio::select! {
            biased;
            r = tokio::time::timeout(wait, up.read_body()) => match r {
                // As in the forwarding loop: a silent target that answers
                // its `/health` is busy with another request, not stalled
                // (reading the body again is cancel-safe).
                Err(_) if !first
                    && heard.elapsed() < first_wait
                    && Box::pin(member_alive(steps, ctx)).await => continue,
                Err(_) => return Err(cut_or_refuse(first, Reason::Stalled, stalled())),
                Ok(Err(e)) => return Err(cut_or_refuse(first, Reason::UpstreamDied, e)),
                Ok(Ok(None)) => return Err(cut_or_refuse(first, Reason::UpstreamDied, ended())),
                Ok(Ok(Some(b))) => {
                    heard = Instant::now();
                    b
                }
            },
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                // The client hung up: the caller's error path reports it.
                let e = r.err().unwrap_or_else(|| Error::new(ErrorType::ConnectionClosed));
                return Err(Stop::Client(e.into_down()));
            }
        };
        let mut out: Vec<u8> = Vec::new();
        let mut end: Option<(String, Option<AnswerUsage>)> = None;
        let mut native_done = false;
        reader.feed(&chunk, |event| {
            let delta = llama::parse_event(StreamFormat::Native, event);
            match &sofar.ids {
                None => {
                    out.extend_from_slice(&plan::native_event(event.data, entry.tokens_before));
                    native_done |= delta.done;
                }
                Some(ids) => {
                    if let Some(text) = delta.visible.as_deref() {
                        let probs = sofar
                            .plan
                            .wants_logprobs()
                            .then(|| probabilities(event.data))
                            .flatten();
                        out.extend_from_slice(&ids.content_event(text, probs.as_ref()));
                    }
                }
            }
            if delta.done && end.is_none() {
                if let Some(t) = delta.timings {
                    entry.reprefilled = t.prompt_n;
                    entry.cached = t.cache_n;
                    entry.generated = t.predicted_n;
                }
                let usage = delta.usage.map(|u| AnswerUsage {
                    prompt_tokens: u
                        .input_tokens
                        .unwrap_or(0)
                        .saturating_sub(entry.tokens_before),
                    completion_tokens: entry.tokens_before + u.output_tokens.unwrap_or(0),
                });
                let reason = plan::finish_reason(delta.finish_reason.as_deref()).to_string();
                end = Some((reason, usage));
            }
        });
        if first && !out.is_empty() {
            first = false;
            entry.pause = cut.elapsed();
        }
        if let Some((reason, usage)) = end {
            if let Some(ids) = &sofar.ids {
                // A text completion's last chunk always has the usage; a
                // chat stream's only when asked for.
                let usage = usage.filter(|_| ids.text_completion || sofar.plan.include_usage());
                out.extend_from_slice(&ids.finish_events(&reason, usage));
            }
            if first {
                entry.pause = cut.elapsed();
            }
            return write(steps, session, ctx, out, true)
                .await
                .map_err(Stop::Client);
        }
        if native_done {
            return write(steps, session, ctx, out, true)
                .await
                .map_err(Stop::Client);
        }
        if !out.is_empty() {
            write(steps, session, ctx, out, false)
                .await
                .map_err(Stop::Client)?;
        }
    }
}

/// A native event's `completion_probabilities`, for the client's logprobs.
fn probabilities(data: &[u8]) -> Option<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_slice(data).ok()?;
    v.get_mut("completion_probabilities")
        .map(serde_json::Value::take)
}

/// Before the continuation's first token its failure is a failed
/// continuation; after it, a new cut.
fn cut_or_refuse(first: bool, reason: Reason, e: Box<Error>) -> Stop {
    if first {
        Stop::Refused(ContinuationResult::Failed, "target_failed")
    } else {
        Stop::Cut(reason, e)
    }
}

fn stalled() -> Box<Error> {
    Error::explain(
        ErrorType::ReadTimedout,
        "the continuation's upstream stalled",
    )
    .into_up()
}

fn ended() -> Box<Error> {
    Error::explain(
        ErrorType::ConnectionClosed,
        "the continuation's upstream ended before its last event",
    )
    .into_up()
}

/// The shape whose token ids the transcript keeps: a native stream's
/// always; a chat or completions stream's when the request may have asked
/// for `logprobs` (its events then carry them).
pub(super) fn transcript_ids(ctx: &RequestCtx) -> Option<Shape> {
    let body = &ctx.resume.as_ref()?.body;
    match shape_of(ctx.route)? {
        Shape::Native => Some(Shape::Native),
        s => memchr::memmem::find(body, b"\"logprobs\"").map(|_| s),
    }
}

/// Keeps the body of a stream that may be continued (a chat, completions
/// or native completion request; called when the request body is whole).
pub(super) fn keep_body(ctx: &mut RequestCtx, enabled: bool, body: Bytes) {
    if enabled && shape_of(ctx.route).is_some() && ctx.request.stream == Some(true) {
        ctx.resume = Some(Box::new(Resume {
            body,
            ..Resume::default()
        }));
    }
}
