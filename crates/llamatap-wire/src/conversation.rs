//! llama-server's resumable streams, kept apart per tenant: the ids a
//! tenant names are scoped to it on the way up and unscoped on the way
//! back.
//!
//! llama-server keeps a generation whose request carried
//! `X-Conversation-Id: ID` running after a hang-up, into a buffer keyed by
//! `ID` alone, one namespace for every caller: `GET /v1/stream?conv_id=ID`
//! replays it, `POST /v1/streams/lookup` with
//! `{"conversation_ids": [ID, ...]}` lists the sessions whose id is `ID` or
//! starts with `ID::` (the web UI's `ID::model`), answering an array of
//! `{"conversation_id", "is_done", "total_bytes", "started_at",
//! "completed_at"}`, and `DELETE /v1/stream?conv_id=ID` stops it.
//!
//! A [`Scope`] puts a tenant's fixed prefix in front of every id it sends
//! (`t-` and 16 hex digits of a hash of the tenant's name, then `.`), so
//! `ID::model` stays `PREFIX.ID::model` and a lookup's prefix match stays
//! within the tenant. Every scoped id starts with its tenant's prefix,
//! whatever id the tenant chose: an id that spells another tenant's scoped
//! id gets the sender's own prefix in front, so two tenants' scoped ids
//! are equal (or one a prefix of the other) only when their prefixes are,
//! which the configuration checks never happens.
//!
//! Pure: the header value, the query and the lookup's bodies, as bytes.
//! Deliberately not here: which requests carry them and the exchange
//! itself (the proxy's `conversation` module).

use serde_json::Value;

use crate::request::query;

/// The query parameter naming a conversation (`/v1/stream`).
pub const PARAM: &[u8] = b"conv_id";

/// The request header naming a conversation.
pub const HEADER: &str = "x-conversation-id";

/// The decoded path of the lookup route (`POST`).
pub const LOOKUP_PATH: &[u8] = b"/v1/streams/lookup";

/// Most ids one lookup may name.
pub const MAX_LOOKUP_IDS: usize = 1024;

/// The decoded path of the replay (`GET`) and stop (`DELETE`) route.
pub const STREAM_PATH: &[u8] = b"/v1/stream";

/// The conversation a request target names: its first `conv_id` query
/// parameter, decoded (llama-server reads the first), when the decoded
/// path is [`STREAM_PATH`] and the id is not empty.
pub fn stream_id(target: &[u8]) -> Option<Vec<u8>> {
    if crate::request::path::decoded(target).as_ref() != STREAM_PATH {
        return None;
    }
    query::pairs(target)
        .find(|(k, _)| query::decode(k) == PARAM)
        .map(|(_, v)| query::decode(v.unwrap_or(&[])))
        .filter(|id| !id.is_empty())
}

/// A replay's `from` offset as llama-server reads it: `0` when absent,
/// `None` when it is not a number.
pub fn stream_from(target: &[u8]) -> Option<usize> {
    match query::pairs(target).find(|(k, _)| query::decode(k) == b"from") {
        None => Some(0),
        Some((_, v)) => std::str::from_utf8(&query::decode(v.unwrap_or(&[])))
            .ok()
            .and_then(|s| s.parse().ok()),
    }
}

/// Whether a request is the stream lookup (`POST /v1/streams/lookup`, the
/// path as llama-server decodes it).
pub fn is_lookup(method: &str, target: &[u8]) -> bool {
    method == "POST" && crate::request::path::decoded(target).as_ref() == LOOKUP_PATH
}

/// One tenant's conversation namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    prefix: String,
}

/// Why a lookup body was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// Not a JSON object whose `conversation_ids` is an array of strings.
    Malformed,
    /// More than [`MAX_LOOKUP_IDS`] ids.
    TooMany,
}

impl LookupError {
    /// The message the client reads.
    pub fn message(self) -> &'static str {
        match self {
            LookupError::Malformed => {
                "the lookup body must be a JSON object whose \"conversation_ids\" is an array of strings"
            }
            LookupError::TooMany => "a lookup names at most 1024 conversation ids",
        }
    }
}

impl Scope {
    /// The namespace of the tenant named `name`.
    pub fn of_tenant(name: &str) -> Scope {
        let tag = xxhash_rust::xxh3::xxh3_64(name.as_bytes());
        Scope {
            prefix: format!("t-{tag:016x}."),
        }
    }

    /// The one namespace of every caller (no named keys): ids go upstream
    /// as they are, and a lookup's answer keeps every entry.
    pub fn open() -> Scope {
        Scope {
            prefix: String::new(),
        }
    }

    /// The prefix every id of this scope starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `id` in this scope. An empty id stays empty (llama-server reads an
    /// empty id as none).
    pub fn scope(&self, id: &[u8]) -> Vec<u8> {
        if id.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(self.prefix.len() + id.len());
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(id);
        out
    }

    /// The id as the tenant named it, if `scoped` is in this scope.
    pub fn unscope<'a>(&self, scoped: &'a str) -> Option<&'a str> {
        scoped.strip_prefix(self.prefix.as_str())
    }

    /// The request target with every `conv_id` query parameter (its key
    /// and value decoded as llama-server decodes them) scoped and
    /// re-encoded, everything else as it was; `None` when it has none.
    pub fn scope_target(&self, target: &[u8]) -> Option<Vec<u8>> {
        let (start, end) = query::bounds(target)?;
        let query = &target[start..end];
        if !query::pairs(target).any(|(k, _)| query::decode(k) == PARAM) {
            return None;
        }
        let mut out = Vec::with_capacity(target.len() + self.prefix.len() * 2);
        out.extend_from_slice(&target[..start]);
        let mut first = true;
        for pair in query.split(|b| *b == b'&') {
            if !first {
                out.push(b'&');
            }
            first = false;
            let (key, value) = match memchr::memchr(b'=', pair) {
                Some(at) => (&pair[..at], Some(&pair[at + 1..])),
                None => (pair, None),
            };
            if key.is_empty() || query::decode(key) != PARAM {
                out.extend_from_slice(pair);
                continue;
            }
            let id = query::decode(value.unwrap_or(&[]));
            out.extend_from_slice(PARAM);
            out.push(b'=');
            out.extend_from_slice(query::encode(&self.scope(&id)).as_bytes());
        }
        out.extend_from_slice(&target[end..]);
        Some(out)
    }

    /// The lookup body llama-server gets: the client's ids scoped (empty
    /// ones dropped, as llama-server drops them).
    pub fn lookup_request(&self, body: &[u8]) -> Result<Vec<u8>, LookupError> {
        let v: Value = serde_json::from_slice(body).map_err(|_| LookupError::Malformed)?;
        let ids = v
            .as_object()
            .and_then(|o| o.get("conversation_ids"))
            .and_then(Value::as_array)
            .ok_or(LookupError::Malformed)?;
        if ids.len() > MAX_LOOKUP_IDS {
            return Err(LookupError::TooMany);
        }
        let mut scoped = Vec::with_capacity(ids.len());
        for id in ids {
            let id = id.as_str().ok_or(LookupError::Malformed)?;
            if !id.is_empty() {
                scoped.push(Value::String(format!("{}{id}", self.prefix)));
            }
        }
        let body = serde_json::json!({ "conversation_ids": scoped });
        serde_json::to_vec(&body).map_err(|_| LookupError::Malformed)
    }

    /// The lookup answer the client gets: only the entries of this scope,
    /// each `conversation_id` as the tenant named it; `None` when the
    /// answer is not a JSON array (nothing of it may reach the client).
    pub fn lookup_answer(&self, body: &[u8]) -> Option<Vec<u8>> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let entries = v.as_array()?;
        let mut kept = Vec::new();
        for entry in entries {
            let Some(obj) = entry.as_object() else {
                continue;
            };
            let Some(id) = obj.get("conversation_id").and_then(Value::as_str) else {
                continue;
            };
            let Some(own) = self.unscope(id).filter(|own| !own.is_empty()) else {
                continue;
            };
            let mut obj = obj.clone();
            obj.insert("conversation_id".into(), Value::String(own.to_string()));
            kept.push(Value::Object(obj));
        }
        serde_json::to_vec(&Value::Array(kept)).ok()
    }
}

#[cfg(test)]
mod tests;
