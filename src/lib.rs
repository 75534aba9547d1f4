//! llamatap: a drop-in Pingora proxy for llama.cpp's `llama-server`.
//!
//! It forwards every request unchanged and every stream unbuffered, measures the
//! moments a voice or RAG user feels (upstream headers, first token, first
//! sentence, end), exports them as OpenTelemetry spans and Prometheus
//! histograms, and closes the upstream connection the moment a client hangs up
//! so llama-server cancels the task.
//!
//! The pure parts are crates of their own, whose manifests list no
//! framework, each named the same way as its folder and its path (no
//! re-exports here):
//! - `llamatap-wire` (`crates/llamatap-wire`, [`llamatap_wire`]): the SSE
//!   reader, the first-sentence rule, llama-server's formats, the request's
//!   facts, response framing, trace context, the continuation's wire parts;
//! - `llamatap-policy` (`crates/llamatap-policy`, [`llamatap_policy`]): the
//!   router, the queue's scheduler, tenants, the cache-break diagnosis, the
//!   answer's typed causes.
//!
//! Telemetry is the `llamatap-telemetry` crate (`crates/llamatap-telemetry`,
//! [`llamatap_telemetry`]): it takes finished facts and settings of its
//! own, never a session or the whole configuration.
//!
//! This crate: [`config`], [`proxy`] (the hooks), [`admission`] (the queue
//! and the slots shared between replicas), [`fleet`], [`upstream`] (the
//! HTTP/1 client), [`replay`] (a request body read ahead), [`store`],
//! [`admin`], [`server`], [`shutdown`], [`pidfile`], [`cli`].

pub mod admin;
pub mod admission;
pub mod cli;
pub mod config;
pub mod conversations;
pub mod fleet;
pub mod pidfile;
pub mod proxy;
pub mod replay;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod ttft;
pub mod upstream;
