//! Stable 64-bit hashing for routing keys: XXH3-64 with a fixed seed, fed a
//! canonical, length-prefixed encoding of JSON values.
//!
//! Stable means that two llamatap processes compute the same hash for the
//! same request on any platform and across Rust releases: XXH3-64's output is
//! specified (xxHash 0.8 format), unlike `std`'s `DefaultHasher`. The seed
//! ([`SEED`]) and the encoding below are part of that contract; changing
//! either moves every conversation once.
//!
//! It is not a cryptographic hash: a client that crafts collisions can only
//! steer the placement of its own requests. The in-memory index keys its hash
//! table with a per-process random key (see `index`), so crafted link hashes
//! cannot degrade its lookups either.
//!
//! Encoding (each item starts with a one-byte tag, so no two different
//! values feed the same bytes): strings are their UTF-8 bytes prefixed with
//! the length as `u64` little-endian; numbers are 8 bytes (`u64`, `i64`, or
//! the `f64` bit pattern, each with its own tag); arrays are their length and
//! elements in order; objects are their length and the wrapping sum of one
//! hash per entry (key and value), so key order does not matter.

use serde_json::{Map, Value};
use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

/// The fixed seed of every routing hash: "llamatap" in ASCII.
pub const SEED: u64 = u64::from_be_bytes(*b"llamatap");

/// One-byte tags that start each encoded item.
#[derive(Clone, Copy)]
#[repr(u8)]
pub(super) enum Tag {
    Null = 0,
    False = 1,
    True = 2,
    Unsigned = 3,
    Signed = 4,
    Float = 5,
    Str = 6,
    Array = 7,
    Object = 8,
    /// A chain's root: what kind of request and for which model.
    Root = 16,
    /// A link made of a chat message (role, content, other fields).
    Message = 17,
    /// A link made of a chat input item that is not a message.
    Item = 18,
    /// A link made of the request's tool definitions.
    Tools = 19,
    /// A message's content as a list of parts.
    Parts = 20,
    /// A content part that is plain text.
    Text = 21,
    /// A block of a completion prompt.
    Block = 22,
    /// A leading block of a chat message's text.
    MessageBlock = 23,
}

/// An incremental XXH3-64 hasher that also counts the string bytes it was
/// fed: the size estimate of a link.
pub(super) struct Feed {
    state: Xxh3,
    bytes: u64,
}

impl Feed {
    /// A hasher seeded with [`SEED`] that has been fed nothing.
    pub fn new() -> Self {
        Feed {
            state: Xxh3::with_seed(SEED),
            bytes: 0,
        }
    }

    /// Feeds one tag byte.
    pub fn tag(&mut self, tag: Tag) {
        self.state.update(&[tag as u8]);
    }

    /// Feeds `n` as 8 bytes, little-endian.
    pub fn u64(&mut self, n: u64) {
        self.state.update(&n.to_le_bytes());
    }

    /// Feeds a length (a `usize`) as a `u64`.
    pub fn len(&mut self, n: usize) {
        self.u64(u64::try_from(n).unwrap_or(u64::MAX));
    }

    /// Feeds a string: [`Tag::Str`], its length, its bytes; counts the bytes.
    pub fn str(&mut self, s: &str) {
        self.tag(Tag::Str);
        self.raw(s.as_bytes());
    }

    /// Feeds bytes prefixed with their length (no tag); counts the bytes.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.len(bytes.len());
        self.state.update(bytes);
        self.bytes = self
            .bytes
            .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
    }

    /// Feeds a JSON value in the canonical encoding (see the module docs).
    pub fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.tag(Tag::Null),
            Value::Bool(false) => self.tag(Tag::False),
            Value::Bool(true) => self.tag(Tag::True),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.tag(Tag::Unsigned);
                    self.u64(u);
                } else if let Some(i) = n.as_i64() {
                    self.tag(Tag::Signed);
                    self.u64(u64::from_le_bytes(i.to_le_bytes()));
                } else {
                    self.tag(Tag::Float);
                    self.u64(n.as_f64().map_or(0, f64::to_bits));
                }
            }
            Value::String(s) => self.str(s),
            Value::Array(items) => {
                self.tag(Tag::Array);
                self.len(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => self.object(map, &[]),
        }
    }

    /// Feeds an object without the keys in `skip`, whatever its key order:
    /// [`Tag::Object`], the number of entries kept, and the wrapping sum of
    /// one hash per kept entry.
    pub fn object(&mut self, map: &Map<String, Value>, skip: &[&str]) {
        let mut count = 0usize;
        let mut sum = 0u64;
        for (key, value) in map {
            if skip.contains(&key.as_str()) {
                continue;
            }
            let mut entry = Feed::new();
            entry.str(key);
            entry.value(value);
            self.bytes = self.bytes.saturating_add(entry.bytes);
            sum = sum.wrapping_add(entry.state.digest());
            count += 1;
        }
        self.tag(Tag::Object);
        self.len(count);
        self.u64(sum);
    }

    /// The hash of everything fed, and the string bytes counted.
    pub fn finish(&self) -> (u64, u64) {
        (self.state.digest(), self.bytes)
    }
}

/// The stable hash of a string alone (an upstream's name, a session id).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, SEED)
}

/// The stable hash of two 64-bit values, in order (a rendezvous draw).
pub fn hash_pair(a: u64, b: u64) -> u64 {
    let mut bytes = [0u8; 16];
    let (left, right) = bytes.split_at_mut(8);
    left.copy_from_slice(&a.to_le_bytes());
    right.copy_from_slice(&b.to_le_bytes());
    xxh3_64_with_seed(&bytes, SEED)
}
