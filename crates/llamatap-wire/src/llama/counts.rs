//! [`CountScanner`]: the token counts of a non-streaming answer too large to
//! keep, read as its bytes pass, holding only the few top-level fields
//! that carry them.
//!
//! A whole JSON answer is parsed by [`super::parse_response`] once it is
//! complete, which means holding it. An answer larger than that (a chat
//! with `top_logprobs` runs to megabytes for a few hundred tokens) still
//! states its counts in small top-level fields: `usage` and `timings`
//! (OpenAI, Anthropic, Responses), `tokens_predicted` and
//! `tokens_evaluated` (native). The scanner follows the JSON's nesting
//! byte by byte (strings, escapes, depth) and copies only those fields'
//! values, each up to [`MAX_FIELD_BYTES`]; at the end they are read by the
//! same parser as a whole answer. Their place in the body does not matter
//! (a native answer puts `timings` before its `completion_probabilities`),
//! and text inside a string can never pose as a field: only keys of the
//! top-level object are read.
//!
//! Deliberately not here: finish reasons and text (inside `choices`), and a
//! native answer that is an array of results (several prompts): its counts
//! are inside the array's objects, so nothing is read.

use super::{parse_response, ResponseFacts, StreamFormat};

/// Largest field value kept, in bytes (a `usage` or `timings` object is a
/// few hundred).
pub const MAX_FIELD_BYTES: usize = 4096;

/// Longest key compared, in bytes (longer keys are not ones kept).
const MAX_KEY_BYTES: usize = 32;

/// The top-level fields kept.
const FIELDS: [&[u8]; 6] = [
    b"usage",
    b"timings",
    b"tokens_predicted",
    b"tokens_evaluated",
    b"model",
    b"id",
];

/// Reads a JSON answer's counting fields as it passes; see the module.
#[derive(Debug, Default)]
pub struct CountScanner {
    /// Nesting depth: 1 inside the top-level object.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The top-level value is an object (not an array or a scalar).
    object: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// The key being read (at depth 1), while it is.
    key: Option<Vec<u8>>,
    /// The last key read names a kept field (its index in [`FIELDS`]).
    named: Option<usize>,
    /// The value being copied: its field and bytes so far (`None` once it
    /// outgrew [`MAX_FIELD_BYTES`]).
    value: Option<(usize, Option<Vec<u8>>)>,
    /// The last complete value of each field.
    kept: [Option<Vec<u8>>; FIELDS.len()],
}

impl CountScanner {
    /// A scanner at the start of a body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next `chunk` of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string && !self.escaped && self.key.is_none() && self.value.is_none() {
                // Inside a string no field is read: skip to its next quote
                // or backslash at once.
                match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                    Some(n) => i += n,
                    None => return,
                }
            }
            self.byte(chunk[i]);
            i += 1;
        }
    }

    fn byte(&mut self, c: u8) {
        if self.in_string {
            self.copy(c);
            if self.escaped {
                self.escaped = false;
                self.push_key(c);
            } else if c == b'\\' {
                self.escaped = true;
                self.push_key(c);
            } else if c == b'"' {
                self.in_string = false;
                if let Some(key) = self.key.take() {
                    self.named = FIELDS.iter().position(|f| *f == key.as_slice());
                }
            } else {
                self.push_key(c);
            }
            return;
        }
        if self.depth == 1 && self.object && matches!(c, b',' | b'}') {
            if let Some((field, Some(bytes))) = self.value.take() {
                self.kept[field] = Some(bytes);
            }
            self.value = None;
            self.named = None;
            self.expect_key = c == b',';
            if c == b'}' {
                self.depth = 0;
                self.object = false;
            }
            return;
        }
        self.copy(c);
        match c {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.object && self.expect_key {
                    self.expect_key = false;
                    self.key = Some(Vec::new());
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 {
                    self.object = c == b'{';
                    self.expect_key = self.object;
                }
                self.depth = self.depth.saturating_add(1);
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if self.depth == 1 && self.object => {
                if let Some(field) = self.named.take() {
                    self.value = Some((field, Some(Vec::new())));
                }
            }
            _ => {}
        }
    }

    /// Copies `c` into the value being kept, if any.
    fn copy(&mut self, c: u8) {
        if let Some((_, slot)) = &mut self.value {
            if let Some(bytes) = slot {
                if bytes.len() < MAX_FIELD_BYTES {
                    bytes.push(c);
                } else {
                    *slot = None;
                }
            }
        }
    }

    fn push_key(&mut self, c: u8) {
        if let Some(key) = &mut self.key {
            if key.len() <= MAX_KEY_BYTES {
                key.push(c);
            }
        }
    }

    /// What the kept fields say, read as a whole `format` answer made of
    /// them alone (a field whose value is not JSON is left out).
    pub fn finish(&self, format: StreamFormat) -> ResponseFacts {
        let mut body = b"{".to_vec();
        for (name, value) in FIELDS.iter().zip(&self.kept) {
            let Some(value) = value else { continue };
            if serde_json::from_slice::<serde::de::IgnoredAny>(value).is_err() {
                continue;
            }
            if body.len() > 1 {
                body.push(b',');
            }
            body.push(b'"');
            body.extend_from_slice(name);
            body.extend_from_slice(b"\":");
            body.extend_from_slice(value);
        }
        body.push(b'}');
        parse_response(format, &body)
    }
}

#[cfg(test)]
mod tests;
