//! A message content's text hashed as it arrives: the whole, its length in
//! characters, its [`CHUNK_CHARS`]-character chunk hashes (the first
//! [`MAX_CHUNKS`]) and, with content capture, its first [`MAX_TEXT_CHARS`]
//! characters. Text split over several parts hashes as one string.

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::{CHUNK_CHARS, MAX_CHUNKS, MAX_TEXT_CHARS};

/// Hashes a content's text as it arrives (parts concatenated): the whole,
/// its length in characters, its chunk hashes and, with capture, its start.
/// A chunk is hashed in one call on its slice of the text; only a chunk
/// that spans two parts is copied (into `carry`, at most 128 bytes). The
/// whole text's hasher (576 bytes) is boxed, so that a chunker moves
/// cheaply while its message is read.
pub(super) struct Chunker {
    whole: Box<Xxh3>,
    carry: Vec<u8>,
    in_chunk: usize,
    chars: usize,
    chunks: Vec<u32>,
    text: Option<String>,
}

impl Chunker {
    /// An empty text; with `capture`, its start is kept.
    pub fn new(capture: bool) -> Self {
        Chunker {
            whole: Box::new(Xxh3::new()),
            carry: Vec::new(),
            in_chunk: 0,
            chars: 0,
            chunks: Vec::new(),
            text: capture.then(String::new),
        }
    }

    /// Appends `text`.
    pub fn feed(&mut self, text: &str) {
        self.whole.update(text.as_bytes());
        if let Some(t) = &mut self.text {
            let room = MAX_TEXT_CHARS.saturating_sub(self.chars);
            t.extend(text.chars().take(room));
        }
        let ascii = text.is_ascii();
        let mut rest = text;
        while !rest.is_empty() {
            if self.chunks.len() >= MAX_CHUNKS {
                self.chars += if ascii {
                    rest.len()
                } else {
                    rest.chars().count()
                };
                return;
            }
            let need = CHUNK_CHARS - self.in_chunk;
            let (bytes, chars) = if ascii {
                let b = need.min(rest.len());
                (b, b)
            } else {
                match rest.char_indices().nth(need) {
                    Some((i, _)) => (i, need),
                    None => (rest.len(), rest.chars().count()),
                }
            };
            let (piece, tail) = rest.split_at(bytes);
            self.in_chunk += chars;
            self.chars += chars;
            if self.in_chunk == CHUNK_CHARS {
                self.close_chunk(piece.as_bytes());
            } else {
                self.carry.extend_from_slice(piece.as_bytes());
            }
            rest = tail;
        }
    }

    /// Ends the current chunk with `last` (the carried part before it).
    fn close_chunk(&mut self, last: &[u8]) {
        let h = if self.carry.is_empty() {
            xxh3_64(last)
        } else {
            self.carry.extend_from_slice(last);
            let h = xxh3_64(&self.carry);
            self.carry.clear();
            h
        };
        // The low 32 bits: a chunk hash is compared, not trusted.
        self.chunks
            .push(u32::try_from(h & u64::from(u32::MAX)).unwrap_or(0));
        self.in_chunk = 0;
    }

    /// The whole text's hash (its length included), its length in
    /// characters, its chunk hashes and, with capture, its start.
    pub fn finish(mut self) -> (u64, u32, Box<[u32]>, Option<Box<str>>) {
        if self.in_chunk > 0 && self.chunks.len() < MAX_CHUNKS {
            self.close_chunk(&[]);
        }
        let mut whole = self.whole;
        whole.update(&(self.chars as u64).to_le_bytes());
        (
            whole.digest(),
            u32::try_from(self.chars).unwrap_or(u32::MAX),
            self.chunks.into_boxed_slice(),
            self.text.map(String::into_boxed_str),
        )
    }
}
