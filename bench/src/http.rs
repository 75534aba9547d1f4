//! Just enough HTTP/1.1 for the benchmark: header parsing and an incremental
//! chunked-body decoder that never copies more than it must.

/// Position just past the `\r\n\r\n` ending a header block.
pub fn header_end(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n\r\n").map(|p| p + 4)
}

/// A parsed request or response head.
#[derive(Debug, Default, Clone)]
pub struct Head {
    /// Request method, or the HTTP version of a response.
    pub first: String,
    /// Request target, or the status code of a response.
    pub second: String,
    /// Lower-cased header names with values.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// Parses `buf[..end]`.
    pub fn parse(head: &[u8]) -> Option<Head> {
        let text = std::str::from_utf8(head).ok()?;
        let mut lines = text.split("\r\n");
        let start = lines.next()?;
        let mut parts = start.splitn(3, ' ');
        let first = parts.next()?.to_string();
        let second = parts.next()?.to_string();
        let mut headers = Vec::new();
        for l in lines {
            if l.is_empty() {
                continue;
            }
            let (k, v) = l.split_once(':')?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        Some(Head {
            first,
            second,
            headers,
        })
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length`, if any.
    pub fn content_length(&self) -> Option<usize> {
        self.header("content-length").and_then(|v| v.parse().ok())
    }

    /// `Transfer-Encoding: chunked`.
    pub fn chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    /// `Connection: close`.
    pub fn close(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Incremental chunked transfer-encoding decoder.
#[derive(Debug, Default)]
pub struct Chunked {
    state: State,
    line: Vec<u8>,
    /// The terminal chunk and its trailer were read.
    pub done: bool,
}

#[derive(Debug, Default, PartialEq)]
enum State {
    #[default]
    Size,
    Data(usize),
    DataCrlf(u8),
    Trailer,
}

impl Chunked {
    /// Decodes `input`, appending payload bytes to `out`. Returns the number
    /// of input bytes consumed (all of them unless the body ended), or an
    /// error for bad framing.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < input.len() && !self.done {
            match self.state {
                State::Size | State::Trailer => {
                    let b = input[i];
                    i += 1;
                    if b == b'\n' {
                        let line = std::mem::take(&mut self.line);
                        let line = line.strip_suffix(b"\r").unwrap_or(&line);
                        if self.state == State::Trailer {
                            if line.is_empty() {
                                self.done = true;
                            }
                            continue;
                        }
                        let hex = line.split(|&c| c == b';').next().unwrap_or(&[]);
                        let hex = std::str::from_utf8(hex).map_err(|_| "bad chunk size")?;
                        let n =
                            usize::from_str_radix(hex.trim(), 16).map_err(|_| "bad chunk size")?;
                        self.state = if n == 0 {
                            State::Trailer
                        } else {
                            State::Data(n)
                        };
                    } else {
                        if self.line.len() > 1024 {
                            return Err("chunk line too long");
                        }
                        self.line.push(b);
                    }
                }
                State::Data(n) => {
                    let take = n.min(input.len() - i);
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    self.state = if take == n {
                        State::DataCrlf(2)
                    } else {
                        State::Data(n - take)
                    };
                }
                State::DataCrlf(k) => {
                    i += 1;
                    self.state = if k == 1 {
                        State::Size
                    } else {
                        State::DataCrlf(k - 1)
                    };
                }
            }
        }
        Ok(i)
    }
}

/// Appends one chunk (size line, data, CRLF) to `out`.
pub fn put_chunk(out: &mut Vec<u8>, data: &[u8]) {
    use std::io::Write;
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_in_pieces() {
        let mut wire = Vec::new();
        put_chunk(&mut wire, b"data: a\n\n");
        put_chunk(&mut wire, b"data: bb\n\n");
        wire.extend_from_slice(b"0\r\n\r\n");
        for cut in 1..wire.len() {
            let mut d = Chunked::default();
            let mut out = Vec::new();
            d.decode(&wire[..cut], &mut out).unwrap();
            d.decode(&wire[cut..], &mut out).unwrap();
            assert!(d.done);
            assert_eq!(out, b"data: a\n\ndata: bb\n\n");
        }
    }
}
