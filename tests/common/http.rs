//! A small, honest HTTP/1.1 client over a raw socket: tests see exactly what
//! went over the wire (status, headers, de-chunked body bytes) and when each
//! piece arrived.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A response head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A response being read.
pub struct Reader {
    pub stream: TcpStream,
    buf: Vec<u8>,
    pub head: Head,
    chunked: bool,
    remaining: Option<usize>,
    done: bool,
    /// Whether the body ended with a proper terminator (last chunk / full length).
    pub clean_end: bool,
}

/// Opens a connection and sends a request without reading anything back.
pub fn send_only(addr: &str, method: &str, path: &str, body: &[u8]) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    Ok(s)
}

/// Opens a connection, sends a request, reads the head.
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Reader> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    let mut has_ct = false;
    for (k, v) in headers {
        has_ct |= k.eq_ignore_ascii_case("content-type");
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        if !has_ct {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    Reader::read_head(s)
}

/// POST JSON.
pub fn post(addr: &str, path: &str, body: &str) -> io::Result<Reader> {
    send(addr, "POST", path, &[], body.as_bytes())
}

/// GET, whole body.
pub fn get(addr: &str, path: &str) -> io::Result<(u16, Vec<u8>)> {
    let mut r = send(addr, "GET", path, &[("Connection", "close")], b"")?;
    let body = r.read_all()?;
    Ok((r.head.status, body))
}

impl Reader {
    /// Reads the response head from a connection whose request was already sent.
    pub fn read_head(mut stream: TcpStream) -> io::Result<Reader> {
        let mut buf = Vec::new();
        let mut tmp = [0u8; 8192];
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            let n = stream.read(&mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before response head",
                ));
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let head_text = String::from_utf8_lossy(&buf[..end]).to_string();
        let mut lines = head_text.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let head = Head { status, headers };
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let remaining = if chunked {
            None
        } else {
            head.header("content-length").and_then(|v| v.parse().ok())
        };
        let rest = buf[end + 4..].to_vec();
        let done = remaining == Some(0);
        Ok(Reader {
            stream,
            buf: rest,
            head,
            chunked,
            remaining,
            done,
            clean_end: done,
        })
    }

    fn fill(&mut self) -> io::Result<bool> {
        let mut tmp = [0u8; 65536];
        let n = self.stream.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// The next piece of body as it arrived (one chunk, or one read); None at the end.
    pub fn next_piece(&mut self) -> io::Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        if self.chunked {
            loop {
                if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    let size_line = String::from_utf8_lossy(&self.buf[..p]).to_string();
                    let size =
                        usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                            .map_err(|_| {
                                io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!("bad chunk size {size_line:?}"),
                                )
                            })?;
                    if self.buf.len() >= p + 2 + size + 2 {
                        let data = self.buf[p + 2..p + 2 + size].to_vec();
                        self.buf.drain(..p + 2 + size + 2);
                        if size == 0 {
                            self.done = true;
                            self.clean_end = true;
                            return Ok(None);
                        }
                        return Ok(Some(data));
                    }
                }
                if !self.fill()? {
                    self.done = true;
                    return Ok(None);
                }
            }
        }
        if self.buf.is_empty() && !self.fill()? {
            self.done = true;
            self.clean_end = self.remaining.is_none();
            return Ok(None);
        }
        let mut data = std::mem::take(&mut self.buf);
        if let Some(r) = self.remaining.as_mut() {
            data.truncate(*r);
            *r -= data.len();
            if *r == 0 {
                self.done = true;
                self.clean_end = true;
            }
        }
        Ok(Some(data))
    }

    /// Pieces with their arrival times.
    pub fn pieces_timed(&mut self) -> io::Result<Vec<(Instant, Vec<u8>)>> {
        let mut out = Vec::new();
        while let Some(p) = self.next_piece()? {
            out.push((Instant::now(), p));
        }
        Ok(out)
    }

    /// The whole body.
    pub fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(p) = self.next_piece()? {
            out.extend_from_slice(&p);
        }
        Ok(out)
    }

    /// Reads until the body so far contains `needle`; returns the body so far.
    pub fn read_until(&mut self, needle: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while !out.windows(needle.len()).any(|w| w == needle) {
            match self.next_piece()? {
                Some(p) => out.extend_from_slice(&p),
                None => break,
            }
        }
        Ok(out)
    }
}

/// `data:` payloads of an SSE body (no parsing beyond lines).
pub fn sse_data(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("data:")
                        .map(|d| d.strip_prefix(' ').unwrap_or(d))
                })
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// Concatenated `choices[0].delta.content` of an OpenAI chat stream.
pub fn chat_content(body: &[u8]) -> String {
    sse_data(body)
        .iter()
        .filter(|d| d.as_str() != "[DONE]")
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}
