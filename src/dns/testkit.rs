#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hand-built DNS messages for tests: a response builder that writes names
//! uncompressed (or, on request, owners equal to the question as a pointer
//! to it), and a query reader for in-test servers.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Rcode, RecordKind};

/// A resource record to write.
#[derive(Clone, Debug)]
pub(crate) struct Rr {
    pub owner: String,
    pub rtype: u16,
    pub class: u16,
    pub ttl: u32,
    pub data: Vec<u8>,
}

/// Uncompressed wire form of `name`, case kept; "" and "." are the root.
pub(crate) fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

pub(crate) fn a(owner: &str, ttl: u32, ip: Ipv4Addr) -> Rr {
    rr(owner, 1, ttl, ip.octets().to_vec())
}

pub(crate) fn aaaa(owner: &str, ttl: u32, ip: Ipv6Addr) -> Rr {
    rr(owner, 28, ttl, ip.octets().to_vec())
}

pub(crate) fn cname(owner: &str, ttl: u32, target: &str) -> Rr {
    rr(owner, 5, ttl, wire(target))
}

/// An `SOA` for zone `owner` with the given record TTL and MINIMUM field.
pub(crate) fn soa(owner: &str, ttl: u32, minimum: u32) -> Rr {
    let mut data = wire("ns.test.");
    data.extend(wire("hostmaster.test."));
    for n in [1u32, 3600, 600, 86400, minimum] {
        data.extend(n.to_be_bytes());
    }
    rr(owner, 6, ttl, data)
}

pub(crate) fn rr(owner: &str, rtype: u16, ttl: u32, data: Vec<u8>) -> Rr {
    Rr {
        owner: owner.to_owned(),
        rtype,
        class: 1,
        ttl,
        data,
    }
}

/// A response under construction.
#[derive(Clone, Debug)]
pub(crate) struct Response {
    pub id: u16,
    pub name: String,
    pub qtype: u16,
    pub rcode: Rcode,
    pub truncated: bool,
    pub question: bool,
    pub compress: bool,
    pub answers: Vec<Rr>,
    pub authority: Vec<Rr>,
    pub additional: Vec<Rr>,
}

impl Response {
    /// NOERROR, the question echoed, no records.
    pub fn new(id: u16, name: &str, kind: RecordKind) -> Self {
        Self {
            id,
            name: name.to_owned(),
            qtype: kind.code(),
            rcode: Rcode::NoError,
            truncated: false,
            question: true,
            compress: false,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
        }
    }

    pub fn rcode(mut self, rcode: Rcode) -> Self {
        self.rcode = rcode;
        self
    }

    pub fn truncated(mut self) -> Self {
        self.truncated = true;
        self
    }

    pub fn compressed(mut self) -> Self {
        self.compress = true;
        self
    }

    pub fn answer(mut self, rr: Rr) -> Self {
        self.answers.push(rr);
        self
    }

    pub fn authority(mut self, rr: Rr) -> Self {
        self.authority.push(rr);
        self
    }

    pub fn additional(mut self, rr: Rr) -> Self {
        self.additional.push(rr);
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend(self.id.to_be_bytes());
        m.push(0x81 | if self.truncated { 0x02 } else { 0 }); // QR, RD
        m.push(0x80 | self.rcode.bits()); // RA
        for n in [
            usize::from(self.question),
            self.answers.len(),
            self.authority.len(),
            self.additional.len(),
        ] {
            m.extend((n as u16).to_be_bytes());
        }
        if self.question {
            m.extend(wire(&self.name));
            m.extend(self.qtype.to_be_bytes());
            m.extend(1u16.to_be_bytes());
        }
        let same = |a: &str, b: &str| {
            a.trim_end_matches('.')
                .eq_ignore_ascii_case(b.trim_end_matches('.'))
        };
        for r in self
            .answers
            .iter()
            .chain(&self.authority)
            .chain(&self.additional)
        {
            if self.compress && self.question && same(&r.owner, &self.name) {
                m.extend([0xc0, 0x0c]);
            } else {
                m.extend(wire(&r.owner));
            }
            m.extend(r.rtype.to_be_bytes());
            m.extend(r.class.to_be_bytes());
            m.extend(r.ttl.to_be_bytes());
            m.extend((r.data.len() as u16).to_be_bytes());
            m.extend(&r.data);
        }
        m
    }
}

/// The id, name (dotted, no trailing dot) and kind of a query, if `msg`
/// is a one-question `A` or `AAAA` query with an uncompressed name.
pub(crate) fn read_query(msg: &[u8]) -> Option<(u16, String, RecordKind)> {
    let id = u16::from_be_bytes([*msg.first()?, *msg.get(1)?]);
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        if len == 0 || len > 63 {
            break;
        }
        labels.push(String::from_utf8(msg.get(pos + 1..pos + 1 + len)?.to_vec()).ok()?);
        pos += 1 + len;
    }
    let qtype = u16::from_be_bytes([*msg.get(pos + 1)?, *msg.get(pos + 2)?]);
    let kind = match qtype {
        1 => RecordKind::A,
        28 => RecordKind::Aaaa,
        _ => return None,
    };
    Some((id, labels.join("."), kind))
}
