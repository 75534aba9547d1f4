//! Which fleet member holds which resumable stream: the conversation book,
//! and what a request says about a conversation ([`Claim`]).
//!
//! llama-server keeps the answer of a request that carried
//! `X-Conversation-Id` in a buffer of its own process, for
//! [`KEEP_AFTER_END`] after the answer ends; a replay, a stop or a
//! follow-up must reach that process. The [`Book`] remembers, per id (as
//! llama-server sees it: the tenant's scoped id), the member's name, from
//! the answer's head until [`KEEP_AFTER_END`] after its end. An answer
//! whose end is never reported is kept at most [`MAX_OPEN`]. The book holds
//! at most its capacity of ids: a new one beyond it forgets the oldest.
//!
//! Pure: the caller passes the time. Deliberately not here: reading ids off
//! requests, the shared store and the routing itself (the binary's
//! `conversations` module).

pub mod copies;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long llama-server keeps an ended answer's buffer
/// (`STREAM_SESSION_TTL_SECONDS` in `server-stream.cpp`).
pub const KEEP_AFTER_END: Duration = Duration::from_secs(300);

/// Longest an answer whose end was never reported stays in the book.
pub const MAX_OPEN: Duration = Duration::from_secs(3600);

/// Most ids a book holds by default.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// What a request does with a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// A generation carrying `X-Conversation-Id`: its answer is buffered.
    Generate,
    /// `GET /v1/stream`: a replay of a buffered answer.
    Replay,
    /// `DELETE /v1/stream`: a stop.
    Stop,
    /// `POST /v1/streams/lookup`, sent to one member of several.
    Lookup,
}

impl Use {
    /// The label: `generate`, `replay`, `stop`, `lookup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Use::Generate => "generate",
            Use::Replay => "replay",
            Use::Stop => "stop",
            Use::Lookup => "lookup",
        }
    }
}

/// What one request says about a conversation, and where it must go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// What the request does.
    pub usage: Use,
    /// The id as llama-server sees it (scoped to the tenant with named
    /// keys); empty for a lookup.
    pub id: String,
    /// The member that holds it (its name), when known.
    pub holder: Option<String>,
    /// Bytes of a generation read after its client hung up (observed,
    /// sent to nobody).
    pub unsent_bytes: u64,
    /// A generation's bytes so far, for its copy
    /// ([`copies`]); emptied once past [`copies::MAX_COPY`].
    pub seen: Vec<u8>,
    /// The generation outgrew [`copies::MAX_COPY`]: no copy is kept.
    pub overflow: bool,
    /// A replay served from llamatap's copy (its member was gone).
    pub from_copy: bool,
    /// A replay generating the rest of a cut copy on another member: its
    /// bytes (the copy's, then the rest's) are kept for the grown copy.
    pub rest: bool,
}

impl Claim {
    /// A claim of `usage` on `id`, held by `holder`.
    pub fn new(usage: Use, id: String, holder: Option<String>) -> Claim {
        Claim {
            usage,
            id,
            holder,
            unsent_bytes: 0,
            seen: Vec::new(),
            overflow: false,
            from_copy: false,
            rest: false,
        }
    }

    /// Keeps a generation's `chunk` (or the rest a replay generates) for
    /// its copy, within [`copies::MAX_COPY`].
    pub fn see(&mut self, chunk: &[u8]) {
        if !(self.usage == Use::Generate || self.rest) || self.overflow {
            return;
        }
        if self.seen.len() + chunk.len() > copies::MAX_COPY {
            self.overflow = true;
            self.seen = Vec::new();
            return;
        }
        self.seen.extend_from_slice(chunk);
    }
}

/// The bounded map from conversation id to the member holding it.
#[derive(Debug)]
pub struct Book {
    entries: HashMap<String, Entry>,
    /// Ids in the order they were written, with the write's number; an
    /// id written again has a stale pair here, skipped when evicting.
    order: VecDeque<(u64, String)>,
    next: u64,
    capacity: usize,
}

#[derive(Debug)]
struct Entry {
    member: String,
    until: Instant,
    open: bool,
    written: u64,
}

impl Book {
    /// A book of at most `capacity` ids (at least one).
    pub fn new(capacity: usize) -> Book {
        Book {
            entries: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            capacity: capacity.max(1),
        }
    }

    /// Ids held now (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the book holds no id.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// An answer for `id` started on `member` at `now`: it replaces
    /// whatever the id was held by (llama-server replaces a conversation's
    /// buffer too).
    pub fn started(&mut self, id: &str, member: &str, now: Instant) {
        self.write(id, member, now + MAX_OPEN, true);
    }

    /// The answer for `id` on `member` ended at `now`: kept
    /// [`KEEP_AFTER_END`] from now. Nothing changes when the id is held by
    /// another member since (a later answer replaced it).
    pub fn ended(&mut self, id: &str, member: &str, now: Instant) {
        match self.entries.get_mut(id) {
            Some(e) if e.member == member => {
                e.until = now + KEEP_AFTER_END;
                e.open = false;
            }
            Some(_) => {}
            None => self.write(id, member, now + KEEP_AFTER_END, false),
        }
    }

    /// Learns that `member` holds `id` until `until` (read from the shared
    /// store), unless the book knows a later answer.
    pub fn learn(&mut self, id: &str, member: &str, until: Instant) {
        if self.entries.get(id).is_some_and(|e| e.until >= until) {
            return;
        }
        self.write(id, member, until, false);
    }

    /// The member holding `id` at `now`, if any.
    pub fn holder(&mut self, id: &str, now: Instant) -> Option<&str> {
        if self.entries.get(id).is_some_and(|e| e.until <= now) {
            self.entries.remove(id);
        }
        self.entries.get(id).map(|e| e.member.as_str())
    }

    /// Whether the answer for `id` is still under way (its end not
    /// reported).
    pub fn is_open(&self, id: &str) -> bool {
        self.entries.get(id).is_some_and(|e| e.open)
    }

    /// `id` was stopped on `member`: forgotten (unless held elsewhere).
    pub fn forget(&mut self, id: &str, member: &str) {
        if self.entries.get(id).is_some_and(|e| e.member == member) {
            self.entries.remove(id);
        }
    }

    fn write(&mut self, id: &str, member: &str, until: Instant, open: bool) {
        let written = self.next;
        self.next += 1;
        let fresh = !self.entries.contains_key(id);
        if fresh {
            while self.entries.len() >= self.capacity {
                if !self.evict_oldest() {
                    break;
                }
            }
        }
        self.entries.insert(
            id.to_string(),
            Entry {
                member: member.to_string(),
                until,
                open,
                written,
            },
        );
        self.order.push_back((written, id.to_string()));
        if self.order.len() > self.capacity.saturating_mul(2) {
            self.compact();
        }
    }

    /// Forgets the id written longest ago; false when none is left.
    fn evict_oldest(&mut self) -> bool {
        while let Some((n, id)) = self.order.pop_front() {
            if self.entries.get(&id).is_some_and(|e| e.written == n) {
                self.entries.remove(&id);
                return true;
            }
        }
        false
    }

    /// Drops the stale pairs of `order`.
    fn compact(&mut self) {
        let entries = &self.entries;
        self.order
            .retain(|(n, id)| entries.get(id).is_some_and(|e| e.written == *n));
    }
}

#[cfg(test)]
mod tests;
