//! A minimal DNS codec for upstream discovery: builds one `A` or `AAAA`
//! query and reads the addresses (with their TTLs) out of the response.
//!
//! Pure: bytes in, values out; no sockets, no clock, no framework imports
//! (the async lookup that sends these is `proxy::fleet::resolver`). Parsing
//! never panics and never reads outside the message, whatever the bytes.
//!
//! What it reads:
//! - The header: id, QR bit, opcode, TC bit and RCODE.
//! - The question, which must echo the one asked (name compared
//!   case-insensitively, type, class `IN`). A response without a question
//!   is accepted only with TC set or an error RCODE other than NXDOMAIN
//!   (servers may drop the question from those), and then has no
//!   addresses.
//! - The answer section: address records of the asked type, and `CNAME`
//!   chains from the asked name to the end of the chain. Each
//!   address's TTL is the minimum of its own and those of the `CNAME`s
//!   followed. Other types and classes are skipped.
//! - The authority section, only when no address was found: the `SOA` of
//!   the name or one of its ancestors gives the negative TTL (RFC 2308:
//!   the lesser of the record's TTL and its MINIMUM field; also capped by
//!   any `CNAME` followed).
//!
//! Compression pointers must point backwards (which rules out loops), and
//! a name may not exceed 255 bytes on the wire.
//!
//! What it deliberately does not do: other record types, EDNS, DNSSEC,
//! multiple questions, caching, retries or choosing transports (a response
//! with TC set is returned with its flag and no addresses, the caller asks
//! again over TCP). IP literals are not names: [`query`] refuses them and
//! the caller uses the address as is.

use std::fmt;
use std::net::IpAddr;

mod name;
#[cfg(test)]
mod proptests;
mod read;
#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;

/// The record type asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// IPv4 address (type 1).
    A,
    /// IPv6 address (type 28).
    Aaaa,
}

impl RecordKind {
    /// The type's number on the wire.
    pub fn code(self) -> u16 {
        match self {
            Self::A => 1,
            Self::Aaaa => 28,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::A => "A",
            Self::Aaaa => "AAAA",
        })
    }
}

/// The response code of a message (the header's 4-bit RCODE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rcode {
    /// 0: no error (possibly no records either).
    NoError,
    /// 1: the server could not read the query.
    FormErr,
    /// 2: the server failed to answer.
    ServFail,
    /// 3: the name does not exist.
    NxDomain,
    /// 4: the server does not support this kind of query.
    NotImp,
    /// 5: the server refuses to answer.
    Refused,
    /// Any other code (6..=15).
    Other(u8),
}

impl Rcode {
    /// The code for the header's low four bits.
    pub fn from_bits(bits: u8) -> Self {
        match bits & 0x0f {
            0 => Self::NoError,
            1 => Self::FormErr,
            2 => Self::ServFail,
            3 => Self::NxDomain,
            4 => Self::NotImp,
            5 => Self::Refused,
            n => Self::Other(n),
        }
    }

    /// The code's number.
    pub fn bits(self) -> u8 {
        match self {
            Self::NoError => 0,
            Self::FormErr => 1,
            Self::ServFail => 2,
            Self::NxDomain => 3,
            Self::NotImp => 4,
            Self::Refused => 5,
            Self::Other(n) => n & 0x0f,
        }
    }
}

impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoError => f.write_str("NOERROR"),
            Self::FormErr => f.write_str("FORMERR"),
            Self::ServFail => f.write_str("SERVFAIL"),
            Self::NxDomain => f.write_str("NXDOMAIN"),
            Self::NotImp => f.write_str("NOTIMP"),
            Self::Refused => f.write_str("REFUSED"),
            Self::Other(n) => write!(f, "RCODE {n}"),
        }
    }
}

/// What a response says about the name asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The server's response code.
    pub rcode: Rcode,
    /// The TC bit: the answer did not fit, ask again over TCP. When set,
    /// no records are read and `addresses` is empty.
    pub truncated: bool,
    /// Each address of the asked type with its TTL in seconds, in the
    /// order of the answer section (duplicates kept).
    pub addresses: Vec<(IpAddr, u32)>,
    /// When `addresses` is empty: how long, in seconds, the absence may be
    /// cached, from the authority section's `SOA`; `None` without one.
    pub negative_ttl: Option<u32>,
}

/// Why a name could not be asked or a response could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The host name is not a valid DNS name (or is an IP literal).
    #[error("invalid host name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The message ends inside a header, name or record.
    #[error("DNS message ends early (at byte {0})")]
    Short(usize),
    /// The response carries another query's id.
    #[error("DNS response id {got} does not match query id {expected}")]
    IdMismatch {
        /// The id of the query.
        expected: u16,
        /// The id in the response.
        got: u16,
    },
    /// The QR bit is clear or the opcode is not a standard query.
    #[error("DNS message is not a response to a standard query")]
    NotAResponse,
    /// The question section is not the question asked.
    #[error("DNS response answers another question")]
    QuestionMismatch,
    /// A compression pointer points forwards, outside the message or into a loop.
    #[error("DNS name has a bad compression pointer at byte {0}")]
    BadPointer(usize),
    /// A label uses a reserved type, or a name exceeds 255 bytes.
    #[error("DNS name at byte {0} is malformed")]
    BadName(usize),
    /// A record's data does not fit its type or its length.
    #[error("DNS record of type {rtype} at byte {at} has malformed data")]
    BadRecord {
        /// The record's type number.
        rtype: u16,
        /// Where its data starts.
        at: usize,
    },
}

/// Builds a standard recursive query (RD set) for `name`'s `kind` records,
/// with the given message id.
///
/// `name` is a host name: labels of 1 to 63 letters, digits, hyphens or
/// underscores, at most 253 bytes in all, an optional trailing dot. An IP
/// literal is refused ([`DnsError::InvalidName`]): it needs no lookup.
pub fn query(id: u16, name: &str, kind: RecordKind) -> Result<Vec<u8>, DnsError> {
    let wire = name::encode(name)?;
    let mut msg = Vec::with_capacity(12 + wire.len() + 4);
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&[0x01, 0x00]); // QR=0, opcode 0, RD=1
    msg.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // one question
    msg.extend_from_slice(&wire);
    msg.extend_from_slice(&kind.code().to_be_bytes());
    msg.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(msg)
}

/// Reads the response `msg` to the query [`query`] built with `id`, `name`
/// and `kind`: its RCODE, TC bit, the addresses for `name` (following
/// `CNAME`s) and, without addresses, the negative TTL.
///
/// An RCODE other than NOERROR is not an error here: the answer carries it
/// and no addresses.
pub fn parse(msg: &[u8], id: u16, name: &str, kind: RecordKind) -> Result<Answer, DnsError> {
    let asked = name::encode(name)?;
    read::response(msg, id, &asked, kind)
}

/// The `IN` class.
const CLASS_IN: u16 = 1;
