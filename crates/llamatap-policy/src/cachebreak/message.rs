//! One chat item's [`MessageDigest`], computed as the item is parsed: a
//! message (an object with a string `role`) by field, anything else as one
//! value hash ([`super::hash`]).
//!
//! Since an object's keys come in any order and a key may come twice (the
//! last counts), nothing is decided before the object ends: each field's
//! digest is kept until then, and a content part's `text` is copied once
//! (into [`Scratch::text`]) until its `type` is known. An item that is not
//! a message hashes its `content` by the content's digest (so a string and
//! one text part holding it hash alike there too).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use xxhash_rust::xxh3::xxh3_64;

use super::chunker::Chunker;
use super::digest::MessageDigest;
use super::hash::{self, entry, pair, visit_numbers, Key, Object, Scratch, Tee, Teed, ValueHash};

/// Content part types whose `text` is plain text.
const TEXT_PART_TYPES: [&str; 3] = ["text", "input_text", "output_text"];

/// The message fields hashed apart, in [`Key`] order.
const MESSAGE_FIELDS: &[&str] = &["role", "content", "name", "tool_calls"];
/// A content part's fields of interest, in [`Key`] order.
const PART_FIELDS: &[&str] = &["type", "text"];

/// A role's class: 1 for `system` and `developer`, 2 for `user`.
fn role_class(role: &str) -> u8 {
    match role {
        "system" | "developer" => 1,
        "user" => 2,
        _ => 0,
    }
}

/// 1 for a content part type whose `text` is plain text.
fn part_class(kind: &str) -> u8 {
    u8::from(TEXT_PART_TYPES.contains(&kind))
}

fn no_class(_: &str) -> u8 {
    0
}

/// A message's content as read: its text's chunker and its other parts
/// folded into one hash.
pub(super) struct Content {
    chunker: Chunker,
    parts: u64,
    /// The content was `null`.
    null: bool,
}

impl Content {
    /// The content of a message without one.
    pub fn absent(capture: bool) -> Self {
        Content {
            chunker: Chunker::new(capture),
            parts: 3,
            null: false,
        }
    }

    /// Whether the content was `null`.
    pub fn is_null(&self) -> bool {
        self.null
    }

    /// The content of a plain string.
    pub fn text(text: &str, capture: bool) -> Self {
        let mut chunker = Chunker::new(capture);
        chunker.feed(text);
        Content {
            chunker,
            parts: 0,
            null: false,
        }
    }

    /// The message of `role` with this content and the other fields' hashes.
    pub fn message(self, role: &str, name: u64, tool_calls: u64, other: u64) -> MessageDigest {
        self.into_message(
            xxh3_64(role.as_bytes()),
            role_class(role) == 1,
            name,
            tool_calls,
            other,
        )
    }

    fn into_message(
        self,
        role: u64,
        system: bool,
        name: u64,
        tool_calls: u64,
        other: u64,
    ) -> MessageDigest {
        let (text_digest, chars, chunks, text) = self.chunker.finish();
        MessageDigest {
            role,
            system,
            content: pair(text_digest, self.parts),
            name,
            tool_calls,
            other,
            chars,
            chunks,
            text,
        }
    }
}

/// A chat item's digest, and whether it is a `user` message.
pub(super) struct Item<'s> {
    pub scratch: &'s mut Scratch,
    pub capture: bool,
}

impl Item<'_> {
    /// A non-message item: its whole value's hash.
    fn whole(h: u64) -> (MessageDigest, bool) {
        let m = MessageDigest {
            role: 0,
            system: false,
            content: 0,
            name: 0,
            tool_calls: 0,
            other: h,
            chars: 0,
            chunks: Box::new([]),
            text: None,
        };
        (m, false)
    }
}

impl<'de> DeserializeSeed<'de> for Item<'_> {
    type Value = (MessageDigest, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Item<'_> {
    type Value = (MessageDigest, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a chat message")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Item::whole(hash::null()))
    }

    visit_numbers!(self, h => Item::whole(h));

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Item::whole(hash::string(s)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok(Item::whole(hash::array(seq, self.scratch)?))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let scratch = self.scratch;
        let mut object = Object::open(scratch);
        // The last value of each field hashed apart: its key's hash, its
        // value's hash, and what else was read of it. The content is not
        // an entry of `object`: its digest stands for it, once complete.
        let mut role: Option<(u64, Teed)> = None;
        let mut content: Option<(u64, Content)> = None;
        let mut name: Option<(u64, u64)> = None;
        let mut tool_calls: Option<(u64, u64)> = None;
        while let Some((key, field)) = map.next_key_seed(Key(MESSAGE_FIELDS))? {
            let value = match field {
                Some(0) => {
                    let teed = map.next_value_seed(Tee {
                        scratch: &mut *scratch,
                        class: role_class,
                        keep: false,
                    })?;
                    role = Some((key, teed));
                    teed.0
                }
                Some(1) => {
                    let c = map.next_value_seed(ContentSeed {
                        scratch: &mut *scratch,
                        capture: self.capture,
                    })?;
                    content = Some((key, c));
                    continue;
                }
                Some(2) => {
                    let h = map.next_value_seed(ValueHash(&mut *scratch))?;
                    name = Some((key, h));
                    h
                }
                Some(3) => {
                    let h = map.next_value_seed(ValueHash(&mut *scratch))?;
                    tool_calls = Some((key, h));
                    h
                }
                _ => map.next_value_seed(ValueHash(&mut *scratch))?,
            };
            object.push(scratch, key, value);
        }
        let mut entries = object.close(scratch);
        let content_key = content.as_ref().map(|(key, _)| *key);
        let content = content.map_or_else(|| Content::absent(self.capture), |(_, c)| c);
        let Some((role_key, (role_value, Some((role, class))))) = role else {
            // Not a message: the whole item's hash.
            let m = content.into_message(0, false, 0, 0, 0);
            if let Some(key) = content_key {
                entries.add(entry(key, m.content));
            }
            return Ok(Item::whole(entries.hash()));
        };
        // The other fields' sum: every field's, less those hashed apart.
        let mut other = entries.sum.wrapping_sub(entry(role_key, role_value));
        let mut apart = |field: Option<(u64, u64)>| {
            field.map_or(0, |(key, value)| {
                other = other.wrapping_sub(entry(key, value));
                value
            })
        };
        let name = apart(name);
        let tool_calls = apart(tool_calls);
        let m = content.into_message(role, class == 1, name, tool_calls, other);
        Ok((m, class == 2))
    }
}

/// A message's content: a string is text; a list is parts, text parts as
/// text and others by hash; anything else (`null` included) is one hash.
pub(super) struct ContentSeed<'s> {
    pub scratch: &'s mut Scratch,
    pub capture: bool,
}

impl ContentSeed<'_> {
    fn other(self, h: u64) -> Content {
        let mut c = Content::absent(self.capture);
        c.parts = pair(2, h);
        c
    }
}

impl<'de> DeserializeSeed<'de> for ContentSeed<'_> {
    type Value = Content;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ContentSeed<'_> {
    type Value = Content;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message content")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        let mut c = self.other(hash::null());
        c.null = true;
        Ok(c)
    }

    visit_numbers!(self, h => self.other(h));

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Content::text(s, self.capture))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let h = hash::object(map, &mut *self.scratch)?;
        Ok(self.other(h))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let scratch = self.scratch;
        let mut content = Content {
            chunker: Chunker::new(self.capture),
            parts: 0,
            null: false,
        };
        while let Some((h, text)) = seq.next_element_seed(Part(&mut *scratch))? {
            if text {
                content.chunker.feed(&scratch.text);
            } else {
                content.parts = pair(content.parts ^ 1, h);
            }
        }
        Ok(content)
    }
}

/// A content part: its hash, and whether it is a plain text part (an
/// object with a text `type` and a string `text`, left in
/// [`Scratch::text`]).
struct Part<'s>(&'s mut Scratch);

impl<'de> DeserializeSeed<'de> for Part<'_> {
    type Value = (u64, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Part<'_> {
    type Value = (u64, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a content part")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((hash::null(), false))
    }

    visit_numbers!(self, h => (h, false));

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok((hash::string(s), false))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Ok((hash::array(seq, self.0)?, false))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let scratch = self.0;
        let mut object = Object::open(scratch);
        let (mut text_type, mut text) = (false, false);
        while let Some((key, field)) = map.next_key_seed(Key(PART_FIELDS))? {
            let (h, string) = match field {
                Some(0) => map.next_value_seed(Tee {
                    scratch: &mut *scratch,
                    class: part_class,
                    keep: false,
                })?,
                Some(1) => map.next_value_seed(Tee {
                    scratch: &mut *scratch,
                    class: no_class,
                    keep: true,
                })?,
                _ => (map.next_value_seed(ValueHash(&mut *scratch))?, None),
            };
            match field {
                Some(0) => text_type = string.is_some_and(|(_, class)| class == 1),
                Some(1) => text = string.is_some(),
                _ => {}
            }
            object.push(scratch, key, h);
        }
        Ok((object.close(scratch).hash(), text_type && text))
    }
}
