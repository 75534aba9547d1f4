//! The hash of a JSON value, computed as the value is parsed: equal for
//! equal values whatever the whitespace, the escapes, the order of an
//! object's keys or a key named twice in one object (the last one counts,
//! as in a parsed `serde_json::Value`), and never a tree, a copy of the text
//! or an allocation per value.
//!
//! Each value hashes to 64 bits: a scalar from its type and its bits, an
//! array from its elements' hashes in order, an object from the sum of its
//! entries' (key, value) hashes, so order-free. The entries of the objects
//! open at one time sit on one stack ([`Scratch`]), which grows once per
//! request: a key named twice is found by sorting an object's entries when
//! it closes.
//!
//! What it deliberately is not: stable across processes or versions (the
//! hashes are compared within one process only), or a canonical form of
//! numbers: `1` and `1.0` differ, as they do in a parsed value.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use xxhash_rust::xxh3::xxh3_64;

/// Type tags mixed into the hashes.
const NULL: u64 = 0;
const BOOL: u64 = 1;
const UNSIGNED: u64 = 2;
const STRING: u64 = 3;
const ARRAY: u64 = 4;
const OBJECT: u64 = 5;
const SIGNED: u64 = 6;
const FLOAT: u64 = 7;

/// The hash of two hashes, in order: XXH3's formula for 16 bytes of
/// input, inline (this runs once or twice per JSON value).
pub(super) fn pair(a: u64, b: u64) -> u64 {
    const K0: u64 = 0x9E37_79B1_85EB_CA87;
    const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
    let (lo, hi) = (a ^ K0, b ^ K1);
    let product = u128::from(lo).wrapping_mul(u128::from(hi));
    let folded = (product as u64) ^ ((product >> 64) as u64);
    let mut h = 16u64
        .wrapping_add(lo.swap_bytes())
        .wrapping_add(hi)
        .wrapping_add(folded);
    h ^= h >> 37;
    h = h.wrapping_mul(0x1656_6791_9E37_79F9);
    h ^ (h >> 32)
}

/// The hash of `null`.
pub(super) fn null() -> u64 {
    pair(NULL, 0)
}

/// The hash of a boolean.
pub(super) fn boolean(b: bool) -> u64 {
    pair(BOOL, u64::from(b))
}

/// The hash of a non-negative integer.
pub(super) fn unsigned(n: u64) -> u64 {
    pair(UNSIGNED, n)
}

/// The hash of an integer (a non-negative one as [`unsigned`]).
pub(super) fn signed(n: i64) -> u64 {
    match u64::try_from(n) {
        Ok(n) => unsigned(n),
        Err(_) => pair(SIGNED, n as u64),
    }
}

/// The hash of a float: its bits.
pub(super) fn float(x: f64) -> u64 {
    pair(FLOAT, x.to_bits())
}

/// The hash of a string.
pub(super) fn string(s: &str) -> u64 {
    pair(STRING, xxh3_64(s.as_bytes()))
}

/// The `visit_bool`, `visit_u64`, `visit_i64` and `visit_f64` of a visitor
/// whose value for such a scalar is `$value`, with the scalar's hash as `$h`.
macro_rules! visit_numbers {
    ($self:ident, $h:ident => $value:expr) => {
        fn visit_bool<E>($self, b: bool) -> Result<Self::Value, E> {
            let $h = $crate::cachebreak::hash::boolean(b);
            Ok($value)
        }

        fn visit_u64<E>($self, n: u64) -> Result<Self::Value, E> {
            let $h = $crate::cachebreak::hash::unsigned(n);
            Ok($value)
        }

        fn visit_i64<E>($self, n: i64) -> Result<Self::Value, E> {
            let $h = $crate::cachebreak::hash::signed(n);
            Ok($value)
        }

        fn visit_f64<E>($self, x: f64) -> Result<Self::Value, E> {
            let $h = $crate::cachebreak::hash::float(x);
            Ok($value)
        }
    };
}
pub(super) use visit_numbers;

/// Per-request working memory: the entries of the objects being read.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// (key hash, index in its object, value hash).
    entries: Vec<(u64, u32, u64)>,
    /// The last string kept by a [`Tee`] with `keep`.
    pub text: String,
}

/// An array's hash, element by element.
pub(super) struct Array {
    acc: u64,
    len: u64,
}

impl Array {
    pub fn new() -> Self {
        Array { acc: ARRAY, len: 0 }
    }

    pub fn push(&mut self, element: u64) {
        self.acc = pair(self.acc, element);
        self.len += 1;
    }

    /// Elements pushed.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn finish(&self) -> u64 {
        pair(pair(ARRAY, self.len), self.acc)
    }
}

/// An object's hash, entry by entry, on the [`Scratch`] stack.
pub(super) struct Object {
    start: usize,
    next: u32,
}

impl Object {
    pub fn open(scratch: &Scratch) -> Self {
        Object {
            start: scratch.entries.len(),
            next: 0,
        }
    }

    pub fn push(&mut self, scratch: &mut Scratch, key: u64, value: u64) {
        scratch.entries.push((key, self.next, value));
        self.next = self.next.wrapping_add(1);
    }

    /// Its entries, each key once with its last value. Pops them.
    pub fn close(self, scratch: &mut Scratch) -> Entries {
        let mut all = Entries { count: 0, sum: 0 };
        if let Some(entries) = scratch.entries.get_mut(self.start..) {
            if entries.len() > 1 {
                entries.sort_unstable_by_key(|&(key, at, _)| (key, at));
            }
            let mut iter = entries.iter().peekable();
            while let Some(&(key, _, value)) = iter.next() {
                if iter.peek().is_some_and(|next| next.0 == key) {
                    continue; // a later value for this key counts
                }
                all.add(entry(key, value));
            }
        }
        scratch.entries.truncate(self.start);
        all
    }
}

/// An object's entries: how many, and the sum of their hashes.
pub(super) struct Entries {
    count: u64,
    pub sum: u64,
}

impl Entries {
    /// Counts one more entry, of hash `entry`.
    pub fn add(&mut self, entry: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(entry);
    }

    /// The object's hash.
    pub fn hash(&self) -> u64 {
        pair(pair(OBJECT, self.count), self.sum)
    }
}

/// The hash of one object entry.
pub(super) fn entry(key: u64, value: u64) -> u64 {
    pair(key, value)
}

/// Reads an array's elements with `ValueHash`.
pub(super) fn array<'de, A: SeqAccess<'de>>(
    mut seq: A,
    scratch: &mut Scratch,
) -> Result<u64, A::Error> {
    let mut array = Array::new();
    while let Some(h) = seq.next_element_seed(ValueHash(&mut *scratch))? {
        array.push(h);
    }
    Ok(array.finish())
}

/// Reads an object's entries with `ValueHash`.
pub(super) fn object<'de, A: MapAccess<'de>>(
    mut map: A,
    scratch: &mut Scratch,
) -> Result<u64, A::Error> {
    let mut object = Object::open(scratch);
    while let Some((key, _)) = map.next_key_seed(Key(&[]))? {
        let value = map.next_value_seed(ValueHash(&mut *scratch))?;
        object.push(scratch, key, value);
    }
    Ok(object.close(scratch).hash())
}

/// An object key: its hash, and its index in a list of names of interest.
pub(super) struct Key(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = (u64, Option<usize>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Key {
    type Value = (u64, Option<usize>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok((
            xxh3_64(key.as_bytes()),
            self.0.iter().position(|n| *n == key),
        ))
    }
}

/// Any JSON value's hash.
pub(super) struct ValueHash<'s>(pub &'s mut Scratch);

impl<'de> DeserializeSeed<'de> for ValueHash<'_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueHash<'_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(null())
    }

    visit_numbers!(self, h => h);

    fn visit_str<E>(self, s: &str) -> Result<u64, E> {
        Ok(string(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<u64, A::Error> {
        array(seq, self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<u64, A::Error> {
        object(map, self.0)
    }
}

/// A value's hash and, when it is a string, the string's own hash and its
/// class by `class`; with `keep`, the string is also copied into
/// [`Scratch::text`].
pub(super) struct Tee<'s> {
    pub scratch: &'s mut Scratch,
    pub class: fn(&str) -> u8,
    pub keep: bool,
}

/// What a [`Tee`] read: the value's hash, and for a string (its
/// `xxh3_64`, its class).
pub(super) type Teed = (u64, Option<(u64, u8)>);

impl<'de> DeserializeSeed<'de> for Tee<'_> {
    type Value = Teed;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Teed, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tee<'_> {
    type Value = Teed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Teed, E> {
        Ok((null(), None))
    }

    visit_numbers!(self, h => (h, None));

    fn visit_str<E>(self, s: &str) -> Result<Teed, E> {
        if self.keep {
            self.scratch.text.clear();
            self.scratch.text.push_str(s);
        }
        let own = xxh3_64(s.as_bytes());
        Ok((pair(STRING, own), Some((own, (self.class)(s)))))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Teed, A::Error> {
        Ok((array(seq, self.scratch)?, None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Teed, A::Error> {
        Ok((object(map, self.scratch)?, None))
    }
}
