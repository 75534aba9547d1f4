//! One account of a resumed answer: a generation that carried
//! `X-Conversation-Id` goes on at llama-server after its client hangs up
//! (into the buffer a replay reads), so llamatap goes on reading it too,
//! writing to nobody, until the answer ends. The observer sees the whole
//! generated answer, so the record, the span, the metrics and the tenant's
//! charge count it once; what was read after the hang-up is
//! [`Claim::unsent_bytes`](llamatap_policy::conversation::Claim).
//!
//! Bounded by llama-server's own limits: the answer's end, the upstream
//! read timeout between two chunks, and [`MAX_UNSENT`] bytes (the buffer
//! holds 4 MiB; beyond it a replay cannot start from the beginning
//! anyway). A request without the header is not drained: its connection is
//! dropped at once, which cancels it at llama-server.
//!
//! Deliberately not here: replays (they are other requests), and a
//! continuation's attempt (llamatap's own `/completion`, never buffered).

use std::time::Duration;

use pingora::upstreams::peer::HttpPeer;
use pingora::Error;

use super::super::context::RequestCtx;
use super::super::{predict, Steps};
use crate::upstream::client::Exchange;
use llamatap_policy::conversation::Use;

/// Most bytes read after a hang-up (llama-server's buffer).
pub const MAX_UNSENT: u64 = 4 * 1024 * 1024;

/// Longest wait for a chunk when the upstream sets no read timeout.
const READ_LIMIT: Duration = Duration::from_secs(300);

/// The client left with `cause`: reads the rest of a buffered generation
/// (observed, sent nowhere), then hands `cause` back.
pub async fn after_hangup(
    steps: &Steps,
    ctx: &mut RequestCtx,
    up: &mut Exchange,
    peer: &HttpPeer,
    cause: Box<Error>,
) -> Box<Error> {
    if !buffered(ctx) || up.is_body_done() {
        return cause;
    }
    let limit = peer.options.read_timeout.unwrap_or(READ_LIMIT);
    let mut unsent = 0u64;
    while unsent < MAX_UNSENT {
        let chunk = match tokio::time::timeout(limit, up.read_body()).await {
            Ok(Ok(c)) => c,
            Ok(Err(_)) | Err(_) => break,
        };
        let end = chunk.is_none() || up.is_body_done();
        let n = chunk.as_ref().map_or(0, |c| c.len() as u64);
        unsent += n;
        steps.response_chunk(ctx, chunk.as_ref(), end);
        // Still on the board: the predictions beside it see its count.
        predict::counted(ctx);
        if end {
            break;
        }
    }
    // Observed, not forwarded.
    ctx.seen.response_bytes = ctx.seen.response_bytes.saturating_sub(unsent);
    if let Some(c) = ctx.conversation.as_deref_mut() {
        c.unsent_bytes = unsent;
    }
    cause
}

/// The answer goes on at llama-server after a hang-up: a streamed
/// generation answered `200` that carried `X-Conversation-Id`.
fn buffered(ctx: &RequestCtx) -> bool {
    ctx.seen.streaming
        && ctx.seen.status == Some(200)
        && ctx
            .conversation
            .as_deref()
            .is_some_and(|c| c.usage == Use::Generate)
}
