//! Reading (and, when stripping, removing) llama-server's `prompt_progress`
//! events from an answer's event stream, at any chunk cut.
//!
//! An event is told only once complete (its blank line read; a blank line
//! that ends in CR once the next byte says whether an LF belongs to it).
//! A complete event goes out at once unless it is a progress event: a
//! single `data:` line holding a JSON object with a top-level
//! `prompt_progress` member. Only the bytes of the event still incomplete
//! are held back, at most `max_event_bytes`; a longer event is no progress
//! event and goes out as it comes. What is not an event of a stream
//! (bytes after the last blank line at the end) goes out as it is.
//!
//! Line ends are LF, CRLF or CR, as in the SSE reader ([`crate::sse`]).
//!
//! Deliberately not here: every other reading of the stream (the SSE
//! reader and [`crate::llama`]); the filter is meant for the events before
//! the first token, where llama-server sends its progress events.

use serde::de::IgnoredAny;
use serde::Deserialize;

/// A `prompt_progress` event's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PromptProgress {
    /// `total`: the prompt's tokens.
    pub total: u32,
    /// `cache`: tokens reused from the KV cache.
    pub cache: u32,
    /// `processed`: tokens in the slot so far, the cached ones included.
    pub processed: u32,
    /// `time_ms`: milliseconds since the slot started the prompt.
    pub time_ms: u64,
}

/// Strips (or only reads) progress events; see the module documentation.
#[derive(Debug)]
pub struct ProgressFilter {
    strip: bool,
    max_event_bytes: usize,
    /// The current event's bytes from earlier chunks (stripping: not sent
    /// yet; reading: kept to be read).
    event: Vec<u8>,
    /// The current event outgrew `max_event_bytes`: not a progress event.
    oversize: bool,
    /// The last byte ended a line (or nothing was read yet).
    at_line_start: bool,
    /// The last byte was a CR ending a line: an LF next belongs to it.
    cr: bool,
    /// The current event's blank line ended with a CR: it is complete once
    /// the next byte is known.
    ended_by_cr: bool,
}

impl ProgressFilter {
    /// A filter that removes progress events (`strip`) or only reads them,
    /// keeping at most `max_event_bytes` of an incomplete event.
    pub fn new(strip: bool, max_event_bytes: usize) -> Self {
        ProgressFilter {
            strip,
            max_event_bytes,
            event: Vec::new(),
            oversize: false,
            at_line_start: true,
            cr: false,
            ended_by_cr: false,
        }
    }

    /// It removes progress events (else it only reads them).
    pub fn strips(&self) -> bool {
        self.strip
    }

    /// No byte is held back: the stream is between two events.
    pub fn is_idle(&self) -> bool {
        self.event.is_empty()
    }

    /// One chunk: each complete progress event goes to `on_progress`; when
    /// stripping, the bytes to send are appended to `out` (when only
    /// reading, `out` is untouched and the chunk goes on as it is).
    pub fn feed<F: FnMut(PromptProgress)>(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<u8>,
        mut on_progress: F,
    ) {
        let mut start = 0;
        for (j, &b) in chunk.iter().enumerate() {
            if self.ended_by_cr {
                self.ended_by_cr = false;
                self.cr = false;
                if b == b'\n' {
                    self.complete(&chunk[start..=j], out, &mut on_progress);
                    start = j + 1;
                    continue;
                }
                self.complete(&chunk[start..j], out, &mut on_progress);
                start = j;
            }
            if self.cr && b == b'\n' {
                self.cr = false;
                continue;
            }
            self.cr = false;
            match b {
                b'\n' if self.at_line_start => {
                    self.complete(&chunk[start..=j], out, &mut on_progress);
                    start = j + 1;
                }
                b'\r' if self.at_line_start => self.ended_by_cr = true,
                b'\n' => self.at_line_start = true,
                b'\r' => {
                    self.at_line_start = true;
                    self.cr = true;
                }
                _ => self.at_line_start = false,
            }
        }
        self.hold(&chunk[start..], out);
    }

    /// The stream ended: a last event that is complete is told, and any
    /// bytes still held go out.
    pub fn finish<F: FnMut(PromptProgress)>(&mut self, out: &mut Vec<u8>, mut on_progress: F) {
        if self.ended_by_cr {
            self.ended_by_cr = false;
            self.complete(&[], out, &mut on_progress);
        } else if self.strip {
            out.append(&mut self.event);
        }
        self.event.clear();
    }

    /// The current event's bytes in this chunk, incomplete: held (or, past
    /// the bound, sent).
    fn hold(&mut self, part: &[u8], out: &mut Vec<u8>) {
        if part.is_empty() {
            return;
        }
        if !self.oversize && self.event.len() + part.len() > self.max_event_bytes {
            self.oversize = true;
            if self.strip {
                out.append(&mut self.event);
            }
            self.event = Vec::new();
        }
        if self.oversize {
            if self.strip {
                out.extend_from_slice(part);
            }
        } else {
            self.event.extend_from_slice(part);
        }
    }

    /// The current event ends with `tail` (its bytes in this chunk).
    fn complete<F: FnMut(PromptProgress)>(
        &mut self,
        tail: &[u8],
        out: &mut Vec<u8>,
        on_progress: &mut F,
    ) {
        self.at_line_start = true;
        if std::mem::take(&mut self.oversize) {
            if self.strip {
                out.extend_from_slice(tail);
            }
            self.event.clear();
            return;
        }
        // The bound holds however the event was cut.
        let over = self.event.len() + tail.len() > self.max_event_bytes;
        if !self.event.is_empty() {
            self.event.extend_from_slice(tail);
        }
        let bytes: &[u8] = if self.event.is_empty() {
            tail
        } else {
            &self.event
        };
        match if over { None } else { read(bytes) } {
            Some(Some(p)) => on_progress(p),
            Some(None) => {}
            None if self.strip => out.extend_from_slice(bytes),
            None => {}
        }
        self.event.clear();
    }
}

/// A top-level `prompt_progress`, whatever it holds.
#[derive(Deserialize)]
struct Event {
    prompt_progress: Option<Figures>,
}

/// The progress's figures, or something else there.
#[derive(Deserialize)]
#[serde(untagged)]
enum Figures {
    Read(PromptProgress),
    Other(IgnoredAny),
}

/// A complete event: `None` when it is no progress event, `Some(None)`
/// for a progress event whose figures do not read.
fn read(event: &[u8]) -> Option<Option<PromptProgress>> {
    let line = event.strip_prefix(b"data:")?;
    let line = line.strip_prefix(b" ").unwrap_or(line);
    let end = line
        .iter()
        .position(|&b| b == b'\n' || b == b'\r')
        .unwrap_or(line.len());
    let (json, rest) = line.split_at(end);
    // One line: what follows it is only its end and the blank line.
    if rest.iter().any(|&b| b != b'\n' && b != b'\r') || !json.starts_with(b"{") {
        return None;
    }
    match serde_json::from_slice::<Event>(json)
        .ok()?
        .prompt_progress?
    {
        Figures::Read(p) => Some(Some(p)),
        Figures::Other(_) => Some(None),
    }
}
