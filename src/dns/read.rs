//! Reading a response: header, question, answer section and, when no
//! address was found, the authority section's `SOA`. The additional
//! section is never read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{name, Answer, DnsError, Rcode, RecordKind, CLASS_IN};

/// The `CNAME` type.
const TYPE_CNAME: u16 = 5;
/// The `SOA` type.
const TYPE_SOA: u16 = 6;
/// Header length.
const HEADER: usize = 12;

/// One resource record, its data borrowed from the message.
struct Record<'a> {
    owner: Vec<u8>,
    rtype: u16,
    class: u16,
    ttl: u32,
    /// Offset of the data in the message (names in it may point back).
    data_at: usize,
    data: &'a [u8],
}

/// Reads the response `msg` to query `id` for `asked` (wire form) and `kind`.
pub(super) fn response(
    msg: &[u8],
    id: u16,
    asked: &[u8],
    kind: RecordKind,
) -> Result<Answer, DnsError> {
    let header = msg.get(..HEADER).ok_or(DnsError::Short(msg.len()))?;
    let got = u16::from_be_bytes([header[0], header[1]]);
    if got != id {
        return Err(DnsError::IdMismatch { expected: id, got });
    }
    // QR must be set and the opcode (bits 3..=6) a standard query.
    if header[2] & 0x80 == 0 || header[2] & 0x78 != 0 {
        return Err(DnsError::NotAResponse);
    }
    let truncated = header[2] & 0x02 != 0;
    let rcode = Rcode::from_bits(header[3]);
    let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    let (questions, answers, authorities) = (count(4), count(6), count(8));
    let mut answer = Answer {
        rcode,
        truncated,
        addresses: Vec::new(),
        negative_ttl: None,
    };

    let mut pos = match questions {
        // Without a question nothing says which name this answers, which
        // is fine for a failure or "ask again over TCP", not for records.
        0 if truncated || !matches!(rcode, Rcode::NoError | Rcode::NxDomain) => return Ok(answer),
        1 => question(msg, asked, kind)?,
        _ => return Err(DnsError::QuestionMismatch),
    };
    if truncated {
        return Ok(answer);
    }

    // The answer section: addresses of the asked type, and CNAMEs.
    let mut found: Vec<(Vec<u8>, IpAddr, u32)> = Vec::new();
    let mut cnames: Vec<(Vec<u8>, Vec<u8>, u32)> = Vec::new();
    for _ in 0..answers {
        let (r, next) = record(msg, pos)?;
        pos = next;
        if r.class != CLASS_IN {
            continue;
        }
        if r.rtype == kind.code() {
            let ip = address(kind, &r)?;
            found.push((r.owner, ip, r.ttl));
        } else if r.rtype == TYPE_CNAME {
            let (target, end) = name::decode(msg, r.data_at)?;
            if end != r.data_at + r.data.len() {
                return Err(DnsError::BadRecord {
                    rtype: r.rtype,
                    at: r.data_at,
                });
            }
            cnames.push((r.owner, target, r.ttl));
        }
    }

    // Follow CNAMEs from the asked name to the end of the chain (a CNAME
    // wins over addresses beside it, which RFC 1034 forbids anyway); each
    // step uses a record, so a loop ends after them all.
    let mut current = asked;
    let mut chain_ttl = u32::MAX;
    for _ in 0..cnames.len() {
        match cnames
            .iter()
            .find(|(owner, ..)| owner.as_slice() == current)
        {
            Some((_, target, ttl)) => {
                chain_ttl = chain_ttl.min(*ttl);
                current = target;
            }
            None => break,
        }
    }
    answer.addresses = found
        .iter()
        .filter(|(owner, ..)| owner.as_slice() == current)
        .map(|(_, ip, ttl)| (*ip, (*ttl).min(chain_ttl)))
        .collect();
    if answer.addresses.is_empty() {
        answer.negative_ttl = soa_ttl(msg, pos, authorities, current)?.map(|t| t.min(chain_ttl));
    }
    Ok(answer)
}

/// Checks the question at the header's end is the one asked; the offset
/// after it.
fn question(msg: &[u8], asked: &[u8], kind: RecordKind) -> Result<usize, DnsError> {
    let (qname, pos) = name::decode(msg, HEADER)?;
    let tail = msg.get(pos..pos + 4).ok_or(DnsError::Short(msg.len()))?;
    let qtype = u16::from_be_bytes([tail[0], tail[1]]);
    let qclass = u16::from_be_bytes([tail[2], tail[3]]);
    if qname != asked || qtype != kind.code() || qclass != CLASS_IN {
        return Err(DnsError::QuestionMismatch);
    }
    Ok(pos + 4)
}

/// The record at `pos` and the offset after it.
fn record(msg: &[u8], pos: usize) -> Result<(Record<'_>, usize), DnsError> {
    let (owner, pos) = name::decode(msg, pos)?;
    let fixed = msg.get(pos..pos + 10).ok_or(DnsError::Short(msg.len()))?;
    let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let class = u16::from_be_bytes([fixed[2], fixed[3]]);
    let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    let data_at = pos + 10;
    let data = msg
        .get(data_at..data_at + len)
        .ok_or(DnsError::Short(msg.len()))?;
    let record = Record {
        owner,
        rtype,
        class,
        // RFC 2181 §8: a TTL with the top bit set means zero.
        ttl: if ttl > i32::MAX as u32 { 0 } else { ttl },
        data_at,
        data,
    };
    Ok((record, data_at + len))
}

/// The address in an `A` or `AAAA` record.
fn address(kind: RecordKind, r: &Record<'_>) -> Result<IpAddr, DnsError> {
    let bad = DnsError::BadRecord {
        rtype: r.rtype,
        at: r.data_at,
    };
    match kind {
        RecordKind::A => <[u8; 4]>::try_from(r.data)
            .map(|b| IpAddr::V4(Ipv4Addr::from(b)))
            .map_err(|_| bad),
        RecordKind::Aaaa => <[u8; 16]>::try_from(r.data)
            .map(|b| IpAddr::V6(Ipv6Addr::from(b)))
            .map_err(|_| bad),
    }
}

/// The negative TTL from the first `SOA` among the `count` authority
/// records at `pos` whose owner is `name` or an ancestor of it: the lesser
/// of its TTL and its MINIMUM field.
fn soa_ttl(msg: &[u8], mut pos: usize, count: u16, name: &[u8]) -> Result<Option<u32>, DnsError> {
    for _ in 0..count {
        let (r, next) = record(msg, pos)?;
        pos = next;
        if r.rtype != TYPE_SOA || r.class != CLASS_IN || !name::is_at_or_below(name, &r.owner) {
            continue;
        }
        let bad = DnsError::BadRecord {
            rtype: r.rtype,
            at: r.data_at,
        };
        let data_end = r.data_at + r.data.len();
        let (_, after_mname) = name::decode(msg, r.data_at)?;
        let (_, after_rname) = name::decode(msg, after_mname)?;
        // Serial, refresh, retry, expire, minimum: five 32-bit numbers.
        if after_rname > data_end || data_end - after_rname != 20 {
            return Err(bad);
        }
        let Some((_, minimum)) = r.data.split_last_chunk::<4>() else {
            return Err(bad);
        };
        return Ok(Some(r.ttl.min(u32::from_be_bytes(*minimum))));
    }
    Ok(None)
}
