//! llamatap's wire formats: what travels between a client, llamatap and
//! llama-server, read incrementally and bounded.
//!
//! - [`sse`]: the incremental Server-Sent Events reader.
//! - [`sentence`]: the first-sentence rule.
//! - [`llama`]: llama-server's wire: stream and response formats, its own
//!   `llamacpp:*` metrics and `/slots`, parsed and bounded.
//! - [`request`]: request inspection (route as llama-server routes the path,
//!   model, stream flag, the prompt's fields as the body is parsed).
//! - [`framing`]: HTTP/1 response body framing and the chunked decoder.
//! - [`tracecontext`]: W3C `traceparent`/`tracestate` parsing.
//! - [`text`]: strings cut to a bound on a character boundary.
//! - [`continuation`]: continuing a chat stream elsewhere: what can be
//!   continued, the continuation's body, the re-wrapped chunks.
//! - [`progress`]: asking llama-server for prompt progress events, and
//!   reading (or stripping) them from its stream.
//! - [`conversation`]: llama-server's resumable-stream ids scoped to one
//!   tenant and back.
//!
//! Deliberately not here: sockets, timers, a runtime or a framework. The
//! manifest lists none (no Pingora, tokio, tracing or OpenTelemetry), so
//! every module is a function of the bytes it is handed, testable at every
//! chunk cut.

pub mod continuation;
pub mod conversation;
pub mod framing;
pub mod llama;
pub mod progress;
pub mod request;
pub mod sentence;
pub mod sse;
pub mod text;
pub mod tracecontext;
