//! HTTP/1 response body framing: which framing a response head declares
//! (RFC 9112 §6.3, for a response to a request that is neither `HEAD` nor
//! `CONNECT`), and an incremental decoder of the chunked transfer coding that
//! hands out each chunk's data as a range of its input, so that the caller
//! can forward it without a copy.
//!
//! The decoder copes with input cut at any byte. It accepts a bare LF where
//! CRLF ends a line (RFC 9112 §2.2 allows it), skips chunk extensions, and
//! reads and drops trailer fields.
//!
//! What it deliberately does not do: I/O, buffering (the caller keeps the
//! bytes; the decoder keeps only its position in the coding), request
//! framing (Pingora parses requests), or codings other than `chunked`.

#[cfg(test)]
mod tests;

/// The longest run of chunk extensions plus trailer fields a body may carry
/// before it is refused, so that a misbehaving upstream cannot keep the
/// decoder reading forever without a byte of data.
pub const MAX_FRAMING_BYTES: usize = 64 * 1024;

/// How a response's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (1xx, 204, 304).
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection.
    UntilClose,
}

/// A response head whose framing cannot be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// `Content-Length` is not a number, or its values disagree.
    BadContentLength,
}

/// The framing of a response with `status`, the values of its
/// `Transfer-Encoding` fields and of its `Content-Length` fields.
///
/// A `Transfer-Encoding` whose last coding is `chunked` means chunked; any
/// other `Transfer-Encoding` means the body runs until the connection closes;
/// either way `Content-Length` is ignored. `Content-Length` values (repeated
/// fields or a comma-separated list) must all be the same number.
pub fn framing(
    status: u16,
    transfer_encoding: &[&[u8]],
    content_length: &[&[u8]],
) -> Result<Framing, FramingError> {
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::Empty);
    }
    let mut codings = transfer_encoding
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(trim)
        .filter(|c| !c.is_empty());
    if let Some(last) = codings.next_back() {
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        });
    }
    let mut length = None;
    for value in content_length.iter().flat_map(|v| v.split(|&b| b == b',')) {
        let n = parse_length(trim(value)).ok_or(FramingError::BadContentLength)?;
        if length.is_some_and(|l| l != n) {
            return Err(FramingError::BadContentLength);
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// `1*DIGIT` as a `u64`; `None` for anything else or an overflow.
fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
    })
}

/// `v` without leading and trailing spaces and tabs.
fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let end = v.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

/// What [`Chunked::decode`] found in its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `input[start..end]` is body data; everything before `start` was
    /// framing. Decode again from `end`.
    Data {
        /// First data byte.
        start: usize,
        /// One past the last data byte.
        end: usize,
    },
    /// All of the input was framing: more is needed.
    More,
    /// The body ended with `input[end - 1]`; what follows is not body.
    End {
        /// One past the body's last byte.
        end: usize,
    },
}

/// A malformed chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// A chunk size line that is not `1*HEXDIG [ext] CRLF`.
    BadSize,
    /// A chunk size over `u64`.
    SizeOverflow,
    /// A chunk's data not followed by CRLF (its size was wrong).
    MissingLineEnd,
    /// More than [`MAX_FRAMING_BYTES`] of extensions and trailers.
    TooMuchFraming,
}

/// Where the decoder stands in the coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading a chunk size; `digits` read so far.
    Size { value: u64, digits: u8 },
    /// Spaces after the size, before `;` or the line end.
    SizeSpace { value: u64 },
    /// Inside chunk extensions, up to the line end.
    Extension { value: u64 },
    /// A CR ended the size line; its LF is next.
    SizeLf { value: u64 },
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data is next.
    DataEnd,
    /// The CR after a chunk's data was read; its LF is next.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field, up to its line end.
    Trailer,
    /// A CR at the start of a trailer line: the final LF is next.
    FinalLf,
    /// The body is complete.
    Done,
}

/// Incremental decoder of one chunked body.
#[derive(Clone, Debug)]
pub struct Chunked {
    state: State,
    framing_bytes: usize,
}

impl Default for Chunked {
    fn default() -> Self {
        Self::new()
    }
}

impl Chunked {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        Chunked {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            framing_bytes: 0,
        }
    }

    /// Whether the last chunk and the trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from the start of `input` (the bytes after those the previous
    /// call used) to the first data, the end of the body or the end of
    /// `input`. Once done, every call returns `End { end: 0 }`.
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let at = self.skip_framing(input)?;
        if self.state == State::Done {
            return Ok(Step::End { end: at });
        }
        let State::Data(left) = self.state else {
            return Ok(Step::More);
        };
        if at == input.len() {
            return Ok(Step::More);
        }
        let take = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .min(input.len() - at);
        let left = left - take as u64;
        self.state = if left == 0 {
            State::DataEnd
        } else {
            State::Data(left)
        };
        Ok(Step::Data {
            start: at,
            end: at + take,
        })
    }

    /// Reads the framing at the start of `input`, up to the next data, the
    /// end of the body or the end of `input`, and says how many bytes it
    /// used. Reads nothing inside a chunk's data or after the end.
    pub fn skip_framing(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let mut at = 0;
        while at < input.len() && !matches!(self.state, State::Data(_) | State::Done) {
            self.framing_byte(input[at])?;
            at += 1;
        }
        Ok(at)
    }

    /// Moves the state over one framing byte.
    fn framing_byte(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        self.state = match self.state {
            Size { value, digits } => match (hex(b), b) {
                (Some(d), _) => {
                    if digits >= 16 {
                        return Err(ChunkError::SizeOverflow);
                    }
                    Size {
                        value: value << 4 | u64::from(d),
                        digits: digits + 1,
                    }
                }
                (None, _) if digits == 0 => return Err(ChunkError::BadSize),
                (None, b' ' | b'\t') => SizeSpace { value },
                (None, b';') => self.extension(value)?,
                (None, b'\r') => SizeLf { value },
                (None, b'\n') => size_line_end(value),
                (None, _) => return Err(ChunkError::BadSize),
            },
            SizeSpace { value } => match b {
                b' ' | b'\t' => SizeSpace { value },
                b';' => self.extension(value)?,
                b'\r' => SizeLf { value },
                b'\n' => size_line_end(value),
                _ => return Err(ChunkError::BadSize),
            },
            Extension { value } => match b {
                b'\r' => SizeLf { value },
                b'\n' => size_line_end(value),
                _ => self.extension(value)?,
            },
            SizeLf { value } => match b {
                b'\n' => size_line_end(value),
                _ => return Err(ChunkError::BadSize),
            },
            DataEnd => match b {
                b'\r' => DataLf,
                b'\n' => Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(ChunkError::MissingLineEnd),
            },
            DataLf => match b {
                b'\n' => Size {
                    value: 0,
                    digits: 0,
                },
                _ => return Err(ChunkError::MissingLineEnd),
            },
            TrailerStart => match b {
                b'\r' => FinalLf,
                b'\n' => Done,
                _ => self.trailer()?,
            },
            Trailer => match b {
                b'\n' => TrailerStart,
                _ => self.trailer()?,
            },
            FinalLf => match b {
                b'\n' => Done,
                _ => return Err(ChunkError::MissingLineEnd),
            },
            Data(_) | Done => self.state,
        };
        Ok(())
    }

    /// One more byte of chunk extension.
    fn extension(&mut self, value: u64) -> Result<State, ChunkError> {
        self.count_framing()?;
        Ok(State::Extension { value })
    }

    /// One more byte of trailer.
    fn trailer(&mut self) -> Result<State, ChunkError> {
        self.count_framing()?;
        Ok(State::Trailer)
    }

    fn count_framing(&mut self) -> Result<(), ChunkError> {
        self.framing_bytes += 1;
        if self.framing_bytes > MAX_FRAMING_BYTES {
            return Err(ChunkError::TooMuchFraming);
        }
        Ok(())
    }
}

/// The state after a size line: data, or the trailers after the last chunk.
fn size_line_end(value: u64) -> State {
    if value == 0 {
        State::TrailerStart
    } else {
        State::Data(value)
    }
}

/// The value of a hex digit.
fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
