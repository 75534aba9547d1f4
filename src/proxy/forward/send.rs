//! What an attempt sends upstream and the head it reads back: the client's
//! own request (its head shaped by the steps, its body as it comes or sent
//! again whole), a continuation's `POST`s (`/apply-template`, then
//! `/completion`), and the final response head, read while the client is
//! watched for a hang-up. `Expect: 100-continue` is answered by [`super::super::downstream`].
//!
//! Deliberately not here: choosing and connecting (the steps), the answer's
//! body (`stream`), deciding the next attempt (`resume`).

use std::time::Duration;

use bytes::{BufMut, Bytes};
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::http_req_header_to_wire;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType, Result};

use super::super::context::RequestCtx;
use super::super::{predict, progress, request_head, sequence, Steps};
use crate::upstream::client::Exchange;
use llamatap_wire::continuation as plan;

/// Largest `/apply-template` answer read.
const MAX_TEMPLATE_ANSWER: usize = 8 << 20;

/// Writes the request head (shaped by [`Steps::upstream_request`]) and the
/// body (each chunk through [`Steps::request_chunk`], which enforces the body
/// limit), or `replay`, the whole body read by an earlier attempt.
/// The head goes out with the first body chunk, a body read whole with it
/// in one write. A body that may ask llama-server for prompt progress
/// ([`progress::may_ask`]) is read whole first (llama-server reads a body
/// whole before it starts on it).
pub async fn request(
    steps: &Steps,
    session: &mut Session,
    up: &mut Exchange,
    peer: &HttpPeer,
    ctx: &mut RequestCtx,
    replay: Option<&Bytes>,
) -> Result<()> {
    let mut req = session.req_header().clone();
    req.set_version(http::Version::HTTP_11);
    strip_hop_by_hop(&mut req);
    steps.upstream_request(&mut req, ctx)?;
    if let Some(body) = replay {
        // The whole body is known: its length frames it.
        req.remove_header(&header::TRANSFER_ENCODING);
        req.insert_header(header::CONTENT_LENGTH, body.len().to_string())?;
    } else if !session.as_mut().is_body_empty()
        && !req.headers.contains_key(header::CONTENT_LENGTH)
        && !req.headers.contains_key(header::TRANSFER_ENCODING)
    {
        req.insert_header(header::TRANSFER_ENCODING, "chunked")?;
    }
    let timeout = peer.options.write_timeout;
    let may_ask = progress::may_ask(&steps.config, ctx, &req);
    if let Some(body) = replay {
        ctx.asked.request_bytes = body.len() as u64;
        let asked = if may_ask {
            progress::shape(ctx, &mut req, body)?
        } else {
            None
        };
        predict::described(&steps.predictor, ctx, steps.config.ttft.sequence_prompts);
        sequence::wait(steps, ctx).await;
        let mut out = wire(&req)?;
        out.put_slice(asked.as_deref().unwrap_or(body));
        return up.write(&out, timeout).await;
    }
    if may_ask {
        return Box::pin(whole(steps, session, up, ctx, req, timeout)).await;
    }
    sequence::wait(steps, ctx).await;
    let chunked = req.headers.contains_key(header::TRANSFER_ENCODING);
    let mut out = wire(&req)?;
    drop(req);
    // The part of the body read before routing (fleets only) is in Pingora's
    // replay buffer; the rest is read here. A buffer that outgrew its limit
    // has lost the body's start: refused, never forwarded without it.
    if session.as_ref().retry_buffer_truncated() {
        return Error::e_explain(
            ErrorType::InternalError,
            "the request body read ahead outgrew what can be replayed",
        );
    }
    let mut pending = session
        .as_ref()
        .get_retry_buffer()
        .filter(|b| !b.is_empty());
    loop {
        let chunk = match pending.take() {
            Some(b) => Some(b),
            None if session.as_mut().is_body_done() => None,
            None => session
                .as_mut()
                .read_request_body()
                .await
                .map_err(|e| e.into_down())?,
        };
        let end = chunk.is_none() || session.as_mut().is_body_done();
        steps.request_chunk(ctx, chunk.as_ref(), end)?;
        if let Some(b) = chunk.filter(|b| !b.is_empty()) {
            if chunked {
                out.put_slice(format!("{:x}\r\n", b.len()).as_bytes());
                out.put_slice(&b);
                out.put_slice(b"\r\n");
            } else if out.is_empty() {
                // Past the first chunk a body goes out as it is, uncopied.
                up.write(&b, timeout).await?;
            } else {
                out.put_slice(&b);
            }
        }
        if end && chunked {
            out.put_slice(b"0\r\n\r\n");
        }
        if !out.is_empty() {
            up.write(&out, timeout).await?;
            out.clear();
        }
        if end {
            return Ok(());
        }
    }
}

/// The request head on the wire.
fn wire(req: &RequestHeader) -> Result<bytes::BytesMut> {
    http_req_header_to_wire(req).ok_or_else(|| {
        Error::explain(ErrorType::InvalidHTTPHeader, "invalid request target").into_down()
    })
}

/// A body framed by its length, within `telemetry.max_inspect_bytes`,
/// read whole (each chunk through [`Steps::request_chunk`]), then sent
/// with its head in one write, asking for prompt progress when
/// [`progress::shape`] says so.
async fn whole(
    steps: &Steps,
    session: &mut Session,
    up: &mut Exchange,
    ctx: &mut RequestCtx,
    mut req: RequestHeader,
    timeout: Option<Duration>,
) -> Result<()> {
    if session.as_ref().retry_buffer_truncated() {
        return Error::e_explain(
            ErrorType::InternalError,
            "the request body read ahead outgrew what can be replayed",
        );
    }
    let mut pending = session
        .as_ref()
        .get_retry_buffer()
        .filter(|b| !b.is_empty());
    let mut body = Vec::new();
    loop {
        let chunk = match pending.take() {
            Some(b) => Some(b),
            None if session.as_mut().is_body_done() => None,
            None => session
                .as_mut()
                .read_request_body()
                .await
                .map_err(|e| e.into_down())?,
        };
        let end = chunk.is_none() || session.as_mut().is_body_done();
        steps.request_chunk(ctx, chunk.as_ref(), end)?;
        if let Some(b) = chunk {
            body.extend_from_slice(&b);
        }
        if end {
            break;
        }
    }
    let asked = progress::shape(ctx, &mut req, &body)?;
    predict::described(&steps.predictor, ctx, steps.config.ttft.sequence_prompts);
    sequence::wait(steps, ctx).await;
    let mut out = wire(&req)?;
    out.put_slice(asked.as_deref().unwrap_or(&body));
    up.write(&out, timeout).await
}

/// Reads the final response head (informational ones are skipped), while
/// watching the client: a hang-up now drops the upstream connection at once.
pub async fn read_header(
    session: &mut Session,
    up: &mut Exchange,
    peer: &HttpPeer,
) -> Result<Box<ResponseHeader>> {
    let timeout = peer.options.read_timeout;
    loop {
        let header = tokio::select! {
            biased;
            r = up.read_header(timeout) => r?,
            r = session.as_downstream_mut().read_body_or_idle(true) => {
                r.map_err(|e| e.into_down())?;
                continue;
            }
        };
        if !header.status.is_informational() {
            return Ok(header);
        }
    }
}

/// Sends a continuation's `POST /completion` with `body` on `up` (its
/// attempt's connection to `peer`), after the conversation is rendered by
/// the target's `/apply-template` on a connection of its own when the plan
/// needs it. The error says which of the two failed.
pub async fn rest(
    steps: &Steps,
    ctx: &RequestCtx,
    up: &mut Exchange,
    peer: &HttpPeer,
    rest: &plan::Rest,
) -> std::result::Result<(), &'static str> {
    let rendered = if rest.plan.needs_template() {
        let body = ctx
            .resume
            .as_ref()
            .map(|r| r.body.clone())
            .unwrap_or_default();
        let mut render_up = steps
            .reconnect(ctx, peer)
            .await
            .map_err(|_| "template_failed")?;
        let r = render(steps, ctx, &mut render_up, peer, &body).await;
        Some(r.map_err(|_| "template_failed")?)
    } else {
        None
    };
    let body = rest.completion_body(rendered.as_deref());
    let head = post(steps, ctx, peer, "/completion", &body).map_err(|_| "target_failed")?;
    up.write(&head, peer.options.write_timeout)
        .await
        .map_err(|_| "target_failed")
}

/// A `POST` of a JSON body to `path` on the attempt's upstream, head and
/// body in one buffer, shaped as every request llamatap sends upstream.
fn post(
    steps: &Steps,
    ctx: &RequestCtx,
    peer: &HttpPeer,
    path: &str,
    body: &[u8],
) -> Result<Vec<u8>> {
    use pingora::upstreams::peer::Peer;
    let base = ctx
        .attempt
        .member
        .and_then(|i| steps.fleet.member(i))
        .map(|m| m.upstream.base_path.clone())
        .unwrap_or_default();
    let mut req = RequestHeader::build("POST", path.as_bytes(), None)?;
    req.insert_header("Host", peer.address().to_string())?;
    req.insert_header("Content-Type", "application/json")?;
    req.insert_header("Content-Length", body.len().to_string())?;
    request_head::shape(&mut req, ctx, &base, &steps.config)?;
    let mut out = http_req_header_to_wire(&req)
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "invalid continuation request"))?;
    out.extend_from_slice(body);
    Ok(out.to_vec())
}

/// The conversation rendered by the target's `/apply-template`.
async fn render(
    steps: &Steps,
    ctx: &RequestCtx,
    up: &mut Exchange,
    peer: &HttpPeer,
    body: &[u8],
) -> Result<String> {
    let head = post(steps, ctx, peer, "/apply-template", body)?;
    up.write(&head, peer.options.write_timeout).await?;
    let header = up.read_header(peer.options.read_timeout).await?;
    if header.status.as_u16() != 200 {
        return Err(Error::explain(
            ErrorType::HTTPStatus(header.status.as_u16()),
            "apply-template refused",
        ));
    }
    let wait = peer
        .options
        .read_timeout
        .unwrap_or(Duration::from_secs(600));
    let mut answer = Vec::new();
    while let Some(piece) = tokio::time::timeout(wait, up.read_body())
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

/// Removes the hop-by-hop headers and those the client's `Connection` names,
/// as Pingora's default request policy does.
pub fn strip_hop_by_hop(req: &mut RequestHeader) {
    let nominated: Vec<String> = req
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for name in nominated {
        req.remove_header(name.as_str());
    }
    for name in [
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "connection",
        "upgrade",
        "http2-settings",
    ] {
        req.remove_header(name);
    }
}
