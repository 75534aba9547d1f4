//! llamatap's own HTTP/1 client to the upstreams: one exchange on a
//! connection of its own, written and read without Pingora's client
//! session. The forwarding loop (`proxy::forward`, every route) and the
//! watcher's checks (`fleet::probe`) use it; it is the only upstream client.
//!
//! The caller writes the request in as few writes as its body allows (the
//! head goes out with the first body chunk). The response head is parsed
//! with `httparse` under the options Pingora's client uses; the body is
//! decoded in place ([`llamatap_wire::framing`]) and each piece is handed out as a
//! slice of the read buffer, without a copy. The buffer is taken only when
//! the socket has bytes to read and let go once they are parsed; it starts
//! at 4 KiB and grows (to 64 KiB) only while reads fill it. So a stream held
//! between two events keeps no read buffer, where Pingora's client session
//! keeps a 4 KiB head buffer and a 64 KiB body buffer.
//!
//! Deliberately not: keep-alive (every request asks llama-server for
//! `Connection: close`; the connection is dropped after one exchange),
//! upgrades, `Expect`, HTTP/2, TLS.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header;
use pingora::http::ResponseHeader;
use pingora::protocols::Stream;
use pingora::{Error, ErrorType, OrErr, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use llamatap_wire::framing::{self, Chunked, Framing, Step};

/// The most header fields a response head may have (as Pingora).
const MAX_HEADERS: usize = 256;
/// The largest response head accepted (as Pingora).
const MAX_HEAD_BYTES: usize = 1024 * 1024;
/// The first read buffer; doubled while reads fill it.
const FIRST_READ: usize = 4 * 1024;
/// The largest read.
const MAX_READ: usize = 64 * 1024;

/// Where the response body stands.
enum Body {
    /// The head has not been read.
    Head,
    /// This many bytes are left.
    Length(u64),
    /// Chunked, at this point of the coding.
    Chunked(Chunked),
    /// Until the upstream closes.
    UntilClose,
    /// Complete.
    Done,
}

/// One exchange with an upstream.
pub struct Exchange {
    stream: Stream,
    buf: BytesMut,
    read_size: usize,
    body: Body,
    /// The request was `HEAD`: its answer has no body, whatever its head
    /// declares.
    head_request: bool,
}

impl Exchange {
    /// An exchange on a connected `stream`.
    pub fn new(stream: Stream) -> Self {
        Exchange {
            stream,
            buf: BytesMut::new(),
            read_size: FIRST_READ,
            body: Body::Head,
            head_request: false,
        }
    }

    /// Marks the exchange's request as `HEAD` (RFC 9112 §6.3: the answer
    /// ends with its head).
    pub fn head_request(&mut self) {
        self.head_request = true;
    }

    /// Writes `bytes` whole, within `timeout` when there is one.
    pub async fn write(&mut self, bytes: &[u8], timeout: Option<Duration>) -> Result<()> {
        let write = async {
            self.stream
                .write_all(bytes)
                .await
                .or_err(ErrorType::WriteError, "writing the request upstream")?;
            self.stream
                .flush()
                .await
                .or_err(ErrorType::WriteError, "writing the request upstream")
        };
        let done = match timeout {
            Some(t) => tokio::time::timeout(t, write).await.map_err(|_| {
                Error::explain(ErrorType::WriteTimedout, "writing the request upstream")
            })?,
            None => write.await,
        };
        done.map_err(|e| e.into_up())
    }

    /// Reads the next response head (an informational one included), each
    /// read within `timeout` when there is one. Cancel-safe: the bytes read
    /// so far stay in the buffer.
    pub async fn read_header(&mut self, timeout: Option<Duration>) -> Result<Box<ResponseHeader>> {
        loop {
            if let Some(header) = self.parse_header()? {
                return Ok(header);
            }
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    format!("response head larger than {MAX_HEAD_BYTES} bytes"),
                )
                .into_up());
            }
            let read = self.fill();
            let n = match timeout {
                Some(t) => tokio::time::timeout(t, read).await.map_err(|_| {
                    Error::explain(ErrorType::ReadTimedout, "reading the response head").into_up()
                })??,
                None => read.await?,
            };
            if n == 0 {
                return Err(Error::explain(
                    ErrorType::ConnectionClosed,
                    "the upstream closed the connection before the response head",
                )
                .into_up());
            }
        }
    }

    /// Parses a complete head at the start of the buffer, if there is one,
    /// and sets up the body's framing.
    fn parse_header(&mut self) -> Result<Option<Box<ResponseHeader>>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut fields);
        let mut parser = httparse::ParserConfig::default();
        parser.allow_spaces_after_header_name_in_responses(true);
        parser.allow_obsolete_multiline_headers_in_responses(true);
        let len = match parser.parse_response(&mut resp, &self.buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                return Err(Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    format!("invalid response head: {e}"),
                )
                .into_up())
            }
        };
        let header = build_header(&resp)?;
        let framing = if self.head_request && !header.status.is_informational() {
            Framing::Empty
        } else {
            framing_of(&header)?
        };
        self.set_framing(framing);
        self.buf.advance(len);
        Ok(Some(header))
    }

    /// Whether the whole body has been handed out.
    pub fn is_body_done(&self) -> bool {
        matches!(self.body, Body::Done)
    }

    /// The next piece of the body as it arrived (never empty), `None` at its
    /// end. A connection closed before the end is an error. Cancel-safe.
    pub async fn read_body(&mut self) -> Result<Option<Bytes>> {
        loop {
            if let Some(piece) = self.next_piece()? {
                return Ok(Some(piece));
            }
            if self.is_body_done() {
                return Ok(None);
            }
            if self.fill().await? == 0 {
                if matches!(self.body, Body::UntilClose) {
                    self.body = Body::Done;
                    return Ok(None);
                }
                return Err(Error::explain(
                    ErrorType::ConnectionClosed,
                    "the upstream closed the connection before the end of the body",
                )
                .into_up());
            }
        }
    }

    /// The body bytes already in the buffer, if any, split off without a
    /// copy; framing that follows them is read at once, so that the end of
    /// a body is known as soon as its bytes are in. An error comes only
    /// once every byte before it has been handed out.
    fn next_piece(&mut self) -> Result<Option<Bytes>> {
        let piece = match &mut self.body {
            Body::Head | Body::Done => return Ok(None),
            Body::Length(left) => {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let take = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                *left -= take as u64;
                if *left == 0 {
                    self.body = Body::Done;
                }
                self.buf.split_to(take).freeze()
            }
            Body::UntilClose => {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                self.buf.split().freeze()
            }
            Body::Chunked(coding) => match coding.decode(&self.buf).map_err(chunk_error)? {
                Step::Data { start, end } => {
                    self.buf.advance(start);
                    let piece = self.buf.split_to(end - start).freeze();
                    // Malformed framing after the piece is reported by the
                    // next call, once the piece is out.
                    let mut ahead = coding.clone();
                    if let Ok(framing) = ahead.skip_framing(&self.buf) {
                        *coding = ahead;
                        self.buf.advance(framing);
                        if coding.is_done() {
                            self.body = Body::Done;
                        }
                    }
                    piece
                }
                Step::More => {
                    self.buf.clear();
                    return Ok(None);
                }
                Step::End { .. } => {
                    self.body = Body::Done;
                    self.buf = BytesMut::new();
                    return Ok(None);
                }
            },
        };
        if self.is_body_done() {
            // Nothing after the body is used: the connection is not reused.
            self.buf = BytesMut::new();
        }
        Ok(Some(piece))
    }

    /// Reads once into the buffer; the number of bytes read (0 at the end).
    ///
    /// With nothing left unparsed, the buffer is let go and a new one taken
    /// only once the socket is readable (a read into no room waits for that
    /// and reads nothing): a stream held between two events keeps no read
    /// buffer. The old one is freed when the pieces cut from it have been
    /// written.
    async fn fill(&mut self) -> Result<usize> {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
            self.stream
                .read(&mut [])
                .await
                .or_err(ErrorType::ReadError, "reading from the upstream")
                .map_err(|e| e.into_up())?;
        }
        if self.buf.capacity() - self.buf.len() < self.read_size / 2 {
            self.buf.reserve(self.read_size);
        }
        let room = self.buf.capacity() - self.buf.len();
        let n = self
            .stream
            .read_buf(&mut self.buf)
            .await
            .or_err(ErrorType::ReadError, "reading from the upstream")
            .map_err(|e| e.into_up())?;
        if n == room && self.read_size < MAX_READ {
            self.read_size *= 2;
        }
        Ok(n)
    }

    /// Sets the body's framing from a parsed head.
    fn set_framing(&mut self, framing: Framing) {
        self.body = match framing {
            Framing::Empty | Framing::Length(0) => Body::Done,
            Framing::Length(n) => Body::Length(n),
            Framing::Chunked => Body::Chunked(Chunked::new()),
            Framing::UntilClose => Body::UntilClose,
        };
    }
}

/// A Pingora response head from a parsed one, names in their case; a
/// `Content-Length` beside a `Transfer-Encoding` is removed (RFC 9112 §6.3).
fn build_header(resp: &httparse::Response<'_, '_>) -> Result<Box<ResponseHeader>> {
    let code = resp.code.unwrap_or(0);
    let mut header = ResponseHeader::build(code, Some(resp.headers.len()))?;
    header.set_version(match resp.version {
        Some(0) => http::Version::HTTP_10,
        _ => http::Version::HTTP_11,
    });
    header.set_reason_phrase(resp.reason)?;
    for field in resp.headers.iter() {
        header
            .append_header(
                field.name.to_string(),
                pingora::http::header_value_from_raw(Bytes::copy_from_slice(field.value)),
            )
            .or_err(ErrorType::InvalidHTTPHeader, "invalid response header")
            .map_err(|e| e.into_up())?;
    }
    if header.headers.contains_key(header::TRANSFER_ENCODING) {
        header.remove_header(&header::CONTENT_LENGTH);
    }
    Ok(Box::new(header))
}

/// The framing a parsed head declares.
fn framing_of(header: &ResponseHeader) -> Result<Framing> {
    let values = |name| -> Vec<&[u8]> {
        header
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes())
            .collect()
    };
    framing::framing(
        header.status.as_u16(),
        &values(header::TRANSFER_ENCODING),
        &values(header::CONTENT_LENGTH),
    )
    .map_err(|_| {
        Error::explain(
            ErrorType::InvalidHTTPHeader,
            "invalid Content-Length in the response",
        )
        .into_up()
    })
}

/// A chunked-coding error as an upstream protocol error.
fn chunk_error(e: framing::ChunkError) -> Box<Error> {
    Error::explain(
        ErrorType::H1Error,
        format!("invalid chunked body from the upstream: {e:?}"),
    )
    .into_up()
}
