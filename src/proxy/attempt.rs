//! One upstream attempt's verdicts, in one place:
//! the peer it connects to, a failed connect (the upstream is ejected for a
//! while, and another is tried when one can serve the request), and what
//! the answer's status says of the upstream (ejected when unwell, healthy
//! otherwise).
//!
//! Deliberately not here: choosing the upstream ([`super::routing`]).

use std::net::SocketAddr;

use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::Error;

use super::context::RequestCtx;
use super::errors;
use super::outcome::unwell_answer;
use crate::config::Config;
use crate::fleet::Fleet;

/// The peer at the last resolved address: a `SocketAddr`, so building it
/// never looks a name up.
pub fn peer(config: &Config, address: SocketAddr) -> HttpPeer {
    let mut peer = HttpPeer::new(address, false, String::new());
    let o = &mut peer.options;
    o.connection_timeout = Some(config.connect_timeout);
    o.total_connection_timeout = Some(config.connect_timeout);
    o.read_timeout = Some(config.read_timeout);
    o.write_timeout = Some(config.write_timeout);
    peer
}

/// A connect was refused or timed out: the upstream is ejected, and the
/// error is marked for a retry when another upstream can serve the request
/// (it has not reached any llama-server). The one log line of it is here
/// (Pingora's own is suppressed, see `suppress_error_log`).
pub fn connect_failed(
    fleet: &Fleet,
    session: &Session,
    ctx: &mut RequestCtx,
    mut e: Box<Error>,
) -> Box<Error> {
    if let Some(i) = ctx.attempt.member {
        fleet.eject(i);
        ctx.attempt.routed.ejected = true;
        let again = fleet.is_fleet()
            && fleet.can_fail_over(
                ctx.asked.request.model.as_deref(),
                i,
                &ctx.attempt.routed.tried,
            );
        if again {
            ctx.attempt.routed.tried.push(i);
            e.set_retry(true);
        }
        let _in = ctx.seen.log_span.enter();
        let name = fleet.member(i).map(|m| m.upstream.name.clone());
        let req = session.req_header();
        tracing::warn!(
            upstream = name.as_deref().unwrap_or(""),
            "{} {}: connect failed ({e}); upstream ejected, {}",
            req.method,
            errors::bounded_path(req.uri.path()),
            if again {
                "trying another"
            } else {
                "the request fails"
            }
        );
    }
    e
}

/// The answer's head from the attempt's upstream: an unwell status ejects
/// it, anything under 500 counts as a success.
pub fn answered(fleet: &Fleet, ctx: &mut RequestCtx, status: u16) {
    if let Some(i) = ctx.attempt.member {
        if unwell_answer(status, ctx.asked.route) {
            fleet.eject(i);
            ctx.attempt.routed.ejected = true;
        } else if status < 500 {
            fleet.succeeded(i);
        }
    }
}
