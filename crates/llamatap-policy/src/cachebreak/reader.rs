//! A [`PromptDigest`] read from a body's prompt fields as the body is
//! parsed ([`request::PromptReader`]): each field is digested on its own,
//! the last of a field named twice counts, and the digest is put together
//! in the prompt's order once the model is known.
//!
//! Work per request is linear in the body's bytes: no tree is built, no
//! text copied (but a content part's text, once), nothing allocated per
//! JSON value; items past [`MAX_MESSAGES`] in a field are parsed and
//! skipped, not digested.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::digest::{MessageDigest, PromptDigest};
use super::hash::{self, pair, visit_numbers, Scratch, ValueHash};
use super::message::{Content, ContentSeed, Item};
use super::{MAX_MESSAGES, MAX_TOOLS};
use crate::router::SEED;
use llamatap_wire::request::{self, PromptField, PromptReader, RequestFacts, Route};

#[cfg(test)]
mod tests;

/// Whether `route` carries a chat prompt.
pub(super) fn is_chat(route: Route) -> bool {
    matches!(
        route,
        Route::ChatCompletions | Route::Messages | Route::Responses
    )
}

/// Reads a complete request body once: its facts and, on a chat route
/// ([`Route::ChatCompletions`], [`Route::Messages`], [`Route::Responses`]),
/// the digest of its prompt (with `capture`, each message's text kept,
/// bounded). Equal to [`PromptDigest::from_json`] of the parsed body.
pub fn inspect(route: Route, body: &[u8], capture: bool) -> (RequestFacts, Option<PromptDigest>) {
    if !is_chat(route) {
        return (request::inspect_body(body), None);
    }
    let mut reader = DigestReader::new(capture);
    let facts = request::inspect_body_with_prompt(body, &mut reader);
    let digest = reader.finish(facts.model.as_deref().unwrap_or(""));
    (facts, Some(digest))
}

/// Chat items, each with whether it is a `user` message.
type Items = Vec<(MessageDigest, bool)>;

/// A prompt's fields, digested as they are read.
#[derive(Default)]
pub(super) struct DigestReader {
    capture: bool,
    scratch: Scratch,
    system: Option<MessageDigest>,
    instructions: Option<MessageDigest>,
    messages: Items,
    input: Items,
    tools: Vec<u64>,
}

impl DigestReader {
    pub fn new(capture: bool) -> Self {
        DigestReader {
            capture,
            ..Self::default()
        }
    }

    /// The digest, for a body naming `model`.
    pub fn finish(self, model: &str) -> PromptDigest {
        let model = xxh3_64_with_seed(model.as_bytes(), SEED);
        let tops = [self.system, self.instructions];
        let items = tops.into_iter().flatten().map(|m| (m, false));
        let all = items.chain(self.messages).chain(self.input);
        let mut messages = Vec::new();
        let mut user_keys = Vec::new();
        for (m, user) in all.take(MAX_MESSAGES) {
            if user {
                user_keys.push(pair(model, m.content));
            }
            messages.push(m);
        }
        PromptDigest {
            key: user_keys.first().copied(),
            user_keys: user_keys.into_boxed_slice(),
            tools: self.tools.into_boxed_slice(),
            messages: messages.into_boxed_slice(),
        }
    }
}

impl PromptReader for DigestReader {
    fn read<'de, D: Deserializer<'de>>(
        &mut self,
        field: PromptField,
        value: D,
    ) -> Result<(), D::Error> {
        let (scratch, capture) = (&mut self.scratch, self.capture);
        match field {
            PromptField::System | PromptField::Instructions => {
                let content = ContentSeed { scratch, capture }.deserialize(value)?;
                let m = (!content.is_null()).then(|| content.message("system", 0, 0, 0));
                match field {
                    PromptField::System => self.system = m,
                    _ => self.instructions = m,
                }
            }
            PromptField::Messages => {
                let text = false;
                self.messages = ItemsSeed {
                    scratch,
                    capture,
                    text,
                }
                .deserialize(value)?;
            }
            PromptField::Input => {
                let text = true;
                self.input = ItemsSeed {
                    scratch,
                    capture,
                    text,
                }
                .deserialize(value)?;
            }
            PromptField::Tools => self.tools = Tools(scratch).deserialize(value)?,
        }
        Ok(())
    }
}

/// `messages` or `input`: the items of a list (the first [`MAX_MESSAGES`]),
/// or with `text` a string as one `user` message; nothing for other values.
struct ItemsSeed<'s> {
    scratch: &'s mut Scratch,
    capture: bool,
    text: bool,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Items;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of chat items")
    }

    fn visit_unit<E>(self) -> Result<Items, E> {
        Ok(Vec::new())
    }

    visit_numbers!(self, _h => Vec::new());

    fn visit_str<E>(self, s: &str) -> Result<Items, E> {
        if !self.text {
            return Ok(Vec::new());
        }
        let m = Content::text(s, self.capture).message("user", 0, 0, 0);
        Ok(vec![(m, true)])
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        let mut items = Vec::new();
        while items.len() < MAX_MESSAGES {
            let item = Item {
                scratch: &mut *self.scratch,
                capture: self.capture,
            };
            match seq.next_element_seed(item)? {
                Some(item) => items.push(item),
                None => return Ok(items),
            }
        }
        // Beyond what a digest keeps: read, not digested.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(items)
    }
}

/// `tools`: one hash per definition, the last of [`MAX_TOOLS`] covering
/// those beyond; any other value but `null` as one hash.
struct Tools<'s>(&'s mut Scratch);

impl<'de> DeserializeSeed<'de> for Tools<'_> {
    type Value = Vec<u64>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tools<'_> {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of tools")
    }

    fn visit_unit<E>(self) -> Result<Vec<u64>, E> {
        Ok(Vec::new())
    }

    visit_numbers!(self, h => vec![h]);

    fn visit_str<E>(self, s: &str) -> Result<Vec<u64>, E> {
        Ok(vec![hash::string(s)])
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<u64>, A::Error> {
        Ok(vec![hash::object(map, self.0)?])
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut hashes = Vec::new();
        let mut rest = hash::Array::new();
        while let Some(h) = seq.next_element_seed(ValueHash(&mut *self.0))? {
            if hashes.len() < MAX_TOOLS {
                hashes.push(h);
            }
            if hashes.len() == MAX_TOOLS {
                rest.push(h);
            }
        }
        if rest.len() > 1 {
            if let Some(last) = hashes.last_mut() {
                *last = rest.finish();
            }
        }
        Ok(hashes)
    }
}
