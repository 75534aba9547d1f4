//! Error responses in the OpenAI shape (`{"error":{"message","type","code"}}`)
//! and the mapping from Pingora errors to status, outcome and `error.type`.
//!
//! Used by the proxy hooks only; builds bytes, sends nothing itself.

use pingora::{Error, ErrorSource, ErrorType};

use crate::record::Outcome;

/// How a failed request is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status for the client (0: the client is gone, send nothing).
    pub status: u16,
    /// Outcome label.
    pub outcome: Outcome,
    /// `error.type` and the JSON body's `code`.
    pub code: &'static str,
    /// The JSON body's `type`.
    pub kind: &'static str,
}

/// The error type of a request made while the upstream's host name has never
/// resolved.
const UNRESOLVED: &str = "UpstreamUnresolved";

/// The error for a request made while the upstream's `host:port` has never
/// resolved (the watcher keeps trying; nothing is looked up on the request's
/// path).
pub fn unresolved(address: &str) -> Box<Error> {
    Error::explain(ErrorType::Custom(UNRESOLVED), address.to_string()).into_up()
}

/// The error type of a request body found over `limits.max_body_bytes` as it
/// streamed (a chunked body; a declared `Content-Length` is refused earlier).
const TOO_LARGE: &str = "RequestTooLarge";

/// The message of every 413, whatever the body's framing.
pub const TOO_LARGE_MESSAGE: &str =
    "the request body is larger than llamatap's limits.max_body_bytes";

/// The error for a request body that outgrew `limits.max_body_bytes` while
/// streaming: answered exactly as a declared oversized body is refused.
pub fn too_large() -> Box<Error> {
    Error::explain(ErrorType::Custom(TOO_LARGE), TOO_LARGE_MESSAGE).into_down()
}

/// The error type of a native request whose `response_fields` would hide
/// the token counts a tenant's `tokens_per_minute` is charged from.
const COUNTS_HIDDEN: &str = "ResponseFieldsHideCounts";

/// The message of that refusal.
pub const COUNTS_HIDDEN_MESSAGE: &str = "response_fields must keep \"timings\" (or both \"tokens_predicted\" and \"tokens_evaluated\") for a tenant with tokens_per_minute: the answer's tokens are charged from them";

/// The error for a native request, from a tenant with a token limit, whose
/// `response_fields` would hide the answer's token counts: refused with 400
/// before llama-server has the whole body.
pub fn counts_hidden() -> Box<Error> {
    Error::explain(ErrorType::Custom(COUNTS_HIDDEN), COUNTS_HIDDEN_MESSAGE).into_down()
}

/// Classifies a Pingora error.
pub fn classify(e: &Error) -> Failure {
    use ErrorType::*;
    let f = |status, outcome, code, kind| Failure {
        status,
        outcome,
        code,
        kind,
    };
    match (e.esource(), e.etype()) {
        (_, HTTPStatus(code)) => f(
            *code,
            Outcome::ProxyError,
            "http_status",
            "invalid_request_error",
        ),
        (_, Custom(TOO_LARGE)) => f(
            413,
            Outcome::Rejected,
            "request_too_large",
            "invalid_request_error",
        ),
        (_, Custom(COUNTS_HIDDEN)) => f(
            400,
            Outcome::Rejected,
            "response_fields_hide_usage",
            "invalid_request_error",
        ),
        (ErrorSource::Downstream, WriteError | ReadError | ConnectionClosed) => {
            f(0, Outcome::ClientHangup, "client_hangup", "client_hangup")
        }
        (ErrorSource::Downstream, ReadTimedout | WriteTimedout) => f(
            408,
            Outcome::ClientHangup,
            "client_timeout",
            "invalid_request_error",
        ),
        (ErrorSource::Downstream, _) => f(
            400,
            Outcome::ProxyError,
            "bad_request",
            "invalid_request_error",
        ),
        (_, ConnectTimedout) => f(
            504,
            Outcome::UpstreamError,
            "upstream_connect_timeout",
            "upstream_error",
        ),
        (_, ReadTimedout | WriteTimedout) => f(
            504,
            Outcome::UpstreamError,
            "upstream_timeout",
            "upstream_error",
        ),
        (_, Custom(UNRESOLVED)) => f(
            502,
            Outcome::UpstreamError,
            "upstream_unresolved",
            "upstream_error",
        ),
        (_, ConnectRefused | ConnectNoRoute | ConnectError | SocketError | BindError) => f(
            502,
            Outcome::UpstreamError,
            "upstream_unreachable",
            "upstream_error",
        ),
        (ErrorSource::Upstream, ConnectionClosed | ReadError | WriteError) => f(
            502,
            Outcome::UpstreamError,
            "upstream_disconnected",
            "upstream_error",
        ),
        (ErrorSource::Upstream, InvalidHTTPHeader | H1Error | H2Error | InvalidH2) => f(
            502,
            Outcome::UpstreamError,
            "upstream_protocol_error",
            "upstream_error",
        ),
        (ErrorSource::Upstream, _) => f(
            502,
            Outcome::UpstreamError,
            "upstream_error",
            "upstream_error",
        ),
        _ => f(500, Outcome::ProxyError, "proxy_error", "proxy_error"),
    }
}

/// Human text for a failure, as the client hears it: no internals (no
/// upstream name, address or host name) beyond the error's own kind.
pub fn message(f: &Failure, e: &Error) -> String {
    let what = match f.code {
        "upstream_connect_timeout" => "timed out connecting to the upstream llama-server",
        "upstream_timeout" => "timed out waiting for the upstream llama-server",
        "upstream_unreachable" => "cannot connect to the upstream llama-server",
        "upstream_unresolved" => {
            return "the upstream llama-server's host name does not resolve (yet)".to_string()
        }
        "upstream_disconnected" => {
            "the upstream llama-server closed the connection before the response was complete"
        }
        "upstream_protocol_error" => "the upstream llama-server sent an invalid HTTP response",
        "upstream_error" => "the upstream llama-server failed",
        "client_timeout" => "timed out reading the request",
        "bad_request" => "invalid request",
        "request_too_large" => return TOO_LARGE_MESSAGE.to_string(),
        "response_fields_hide_usage" => return COUNTS_HIDDEN_MESSAGE.to_string(),
        _ => "llamatap failed to proxy the request",
    };
    format!("{what} ({})", e.etype().as_str())
}

/// [`message`], for the log line and the span: naming the upstream the
/// failure is about when one was chosen (`the upstream llama-server`
/// becomes `upstream llama-server NAME`), and the host name that does not
/// resolve.
pub fn message_naming(f: &Failure, e: &Error, upstream: Option<&str>) -> String {
    let text = message(f, e);
    if f.code == "upstream_unresolved" {
        let address = e.context.as_ref().map_or("", |c| c.as_str());
        return format!("{text}: {address}");
    }
    match upstream {
        Some(name) if f.outcome == Outcome::UpstreamError => text.replacen(
            "the upstream llama-server",
            &format!("upstream llama-server {name}"),
            1,
        ),
        _ => text,
    }
}

/// A request path as a log line shows it: at most 256 bytes.
pub fn bounded_path(path: &str) -> String {
    crate::record::bounded(path, 256)
}

/// The OpenAI-shaped JSON error body.
pub fn json_body(message: &str, kind: &str, code: &str) -> Vec<u8> {
    serde_json::json!({"error": {"message": message, "type": kind, "code": code}})
        .to_string()
        .into_bytes()
}

/// The final SSE event sent when a stream fails after it started. Prefixed with
/// a blank line when the client holds half an event, so this one parses.
pub fn sse_error_event(message: &str, kind: &str, code: &str, mid_event: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if mid_event {
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json_body(message, kind, code));
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests;
