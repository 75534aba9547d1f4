//! llamatap: a drop-in Pingora proxy for llama.cpp's `llama-server`.
//!
//! It forwards every request unchanged and every stream unbuffered, measures the
//! moments a voice or RAG user feels (upstream headers, first token, first
//! sentence, end), exports them as OpenTelemetry spans and Prometheus
//! histograms, and closes the upstream connection the moment a client hangs up
//! so llama-server cancels the task.
//!
//! The pure parts are crates of their own, whose manifests list no framework
//! (re-exported here under the names the binary uses):
//! - `llamatap-wire`: [`sse`], [`sentence`], [`llama`], [`request`],
//!   [`framing`], [`tracecontext`], [`text`];
//! - `llamatap-policy`: [`router`], [`queue`], [`tenant`], [`cachebreak`].
//!
//! Pure modules of this crate: [`access_line`] (the access log's JSON line),
//! [`record`] (the finished facts of one request).
//!
//! Framework modules: [`config`], [`proxy`], [`telemetry`], [`admin`],
//! [`server`], [`shutdown`], [`pidfile`].

pub mod access_line;
pub mod admin;
pub mod cli;
pub mod config;
pub mod fleet;
pub mod observe;
pub mod pidfile;
pub mod proxy;
pub mod record;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod upstream;

pub use llamatap_policy::{cachebreak, queue, router, tenant};
pub use llamatap_wire::{framing, llama, request, sentence, sse, text, tracecontext};
