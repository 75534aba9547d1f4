//! llamatap: a drop-in Pingora proxy for llama.cpp's `llama-server`.
//!
//! It forwards every request unchanged and every stream unbuffered, measures the
//! moments a voice or RAG user feels (upstream headers, first token, first
//! sentence, end), exports them as OpenTelemetry spans and Prometheus
//! histograms, and closes the upstream connection the moment a client hangs up
//! so llama-server cancels the task.
//!
//! Pure modules (no framework imports, exhaustively tested):
//! - [`sse`]: incremental Server-Sent Events reader.
//! - [`sentence`]: the first-sentence rule.
//! - [`llama`]: llama-server's wire: stream and response formats, its own
//!   `llamacpp:*` metrics and `/slots`, parsed and bounded.
//! - [`request`]: request inspection (route, model, stream flag).
//! - [`tracecontext`]: W3C `traceparent`/`tracestate` parsing.
//! - [`access_line`]: the access log's JSON line.
//! - [`framing`]: HTTP/1 response body framing and the chunked decoder.
//! - [`tenant`]: tenants (named keys) and the per-minute limit arithmetic.
//! - [`router`]: fleet routing (prefix chains, per-upstream index, rendezvous,
//!   the decision, learning from `cache_n`).
//! - [`cachebreak`]: why a turn recomputed its prompt (where it stopped
//!   matching the previous turn, the cause, the cost).
//! - [`queue`]: the admission queue (classes, fair turns between tenants,
//!   reserves, per-upstream capacity).
//!
//! Framework modules: [`config`], [`proxy`], [`telemetry`], [`admin`],
//! [`server`], [`shutdown`], [`pidfile`].

pub mod access_line;
pub mod admin;
pub mod cachebreak;
pub mod cli;
pub mod config;
pub mod framing;
pub mod llama;
pub mod observe;
pub mod pidfile;
pub mod proxy;
pub mod queue;
pub mod record;
pub mod request;
pub mod router;
pub mod sentence;
pub mod server;
pub mod shutdown;
pub mod sse;
pub mod telemetry;
pub mod tenant;
pub mod tracecontext;
