//! Checks made before anything reaches llama-server: request size limits (the
//! head, request line included, and the declared body) and client API keys.
//! Pure decisions over headers; the hook sends the answer.

use pingora::http::RequestHeader;

use crate::config::{Config, Secret};
use crate::request::Route;

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

/// Routes llama-server itself serves without an API key.
fn public(route: Route, method: &http::Method) -> bool {
    method == http::Method::OPTIONS || matches!(route, Route::Health | Route::Models | Route::Ui)
}

/// The first limit or key check the request fails, if any.
pub fn check(req: &RequestHeader, route: Route, config: &Config) -> Option<Refusal> {
    if head_bytes(req) > config.max_header_bytes {
        return Some(Refusal {
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
        return Some(Refusal {
            status: 413,
            kind: "invalid_request_error",
            code: "request_too_large",
            message: super::errors::TOO_LARGE_MESSAGE,
        });
    }
    if !config.api_keys.is_empty() && !public(route, &req.method) {
        let presented = req
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let ok = presented.is_some_and(|p| config.api_keys.iter().any(|k| same(k, p)));
        if !ok {
            return Some(Refusal {
                status: 401,
                kind: "authentication_error",
                code: "invalid_api_key",
                message: "missing or invalid API key: send Authorization: Bearer <key>",
            });
        }
    }
    None
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

/// Compares without an early exit on the first differing byte.
fn same(key: &Secret, presented: &str) -> bool {
    let (a, b) = (key.expose().as_bytes(), presented.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn comparison() {
        let k = Secret::new("secret-key-1".into());
        assert!(same(&k, "secret-key-1"));
        assert!(!same(&k, "secret-key-2"));
        assert!(!same(&k, "secret-key-10"));
        assert!(!same(&k, ""));
    }
}
