//! The request head llamatap sends upstream: what it changes in the
//! client's head, and why. The body is never touched.
//!
//! - The upstream's base path goes in front of the path.
//! - Every request asks for `Connection: close`: upstream connections are
//!   never pooled (llama-server closes after a streamed answer anyway, a
//!   moment after its last byte and without saying so, and a kept-alive
//!   connection holds one of its HTTP threads while idle).
//! - `Expect` goes when llamatap answered `100 Continue` itself.
//! - `Authorization` is llama-server's key (`auth.upstream_api_key`), or
//!   removed when the client's key was llamatap's.
//! - `traceparent`/`tracestate` name llamatap's CLIENT span.
//! - With named keys, `X-Conversation-Id` and `conv_id` are the tenant's
//!   scoped ids ([`super::conversation`], applied before this).

use std::time::SystemTime;

use pingora::http::RequestHeader;
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;
use crate::config::Config;
use llamatap_telemetry::spans::{RequestSpan, Tracing};

/// Applies the base path and the header changes above but the trace ones.
pub fn shape(
    upstream_request: &mut RequestHeader,
    ctx: &RequestCtx,
    base: &str,
    config: &Config,
) -> Result<()> {
    if !base.is_empty() {
        let pq = upstream_request
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let uri: http::Uri = format!("{base}{pq}")
            .parse()
            .map_err(|e| Error::because(ErrorType::InternalError, "bad upstream path", e))?;
        upstream_request.set_uri(uri);
    }
    upstream_request.insert_header("Connection", "close")?;
    if ctx.asked.continue_sent {
        // The client has its `100 Continue` and the body is read.
        upstream_request.remove_header("Expect");
    }
    if let Some(key) = &config.upstream_api_key {
        upstream_request.insert_header("Authorization", format!("Bearer {}", key.expose()))?;
    } else if config.tenants.auth_required() {
        // The client's key is llamatap's, not llama-server's.
        upstream_request.remove_header("Authorization");
    }
    Ok(())
}

/// Starts the CLIENT span and names it in `traceparent`/`tracestate`.
pub fn trace(
    upstream_request: &mut RequestHeader,
    tracing: &Tracing,
    span: &mut RequestSpan,
) -> Result<()> {
    let (traceparent, tracestate) = tracing.start_upstream(span, SystemTime::now());
    upstream_request.insert_header("traceparent", traceparent)?;
    match tracestate {
        Some(ts) => upstream_request.insert_header("tracestate", ts)?,
        None => {
            upstream_request.remove_header("tracestate");
        }
    }
    Ok(())
}
