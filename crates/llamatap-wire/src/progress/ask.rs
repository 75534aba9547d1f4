//! `"return_progress":true` added to a JSON object body as it streams.
//!
//! The member is placed right after the object's opening brace (followed
//! by `,`, or by a space when the object is empty), and the body grows by
//! exactly [`ADDED`] bytes whatever it holds: a body that does not start
//! with an object (not JSON, for llama-server an error anyway) gets
//! [`ADDED`] spaces at its end instead, so that a `Content-Length` set
//! before the body stays right.
//!
//! Deliberately not here: whether a request asks (the proxy decides).

/// The member added.
const FIELD: &[u8] = b"\"return_progress\":true";

/// Bytes the body grows by.
pub const ADDED: usize = FIELD.len() + 1;

/// Where the body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the first byte that is not whitespace.
    Start,
    /// After the object's `{`, before its next byte that is not whitespace.
    Open,
    /// The member is placed.
    Placed,
    /// The body is not a JSON object: spaces at the end.
    NotObject,
}

/// Adds `"return_progress":true` to a body fed chunk by chunk; see the
/// module documentation.
#[derive(Clone, Debug)]
pub struct ProgressAsk {
    state: State,
}

impl Default for ProgressAsk {
    fn default() -> Self {
        Self::new()
    }
}

impl ProgressAsk {
    /// Before the body's first byte.
    pub fn new() -> Self {
        ProgressAsk {
            state: State::Start,
        }
    }

    /// One chunk of the body: `None` when it goes on as it is, else the
    /// bytes to send instead (only the chunk that holds the place of the
    /// member is changed; every chunk after it is `None`).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<Vec<u8>> {
        for (i, &b) in chunk.iter().enumerate() {
            match self.state {
                State::Placed | State::NotObject => return None,
                _ if is_space(b) => {}
                State::Start if b == b'{' => self.state = State::Open,
                State::Start => {
                    self.state = State::NotObject;
                    return None;
                }
                State::Open => {
                    self.state = State::Placed;
                    let mut out = Vec::with_capacity(chunk.len() + ADDED);
                    out.extend_from_slice(&chunk[..i]);
                    out.extend_from_slice(FIELD);
                    out.push(if b == b'}' { b' ' } else { b',' });
                    out.extend_from_slice(&chunk[i..]);
                    return Some(out);
                }
            }
        }
        None
    }

    /// The body ended: what goes after its last byte (the spaces of a body
    /// where the member found no place), empty once it was placed.
    pub fn finish(&mut self) -> &'static [u8] {
        const SPACES: [u8; ADDED] = [b' '; ADDED];
        if self.state == State::Placed {
            &[]
        } else {
            self.state = State::Placed;
            &SPACES
        }
    }
}

/// `body` with the member first, when it is a JSON object (valid JSON
/// whose first byte that is not whitespace is `{`); else `None`, and the
/// body goes as it is (llama-server's answer to it, an error among them,
/// is then the one it gives the client's own body).
pub fn ask_whole(body: &[u8]) -> Option<Vec<u8>> {
    let first = body.iter().copied().find(|&b| !is_space(b))?;
    if first != b'{' || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return None;
    }
    let mut a = ProgressAsk::new();
    let mut out = a.feed(body)?;
    out.extend_from_slice(a.finish());
    Some(out)
}

/// JSON's whitespace.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}
