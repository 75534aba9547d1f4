//! Error responses in the OpenAI shape (`{"error":{"message","type","code"}}`)
//! and the mapping from Pingora errors to status, outcome and a typed
//! [`Cause`], whose label is the `error.type`.
//!
//! Used by the proxy hooks only; builds bytes, sends nothing itself.
//! Decisions read the [`Cause`] ([`Cause::ejects`]), never its label.

use pingora::{Error, ErrorSource, ErrorType};

use llamatap_telemetry::record::Outcome;

/// How a failed request is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status for the client (0: the client is gone, send nothing).
    pub status: u16,
    /// Outcome label.
    pub outcome: Outcome,
    /// What failed; its label is `error.type` and the JSON body's `code`.
    pub cause: Cause,
    /// The JSON body's `type`.
    pub kind: &'static str,
}

impl Failure {
    /// `error.type` and the JSON body's `code`: [`Cause::as_str`].
    pub fn code(&self) -> &'static str {
        self.cause.as_str()
    }
}

/// What failed, as [`classify`] tells it from a Pingora error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An error carrying an HTTP status of its own.
    HttpStatus,
    /// The request body outgrew `limits.max_body_bytes` as it streamed.
    RequestTooLarge,
    /// A native request's `response_fields` hide the counts a token limit
    /// is charged from.
    CountsHidden,
    /// The client closed or reset its connection.
    ClientHangup,
    /// The client was too slow sending the request or reading the answer.
    ClientTimeout,
    /// Any other error on the client's side.
    BadRequest,
    /// Connecting to the upstream timed out.
    UpstreamConnectTimeout,
    /// The upstream did not answer (or read) within its timeout.
    UpstreamTimeout,
    /// The upstream's host name has never resolved.
    UpstreamUnresolved,
    /// The upstream refused the connection, or it could not be made.
    UpstreamUnreachable,
    /// The upstream closed or reset the connection before the response
    /// was complete.
    UpstreamDisconnected,
    /// The upstream's answer cannot be read as HTTP.
    UpstreamProtocol,
    /// Any other failure of the upstream.
    Upstream,
    /// llamatap itself failed.
    Proxy,
}

impl Cause {
    /// Every cause, in label order.
    pub const ALL: [Cause; 14] = [
        Cause::HttpStatus,
        Cause::RequestTooLarge,
        Cause::CountsHidden,
        Cause::ClientHangup,
        Cause::ClientTimeout,
        Cause::BadRequest,
        Cause::UpstreamConnectTimeout,
        Cause::UpstreamTimeout,
        Cause::UpstreamUnresolved,
        Cause::UpstreamUnreachable,
        Cause::UpstreamDisconnected,
        Cause::UpstreamProtocol,
        Cause::Upstream,
        Cause::Proxy,
    ];

    /// The label value: `error.type` and the JSON body's `code`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::HttpStatus => "http_status",
            Cause::RequestTooLarge => "request_too_large",
            Cause::CountsHidden => "response_fields_hide_usage",
            Cause::ClientHangup => "client_hangup",
            Cause::ClientTimeout => "client_timeout",
            Cause::BadRequest => "bad_request",
            Cause::UpstreamConnectTimeout => "upstream_connect_timeout",
            Cause::UpstreamTimeout => "upstream_timeout",
            Cause::UpstreamUnresolved => "upstream_unresolved",
            Cause::UpstreamUnreachable => "upstream_unreachable",
            Cause::UpstreamDisconnected => "upstream_disconnected",
            Cause::UpstreamProtocol => "upstream_protocol_error",
            Cause::Upstream => "upstream_error",
            Cause::Proxy => "proxy_error",
        }
    }

    /// Whether a request that ended with this cause ejects its member
    /// (passive ejection, in `logging`): the upstream died or stopped
    /// answering under the request, or could not be reached. A failed
    /// connect's member was ejected at the connect already (and a connect
    /// timeout only there); an answer that cannot be read as HTTP, a host
    /// name that does not resolve and a client's failure eject nothing.
    pub fn ejects(self) -> bool {
        matches!(
            self,
            Cause::UpstreamDisconnected | Cause::UpstreamTimeout | Cause::UpstreamUnreachable
        )
    }
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
    let f = |status, outcome, cause, kind| Failure {
        status,
        outcome,
        cause,
        kind,
    };
    match (e.esource(), e.etype()) {
        (_, HTTPStatus(code)) => f(
            *code,
            Outcome::ProxyError,
            Cause::HttpStatus,
            "invalid_request_error",
        ),
        (_, Custom(TOO_LARGE)) => f(
            413,
            Outcome::Rejected,
            Cause::RequestTooLarge,
            "invalid_request_error",
        ),
        (_, Custom(COUNTS_HIDDEN)) => f(
            400,
            Outcome::Rejected,
            Cause::CountsHidden,
            "invalid_request_error",
        ),
        (ErrorSource::Downstream, WriteError | ReadError | ConnectionClosed) => f(
            0,
            Outcome::ClientHangup,
            Cause::ClientHangup,
            "client_hangup",
        ),
        (ErrorSource::Downstream, ReadTimedout | WriteTimedout) => f(
            408,
            Outcome::ClientHangup,
            Cause::ClientTimeout,
            "invalid_request_error",
        ),
        (ErrorSource::Downstream, _) => f(
            400,
            Outcome::ProxyError,
            Cause::BadRequest,
            "invalid_request_error",
        ),
        (_, ConnectTimedout) => f(
            504,
            Outcome::UpstreamError,
            Cause::UpstreamConnectTimeout,
            "upstream_error",
        ),
        (_, ReadTimedout | WriteTimedout) => f(
            504,
            Outcome::UpstreamError,
            Cause::UpstreamTimeout,
            "upstream_error",
        ),
        (_, Custom(UNRESOLVED)) => f(
            502,
            Outcome::UpstreamError,
            Cause::UpstreamUnresolved,
            "upstream_error",
        ),
        (_, ConnectRefused | ConnectNoRoute | ConnectError | SocketError | BindError) => f(
            502,
            Outcome::UpstreamError,
            Cause::UpstreamUnreachable,
            "upstream_error",
        ),
        (ErrorSource::Upstream, ConnectionClosed | ReadError | WriteError) => f(
            502,
            Outcome::UpstreamError,
            Cause::UpstreamDisconnected,
            "upstream_error",
        ),
        (ErrorSource::Upstream, InvalidHTTPHeader | H1Error | H2Error | InvalidH2) => f(
            502,
            Outcome::UpstreamError,
            Cause::UpstreamProtocol,
            "upstream_error",
        ),
        (ErrorSource::Upstream, _) => f(
            502,
            Outcome::UpstreamError,
            Cause::Upstream,
            "upstream_error",
        ),
        _ => f(500, Outcome::ProxyError, Cause::Proxy, "proxy_error"),
    }
}

/// Human text for a failure, as the client hears it: no internals (no
/// upstream name, address or host name) beyond the error's own kind.
pub fn message(f: &Failure, e: &Error) -> String {
    let what = match f.cause {
        Cause::UpstreamConnectTimeout => "timed out connecting to the upstream llama-server",
        Cause::UpstreamTimeout => "timed out waiting for the upstream llama-server",
        Cause::UpstreamUnreachable => "cannot connect to the upstream llama-server",
        Cause::UpstreamUnresolved => {
            return "the upstream llama-server's host name does not resolve (yet)".to_string()
        }
        Cause::UpstreamDisconnected => {
            "the upstream llama-server closed the connection before the response was complete"
        }
        Cause::UpstreamProtocol => "the upstream llama-server sent an invalid HTTP response",
        Cause::Upstream => "the upstream llama-server failed",
        Cause::ClientTimeout => "timed out reading the request",
        Cause::BadRequest => "invalid request",
        Cause::RequestTooLarge => return TOO_LARGE_MESSAGE.to_string(),
        Cause::CountsHidden => return COUNTS_HIDDEN_MESSAGE.to_string(),
        Cause::HttpStatus | Cause::ClientHangup | Cause::Proxy => {
            "llamatap failed to proxy the request"
        }
    };
    format!("{what} ({})", e.etype().as_str())
}

/// [`message`], for the log line and the span: naming the upstream the
/// failure is about when one was chosen (`the upstream llama-server`
/// becomes `upstream llama-server NAME`), and the host name that does not
/// resolve.
pub fn message_naming(f: &Failure, e: &Error, upstream: Option<&str>) -> String {
    let text = message(f, e);
    if f.cause == Cause::UpstreamUnresolved {
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
    llamatap_telemetry::record::bounded(path, 256)
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
