//! Judging an attempt: whether an answer shows the upstream unwell
//! (passive ejection), and whether Pingora's error line about a request is
//! left out.
//!
//! Decisions only; the hooks act on them. How a finished request ended is
//! [`super::answer`].

use pingora::{Error, ErrorSource, ErrorType};

use super::context::RequestCtx;
use llamatap_wire::request::Route;

/// Whether an answer shows the upstream itself unwell, so that it is
/// ejected for a while. llama-server answers many client mistakes with a
/// 5xx (501 for a feature it runs without: `/metrics` without `--metrics`,
/// embeddings, `/infill`; 500 for a prompt missing or an image it cannot
/// read), so a 500 or 501 never ejects. Its 503 means it is loading a model
/// (and, on `/slots?fail_on_no_slot`, that no slot is free): only a route
/// that does work counts it. 502 and 504 come from a proxy in front of it.
pub fn unwell_answer(status: u16, route: Route) -> bool {
    matches!(status, 502..=504) && route.operation_name().is_some()
}

/// Whether Pingora's error line about a request is left out: a client
/// hang-up is normal traffic, and a failed connect was logged once already,
/// naming the upstream ([`super::attempt::connect_failed`]).
pub fn quiet(ctx: &RequestCtx, error: &Error) -> bool {
    let hangup = error.esource() == &ErrorSource::Downstream
        && matches!(
            error.etype(),
            ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
        );
    let connect = ctx.attempt.routed.ejected
        && matches!(
            error.etype(),
            ErrorType::ConnectRefused
                | ErrorType::ConnectTimedout
                | ErrorType::ConnectError
                | ErrorType::SocketError
        );
    hangup || connect
}
