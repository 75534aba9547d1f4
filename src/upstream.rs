//! The upstream HTTP/1 side: llamatap's own client (one exchange per
//! connection, the response head and body framing of
//! `llamatap_wire::framing`), and one connected, never-used connection kept
//! ready per upstream for the next request.
//!
//! Deliberately not here: choosing the upstream (the fleet and the router),
//! and what a request's hooks do with the answer (the proxy).

pub mod client;
pub mod spare;
