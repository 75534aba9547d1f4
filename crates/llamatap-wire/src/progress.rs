//! llama-server's prompt progress events (`"return_progress": true`):
//! asking for them in a request body, and reading them out of an answer's
//! event stream.
//!
//! - [`ask_whole`]: a whole body that is a JSON object, with
//!   `"return_progress":true` as its first member ([`ProgressAsk`] does the
//!   same to a body as it streams). The member goes first, so a
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

pub use ask::{ask_whole, ProgressAsk, ADDED};
pub use strip::{ProgressFilter, PromptProgress};
