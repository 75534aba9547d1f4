//! A parser-free fast path for the one event that dominates every stream:
//! llama-server's single-token chat chunk, byte for byte as it writes it.
//!
//! llama-server serialises with insertion-ordered keys, so a token chunk is
//! always `{"choices":[{"finish_reason":null,"index":N,"delta":{"content":"…"}}],
//! "created":N,"id":"…","model":"…","system_fingerprint":"…",
//! "object":"chat.completion.chunk"}` (or `reasoning_content` in the delta).
//! [`token_chunk`] matches exactly that template with escape-free strings and
//! returns `None` for anything else, which then takes the general serde path.
//! It never guesses: a match is valid JSON with the same meaning.

use std::borrow::Cow;

use super::Delta;

/// Reads `data` if it is exactly llama-server's token-chunk template.
pub(crate) fn token_chunk(data: &[u8]) -> Option<Delta<'_>> {
    let rest = data.strip_prefix(br#"{"choices":[{"finish_reason":null,"index":"#)?;
    let rest = digits(rest)?;
    let rest = rest.strip_prefix(br#","delta":{""#)?;
    let (reasoning, rest) = match rest.strip_prefix(b"content\":\"") {
        Some(rest) => (false, rest),
        None => (true, rest.strip_prefix(b"reasoning_content\":\"")?),
    };
    let (text, rest) = string(rest)?;
    let rest = rest.strip_prefix(br#""}}],"created":"#)?;
    let rest = digits(rest)?;
    let rest = rest.strip_prefix(br#","id":""#)?;
    let (id, rest) = string(rest)?;
    let rest = rest.strip_prefix(br#"","model":""#)?;
    let (model, rest) = string(rest)?;
    let rest = rest.strip_prefix(br#"","system_fingerprint":""#)?;
    let (_, rest) = string(rest)?;
    let rest = rest.strip_prefix(br#"","object":"chat.completion.chunk"}"#)?;
    if !rest.is_empty() {
        return None;
    }
    let text = (!text.is_empty()).then_some(Cow::Borrowed(text));
    Some(Delta {
        hidden_token: reasoning && text.is_some(),
        visible: if reasoning { None } else { text },
        model: (!model.is_empty()).then_some(Cow::Borrowed(model)),
        response_id: (!id.is_empty()).then_some(Cow::Borrowed(id)),
        ..Delta::default()
    })
}

/// Skips a JSON non-negative integer (digits, no leading zero).
fn digits(bytes: &[u8]) -> Option<&[u8]> {
    let n = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let leading_zero = n > 1 && bytes.first() == Some(&b'0');
    if n == 0 || leading_zero {
        return None;
    }
    bytes.get(n..)
}

/// The body of a JSON string up to its closing quote (which stays in the
/// returned rest), if it has no escapes and no control characters.
fn string(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let end = memchr::memchr2(b'"', b'\\', bytes)?;
    if bytes.get(end) != Some(&b'"') {
        return None;
    }
    let body = bytes.get(..end)?;
    if body.iter().any(|&b| b < 0x20) {
        return None;
    }
    Some((std::str::from_utf8(body).ok()?, bytes.get(end..)?))
}
