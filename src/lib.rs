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
//! - `llamatap-policy`: [`router`], [`queue`], [`tenant`], [`cachebreak`],
//!   [`answer`].
//!
//! Telemetry is the `llamatap-telemetry` crate ([`telemetry`], with
//! [`record`], [`observe`] and [`access_line`]): it takes finished facts
//! and settings of its own, never a session or the whole configuration.
//!
//! This crate: [`config`], [`proxy`] (the hooks), [`admission`] (the queue
//! and the slots shared between replicas), [`fleet`], [`upstream`] (the
//! HTTP/1 client), [`replay`] (a request body read ahead), [`store`],
//! [`admin`], [`server`], [`shutdown`], [`pidfile`], [`cli`].

pub mod admin;
pub mod admission;
pub mod cli;
pub mod config;
pub mod fleet;
pub mod pidfile;
pub mod proxy;
pub mod replay;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod upstream;

pub use llamatap_policy::{answer, cachebreak, queue, router, tenant};
/// Telemetry (the `llamatap-telemetry` crate).
pub use llamatap_telemetry as telemetry;
pub use llamatap_telemetry::{access_line, observe, record};
pub use llamatap_wire::{
    continuation, conversation, framing, llama, request, sentence, sse, text, tracecontext,
};
