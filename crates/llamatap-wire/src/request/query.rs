//! A request target's query as llama-server's HTTP library (cpp-httplib,
//! `parse_query_text`) reads it: from the first `?` to any `#`, pairs
//! split on `&`, the key before the first `=`, each part percent-decoded
//! with `+` as a space; and the encoding llamatap writes a value back in.
//!
//! Deliberately not here: what a parameter means (its readers).

/// Whether the target's query (as cpp-httplib reads it: from the first `?`
/// to any `#`, pairs split on `&`, the key before the first `=`,
/// percent-decoded with `+` as a space) has the key `name`.
pub fn has(target: &[u8], name: &[u8]) -> bool {
    pairs(target).any(|(key, _)| decode(key) == name)
}

/// The query's raw `key[=value]` pairs (empty ones skipped).
pub fn pairs(target: &[u8]) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
    let query = of(target).unwrap_or(&[]);
    query.split(|b| *b == b'&').filter_map(|pair| {
        if pair.is_empty() {
            return None;
        }
        Some(match memchr::memchr(b'=', pair) {
            Some(at) => (&pair[..at], Some(&pair[at + 1..])),
            None => (pair, None),
        })
    })
}

/// The query of a request target: after the first `?`, up to any `#`;
/// `None` when there is no `?` before the first `#`.
pub fn of(target: &[u8]) -> Option<&[u8]> {
    bounds(target).map(|(start, end)| &target[start..end])
}

/// Where the query of a request target starts and ends ([`of`]).
pub fn bounds(target: &[u8]) -> Option<(usize, usize)> {
    let end = memchr::memchr(b'#', target).unwrap_or(target.len());
    let at = memchr::memchr(b'?', &target[..end])?;
    Some((at + 1, end))
}

/// A query component decoded as cpp-httplib's `decode_query_component`
/// does: `%XX` (when two more bytes follow the `%` and both are hex) is
/// that byte, `+` a space, anything else itself.
pub fn decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        let hex = |at: usize| raw.get(at).and_then(|c| char::from(*c).to_digit(16));
        match b {
            b'%' if i + 2 < raw.len() => match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => {
                    out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                    i += 3;
                    continue;
                }
                _ => out.push(b),
            },
            b'+' => out.push(b' '),
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

/// A query component percent-encoded: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - . _ ~`) as `%XX`, so [`decode`] gives it back.
pub fn encode(raw: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests;
