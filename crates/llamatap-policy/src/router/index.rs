//! A per-upstream bounded, approximate index of the chains routed to one
//! upstream: a least-recently-used set of link hashes.
//!
//! Since a link hash stands for the whole prompt up to it, a set of links is
//! enough to answer "how long a prefix of this chain was sent here":
//! [`PrefixIndex::matched`] walks the chain from its first link and stops at
//! the first link not in the set, so a lookup costs O(matched links + 1)
//! hash probes and never more than O(chain length).
//!
//! The set stays prefix-closed: [`PrefixIndex::insert`] touches a chain's
//! links from the last to the first, so a link is never older than the
//! links after it, and least-recently-used eviction removes a chain's deep
//! links before its first ones. A shared prefix (a system prompt) is touched
//! by every chain that carries it, so it stays while any of them does.
//!
//! Memory is bounded by the capacity, in links: each entry is one slot of a
//! hash table of `(u64, u32)` (16 bytes and a control byte, at most 8/7
//! slots per entry, rounded up to a power of two) and one 24-byte list node.
//! At the default capacity of [`DEFAULT_CAPACITY`] links that is 131,072
//! table slots (2,228,224 bytes) and 65,536 nodes (1,572,864 bytes): 3.8 MB
//! per upstream when full, 58 bytes per link. In links of 64 bytes of text
//! (a long message's blocks) that is 4 MiB of text, about a million tokens:
//! more than a llama-server keeps. [`PrefixIndex::memory_bytes`]
//! reports the current figure. The table is keyed with a random per-process
//! key, so crafted link hashes cannot pile into one slot.
//!
//! Approximate: it records what was sent, not what the upstream kept. An
//! answer that reused less than predicted proves nothing about the other
//! chains (llama-server may have chosen another slot, and its host-memory
//! prompt cache keeps prefixes past their slot), so nothing is dropped for
//! it; the index is emptied ([`PrefixIndex::clear`]) only when the upstream
//! restarted, and otherwise ages by least-recent use within its capacity.
//!
//! Not thread-safe by itself and framework-free: the caller holds it behind
//! its own lock.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Default capacity, in links, of one upstream's index.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// Largest capacity accepted: node positions are `u32`.
const MAX_CAPACITY: usize = 1 << 31;

/// No node (end of a list).
const NIL: u32 = u32::MAX;

/// The longest indexed prefix of a chain on one upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Match {
    /// Leading links of the chain found in the index.
    pub links: usize,
    /// When the last of those links was touched (the index's own clock);
    /// 0 when no link matched.
    pub stamp: u64,
}

/// A node of the recency list.
#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    stamp: u64,
    prev: u32,
    next: u32,
}

/// One upstream's bounded LRU set of link hashes; see the module docs.
#[derive(Debug)]
pub struct PrefixIndex {
    /// Link hash to node position.
    map: HashMap<u64, u32, KeyedState>,
    /// Node slab; unused nodes are chained through `next` from `free`.
    nodes: Vec<Node>,
    /// Most recently touched node.
    head: u32,
    /// Least recently touched node.
    tail: u32,
    /// First unused node.
    free: u32,
    capacity: usize,
    /// Touches so far; the stamp of the latest touch.
    clock: u64,
}

impl PrefixIndex {
    /// An empty index keeping at most `capacity` links (clamped to
    /// `1..=2^31`); nothing is allocated until links are inserted.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        PrefixIndex {
            map: HashMap::with_hasher(KeyedState::new()),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            free: NIL,
            capacity,
            clock: 0,
        }
    }

    /// Links held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no link is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The most links this index may ever hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The longest prefix of `links` in the index, found by probing from
    /// the first link until one is missing. Reads only: a lookup does not
    /// refresh recency.
    pub fn matched(&self, links: &[u64]) -> Match {
        let mut found = Match::default();
        for (at, key) in links.iter().enumerate() {
            let Some(&node) = self.map.get(key) else {
                break;
            };
            found = Match {
                links: at + 1,
                stamp: self.node(node).stamp,
            };
        }
        found
    }

    /// Records that `links` were sent to this upstream: touches each link,
    /// last to first, inserting the missing ones and evicting the least
    /// recently touched links beyond the capacity.
    pub fn insert(&mut self, links: &[u64]) {
        for &key in links.iter().rev() {
            self.touch(key);
        }
    }

    /// Drops every link (an upstream that restarted has an empty cache);
    /// the number dropped. Keeps the allocations.
    pub fn clear(&mut self) -> usize {
        let dropped = self.map.len();
        self.map.clear();
        self.nodes.clear();
        self.head = NIL;
        self.tail = NIL;
        self.free = NIL;
        dropped
    }

    /// Heap bytes held now, estimated from the table's and the slab's
    /// capacities (the table's control bytes and slot rounding included).
    pub fn memory_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(u64, u32)>() + 1;
        let slots = match self.map.capacity() {
            0 => 0,
            items if items < 8 => (items + 1).next_power_of_two(),
            items => (items * 8 / 7).next_power_of_two(),
        };
        slots * slot + self.nodes.capacity() * std::mem::size_of::<Node>()
    }

    // === recency list ===

    fn node(&self, at: u32) -> &Node {
        &self.nodes[at as usize]
    }

    fn node_mut(&mut self, at: u32) -> &mut Node {
        &mut self.nodes[at as usize]
    }

    /// Makes `key` the most recently touched link.
    fn touch(&mut self, key: u64) {
        self.clock += 1;
        let stamp = self.clock;
        if let Some(&at) = self.map.get(&key) {
            self.unlink(at);
            self.node_mut(at).stamp = stamp;
            self.push_front(at);
            return;
        }
        while self.map.len() >= self.capacity {
            self.evict_tail();
        }
        let at = self.allocate(Node {
            key,
            stamp,
            prev: NIL,
            next: NIL,
        });
        self.map.insert(key, at);
        self.push_front(at);
    }

    /// Stores `node` in an unused slot, growing the slab by at most its
    /// length (and never past the capacity) when none is free.
    fn allocate(&mut self, node: Node) -> u32 {
        if self.free != NIL {
            let at = self.free;
            self.free = self.node(at).next;
            *self.node_mut(at) = node;
            return at;
        }
        let len = self.nodes.len();
        if len == self.nodes.capacity() {
            let room = self.capacity.saturating_sub(len).max(1);
            self.nodes.reserve_exact(len.max(64).min(room));
        }
        self.nodes.push(node);
        u32::try_from(len).unwrap_or(NIL)
    }

    /// Removes the least recently touched link.
    fn evict_tail(&mut self) {
        let at = self.tail;
        if at == NIL {
            return;
        }
        self.unlink(at);
        let key = self.node(at).key;
        self.map.remove(&key);
        let free = self.free;
        self.node_mut(at).next = free;
        self.free = at;
    }

    /// Takes node `at` out of the recency list.
    fn unlink(&mut self, at: u32) {
        let Node { prev, next, .. } = *self.node(at);
        if prev == NIL {
            self.head = next;
        } else {
            self.node_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.node_mut(next).prev = prev;
        }
    }

    /// Puts node `at` at the front (most recent) of the recency list.
    fn push_front(&mut self, at: u32) {
        let head = self.head;
        {
            let node = self.node_mut(at);
            node.prev = NIL;
            node.next = head;
        }
        if head == NIL {
            self.tail = at;
        } else {
            self.node_mut(head).prev = at;
        }
        self.head = at;
    }
}

// === keyed table hashing ===

/// Builds [`Keyed`] hashers sharing one random per-process key.
#[derive(Clone, Debug)]
struct KeyedState {
    key: u64,
}

impl KeyedState {
    /// A state whose key comes from the standard library's random seed.
    fn new() -> Self {
        KeyedState {
            key: RandomState::new().hash_one(0x9E37_79B9_7F4A_7C15_u64) | 1,
        }
    }
}

impl BuildHasher for KeyedState {
    type Hasher = Keyed;

    fn build_hasher(&self) -> Keyed {
        Keyed {
            key: self.key,
            state: 0,
        }
    }
}

/// A table hasher for link hashes: one keyed folded multiply per word, so
/// every output bit depends on every input bit and on the key.
struct Keyed {
    key: u64,
    state: u64,
}

impl Hasher for Keyed {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let product = u128::from(self.state ^ n ^ self.key) * u128::from(0x9E37_79B9_7F4A_7C15_u64);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}
