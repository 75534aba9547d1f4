//! llamatap's decisions, as values: which upstream serves a request, which
//! request waits and which goes next, what a tenant may still spend, why a
//! turn recomputed its prompt, and how an answer ended or moved.
//!
//! - [`router`]: fleet routing (prefix chains, per-upstream index,
//!   rendezvous, the decision, learning from `cache_n`).
//! - [`queue`]: the admission queue (classes, fair turns between tenants,
//!   reserves, per-upstream capacity).
//! - [`tenant`]: tenants (named keys, compared in constant time) and the
//!   per-minute limit arithmetic.
//! - [`cachebreak`]: where a turn stopped matching the previous one, the
//!   cause and the cost.
//! - [`secret`]: a key whose `Debug` never shows it.
//! - [`conversation`]: which fleet member holds which resumable stream
//!   (the bounded conversation book).
//! - [`ttft`]: time to first token predicted before dispatch, learned
//!   online per member and model from `timings`, and corrected by
//!   llama-server's prefill progress.
//! - [`answer`]: why an answer was cut and continued, and what became of it
//!   (the typed causes the proxy decides by and telemetry records).
//!
//! Deliberately not here: I/O, clocks, tasks or a framework. Callers pass the
//! time (`Instant`s) and apply the decisions; the manifest lists no Pingora,
//! tokio, tracing or OpenTelemetry, so none can creep in.

pub mod answer;
pub mod cachebreak;
pub mod conversation;
pub mod queue;
pub mod router;
pub mod secret;
pub mod tenant;
pub mod ttft;
