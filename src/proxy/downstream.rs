//! Writing to the client with a bound on how long a write may make no
//! progress: a client that stops reading (its socket's buffers full) would
//! otherwise hold the answer's upstream connection, its queue slot and its
//! place among the answers that can be paused, for as long as it likes.
//!
//! A write that takes longer than `limits.client_write_seconds` ends the
//! request as a client timeout (`client_timeout`, outcome `client_hangup`,
//! logged by Pingora's error line); dropping the request's upstream
//! connection then cancels llama-server's task. The client's `Expect:
//! 100-continue` is answered here too ([`answer_continue`]). Reading the
//! client (its hang-up) is the forwarding loop's.

use std::time::Duration;

use bytes::Bytes;
use http::header;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;

/// Writes the response head, within `timeout`.
pub async fn head(
    session: &mut Session,
    header: Box<ResponseHeader>,
    timeout: Duration,
) -> Result<()> {
    let write = session.as_downstream_mut().write_response_header(header);
    bounded(write, timeout).await
}

/// Writes `bytes` of the response body (`end`: the last), within `timeout`.
pub async fn body(session: &mut Session, bytes: Bytes, end: bool, timeout: Duration) -> Result<()> {
    let write = session.as_downstream_mut().write_response_body(bytes, end);
    bounded(write, timeout).await
}

async fn bounded(
    write: impl std::future::Future<Output = Result<()>>,
    timeout: Duration,
) -> Result<()> {
    match tokio::time::timeout(timeout, write).await {
        Ok(r) => r.map_err(|e| e.into_down()),
        Err(_) => Err(stalled_client()),
    }
}

/// The error of a write to the client that made no progress in time.
pub fn stalled_client() -> Box<Error> {
    Error::explain(
        ErrorType::WriteTimedout,
        "the client read nothing for limits.client_write_seconds",
    )
    .into_down()
}

/// Answers `Expect: 100-continue` (once) when the client still has a body
/// to send: a client that waits for the `100` before sending it would
/// otherwise stall, and the upstream that could send one is not chosen yet
/// (the upstream is not asked again, see [`super::request_head`]).
pub async fn answer_continue(session: &mut Session, ctx: &mut RequestCtx) -> Result<()> {
    let expects = session
        .req_header()
        .headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
    if !expects || ctx.asked.continue_sent || session.as_mut().is_body_empty() {
        return Ok(());
    }
    session
        .as_downstream_mut()
        .write_continue_response()
        .await
        .map_err(|e| e.into_down())?;
    ctx.asked.continue_sent = true;
    Ok(())
}
