//! Why a turn recomputed its prompt: each chat request is compared with the
//! previous turn of the same conversation and with what llama-server says it
//! reused (`timings.cache_n`), and the first place the prompt stopped
//! matching is named, with a cause from a fixed list and its cost.
//!
//! Pure: no framework, no I/O, no clock. The proxy builds a
//! [`PromptDigest`] as it parses the body for its facts ([`inspect`]), or
//! from the body it already parsed ([`PromptDigest::from_json`]), makes it
//! its tenant's ([`PromptDigest::in_tenant`]), and once the answer is in,
//! hands it, the answer's [`Observed`] facts and the bounded [`Book`] of
//! recent conversations to [`Book::diagnose`].
//!
//! What it does:
//! - A conversation is known by its first `user` message's content alone
//!   (not chained from the system prompt or tools, so a turn whose system
//!   prompt changed still finds its conversation), with the model name; or by
//!   the session key when the proxy has one; and always within its tenant.
//! - Cost: the digest is computed as the body is parsed, in time linear in
//!   its bytes, with no tree and no allocation per JSON value (a prompt of
//!   many small values costs two to three times what parsing its bytes for
//!   the facts alone costs; see `docs/benchmarks.md`).
//! - Per conversation it keeps hashes, never text: per message the role,
//!   content, name, tool calls and other fields apart (so the changed field
//!   is known), the content's length in characters and one 32-bit hash per
//!   [`CHUNK_CHARS`]-character chunk of it (the first [`MAX_CHUNKS`]), the
//!   tools' hashes one per definition, the upstream that answered and the
//!   prompt's token count. With content capture on, and only then, each
//!   message's first [`MAX_TEXT_CHARS`] characters too, for an exact offset
//!   and a [`EXCERPT_CHARS`]-character excerpt of the old and new text.
//! - Memory: [`Book`] is a least-recently-used map bounded by accounted
//!   bytes (see [`Book::bytes`]); a conversation keeps at most
//!   [`MAX_MESSAGES`] messages and [`MAX_TOOLS`] tool hashes.
//!
//! What it deliberately does not do: tokenize or render chat templates (so
//! positions are in the request's JSON terms: message index, field,
//! characters), diagnose completion prompts (`/v1/completions`,
//! `/completion`: no messages to name), or judge a failed request (no
//! `timings`, nothing learnt). Two conversations of one tenant that open
//! with the same first user message and model are one conversation here.

mod book;
mod chunker;
mod diagnose;
mod digest;
mod hash;
mod message;
mod reader;
#[cfg(test)]
mod tests;

pub use book::{Book, DEFAULT_BUDGET_BYTES};
pub use diagnose::diagnose;
pub use digest::{MessageDigest, PromptDigest};
pub use reader::inspect;

/// Characters per chunk hash of a message's content: the granularity of the
/// offset reported when the text is not kept.
pub const CHUNK_CHARS: usize = 32;
/// Chunk hashes kept per message: offsets are located inside the first
/// `CHUNK_CHARS * MAX_CHUNKS` (2,048) characters; a change further in is
/// reported at that bound.
pub const MAX_CHUNKS: usize = 64;
/// Messages kept per conversation (the first ones).
pub const MAX_MESSAGES: usize = 256;
/// Tool definitions hashed one by one (the first ones; the rest share one hash).
pub const MAX_TOOLS: usize = 64;
/// Characters of each message kept with content capture on.
pub const MAX_TEXT_CHARS: usize = 2048;
/// Characters of an excerpt (old or new text at the break).
pub const EXCERPT_CHARS: usize = 40;
/// Characters of an excerpt that come before the break.
pub const EXCERPT_BEFORE: usize = 20;

/// Why a turn recomputed (part of) its prompt. A fixed list: it is a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The prompt extends the previous turn's and llama-server reused it.
    Reused,
    /// No previous turn of this conversation is known.
    NewConversation,
    /// A system message (or top-level `system`/`instructions`) changed.
    SystemChanged,
    /// The tool definitions changed (content or order).
    ToolsChanged,
    /// An earlier message changed (content, role, name or tool calls).
    HistoryEdited,
    /// Messages were dropped from the front of the history.
    HistoryTruncated,
    /// The prompt extends the previous turn's, on the same upstream, but
    /// llama-server reused far less of it: slot taken, cache evicted, or a
    /// restarted server.
    Evicted,
    /// The prompt extends the previous turn's, but went to another upstream,
    /// which reused far less of it.
    OtherUpstream,
    /// Not enough facts to say (no token counts from llama-server).
    Unknown,
}

impl Cause {
    /// Every cause, in label order.
    pub const ALL: [Cause; 9] = [
        Cause::Reused,
        Cause::NewConversation,
        Cause::SystemChanged,
        Cause::ToolsChanged,
        Cause::HistoryEdited,
        Cause::HistoryTruncated,
        Cause::Evicted,
        Cause::OtherUpstream,
        Cause::Unknown,
    ];

    /// The label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Cause::Reused => "reused",
            Cause::NewConversation => "new_conversation",
            Cause::SystemChanged => "system_changed",
            Cause::ToolsChanged => "tools_changed",
            Cause::HistoryEdited => "history_edited",
            Cause::HistoryTruncated => "history_truncated",
            Cause::Evicted => "evicted",
            Cause::OtherUpstream => "other_upstream",
            Cause::Unknown => "unknown",
        }
    }

    /// Whether the cause is a break worth marking (anything but `reused`,
    /// `new_conversation` and `unknown`).
    pub fn is_break(&self) -> bool {
        !matches!(
            self,
            Cause::Reused | Cause::NewConversation | Cause::Unknown
        )
    }
}

/// Which part of the prompt first differs from the previous turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The tool definitions.
    Tools,
    /// A system message's content.
    System,
    /// A message's content.
    Content,
    /// A message's role.
    Role,
    /// A message's `name`.
    Name,
    /// A message's `tool_calls`.
    ToolCalls,
    /// Another field of a message (or a non-message item).
    Other,
    /// A whole message: dropped from the history.
    Message,
}

impl Field {
    /// The attribute value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Field::Tools => "tools",
            Field::System => "system",
            Field::Content => "content",
            Field::Role => "role",
            Field::Name => "name",
            Field::ToolCalls => "tool_calls",
            Field::Other => "other",
            Field::Message => "message",
        }
    }
}

/// Where the prompt first differs from the previous turn's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The message's index in the request's messages (a top-level `system`
    /// counts as message 0); for [`Field::Tools`], the index of the first
    /// tool definition that differs.
    pub message_index: usize,
    /// The field that differs.
    pub field: Field,
    /// Characters into the field: exact with content capture on, else the
    /// start of the first differing [`CHUNK_CHARS`]-character chunk; 0 for
    /// fields other than content.
    pub offset: usize,
}

/// What llama-server and the proxy report about the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Observed {
    /// `timings.cache_n`: prompt tokens reused.
    pub cache_n: Option<u64>,
    /// `timings.prompt_n`: prompt tokens computed.
    pub prompt_n: Option<u64>,
    /// `timings.prompt_ms`: the prefill's milliseconds.
    pub prompt_ms: Option<f64>,
    /// A hash of the upstream that answered (its name).
    pub upstream: Option<u64>,
}

impl Observed {
    /// All prompt tokens, cached included.
    pub fn prompt_tokens(&self) -> Option<u64> {
        Some(self.prompt_n?.saturating_add(self.cache_n.unwrap_or(0)))
    }
}

/// The verdict on one turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// The cause.
    pub cause: Cause,
    /// Where the prompt first differs from the previous turn (`None` when it
    /// extends it, or there was none).
    pub position: Option<Position>,
    /// Prompt tokens recomputed that the previous turn's prompt covered:
    /// `min(previous prompt tokens, prompt tokens) - cache_n`, at least 0.
    pub recomputed_tokens: u64,
    /// The prefill milliseconds they took: `recomputed_tokens * prompt_ms / prompt_n`.
    pub recomputed_ms: f64,
    /// With content capture on: the previous turn's text at the break
    /// (at most [`EXCERPT_CHARS`] characters).
    pub old_excerpt: Option<String>,
    /// With content capture on: this turn's text at the break.
    pub new_excerpt: Option<String>,
}
