//! Checks made before anything reaches llama-server: request size limits (the
//! head, request line included, and the declared body), client API keys,
//! which name the request's tenant ([`llamatap_policy::tenant::Tenants::identify`]),
//! and, once named keys are configured, the administrative routes
//! ([`AdminRoute`]), which only a key marked `admin = true` may use.
//! Pure decisions over headers; the hook sends the answer.

use pingora::http::RequestHeader;

use crate::config::Config;
use llamatap_policy::tenant::{Identity, TenantId};
use llamatap_wire::request::{AdminRoute, Route};

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// JSON `type`.
    pub kind: &'static str,
    /// JSON `code` and `error.type`.
    pub code: &'static str,
    /// Message.
    pub message: &'static str,
}

/// Requests that need no API key: CORS preflights, the health and model
/// list routes, but not their administrative uses (`POST` or `DELETE
/// /models`, `GET /models?reload`: [`AdminRoute`]), and reads of the web UI
/// (its page and files, `GET` and `HEAD`: the only methods llama-server
/// serves them with, so a stranger's other requests never reach it).
pub fn public(route: Route, req: &RequestHeader) -> bool {
    req.method == http::Method::OPTIONS
        || (matches!(route, Route::Health | Route::Models) && admin_route(route, req).is_none())
        || (route == Route::Ui && matches!(req.method, http::Method::GET | http::Method::HEAD))
}

/// The administrative route `req` is, if any.
fn admin_route(route: Route, req: &RequestHeader) -> Option<AdminRoute> {
    AdminRoute::of(route, req.method.as_str(), req.raw_path())
}

/// A named tenant's key that is not `admin` on an administrative route.
const NOT_ADMIN: Refusal = Refusal {
    status: 403,
    kind: "permission_error",
    code: "admin_route",
    message: "this is one of llama-server's administrative routes (slots, metrics, LoRA adapters, \
              global properties, models): it needs a key marked admin = true",
};

/// The request's tenant, or the first limit or key check it fails. A valid
/// key names its tenant on every route but, with named keys, the
/// administrative ones unless it is an admin key (403 `admin_route`); public
/// routes need none.
pub fn check(req: &RequestHeader, route: Route, config: &Config) -> Result<TenantId, Refusal> {
    if head_bytes(req) > config.max_header_bytes {
        return Err(Refusal {
            status: 431,
            kind: "invalid_request_error",
            code: "headers_too_large",
            message:
                "the request line and headers are larger than llamatap's limits.max_header_bytes",
        });
    }
    let declared = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > config.max_body_bytes) {
        return Err(Refusal {
            status: 413,
            kind: "invalid_request_error",
            code: "request_too_large",
            message: super::errors::TOO_LARGE_MESSAGE,
        });
    }
    let presented = req
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match config.tenants.identify(presented) {
        Identity::Known(id)
            if admin_route(route, req).is_some() && !config.tenants.may_administer(id) =>
        {
            Err(NOT_ADMIN)
        }
        Identity::Known(id) => Ok(id),
        Identity::Open => Ok(TenantId::Anonymous),
        Identity::Stranger if public(route, req) => Ok(TenantId::Anonymous),
        Identity::Stranger => Err(Refusal {
            status: 401,
            kind: "authentication_error",
            code: "invalid_api_key",
            message: "missing or invalid API key: send Authorization: Bearer <key>",
        }),
    }
}

/// The request head's size: method and request target (path and query), and
/// each header's name and value (plus `: ` and CRLF).
fn head_bytes(req: &RequestHeader) -> usize {
    let target = req.method.as_str().len() + req.raw_path().len();
    let headers: usize = req
        .headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    target + headers
}

fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests;
