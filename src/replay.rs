//! What Pingora can replay of a request body: its retry buffer's size
//! ([`LIMIT`]), and reading a body ahead within it ([`read_ahead`]), so that
//! what was read before an upstream is chosen is still forwarded whole.
//! Routing reads ahead for the model and the prompt; the admission queue,
//! so that a queued request's socket can be watched for a hang-up.
//!
//! Deliberately not here: what the bytes read mean (routing's
//! [`llamatap_wire::request`]), and forwarding them (the proxy's forwarding loop).

use pingora::proxy::Session;
use pingora::Result;

/// Pingora's retry buffer: what `request_filter` may read and still forward.
pub const LIMIT: usize = 64 * 1024;

/// Reads the body as far as Pingora can replay it: whole when its length is
/// known and within `limit`, else one read. Returns the bytes and whether
/// they are the whole body.
pub async fn read_ahead(session: &mut Session, limit: usize) -> Result<(Vec<u8>, bool)> {
    let length = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = session
        .req_header()
        .headers
        .get(http::header::TRANSFER_ENCODING)
        .is_some();
    let whole = !chunked && length.is_some_and(|n| n <= limit);
    if length == Some(0) {
        return Ok((Vec::new(), true));
    }
    let mut buf = Vec::new();
    loop {
        match session.read_request_body().await? {
            Some(b) => {
                buf.extend_from_slice(&b);
                if !whole {
                    return Ok((buf, session.is_body_done()));
                }
            }
            None => return Ok((buf, true)),
        }
    }
}
