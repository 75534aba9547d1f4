//! llamatap's own error answers (refusals and proxy failures alike), in the
//! OpenAI shape, with `traceresponse` when tracing is on, or as the error
//! event that ends a started stream. Sends them; what an error means is
//! [`errors::classify`]'s.

use std::time::Instant;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::{FailToProxy, Session};
use pingora::Error;

use super::context::RequestCtx;
use super::errors;
use super::guard;
use crate::admission;
use llamatap_telemetry::record::Outcome;
use llamatap_telemetry::spans::Tracing;

/// Answers a refused request with an OpenAI-shaped error; the upstream never sees it.
pub async fn refuse(session: &mut Session, ctx: &mut RequestCtx, r: guard::Refusal) {
    ctx.seen.ended = Some(Instant::now());
    ctx.seen.failure = Some((Outcome::Rejected, r.code, r.message.to_string()));
    let reply = ErrorReply {
        status: r.status,
        kind: r.kind,
        code: r.code,
        message: r.message,
    };
    write_error(session, ctx, reply).await;
}

/// Records and answers a refusal of the admission queue, with
/// `Retry-After: 1` when it says so.
pub async fn write_refusal(session: &mut Session, ctx: &mut RequestCtx, r: &admission::Refusal) {
    ctx.seen.ended = Some(std::time::Instant::now());
    ctx.seen.failure = Some((r.outcome, r.code, r.message.clone()));
    let reply = ErrorReply {
        status: r.status,
        kind: r.kind,
        code: r.code,
        message: &r.message,
    };
    let retry = [("retry-after", "1".to_string())];
    let extra: &[(&'static str, String)] = if r.retry_after { &retry } else { &[] };
    write_error_with(session, ctx, reply, extra).await;
}

/// An error answered by llamatap itself.
pub struct ErrorReply<'a> {
    /// HTTP status.
    pub status: u16,
    /// The JSON body's `type`.
    pub kind: &'a str,
    /// The JSON body's `code` (and `error.type`).
    pub code: &'a str,
    /// The message.
    pub message: &'a str,
}

/// The one writer of llamatap's own error responses (refusals and proxy
/// failures alike): the OpenAI-shaped JSON body, `traceresponse` when tracing
/// is on, `WWW-Authenticate` on a 401, and the request's predicted TTFT
/// when it has one.
pub async fn write_error(session: &mut Session, ctx: &mut RequestCtx, reply: ErrorReply<'_>) {
    write_error_with(session, ctx, reply, &[]).await;
}

/// [`write_error`] with extra headers (a 429's `retry-after` and kin).
pub async fn write_error_with(
    session: &mut Session,
    ctx: &mut RequestCtx,
    reply: ErrorReply<'_>,
    extra: &[(&'static str, String)],
) {
    let body = errors::json_body(reply.message, reply.kind, reply.code);
    let Ok(mut resp) = ResponseHeader::build(reply.status, Some(4)) else {
        return;
    };
    let _ = resp.insert_header("Content-Type", "application/json");
    let _ = resp.insert_header("Content-Length", body.len().to_string());
    if reply.status == 401 {
        let _ = resp.insert_header("WWW-Authenticate", "Bearer");
    }
    // The request's prediction, when it has one (a refusal's own extra
    // header replaces it).
    let _ = predicted(&mut resp, ctx);
    for (name, value) in extra {
        let _ = resp.insert_header(*name, value.as_str());
    }
    if let Some(span) = &ctx.seen.span {
        let _ = resp.insert_header("traceresponse", Tracing::traceresponse(span));
    }
    ctx.seen.status = Some(reply.status);
    let ds = session.as_downstream_mut();
    let _ =
        tokio::time::timeout(LAST_WRITE, ds.write_error_response(resp, Bytes::from(body))).await;
}

/// The response header carrying the predicted TTFT, integer milliseconds.
pub const PREDICTED_HEADER: &str = "x-llamatap-predicted-ttft-ms";

/// [`PREDICTED_HEADER`] on a response head, when the request was predicted
/// (at its dispatch, or at its refusal) with data.
pub fn predicted(resp: &mut ResponseHeader, ctx: &RequestCtx) -> pingora::Result<()> {
    if let Some(ms) = ctx.attempt.routed.ttft.predicted.and_then(|p| p.ms()) {
        resp.insert_header(PREDICTED_HEADER, ms.to_string())?;
    }
    Ok(())
}

/// Longest wait writing an error answer or event: the request is over, and
/// a client that does not read it must not hold it.
const LAST_WRITE: std::time::Duration = std::time::Duration::from_secs(5);

/// A fatal error of a request (`upstream`: the upstream of its last
/// attempt, named in the log line and the span only): an OpenAI-shaped
/// error when nothing was answered yet, or an error event ending a started
/// event stream (never a silent cut, never `[DONE]`).
pub async fn fail(
    session: &mut Session,
    e: &Error,
    ctx: &mut RequestCtx,
    upstream: Option<&str>,
) -> FailToProxy {
    let f = errors::classify(e);
    // The log line and the span name the upstream; the client hears a
    // plain reason.
    let msg = errors::message(&f, e);
    ctx.seen.ended.get_or_insert_with(Instant::now);
    ctx.seen.failure = Some((f.outcome, f.code(), errors::message_naming(&f, e, upstream)));
    let mut code = f.status;
    // A client that stopped reading gets nothing more: the write would wait
    // on it again.
    let unread = e.esource() == &pingora::ErrorSource::Downstream
        && e.etype() == &pingora::ErrorType::WriteTimedout;
    if f.status != 0 && !unread {
        if session.as_downstream().response_written().is_none() {
            let reply = ErrorReply {
                status: f.status,
                kind: f.kind,
                code: f.code(),
                message: &msg,
            };
            write_error(session, ctx, reply).await;
        } else if ctx.seen.streaming {
            let mid = ctx.seen.observer.as_ref().is_some_and(|o| o.mid_event());
            let event = errors::sse_error_event(&msg, f.kind, f.code(), mid);
            let ds = session.as_downstream_mut();
            let write = ds.write_response_body(Bytes::from(event), true);
            let _ = tokio::time::timeout(LAST_WRITE, write).await;
            code = ctx.seen.status.unwrap_or(200);
        }
    }
    FailToProxy {
        error_code: code,
        can_reuse_downstream: false,
    }
}
