//! llama-server's prompt progress events (`"return_progress": true`):
//! asking for them in a request body, and reading them out of an answer's
//! event stream.
//!
//! - [`ProgressAsk`]: adds `"return_progress":true` as the first member of
//!   a JSON object body as it streams, at a length known before the body
//!   (so its `Content-Length` is set up front). The member goes first, so a
//!   `return_progress` the client wrote itself comes later and wins
//!   (llama-server's JSON keeps the last of duplicate keys). Nothing else
//!   of the body moves: the prompt, and so the KV cache prefix, is the
//!   client's.
//! - [`ProgressFilter`]: reads each complete event of an answer's stream;
//!   a `prompt_progress` event is handed out as a [`PromptProgress`] and,
//!   when stripping, removed, so that the client's stream is byte for byte
//!   what llama-server sends without `return_progress`.
//!
//! Deliberately not here: which requests ask and which streams are
//! stripped (the proxy decides), and what a progress event means for the
//! prediction (`llamatap_policy::ttft`).

mod ask;
mod strip;
#[cfg(test)]
mod tests;

pub use ask::{ProgressAsk, ADDED};
pub use strip::{ProgressFilter, PromptProgress};
