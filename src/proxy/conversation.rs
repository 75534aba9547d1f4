//! llama-server's resumable streams kept apart per tenant, once named keys
//! are configured ([`llamatap_wire::conversation`] has the id mapping).
//!
//! - Every request's `X-Conversation-Id` header and `conv_id` query
//!   parameter go upstream scoped to the request's tenant
//!   ([`scope_head`], from [`super::Steps::upstream_request`]): a replay
//!   (`GET /v1/stream`) or a stop (`DELETE /v1/stream`) reaches only the
//!   tenant's own conversations, and a generation started with the header
//!   is buffered under the tenant's scoped id.
//! - The lookup (`POST /v1/streams/lookup`) is answered by
//!   [`super::lookup`] in the tenant's scope.
//!
//! Without named keys nothing here changes a request.

use pingora::http::RequestHeader;
use pingora::{Error, ErrorType, Result};

use super::context::RequestCtx;
use crate::config::Config;
use llamatap_wire::conversation::{self, Scope};

/// The request's tenant's scope, when named keys are configured.
pub fn scope(ctx: &RequestCtx, config: &Config) -> Option<Scope> {
    config
        .tenants
        .named()
        .then(|| Scope::of_tenant(config.tenants.name(ctx.who.tenant)))
}

/// Scopes the upstream head's `X-Conversation-Id` (every copy replaced by
/// one; an empty one removed) and `conv_id` query parameters.
pub fn scope_head(req: &mut RequestHeader, ctx: &RequestCtx, config: &Config) -> Result<()> {
    let Some(scope) = scope(ctx, config) else {
        return Ok(());
    };
    let id = req
        .headers
        .get(conversation::HEADER)
        .map(|v| v.as_bytes().trim_ascii().to_vec());
    if let Some(id) = id {
        req.remove_header(conversation::HEADER);
        let scoped = scope.scope(&id);
        if !scoped.is_empty() {
            let value = http::HeaderValue::from_bytes(&scoped).map_err(|e| {
                Error::because(ErrorType::InvalidHTTPHeader, "X-Conversation-Id", e).into_down()
            })?;
            req.insert_header("X-Conversation-Id", value)?;
        }
    }
    if let Some(target) = scope.scope_target(req.raw_path()) {
        req.set_raw_path(&target)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
