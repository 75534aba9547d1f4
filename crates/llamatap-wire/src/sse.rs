//! Incremental Server-Sent Events reader (WHATWG `EventSource` parsing rules).
//!
//! The proxy feeds every upstream body chunk to [`SseReader::feed`] exactly as
//! it arrives; the reader calls back once per completed event. It copes with
//! events split at any byte (even inside a UTF-8 character), several events in
//! one chunk, LF / CRLF / CR line ends (a CR ending one chunk and an LF
//! starting the next are one line end), comment lines, multi-line `data:`,
//! `event:` fields, fields without a colon and a leading UTF-8 BOM.
//!
//! Hot path: an event that lies wholly inside one chunk and has a single
//! `data:` line is handed out borrowed from the chunk, with no copy and no
//! allocation. Only events that span chunks, or have several `data:` lines,
//! are copied into reusable buffers. Memory is bounded by `max_event_bytes`:
//! a larger event is skipped whole and counted.
//!
//! What it deliberately does not do: it never changes or re-emits bytes (the
//! proxy forwards the original chunk itself), it keeps no `id:` / `retry:`
//! state, it does not decode UTF-8 or JSON (see [`crate::llama`]), and it does
//! not dispatch a trailing event that lacks its closing blank line.

#[cfg(test)]
mod tests;

/// The UTF-8 byte order mark, stripped once at the start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched event, borrowed from the chunk or from the reader's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// Value of the last `event:` field; empty if the event had none.
    pub event: &'a [u8],
    /// `data:` field values joined with `\n` (no trailing newline).
    pub data: &'a [u8],
}

impl SseEvent<'_> {
    /// True for the OpenAI-style end marker `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }
}

/// Where the current event's `data` or `event` value lives during one `feed`.
#[derive(Clone, Copy)]
enum Slot<'c> {
    /// No value yet.
    Empty,
    /// A single value borrowed from the current chunk.
    Borrowed(&'c [u8]),
    /// The value is in the reader's own buffer.
    Owned,
}

/// Incremental SSE parser; see the module documentation.
#[derive(Debug)]
pub struct SseReader {
    max_event_bytes: usize,
    /// Bytes of a line that started in an earlier chunk (empty while skipping).
    line: Vec<u8>,
    /// A line has started and has not ended yet.
    in_line: bool,
    /// The last chunk ended with CR: an LF starting the next chunk belongs to it.
    pending_cr: bool,
    /// Joined `data:` values of the current event, valid when `has_data`.
    data: Vec<u8>,
    has_data: bool,
    /// `event:` value of the current event.
    event: Vec<u8>,
    /// Field-line bytes (terminators excluded) seen in the current event.
    event_bytes: usize,
    /// The current event exceeded `max_event_bytes`: discard to its blank line.
    skipping: bool,
    /// How many bytes of the BOM matched so far; `BOM_DONE` once decided.
    bom_matched: u8,
    skipped: u64,
}

/// `bom_matched` value once the start of the stream has been examined.
const BOM_DONE: u8 = u8::MAX;

/// Buffer capacity kept between events; larger buffers are shrunk back.
const KEEP_CAPACITY: usize = 16 * 1024;

// === impl SseEvent / SseReader ===

impl SseReader {
    /// Creates a reader that skips any event whose field lines (comments
    /// included, line terminators not) add up to more than `max_event_bytes`
    /// bytes. Buffered bytes never exceed that; buffers grown past 16 KiB by
    /// a large event are shrunk back once it ends.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            line: Vec::new(),
            in_line: false,
            pending_cr: false,
            data: Vec::new(),
            has_data: false,
            event: Vec::new(),
            event_bytes: 0,
            skipping: false,
            bom_matched: 0,
            skipped: 0,
        }
    }

    /// Feeds one chunk; calls `on_event` for every event completed by it, in order.
    pub fn feed<F: FnMut(&SseEvent<'_>)>(&mut self, chunk: &[u8], mut on_event: F) {
        let mut chunk = chunk;
        if self.bom_matched != BOM_DONE {
            let matched = usize::from(self.bom_matched);
            let mut taken = 0;
            while matched + taken < BOM.len() && chunk.get(taken) == BOM.get(matched + taken) {
                taken += 1;
            }
            if matched + taken == BOM.len() {
                self.bom_matched = BOM_DONE;
                chunk = chunk.get(taken..).unwrap_or_default();
            } else if taken == chunk.len() {
                // Still a BOM prefix: decide when more bytes arrive.
                self.bom_matched = (matched + taken) as u8;
                return;
            } else {
                // Not a BOM: bytes held back from earlier chunks are content.
                self.bom_matched = BOM_DONE;
                self.feed_bytes(BOM.get(..matched).unwrap_or_default(), &mut on_event);
            }
        }
        self.feed_bytes(chunk, &mut on_event);
    }

    /// Number of events skipped because they exceeded `max_event_bytes`.
    pub fn skipped_events(&self) -> u64 {
        self.skipped
    }

    /// True while an event has started but not ended (or the first bytes
    /// may still be part of a BOM): a stream cut now would leave the
    /// receiver holding part of an event.
    pub fn has_pending(&self) -> bool {
        self.in_line
            || self.event_bytes > 0
            || self.skipping
            || (self.bom_matched != BOM_DONE && self.bom_matched > 0)
    }

    /// Clears the current event's fields.
    fn reset_event(&mut self) {
        self.reset_event_fields();
        self.event_bytes = 0;
    }

    /// Starts discarding the current event.
    fn start_skipping(&mut self) {
        self.skipping = true;
        clear(&mut self.line);
        self.reset_event_fields();
    }

    /// Drops the current event's field values (keeps its byte count).
    fn reset_event_fields(&mut self) {
        clear(&mut self.data);
        self.has_data = false;
        clear(&mut self.event);
    }

    /// Parses `chunk` (BOM already handled).
    fn feed_bytes<F: FnMut(&SseEvent<'_>)>(&mut self, chunk: &[u8], on_event: &mut F) {
        let mut pos = 0;
        if self.pending_cr && !chunk.is_empty() {
            self.pending_cr = false;
            if chunk.first() == Some(&b'\n') {
                pos = 1;
            }
        }
        if self.in_line {
            let rest = chunk.get(pos..).unwrap_or_default();
            let Some(end) = find_eol(rest) else {
                self.grow_line(rest);
                return;
            };
            self.grow_line(rest.get(..end).unwrap_or_default());
            pos = self.after_eol(chunk, pos + end);
            self.in_line = false;
            if !self.skipping {
                self.take_owned_line();
            }
        }
        self.parse_lines(chunk, pos, on_event);
    }

    /// Appends part of an unfinished line, switching to skipping if too big.
    fn grow_line(&mut self, bytes: &[u8]) {
        self.in_line = true;
        if self.skipping {
            return;
        }
        self.event_bytes += bytes.len();
        if self.event_bytes > self.max_event_bytes {
            self.start_skipping();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    /// Position after the line terminator at `at` (`chunk[at]` is CR or LF).
    fn after_eol(&mut self, chunk: &[u8], at: usize) -> usize {
        let next = at + 1;
        if chunk.get(at) == Some(&b'\r') {
            match chunk.get(next) {
                Some(b'\n') => return next + 1,
                None => self.pending_cr = true,
                Some(_) => {}
            }
        }
        next
    }

    /// Applies the completed line held in `self.line` (never blank).
    fn take_owned_line(&mut self) {
        let line = &self.line;
        if line.first() != Some(&b':') {
            let (name, value) = split_field(line);
            match name {
                b"data" => {
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                    self.has_data = true;
                }
                b"event" => {
                    self.event.clear();
                    self.event.extend_from_slice(value);
                }
                _ => {}
            }
        }
        clear(&mut self.line);
    }

    /// Parses the complete lines of `chunk[pos..]` and keeps a trailing partial line.
    fn parse_lines<F: FnMut(&SseEvent<'_>)>(
        &mut self,
        chunk: &[u8],
        mut pos: usize,
        on_event: &mut F,
    ) {
        let mut data = if self.has_data {
            Slot::Owned
        } else {
            Slot::Empty
        };
        let mut event = if self.event.is_empty() {
            Slot::Empty
        } else {
            Slot::Owned
        };
        loop {
            let rest = chunk.get(pos..).unwrap_or_default();
            let Some(end) = find_eol(rest) else {
                if !rest.is_empty() {
                    self.grow_line(rest);
                }
                break;
            };
            let line = rest.get(..end).unwrap_or_default();
            pos = self.after_eol(chunk, pos + end);
            if line.is_empty() {
                if self.skipping {
                    self.skipping = false;
                    self.skipped += 1;
                } else {
                    let payload = match data {
                        Slot::Empty => None,
                        Slot::Borrowed(bytes) => Some(bytes),
                        Slot::Owned => Some(self.data.as_slice()),
                    };
                    if let Some(payload) = payload {
                        let name = match event {
                            Slot::Empty => &[][..],
                            Slot::Borrowed(bytes) => bytes,
                            Slot::Owned => self.event.as_slice(),
                        };
                        on_event(&SseEvent {
                            event: name,
                            data: payload,
                        });
                    }
                }
                self.reset_event();
                data = Slot::Empty;
                event = Slot::Empty;
                continue;
            }
            if self.skipping {
                continue;
            }
            self.event_bytes += line.len();
            if self.event_bytes > self.max_event_bytes {
                self.start_skipping();
                data = Slot::Empty;
                event = Slot::Empty;
                continue;
            }
            if line.first() == Some(&b':') {
                continue;
            }
            let (name, value) = split_field(line);
            match name {
                b"data" => {
                    data = match data {
                        Slot::Empty => Slot::Borrowed(value),
                        Slot::Borrowed(first) => {
                            self.data.clear();
                            self.data.extend_from_slice(first);
                            self.data.push(b'\n');
                            self.data.extend_from_slice(value);
                            self.has_data = true;
                            Slot::Owned
                        }
                        Slot::Owned => {
                            self.data.push(b'\n');
                            self.data.extend_from_slice(value);
                            Slot::Owned
                        }
                    }
                }
                b"event" => event = Slot::Borrowed(value),
                _ => {}
            }
        }
        // The event continues in a later chunk: keep what was borrowed.
        if let Slot::Borrowed(bytes) = data {
            self.data.clear();
            self.data.extend_from_slice(bytes);
            self.has_data = true;
        }
        if let Slot::Borrowed(bytes) = event {
            self.event.clear();
            self.event.extend_from_slice(bytes);
        }
    }
}

/// Empties `buf`, giving back memory a large event made it take.
#[inline]
fn clear(buf: &mut Vec<u8>) {
    buf.clear();
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(KEEP_CAPACITY);
    }
}

/// Index of the first CR or LF in `bytes`.
#[inline]
fn find_eol(bytes: &[u8]) -> Option<usize> {
    memchr::memchr2(b'\n', b'\r', bytes)
}

/// Splits a field line into name and value (one leading space dropped).
#[inline]
fn split_field(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b':') {
        Some(colon) => {
            let name = line.get(..colon).unwrap_or_default();
            let value = line.get(colon + 1..).unwrap_or_default();
            (name, value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &[]),
    }
}
