//! A chat prompt reduced to what a later turn is compared with: hashes per
//! message and field, content lengths and chunk hashes, never text unless
//! content capture is on.

use serde_json::{Map, Value};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed, Xxh3};

use super::{CHUNK_CHARS, MAX_CHUNKS, MAX_MESSAGES, MAX_TEXT_CHARS, MAX_TOOLS};
use crate::request::Route;
use crate::router::SEED;

/// Content part types whose `text` is plain text.
const TEXT_PART_TYPES: [&str; 3] = ["text", "input_text", "output_text"];

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
    /// 32-bit hashes of the text's [`CHUNK_CHARS`]-character chunks (the
    /// first [`MAX_CHUNKS`]).
    pub chunks: Box<[u32]>,
    /// The text's first [`MAX_TEXT_CHARS`] characters, with content capture on.
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
    /// [`MAX_MESSAGES`]): how a conversation whose oldest turns were dropped
    /// is found again.
    pub user_keys: Box<[u64]>,
    /// One hash per tool definition (the last one also covers those beyond
    /// [`MAX_TOOLS`]); empty without tools.
    pub tools: Box<[u64]>,
    /// The messages: a top-level `system` or `instructions` first, then
    /// `messages`, then `input` (the first [`MAX_MESSAGES`]).
    pub messages: Box<[MessageDigest]>,
}

impl PromptDigest {
    /// The digest of a parsed request body on a chat route
    /// ([`Route::ChatCompletions`], [`Route::Messages`], [`Route::Responses`]);
    /// `None` on other routes or for a body that is not an object. With
    /// `capture`, each message's text is kept (bounded).
    pub fn from_json(route: Route, body: &Value, capture: bool) -> Option<PromptDigest> {
        if !matches!(
            route,
            Route::ChatCompletions | Route::Messages | Route::Responses
        ) {
            return None;
        }
        let Value::Object(body) = body else {
            return None;
        };
        let mut messages = Vec::new();
        let mut user_keys = Vec::new();
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        let mut push = |m: MessageDigest, user: bool, messages: &mut Vec<MessageDigest>| {
            if messages.len() < MAX_MESSAGES {
                if user {
                    user_keys.push(conversation_key(model, m.content));
                }
                messages.push(m);
            }
        };
        for k in ["system", "instructions"] {
            if let Some(system) = body.get(k).filter(|v| !v.is_null()) {
                let m = message("system", Some(system), None, capture);
                push(m, false, &mut messages);
            }
        }
        if let Some(Value::Array(items)) = body.get("messages") {
            for item in items {
                let (m, user) = item_digest(item, capture);
                push(m, user, &mut messages);
            }
        }
        match body.get("input") {
            Some(text @ Value::String(_)) => {
                let m = message("user", Some(text), None, capture);
                push(m, true, &mut messages);
            }
            Some(Value::Array(items)) => {
                for item in items {
                    let (m, user) = item_digest(item, capture);
                    push(m, user, &mut messages);
                }
            }
            _ => {}
        }
        let tools = match body.get("tools") {
            Some(Value::Array(tools)) => {
                let mut hashes: Vec<u64> = tools.iter().take(MAX_TOOLS).map(hash_value).collect();
                if tools.len() > MAX_TOOLS {
                    let mut rest = Xxh3::new();
                    for t in tools.iter().skip(MAX_TOOLS - 1) {
                        rest.update(&hash_value(t).to_le_bytes());
                    }
                    if let Some(last) = hashes.last_mut() {
                        *last = rest.digest();
                    }
                }
                hashes
            }
            Some(Value::Null) | None => Vec::new(),
            Some(other) => vec![hash_value(other)],
        };
        Some(PromptDigest {
            key: user_keys.first().copied(),
            user_keys: user_keys.into_boxed_slice(),
            tools: tools.into_boxed_slice(),
            messages: messages.into_boxed_slice(),
        })
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

/// The key of a conversation whose first user message has `content`.
fn conversation_key(model: &str, content: u64) -> u64 {
    pair(xxh3_64_with_seed(model.as_bytes(), SEED), content)
}

/// The digest of a chat item, and whether it is a `user` message.
fn item_digest(item: &Value, capture: bool) -> (MessageDigest, bool) {
    if let Value::Object(map) = item {
        if let Some(role) = map.get("role").and_then(Value::as_str) {
            let m = message(role, map.get("content"), Some(map), capture);
            return (m, role == "user");
        }
    }
    let m = MessageDigest {
        role: 0,
        system: false,
        content: 0,
        name: 0,
        tool_calls: 0,
        other: hash_value(item),
        chars: 0,
        chunks: Box::new([]),
        text: None,
    };
    (m, false)
}

/// The digest of one message. In-process hashes (compared within this
/// process only), so the unseeded one-shot XXH3 serves, which needs no
/// per-call secret.
fn message(
    role: &str,
    content: Option<&Value>,
    rest: Option<&Map<String, Value>>,
    capture: bool,
) -> MessageDigest {
    // Non-text parts, in order, folded into one hash.
    let mut parts = 0u64;
    let mut chunker = Chunker::new(capture);
    match content {
        Some(Value::String(text)) => chunker.feed(text),
        Some(Value::Array(items)) => {
            for part in items {
                match text_part(part) {
                    Some(text) => chunker.feed(text),
                    None => parts = pair(parts ^ 1, hash_value(part)),
                }
            }
        }
        Some(other) => parts = pair(2, hash_value(other)),
        None => parts = 3,
    }
    let (text_digest, chars, chunks, text) = chunker.finish();
    let field = |k: &str| rest.and_then(|m| m.get(k)).map_or(0, hash_value);
    let mut other = 0u64;
    if let Some(map) = rest {
        for (k, v) in map {
            if !matches!(k.as_str(), "role" | "content" | "name" | "tool_calls") {
                other = other.wrapping_add(pair(xxh3_64(k.as_bytes()), hash_value(v)));
            }
        }
    }
    MessageDigest {
        role: xxh3_64(role.as_bytes()),
        system: matches!(role, "system" | "developer"),
        content: pair(text_digest, parts),
        name: field("name"),
        tool_calls: field("tool_calls"),
        other,
        chars,
        chunks,
        text,
    }
}

/// The hash of two hashes, in order.
fn pair(a: u64, b: u64) -> u64 {
    let mut bytes = [0u8; 16];
    let (left, right) = bytes.split_at_mut(8);
    left.copy_from_slice(&a.to_le_bytes());
    right.copy_from_slice(&b.to_le_bytes());
    xxh3_64(&bytes)
}

/// The text of a plain text part: an object with a text `type` and a string `text`.
fn text_part(part: &Value) -> Option<&str> {
    let Value::Object(map) = part else {
        return None;
    };
    let kind = map.get("type").and_then(Value::as_str)?;
    if !TEXT_PART_TYPES.contains(&kind) {
        return None;
    }
    map.get("text").and_then(Value::as_str)
}

/// Hashes a content's text as it arrives (parts concatenated): the whole,
/// its length in characters, its chunk hashes and, with capture, its start.
/// A chunk is hashed in one call on its slice of the text; only a chunk
/// that spans two parts is copied (into `carry`, at most 128 bytes).
struct Chunker {
    whole: Xxh3,
    carry: Vec<u8>,
    in_chunk: usize,
    chars: usize,
    chunks: Vec<u32>,
    text: Option<String>,
}

impl Chunker {
    fn new(capture: bool) -> Self {
        Chunker {
            whole: Xxh3::new(),
            carry: Vec::new(),
            in_chunk: 0,
            chars: 0,
            chunks: Vec::new(),
            text: capture.then(String::new),
        }
    }

    fn feed(&mut self, text: &str) {
        self.whole.update(text.as_bytes());
        if let Some(t) = &mut self.text {
            let room = MAX_TEXT_CHARS.saturating_sub(self.chars);
            t.extend(text.chars().take(room));
        }
        let ascii = text.is_ascii();
        let mut rest = text;
        while !rest.is_empty() {
            if self.chunks.len() >= MAX_CHUNKS {
                self.chars += if ascii {
                    rest.len()
                } else {
                    rest.chars().count()
                };
                return;
            }
            let need = CHUNK_CHARS - self.in_chunk;
            let (bytes, chars) = if ascii {
                let b = need.min(rest.len());
                (b, b)
            } else {
                match rest.char_indices().nth(need) {
                    Some((i, _)) => (i, need),
                    None => (rest.len(), rest.chars().count()),
                }
            };
            let (piece, tail) = rest.split_at(bytes);
            self.in_chunk += chars;
            self.chars += chars;
            if self.in_chunk == CHUNK_CHARS {
                self.close_chunk(piece.as_bytes());
            } else {
                self.carry.extend_from_slice(piece.as_bytes());
            }
            rest = tail;
        }
    }

    /// Ends the current chunk with `last` (the carried part before it).
    fn close_chunk(&mut self, last: &[u8]) {
        let h = if self.carry.is_empty() {
            xxh3_64(last)
        } else {
            self.carry.extend_from_slice(last);
            let h = xxh3_64(&self.carry);
            self.carry.clear();
            h
        };
        // The low 32 bits: a chunk hash is compared, not trusted.
        self.chunks
            .push(u32::try_from(h & u64::from(u32::MAX)).unwrap_or(0));
        self.in_chunk = 0;
    }

    fn finish(mut self) -> (u64, u32, Box<[u32]>, Option<Box<str>>) {
        if self.in_chunk > 0 && self.chunks.len() < MAX_CHUNKS {
            self.close_chunk(&[]);
        }
        let mut whole = self.whole;
        whole.update(&(self.chars as u64).to_le_bytes());
        (
            whole.digest(),
            u32::try_from(self.chars).unwrap_or(u32::MAX),
            self.chunks.into_boxed_slice(),
            self.text.map(String::into_boxed_str),
        )
    }
}

/// A JSON value's hash, whatever the key order of its objects.
fn hash_value(value: &Value) -> u64 {
    if let Value::String(s) = value {
        return pair(3, xxh3_64(s.as_bytes()));
    }
    let mut h = Xxh3::new();
    feed(&mut h, value);
    h.digest()
}

fn feed(h: &mut Xxh3, value: &Value) {
    match value {
        Value::Null => h.update(&[0]),
        Value::Bool(b) => h.update(&[1, u8::from(*b)]),
        Value::Number(n) => {
            h.update(&[2]);
            h.update(n.to_string().as_bytes());
        }
        Value::String(s) => {
            h.update(&[3]);
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        Value::Array(items) => {
            h.update(&[4]);
            h.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Value::Object(map) => {
            let mut sum = 0u64;
            for (k, v) in map {
                sum = sum.wrapping_add(pair(xxh3_64(k.as_bytes()), hash_value(v)));
            }
            h.update(&[5]);
            h.update(&(map.len() as u64).to_le_bytes());
            h.update(&sum.to_le_bytes());
        }
    }
}
