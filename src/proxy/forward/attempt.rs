//! The answer's state between attempts, as types: what an attempt sends
//! ([`Attempt`]) and how it ended ([`Ending`], a cut with its typed
//! [`Reason`]). The loop, `resume` and `stream` decide by these, never by
//! an error's text.
//!
//! Deliberately not here: anything that acts on them.

use bytes::Bytes;
use pingora::Error;

use llamatap_policy::answer::Reason;
use llamatap_wire::continuation::Rest;

/// What one attempt sends.
#[derive(Debug)]
pub enum Attempt {
    /// The client's request: its body as it comes, or (`Some`) the whole
    /// body again after an upstream that died before its answer's head.
    Request(Option<Bytes>),
    /// The rest of a cut answer, from a target.
    Rest(Box<Rest>),
}

/// How one attempt ended, short of an error that ends the request.
#[derive(Debug)]
pub enum Ending {
    /// The client has the whole answer.
    Whole,
    /// The upstream closed or reset before the answer's head: nothing
    /// reached the client.
    BeforeHead(Box<Error>),
    /// The answer was cut mid-stream, or told to move: why, and the error
    /// the client gets if it cannot go on.
    Cut(Reason, Box<Error>),
    /// A continuation's target failed before its first token (a fixed
    /// word for telemetry).
    Failed(&'static str),
}
