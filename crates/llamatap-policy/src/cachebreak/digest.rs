//! A chat prompt reduced to what a later turn is compared with: hashes per
//! message and field, content lengths and chunk hashes, never text unless
//! content capture is on.

use serde_json::Value;

use super::hash::pair;
use super::reader::{is_chat, DigestReader};

/// Mixed with a tenant's key into its conversations' keys.
const TENANT: u64 = 0x7465_6e61_6e74;
use llamatap_wire::request::{PromptField, PromptReader, Route};

/// One message (or input item) of a prompt. Two digests are equal when
/// their hashes are, whether or not their text was kept.
#[derive(Clone, Debug, Eq)]
pub struct MessageDigest {
    /// Hash of `role` (0 for an item that is not a message).
    pub role: u64,
    /// A `system` or `developer` message.
    pub system: bool,
    /// Hash of the content: its text and its other parts.
    pub content: u64,
    /// Hash of `name` (0 when absent).
    pub name: u64,
    /// Hash of `tool_calls` (0 when absent).
    pub tool_calls: u64,
    /// Hash of every other field (a non-message item: the whole item).
    pub other: u64,
    /// The content's text length, characters.
    pub chars: u32,
    /// 32-bit hashes of the text's [`CHUNK_CHARS`](super::CHUNK_CHARS)-character chunks (the
    /// first [`MAX_CHUNKS`](super::MAX_CHUNKS)).
    pub chunks: Box<[u32]>,
    /// The text's first [`MAX_TEXT_CHARS`](super::MAX_TEXT_CHARS) characters, with content capture on.
    pub text: Option<Box<str>>,
}

impl PartialEq for MessageDigest {
    fn eq(&self, other: &Self) -> bool {
        (
            self.role,
            self.content,
            self.name,
            self.tool_calls,
            self.other,
        ) == (
            other.role,
            other.content,
            other.name,
            other.tool_calls,
            other.other,
        )
    }
}

/// A chat prompt as compared across turns; see the module docs of
/// [`crate::cachebreak`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptDigest {
    /// The conversation's key: the model and the first `user` message's
    /// content; `None` without a user message. The proxy may replace it with
    /// a session key.
    pub key: Option<u64>,
    /// The key each `user` message would give as the first one (the first
    /// [`MAX_MESSAGES`](super::MAX_MESSAGES)): how a conversation whose oldest turns were dropped
    /// is found again.
    pub user_keys: Box<[u64]>,
    /// One hash per tool definition (the last one also covers those beyond
    /// [`MAX_TOOLS`](super::MAX_TOOLS)); empty without tools.
    pub tools: Box<[u64]>,
    /// The messages: a top-level `system` or `instructions` first, then
    /// `messages`, then `input` (the first [`MAX_MESSAGES`](super::MAX_MESSAGES)).
    pub messages: Box<[MessageDigest]>,
}

impl PromptDigest {
    /// The digest of a parsed request body on a chat route
    /// ([`Route::ChatCompletions`], [`Route::Messages`], [`Route::Responses`]);
    /// `None` on other routes or for a body that is not an object. With
    /// `capture`, each message's text is kept (bounded). The same digest as
    /// [`inspect`] gives for the body's bytes.
    pub fn from_json(route: Route, body: &Value, capture: bool) -> Option<PromptDigest> {
        if !is_chat(route) {
            return None;
        }
        let Value::Object(body) = body else {
            return None;
        };
        let mut reader = DigestReader::new(capture);
        for field in PromptField::ALL {
            if let Some(value) = body.get(field.as_str()) {
                // Reading a parsed value cannot fail.
                let _ = reader.read(field, value);
            }
        }
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        Some(reader.finish(model))
    }

    /// Makes the conversation `tenant`'s own (a plain key chosen by the
    /// caller, one per tenant): conversations of two tenants are never one,
    /// whatever their model and first message (or session). Call it once,
    /// after any change of [`PromptDigest::key`].
    pub fn in_tenant(&mut self, tenant: u64) {
        let scope = |key: u64| pair(pair(TENANT, tenant), key);
        self.key = self.key.map(scope);
        for key in self.user_keys.iter_mut() {
            *key = scope(*key);
        }
    }

    /// Bytes this digest holds on the heap and inline (for the book's bound).
    pub fn bytes(&self) -> usize {
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                std::mem::size_of::<MessageDigest>()
                    + m.chunks.len() * 4
                    + m.text.as_ref().map_or(0, |t| t.len())
            })
            .sum();
        std::mem::size_of::<PromptDigest>()
            + self.tools.len() * 8
            + self.user_keys.len() * 8
            + messages
    }
}
