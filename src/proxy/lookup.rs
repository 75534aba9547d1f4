//! A tenant's lookup of its resumable streams (`POST /v1/streams/lookup`,
//! named keys only), answered by llamatap ([`lookup`]): its body is read
//! whole (at most [`MAX_LOOKUP_BODY`] bytes; an oversized or malformed one
//! gets `400`), its ids are scoped ([`super::conversation`]), the rewritten
//! request goes to the upstream the routing picks on llamatap's upstream
//! client, and the answer (at most [`MAX_LOOKUP_ANSWER`] bytes) reaches the
//! client with only the tenant's entries, unscoped. A `200` answer that is
//! not a JSON array reaches no client (`502`); another status passes as it
//! is.
//!
//! In a fleet the lookup is asked of every member in the fleet now
//! ([`ask_all`]), each on its own connection, one after another: the
//! entries of every member that answered `200` are merged (an id held by
//! two members is listed once, the later start), also without named keys.
//! A member that cannot be reached is left out; when none answered `200`,
//! the last answer (or error) is the client's.
//!
//! Deliberately not here: scoping every other request's ids
//! ([`super::conversation`]). Without named keys and with one upstream,
//! the lookup goes through the forwarding loop like any other request.

use std::time::Duration;

use bytes::{BufMut, Bytes};
use http::header;
use pingora::http::ResponseHeader;
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;
use super::conversation::scope;
use super::guard::Refusal;
use super::reply::refuse;
use super::{forward, Steps};
use crate::config::Config;
use crate::fleet::Fleet;
use llamatap_policy::conversation::{Claim, Use};
use llamatap_wire::conversation::{self, Scope};

/// Largest lookup body a client may send, bytes.
pub const MAX_LOOKUP_BODY: usize = 64 * 1024;

/// Largest lookup answer read from llama-server, bytes.
pub const MAX_LOOKUP_ANSWER: usize = 4 * 1024 * 1024;

/// How long a lookup waits for llama-server's answer when the upstream
/// sets no read timeout.
const LOOKUP_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether the request is a lookup llamatap answers itself (named keys
/// only).
pub fn answers(session: &Session, config: &Config, fleet: &Fleet) -> bool {
    let req = session.req_header();
    (config.tenants.named() || fleet.is_fleet())
        && conversation::is_lookup(req.method.as_str(), req.raw_path())
}

/// Answers a tenant's lookup: its ids scoped up, the answer's entries
/// filtered and unscoped back.
pub async fn lookup(steps: &Steps, session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    let scope = match scope(ctx, &steps.config) {
        Some(s) => s,
        None if steps.fleet.is_fleet() => Scope::open(),
        None => return forward::run(steps, session, ctx).await,
    };
    super::downstream::answer_continue(session, ctx).await?;
    let Some(body) = read_body(session).await? else {
        refuse(
            session,
            ctx,
            invalid("the lookup body is larger than 64 KiB"),
        )
        .await;
        return Ok(());
    };
    let up_body = match scope.lookup_request(&body) {
        Ok(b) => b,
        Err(e) => {
            refuse(session, ctx, invalid(e.message())).await;
            return Ok(());
        }
    };
    let (head, answer) = if steps.fleet.is_fleet() {
        Box::pin(ask_all(steps, session, ctx, &scope, up_body)).await?
    } else {
        let (head, answer) = Box::pin(exchange(steps, session, ctx, up_body)).await?;
        let answer = match head.status.as_u16() {
            200 => scope.lookup_answer(&answer).ok_or_else(not_array)?,
            _ => answer,
        };
        (head, answer)
    };
    let mut resp = ResponseHeader::build(head.status, Some(4))?;
    let kind = head
        .headers
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(http::HeaderValue::from_static("application/json"));
    resp.insert_header(header::CONTENT_TYPE, kind)?;
    resp.insert_header(header::CONTENT_LENGTH, answer.len().to_string())?;
    steps.downstream_response(&mut resp, ctx)?;
    let ds = session.as_downstream_mut();
    ds.write_response_header(Box::new(resp))
        .await
        .map_err(|e| e.into_down())?;
    ds.write_response_body(Bytes::from(answer), true)
        .await
        .map_err(|e| e.into_down())?;
    Ok(())
}

fn not_array() -> Box<Error> {
    Error::explain(
        ErrorType::InvalidHTTPHeader,
        "the stream lookup's answer is not a JSON array",
    )
    .into_up()
}

/// Asks every member of the fleet, one after another, and merges the
/// `200` answers' entries (each filtered and unscoped by `scope`).
async fn ask_all(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    scope: &Scope,
    body: Vec<u8>,
) -> Result<(Box<ResponseHeader>, Vec<u8>)> {
    let mut merged: Vec<serde_json::Value> = Vec::new();
    let mut ok: Option<Box<ResponseHeader>> = None;
    let mut last: Result<(Box<ResponseHeader>, Vec<u8>)> = Err(Error::explain(
        ErrorType::ConnectNoRoute,
        "no upstream answered the stream lookup",
    ));
    let counted = ctx.asked.request_bytes;
    for member in steps.fleet.members() {
        if member.gone() {
            continue;
        }
        ctx.attempt.routed.tried.clear();
        let holder = Some(member.upstream.name.clone());
        ctx.conversation = Some(Box::new(Claim::new(Use::Lookup, String::new(), holder)));
        let answer = Box::pin(exchange(steps, session, ctx, body.clone())).await;
        match answer {
            Ok((head, a)) if head.status.as_u16() == 200 => {
                let kept = scope.lookup_answer(&a).ok_or_else(not_array)?;
                let entries: Vec<serde_json::Value> =
                    serde_json::from_slice(&kept).map_err(|_| not_array())?;
                merge(&mut merged, entries);
                ok = Some(head);
            }
            Err(e) if e.esource() == &pingora::ErrorSource::Downstream => return Err(e),
            other => last = other,
        }
    }
    ctx.conversation = None;
    // One request body, however many members were asked.
    ctx.asked.request_bytes = counted + body.len() as u64;
    match ok {
        Some(head) => {
            let all = serde_json::to_vec(&merged).map_err(|_| not_array())?;
            Ok((head, all))
        }
        None => last,
    }
}

/// Adds `entries` to `merged`; an id listed twice keeps the later start.
fn merge(merged: &mut Vec<serde_json::Value>, entries: Vec<serde_json::Value>) {
    let started = |v: &serde_json::Value| v["started_at"].as_i64().unwrap_or(0);
    for e in entries {
        let id = e["conversation_id"].clone();
        match merged.iter_mut().find(|m| m["conversation_id"] == id) {
            Some(m) if started(&e) > started(m) => *m = e,
            Some(_) => {}
            None => merged.push(e),
        }
    }
}

fn invalid(message: &'static str) -> Refusal {
    Refusal {
        status: 400,
        kind: "invalid_request_error",
        code: "invalid_stream_lookup",
        message,
    }
}

/// The whole request body (what routing read first included), or `None`
/// past [`MAX_LOOKUP_BODY`].
async fn read_body(session: &mut Session) -> Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    if let Some(b) = session.as_ref().get_retry_buffer() {
        body.extend_from_slice(&b);
    }
    while !session.as_mut().is_body_done() && body.len() <= MAX_LOOKUP_BODY {
        match session
            .as_mut()
            .read_request_body()
            .await
            .map_err(|e| e.into_down())?
        {
            Some(b) => body.extend_from_slice(&b),
            None => break,
        }
    }
    Ok((body.len() <= MAX_LOOKUP_BODY).then_some(body))
}

/// Sends the rewritten lookup to the upstream the routing picks and reads
/// its answer whole.
async fn exchange(
    steps: &Steps,
    session: &mut Session,
    ctx: &mut RequestCtx,
    body: Vec<u8>,
) -> Result<(Box<ResponseHeader>, Vec<u8>)> {
    let (mut up, peer) = steps.connect(session, ctx).await?;
    let mut req = session.req_header().clone();
    req.set_version(http::Version::HTTP_11);
    for name in [
        "content-length",
        "transfer-encoding",
        "expect",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "proxy-authorization",
    ] {
        req.remove_header(name);
    }
    req.insert_header(header::CONTENT_TYPE, "application/json")?;
    req.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    steps.upstream_request(&mut req, ctx)?;
    let mut out = http_req_header_to_wire(&req).ok_or_else(|| {
        Error::explain(ErrorType::InvalidHTTPHeader, "invalid request target").into_down()
    })?;
    out.put_slice(&body);
    steps.request_chunk(ctx, Some(&Bytes::from(body)), true)?;
    up.write(&out, peer.options.write_timeout).await?;
    let timeout = peer.options.read_timeout;
    let head = loop {
        let h = up.read_header(timeout).await?;
        if !h.status.is_informational() {
            break h;
        }
    };
    steps.upstream_response(&head, ctx);
    let mut answer = Vec::new();
    let wait = timeout.unwrap_or(LOOKUP_READ_TIMEOUT);
    loop {
        let piece = tokio::time::timeout(wait, up.read_body())
            .await
            .map_err(|_| {
                Error::explain(
                    ErrorType::ReadTimedout,
                    "reading the stream lookup's answer",
                )
                .into_up()
            })??;
        let end = piece.is_none() || up.is_body_done();
        steps.response_chunk(ctx, piece.as_ref(), end);
        if let Some(p) = piece {
            answer.extend_from_slice(&p);
            if answer.len() > MAX_LOOKUP_ANSWER {
                return Err(Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    "the stream lookup's answer is too large",
                )
                .into_up());
            }
        }
        if end {
            return Ok((head, answer));
        }
    }
}
