//! Domain names: checking and encoding a host name, decoding a (possibly
//! compressed) name from a message, and comparing names.
//!
//! Names are held in uncompressed wire form (length-prefixed labels ending
//! with the zero-length root label), lowercased, so that two names are equal
//! exactly when their bytes are.

use super::DnsError;

/// Longest host name in text form, without the trailing dot.
const MAX_TEXT: usize = 253;
/// Longest label.
const MAX_LABEL: usize = 63;
/// Longest name in wire form (RFC 1035 §2.3.4).
const MAX_WIRE: usize = 255;
/// Most compression pointers followed in one name. Pointer targets strictly
/// decrease, so this only bounds the work on hostile input.
const MAX_POINTERS: usize = 128;

/// The lowercased wire form of host name `name`; see [`super::query`] for
/// what is accepted.
pub(super) fn encode(name: &str) -> Result<Vec<u8>, DnsError> {
    let invalid = |reason| DnsError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(invalid("an IP address, not a name"));
    }
    let text = name.strip_suffix('.').unwrap_or(name);
    if text.is_empty() {
        return Err(invalid("empty"));
    }
    if text.len() > MAX_TEXT {
        return Err(invalid("longer than 253 bytes"));
    }
    let mut wire = Vec::with_capacity(text.len() + 2);
    for label in text.split('.') {
        if label.is_empty() {
            return Err(invalid("empty label"));
        }
        if label.len() > MAX_LABEL {
            return Err(invalid("label longer than 63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid(
                "only letters, digits, '-' and '_' are allowed in labels",
            ));
        }
        wire.push(label.len() as u8);
        wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    wire.push(0);
    Ok(wire)
}

/// Decodes the name at `start` in `msg`: its lowercased wire form and the
/// offset just past its bytes in place (after the first pointer, if any).
pub(super) fn decode(msg: &[u8], start: usize) -> Result<(Vec<u8>, usize), DnsError> {
    let mut out = Vec::new();
    let mut pos = start;
    // Where the labels being read began: a pointer must point before it,
    // so every jump lands strictly lower and no loop is possible.
    let mut segment = start;
    let mut end = None;
    let mut pointers = 0;
    loop {
        let len = *msg.get(pos).ok_or(DnsError::Short(pos))?;
        match len & 0xc0 {
            0x00 => {
                let len = usize::from(len);
                let label = msg
                    .get(pos + 1..pos + 1 + len)
                    .ok_or(DnsError::Short(msg.len()))?;
                if out.len() + 1 + len + usize::from(len != 0) > MAX_WIRE {
                    return Err(DnsError::BadName(start));
                }
                out.push(len as u8);
                out.extend(label.iter().map(u8::to_ascii_lowercase));
                pos += 1 + len;
                if len == 0 {
                    return Ok((out, end.unwrap_or(pos)));
                }
            }
            0xc0 => {
                let low = *msg.get(pos + 1).ok_or(DnsError::Short(pos + 1))?;
                let target = usize::from(u16::from_be_bytes([len & 0x3f, low]));
                pointers += 1;
                if target >= segment || pointers > MAX_POINTERS {
                    return Err(DnsError::BadPointer(pos));
                }
                end.get_or_insert(pos + 2);
                pos = target;
                segment = target;
            }
            _ => return Err(DnsError::BadName(pos)),
        }
    }
}

/// Whether wire name `name` is `ancestor` or lies below it.
pub(super) fn is_at_or_below(name: &[u8], ancestor: &[u8]) -> bool {
    let mut pos = 0;
    while pos < name.len() {
        if name[pos..] == *ancestor {
            return true;
        }
        pos += 1 + usize::from(name[pos]);
    }
    false
}
