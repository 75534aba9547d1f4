//! Writing to the client with a bound on how long a write may make no
//! progress: a client that stops reading (its socket's buffers full) would
//! otherwise hold the answer's upstream connection, its queue slot and its
//! place among the answers that can be paused, for as long as it likes.
//!
//! A write that takes longer than `limits.client_write_seconds` ends the
//! request as a client timeout (`client_timeout`, outcome `client_hangup`,
//! logged by Pingora's error line); dropping the request's upstream
//! connection then cancels llama-server's task. Reading the client (its
//! hang-up) is the forwarding loop's.

use std::time::Duration;

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorType, Result};

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
