//! The bounded record of recent conversations: each one's last turn, least
//! recently used first out, within a byte budget.

use std::collections::{BTreeMap, HashMap};

use super::diagnose::{diagnose, edited_in_place};
use super::digest::PromptDigest;
use super::{Cause, Diagnosis, Observed};

#[cfg(test)]
mod tests;

/// The default budget: 8 MiB of accounted bytes.
pub const DEFAULT_BUDGET_BYTES: usize = 8 * 1024 * 1024;

/// Bytes accounted per conversation beyond its digest: its slot in the hash
/// map (key, tick and turn, plus a control byte, at 8/7 load) and its
/// recency node (two `u64` in a B-tree, counted at twice their size).
const ENTRY_OVERHEAD: usize = 48;

/// Bytes accounted per alias (a later user message's key): its hash-map slot.
const ALIAS_OVERHEAD: usize = 24;

/// A conversation's last turn as remembered.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Its prompt's digest.
    pub digest: PromptDigest,
    /// Its prompt tokens, cached included (`None`: not reported).
    pub tokens: Option<u64>,
    /// The upstream that answered it.
    pub upstream: Option<u64>,
}

impl Turn {
    fn bytes(&self) -> usize {
        self.digest.bytes() + std::mem::size_of::<Turn>() - std::mem::size_of::<PromptDigest>()
            + ENTRY_OVERHEAD
            + self.digest.user_keys.len() * ALIAS_OVERHEAD
    }
}

/// Recent conversations by key, bounded by [`Book::budget`] accounted bytes.
#[derive(Debug)]
pub struct Book {
    budget: usize,
    bytes: usize,
    tick: u64,
    turns: HashMap<u64, (u64, Turn)>,
    recency: BTreeMap<u64, u64>,
    /// A later user message's key -> its conversation's key.
    aliases: HashMap<u64, u64>,
}

impl Book {
    /// An empty book holding at most `budget` accounted bytes.
    pub fn new(budget: usize) -> Self {
        Book {
            budget,
            bytes: 0,
            tick: 0,
            turns: HashMap::new(),
            recency: BTreeMap::new(),
            aliases: HashMap::new(),
        }
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Accounted bytes now: the sum over conversations of their digests
    /// ([`PromptDigest::bytes`]) and a fixed per-entry overhead; never more
    /// than the budget.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Conversations remembered now.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether no conversation is remembered.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The last turn remembered under `key`.
    pub fn get(&self, key: u64) -> Option<&Turn> {
        self.turns.get(&key).map(|(_, t)| t)
    }

    /// Diagnoses a finished turn against its conversation's previous one,
    /// then remembers it as the conversation's last turn. `None` when the
    /// prompt names no conversation (no key).
    ///
    /// A prompt whose first user message is a later user message of a
    /// remembered conversation (its oldest turns dropped) is compared with
    /// that conversation; unless the comparison finds exactly that
    /// ([`Cause::HistoryTruncated`]), it is a new conversation. So is a
    /// prompt whose first user message was edited while every later message
    /// of a remembered conversation is kept (an agent rewriting its
    /// history): found by a later user message, it is
    /// [`Cause::HistoryEdited`] at that first message.
    pub fn diagnose(&mut self, digest: PromptDigest, obs: Observed) -> Option<Diagnosis> {
        let key = digest.key?;
        let mut d = diagnose(self.get(key), &digest, obs);
        if d.cause == Cause::NewConversation {
            if let Some(&primary) = self.aliases.get(&key) {
                let via = diagnose(self.get(primary), &digest, obs);
                if via.cause == Cause::HistoryTruncated {
                    // The conversation lives on under its new first message.
                    d = via;
                    self.forget(primary);
                }
            }
        }
        if d.cause == Cause::NewConversation {
            let edited = digest
                .user_keys
                .iter()
                .filter(|k| **k != key)
                .find_map(|k| self.aliases.get(k).copied())
                .filter(|p| {
                    self.get(*p)
                        .is_some_and(|t| edited_in_place(&t.digest, &digest))
                });
            if let Some(primary) = edited {
                d = diagnose(self.get(primary), &digest, obs);
                self.forget(primary);
            }
        }
        self.remember(
            key,
            Turn {
                digest,
                tokens: obs.prompt_tokens(),
                upstream: obs.upstream,
            },
        );
        Some(d)
    }

    /// Stores `turn` under `key` as the most recent, evicting the least
    /// recently used until the budget holds. A turn larger than the whole
    /// budget is not kept (and its conversation is forgotten).
    pub fn remember(&mut self, key: u64, turn: Turn) {
        self.forget(key);
        let size = turn.bytes();
        if size > self.budget {
            return;
        }
        while self.bytes + size > self.budget {
            let Some((_, oldest)) = self.recency.pop_first() else {
                break;
            };
            if let Some((_, t)) = self.turns.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(t.bytes());
                self.drop_aliases(oldest, &t);
            }
        }
        self.tick += 1;
        self.recency.insert(self.tick, key);
        for &alias in turn.digest.user_keys.iter().filter(|&&k| k != key) {
            self.aliases.insert(alias, key);
        }
        self.turns.insert(key, (self.tick, turn));
        self.bytes += size;
    }

    /// Forgets the conversation under `key`.
    pub fn forget(&mut self, key: u64) {
        if let Some((tick, t)) = self.turns.remove(&key) {
            self.recency.remove(&tick);
            self.bytes = self.bytes.saturating_sub(t.bytes());
            self.drop_aliases(key, &t);
        }
    }

    /// Removes the aliases of `turn` that still point to `key`.
    fn drop_aliases(&mut self, key: u64, turn: &Turn) {
        for alias in turn.digest.user_keys.iter() {
            if self.aliases.get(alias) == Some(&key) {
                self.aliases.remove(alias);
            }
        }
    }
}

impl Default for Book {
    fn default() -> Self {
        Book::new(DEFAULT_BUDGET_BYTES)
    }
}
