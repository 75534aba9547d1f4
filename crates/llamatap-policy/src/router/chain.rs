//! Prefix chains: a request's prompt reduced to a chain of 64-bit hashes, one
//! link per chat message or per prompt block, where each link hashes the
//! previous link and its own part. A link therefore stands for the whole
//! prompt up to and including its part, and turn n+1 of a conversation
//! extends turn n's chain: the chain of a prefix of the messages is a prefix
//! of the chain.
//!
//! Input: the parsed body ([`Chain::from_json`]), or the body's bytes
//! ([`Chain::from_body`], which parses them into a `serde_json::Value`
//! first: the canonical hashing below needs whole values, and the proxy reads
//! only bodies up to its inspection limit). A body that is not a JSON object,
//! or a route that carries no prompt, gives the empty chain, which routes
//! like a request without a body. Nothing here fails or panics.
//!
//! What a chain covers:
//! - The root (not a link) hashes the kind of prompt (chat, text, tokens) and
//!   the body's `model` string (empty when absent), so one upstream serving
//!   several models does not confuse their caches.
//! - Chat (`/v1/chat/completions`, `/v1/messages`, `/v1/responses`): one
//!   link for `tools` when present, one for a top-level `system` (Anthropic)
//!   and one for `instructions` (Responses), each as a `system` message; then
//!   one link per item of `messages`, and of `input` (Responses; a string
//!   `input` is one `user` message). A message hashes its `role`, its
//!   `content`, and its other fields (`name`, `tool_calls`, ...) in any key
//!   order. A string content and a list holding that one text part hash the
//!   same, since chat templates render them alike.
//! - A message's blocks: before its own link, a message whose content is
//!   text (a string, or a list of that one text part) has a link for each
//!   whole [`MESSAGE_BLOCK_BYTES`] block of it that ends before the text
//!   does, each over the previous link, the role and the block. Messages
//!   that begin alike share them (a document before different questions),
//!   as llama-server shares the cache of their common tokens. The message's
//!   own link hashes the link before its blocks: it is the same with or
//!   without them.
//! - Completion prompts (`/v1/completions`, `/completion`): the prompt's
//!   bytes in blocks of [`BLOCK_BYTES`], the last block possibly shorter. A
//!   string is its UTF-8 bytes; a token array is each token as 4 bytes
//!   little-endian (64 tokens a block). A batch (an array of prompts) is
//!   routed by its first prompt. Only whole blocks of a prompt are shared
//!   with a longer prompt that extends it.
//!
//! The anchor: the link that identifies a conversation rather than what many
//! conversations share. For chat it is the first `user` message's own
//! link, after its blocks (so tools, a system prompt and a document shared
//! by many conversations do not decide their placement), or the last link
//! when there is none; for completion prompts
//! it is block [`COLD_BLOCKS`]` - 1` (or the last when shorter). Its hash,
//! which covers everything before it, is the cold key ([`Chain::cold_key`]).
//!
//! Each link also records the bytes of text hashed into it (strings, prompt
//! bytes), and a chat message's link [`MESSAGE_FRAME_BYTES`] more for what
//! its chat template renders around it, to estimate how many tokens a
//! matched prefix holds.
//!
//! Not done here: tokenizing, rendering chat templates, or reading images;
//! two requests that render to the same prompt from different JSON (other
//! content part shapes, other tool field names) get different chains.

use super::hash::{hash_bytes, Feed, Tag};
use llamatap_wire::request::Route;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Bytes per block of a completion prompt (64 tokens of a token array).
pub const BLOCK_BYTES: usize = 256;

/// Bytes per leading block of a chat message's text: about 16 tokens, so
/// a prefix shared within a message is found to within that many.
pub const MESSAGE_BLOCK_BYTES: usize = 64;

/// Bytes counted for each chat message beyond its text and role: what a
/// chat template renders around a message (ChatML's `<|im_start|>`, a
/// newline, `<|im_end|>` and a newline; Llama 3's header and `<|eot_id|>`),
/// about four tokens, taken at 4 bytes a token. Without them a prompt of
/// many short messages counts fewer tokens than it holds, and a line from
/// bytes to tokens fitted on conversations puts them in its fixed part,
/// which then inflates every short one-message prompt.
pub const MESSAGE_FRAME_BYTES: u64 = 16;

/// The anchor of a completion prompt is its block `COLD_BLOCKS - 1`.
pub const COLD_BLOCKS: usize = 2;

/// Kinds of prompt, hashed into the root.
const KIND_CHAT: u64 = 1;
const KIND_TEXT: u64 = 2;
const KIND_TOKENS: u64 = 3;

/// Content part types whose `text` is plain text.
const TEXT_PART_TYPES: [&str; 3] = ["text", "input_text", "output_text"];

/// A request's prefix chain; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    /// One hash per message or block, in order.
    links: Vec<u64>,
    /// Text bytes hashed into links `0..=i`, for each `i`.
    ends: Vec<u64>,
    /// Index of the anchor link (0 when the chain is empty).
    anchor: usize,
}

impl Chain {
    /// The chain of a request body's bytes on `route`: parsed as JSON (a
    /// UTF-8 byte order mark skipped), then [`Chain::from_json`]. Bytes that
    /// are not a JSON object give the empty chain.
    pub fn from_body(route: Route, body: &[u8]) -> Chain {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => Chain::from_json(route, &value),
            Err(_) => Chain::default(),
        }
    }

    /// The chain of a parsed request body on `route`: chat routes
    /// ([`Route::ChatCompletions`], [`Route::Messages`], [`Route::Responses`])
    /// by message, completion routes ([`Route::Completions`],
    /// [`Route::Completion`]) by prompt block; any other route, or a body
    /// that is not an object, gives the empty chain.
    pub fn from_json(route: Route, body: &Value) -> Chain {
        let Value::Object(body) = body else {
            return Chain::default();
        };
        match route {
            Route::ChatCompletions | Route::Messages | Route::Responses => chat(body),
            Route::Completions | Route::Completion => prompt(body),
            _ => Chain::default(),
        }
    }

    /// The link hashes, in order.
    pub fn links(&self) -> &[u64] {
        &self.links
    }

    /// The number of links.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether the chain has no link (no prompt read).
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The index of the anchor link (see the module docs); `None` when empty.
    pub fn anchor(&self) -> Option<usize> {
        (!self.links.is_empty()).then_some(self.anchor)
    }

    /// The hash that places a chain nothing matched: the anchor link's.
    pub fn cold_key(&self) -> Option<u64> {
        self.links.get(self.anchor).copied()
    }

    /// Text bytes hashed into the first `links` links (all of them when
    /// `links` exceeds the length).
    pub fn bytes(&self, links: usize) -> u64 {
        match links.min(self.ends.len()) {
            0 => 0,
            n => self.ends.get(n - 1).copied().unwrap_or(0),
        }
    }

    /// Text bytes hashed into the whole chain.
    pub fn total_bytes(&self) -> u64 {
        self.bytes(self.links.len())
    }

    /// How many leading links a cached prefix of `cached_tokens` out of
    /// `prompt_tokens` covers, assuming tokens spread over the chain's bytes
    /// evenly: a link counts when at least half of its bytes are covered.
    /// Zero when `prompt_tokens` is zero.
    pub fn covered_links(&self, cached_tokens: u64, prompt_tokens: u64) -> usize {
        if prompt_tokens == 0 {
            return 0;
        }
        let cached = u128::from(cached_tokens.min(prompt_tokens));
        let covered = u128::from(self.total_bytes()) * cached / u128::from(prompt_tokens);
        let mut start = 0u64;
        let mut count = 0;
        for &end in &self.ends {
            let middle = start + (end - start) / 2;
            if u128::from(middle) > covered {
                break;
            }
            count += 1;
            start = end;
        }
        count
    }
}

/// Builds a chain link by link.
struct Builder {
    chain: Chain,
    prev: u64,
    total: u64,
}

impl Builder {
    /// A chain of `kind` for the body's model, with no link yet.
    fn new(kind: u64, body: &Map<String, Value>) -> Self {
        let mut root = Feed::new();
        root.tag(Tag::Root);
        root.u64(kind);
        root.str(body.get("model").and_then(Value::as_str).unwrap_or(""));
        Builder {
            chain: Chain::default(),
            prev: root.finish().0,
            total: 0,
        }
    }

    /// A hasher for the next link, already fed the previous link.
    fn next(&self) -> Feed {
        let mut feed = Feed::new();
        feed.u64(self.prev);
        feed
    }

    /// Appends the link hashed by `feed`.
    fn push(&mut self, feed: &Feed) {
        let (hash, bytes) = feed.finish();
        self.push_hash(hash, bytes);
    }

    /// Appends a link of `hash` holding `bytes` of text.
    fn push_hash(&mut self, hash: u64, bytes: u64) {
        self.prev = hash;
        self.total = self.total.saturating_add(bytes);
        self.chain.links.push(hash);
        self.chain.ends.push(self.total);
    }

    /// Appends a message: its text's leading blocks ([`Builder::blocks`]),
    /// then its link: `role`, normalized `content`, and `rest`'s fields
    /// other than `role` and `content`, hashed over the link before the
    /// blocks (so a message's link is the same with or without them).
    fn message(&mut self, role: &str, content: Content<'_>, rest: Option<&Map<String, Value>>) {
        let mut feed = self.next();
        feed.tag(Tag::Message);
        feed.str(role);
        feed_content(&mut feed, content);
        feed.object(rest.unwrap_or(&Map::new()), &["role", "content"]);
        let (hash, bytes) = feed.finish();
        let in_blocks = match plain_text(content) {
            Some(text) => self.blocks(role, text),
            None => 0,
        };
        let own = bytes.saturating_sub(in_blocks);
        self.push_hash(hash, own.saturating_add(MESSAGE_FRAME_BYTES));
    }

    /// Appends a link for each whole [`MESSAGE_BLOCK_BYTES`] block of a
    /// message's text that ends before the text does, each over the
    /// previous link (the first over the link before the message) and the
    /// role; returns
    /// the bytes they hold. Two messages whose text begins alike share
    /// these links, as llama-server shares the cache of their common
    /// tokens.
    fn blocks(&mut self, role: &str, text: &str) -> u64 {
        let bytes = text.as_bytes();
        let whole = bytes.len().saturating_sub(1) / MESSAGE_BLOCK_BYTES;
        let role = hash_bytes(role.as_bytes());
        for block in bytes.chunks(MESSAGE_BLOCK_BYTES).take(whole) {
            let mut feed = self.next();
            feed.tag(Tag::MessageBlock);
            feed.u64(role);
            feed.raw(block);
            self.push(&feed);
        }
        u64::try_from(whole * MESSAGE_BLOCK_BYTES).unwrap_or(u64::MAX)
    }

    /// Appends a chat item: a message when it is an object with a string
    /// `role`, else the item's canonical value. Returns whether it was a
    /// `user` message.
    fn item(&mut self, item: &Value) -> bool {
        if let Value::Object(map) = item {
            if let Some(role) = map.get("role").and_then(Value::as_str) {
                self.message(role, Content::Json(map.get("content")), Some(map));
                return role == "user";
            }
        }
        let mut feed = self.next();
        feed.tag(Tag::Item);
        feed.value(item);
        self.push(&feed);
        false
    }

    /// The chain built, with its anchor at `anchor` (clamped to the last link).
    fn finish(mut self, anchor: usize) -> Chain {
        self.chain.anchor = anchor.min(self.chain.links.len().saturating_sub(1));
        self.chain
    }
}

/// A message's content: a JSON value (absent when `None`) or plain text.
#[derive(Clone, Copy)]
enum Content<'a> {
    Json(Option<&'a Value>),
    Text(&'a str),
}

/// Feeds a message's content: a string as one text part, a list part by
/// part (text parts as text, others canonically), anything else canonically;
/// absent content as `null`.
fn feed_content(feed: &mut Feed, content: Content<'_>) {
    let content = match content {
        Content::Json(Some(Value::String(text))) => Content::Text(text),
        content => content,
    };
    match content {
        Content::Text(text) => {
            feed.tag(Tag::Parts);
            feed.len(1);
            feed.tag(Tag::Text);
            feed.raw(text.as_bytes());
        }
        Content::Json(Some(Value::Array(parts))) => {
            feed.tag(Tag::Parts);
            feed.len(parts.len());
            for part in parts {
                match text_part(part) {
                    Some(text) => {
                        feed.tag(Tag::Text);
                        feed.raw(text.as_bytes());
                    }
                    None => feed.value(part),
                }
            }
        }
        Content::Json(Some(other)) => feed.value(other),
        Content::Json(None) => feed.tag(Tag::Null),
    }
}

/// A message's text when its content is one string, or a list of one
/// plain text part (they render alike); `None` for any other content.
fn plain_text(content: Content<'_>) -> Option<&str> {
    match content {
        Content::Text(text) => Some(text),
        Content::Json(Some(Value::String(text))) => Some(text),
        Content::Json(Some(Value::Array(parts))) if parts.len() == 1 => {
            parts.first().and_then(text_part)
        }
        Content::Json(_) => None,
    }
}

/// The text of a plain text part: an object of exactly `type` (one of
/// [`TEXT_PART_TYPES`]) and a string `text`.
fn text_part(part: &Value) -> Option<&str> {
    let Value::Object(map) = part else {
        return None;
    };
    let kind = map.get("type").and_then(Value::as_str)?;
    if map.len() != 2 || !TEXT_PART_TYPES.contains(&kind) {
        return None;
    }
    map.get("text").and_then(Value::as_str)
}

/// The chain of a chat body; see the module docs.
fn chat(body: &Map<String, Value>) -> Chain {
    let mut builder = Builder::new(KIND_CHAT, body);
    let mut anchor = None;
    if let Some(tools) = body.get("tools").filter(|tools| !tools.is_null()) {
        let mut feed = builder.next();
        feed.tag(Tag::Tools);
        feed.value(tools);
        builder.push(&feed);
    }
    for key in ["system", "instructions"] {
        if let Some(system) = body.get(key).filter(|system| !system.is_null()) {
            builder.message("system", Content::Json(Some(system)), None);
        }
    }
    // The anchor is the first user message's own link, after its blocks.
    let last = |builder: &Builder| builder.chain.links.len().saturating_sub(1);
    if let Some(Value::Array(messages)) = body.get("messages") {
        for message in messages {
            if builder.item(message) && anchor.is_none() {
                anchor = Some(last(&builder));
            }
        }
    }
    match body.get("input") {
        Some(Value::String(text)) => {
            builder.message("user", Content::Text(text), None);
            anchor = anchor.or(Some(last(&builder)));
        }
        Some(Value::Array(items)) => {
            for item in items {
                if builder.item(item) && anchor.is_none() {
                    anchor = Some(last(&builder));
                }
            }
        }
        _ => {}
    }
    builder.finish(anchor.unwrap_or(usize::MAX))
}

/// The chain of a completion body's `prompt`; see the module docs.
fn prompt(body: &Map<String, Value>) -> Chain {
    let bytes = match body.get("prompt") {
        Some(Value::String(text)) => Some((KIND_TEXT, Cow::Borrowed(text.as_bytes()))),
        Some(Value::Array(items)) => match tokens(items) {
            Some(tokens) => Some((KIND_TOKENS, Cow::Owned(tokens))),
            None => match items.first() {
                Some(Value::String(text)) => Some((KIND_TEXT, Cow::Borrowed(text.as_bytes()))),
                Some(Value::Array(first)) => {
                    tokens(first).map(|tokens| (KIND_TOKENS, Cow::Owned(tokens)))
                }
                _ => None,
            },
        },
        _ => None,
    };
    let Some((kind, bytes)) = bytes else {
        return Chain::default();
    };
    let mut builder = Builder::new(kind, body);
    for block in bytes.chunks(BLOCK_BYTES) {
        let mut feed = builder.next();
        feed.tag(Tag::Block);
        feed.raw(block);
        builder.push(&feed);
    }
    builder.finish(COLD_BLOCKS - 1)
}

/// A token array as 4 little-endian bytes per token; `None` unless every
/// item is an integer that fits in `u32`.
fn tokens(items: &[Value]) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(items.len() * 4);
    for item in items {
        let token = u32::try_from(item.as_u64()?).ok()?;
        bytes.extend_from_slice(&token.to_le_bytes());
    }
    Some(bytes)
}
