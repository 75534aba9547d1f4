//! Looking up a host name's addresses for DNS discovery, through
//! hickory-resolver: [`lookup`] asks for `A` and `AAAA` records at once and
//! keeps their TTL, from a [`Source`]:
//! - [`Source::system`]: the system's configuration ([`SystemSource`]
//!   reads it again whenever it changes): `/etc/hosts` first (a name found
//!   there is not asked of DNS), then `/etc/resolv.conf`'s nameservers with
//!   its search domains (glibc's order: a name with fewer dots than `ndots`
//!   is tried with each search domain first, then as is; otherwise as is
//!   first), `timeout` and `attempts`;
//! - [`Source::server`]: one DNS server alone, over UDP, asked again over
//!   TCP when an answer comes back truncated (hickory does both, and ignores
//!   as forged an answer that does not echo the question).
//!
//! How answers become a result, for each name tried:
//! - addresses of both types are merged, sorted and deduplicated; the TTL is
//!   the least of the records used (address records and the `CNAME`s that
//!   led to them); an `/etc/hosts` answer has none;
//! - NXDOMAIN or no records for both types is `Ok` with no addresses (the
//!   name exists with no members now), with the negative TTL if the server
//!   gave one (its `SOA`); the next search name, if any, is tried then;
//! - SERVFAIL, REFUSED (any other RCODE), a timeout or a failed exchange is
//!   an error, which ends the search, so the caller keeps the members it has;
//!   but when one type fails while the other gives addresses, those
//!   addresses are the result.
//!
//! The whole call ends by its timeout; each try's wait is at most half of it,
//! so a lost datagram is asked again in time (hickory also resends UDP
//! queries within a try).
//!
//! Deliberately not here: caching (a hickory resolver with no cache is built
//! for each call: the caller decides when to ask again, from the TTL), SRV,
//! DNSSEC, encrypted transports, mDNS, or IP literals (refused: they need no
//! lookup).

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::{Query, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use hickory_resolver::{Hosts, TokioResolver};
use tokio::time::{timeout_at, Instant};

mod system;
#[cfg(test)]
mod tests;

pub use system::SystemSource;

/// The two record types asked, in the order results are combined.
const KINDS: [RecordType; 2] = [RecordType::A, RecordType::AAAA];

/// The addresses a name has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// Every address, IPv4 and IPv6, sorted, without duplicates; empty when
    /// the name does not exist or has no address records.
    pub addresses: Vec<IpAddr>,
    /// How long the answer holds: the least TTL of the records used or,
    /// when there are no addresses, the negative TTL from the server's SOA.
    /// `None` when the server gave no negative TTL, or for `/etc/hosts`.
    pub ttl: Option<Duration>,
}

/// Why a lookup gave no usable answer; the caller keeps what it had.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The host name cannot be asked (invalid, or an IP literal).
    #[error("invalid host name {0:?}")]
    Name(String),
    /// The system's DNS configuration cannot be read, or hickory refuses
    /// the configuration.
    #[error("cannot use the DNS configuration: {0}")]
    Config(String),
    /// No answer within the timeout.
    #[error("no DNS answer within {0:?}")]
    Timeout(Duration),
    /// The server answered with an error code.
    #[error("DNS server answered {} for {kind}", rcode_name(*.rcode))]
    Server {
        /// The record type asked.
        kind: RecordType,
        /// The code it answered.
        rcode: ResponseCode,
    },
    /// The exchange failed: a socket error, an answer that cannot be
    /// decoded, one truncated even over TCP, ...
    #[error("DNS lookup of {kind} failed: {reason}")]
    Failed {
        /// The record type asked.
        kind: RecordType,
        /// hickory's error.
        reason: String,
    },
}

/// Where names are looked up, and how.
#[derive(Clone, Debug)]
pub struct Source {
    config: ResolverConfig,
    options: ResolverOpts,
    /// Consulted before DNS; `None` for a configured server.
    hosts: Option<Arc<Hosts>>,
}

impl Source {
    /// `server` alone, UDP then TCP on truncation; no search domains, no
    /// `/etc/hosts`. Each try waits at most half the lookup's timeout, and
    /// is made twice at most.
    pub fn server(server: SocketAddr) -> Self {
        let mut ns = NameServerConfig::udp_and_tcp(server.ip());
        for c in &mut ns.connections {
            c.port = server.port();
        }
        let mut options = ResolverOpts::default();
        options.attempts = 1;
        Source {
            config: ResolverConfig::from_name_servers(vec![ns]),
            options,
            hosts: None,
        }
    }

    /// The system's rules applied to a configuration of the caller's:
    /// `hosts` first, then `config`'s nameservers with its search domains
    /// and `options` (`ndots`, `timeout`, `attempts`, `edns0`).
    pub fn configured(config: ResolverConfig, options: ResolverOpts, hosts: Hosts) -> Self {
        Source {
            config,
            options,
            hosts: Some(Arc::new(hosts)),
        }
    }

    /// The names to ask for `name`, in order (see the module documentation).
    fn candidates(&self, name: &Name) -> Vec<Name> {
        let mut absolute = name.clone();
        absolute.set_fqdn(true);
        if name.is_fqdn() {
            return vec![absolute];
        }
        // Without a search list, the local domain is one (as for glibc).
        let domains: Vec<&Name> = if self.config.search().is_empty() {
            self.config.domain().into_iter().collect()
        } else {
            self.config.search().iter().collect()
        };
        let mut names: Vec<Name> = Vec::with_capacity(domains.len() + 1);
        let as_is_first =
            usize::from(name.num_labels()) > self.options.ndots || name.is_localhost();
        if as_is_first {
            names.push(absolute.clone());
        }
        for d in domains {
            if let Ok(mut n) = name.clone().append_domain(d) {
                n.set_fqdn(true);
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        if !as_is_first && !names.contains(&absolute) {
            names.push(absolute);
        }
        names
    }

    /// The addresses `/etc/hosts` gives `name`, if it names it.
    fn in_hosts(&self, name: &Name) -> Option<Vec<IpAddr>> {
        let hosts = self.hosts.as_ref()?;
        let found: Vec<_> = KINDS
            .iter()
            .filter_map(|kind| hosts.lookup_static_host(&Query::query(name.clone(), *kind)))
            .collect();
        if found.is_empty() {
            return None;
        }
        let records = found.iter().flat_map(|l| l.answers());
        Some(records.filter_map(|r| r.data.ip_addr()).collect())
    }

    /// A hickory resolver for one call: this source's servers, no cache,
    /// no hosts file (consulted here), each try bounded by `per_try`.
    fn resolver(&self, per_try: Duration) -> Result<TokioResolver, NetError> {
        let config =
            ResolverConfig::from_parts(None, Vec::new(), self.config.name_servers().to_vec());
        let mut options = self.options.clone();
        options.cache_size = 0;
        options.use_hosts_file = ResolveHosts::Never;
        options.timeout = options.timeout.min(per_try);
        TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(options)
            .build()
    }
}

/// Looks `name` up from `source` and combines the answers (see the module
/// documentation), all within `timeout`.
pub async fn lookup(source: &Source, name: &str, timeout: Duration) -> Result<Lookup, LookupError> {
    let deadline = Instant::now() + timeout;
    if name.trim().is_empty() || name.parse::<IpAddr>().is_ok() {
        return Err(LookupError::Name(name.to_owned()));
    }
    let asked = Name::from_str(name).map_err(|_| LookupError::Name(name.to_owned()))?;
    if let Some(mut addresses) = source.in_hosts(&asked) {
        addresses.sort();
        addresses.dedup();
        return Ok(Lookup {
            addresses,
            ttl: None,
        });
    }
    let resolver = source
        .resolver(timeout / 2)
        .map_err(|e| LookupError::Config(e.to_string()))?;
    // The least negative TTL of the names tried, where one was given.
    let mut negative: Option<Duration> = None;
    for candidate in source.candidates(&asked) {
        let ask = |kind| one_type(&resolver, candidate.clone(), kind, deadline, timeout);
        let (a, aaaa) = tokio::join!(ask(KINDS[0]), ask(KINDS[1]));
        let found = combine(a, aaaa)?;
        if !found.addresses.is_empty() {
            return Ok(found);
        }
        negative = match (negative, found.ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    Ok(Lookup {
        addresses: Vec::new(),
        ttl: negative,
    })
}

// === one record type ===

/// One record type's usable answer for one name: its addresses with their
/// least TTL in seconds, or none with the negative TTL.
struct Answer {
    addresses: Vec<IpAddr>,
    ttl: Option<u32>,
}

/// Asks `name`'s `kind` records, until `deadline`.
async fn one_type(
    resolver: &TokioResolver,
    name: Name,
    kind: RecordType,
    deadline: Instant,
    timeout: Duration,
) -> Result<Answer, LookupError> {
    match timeout_at(deadline, resolver.lookup(name.clone(), kind)).await {
        Err(_) => Err(LookupError::Timeout(timeout)),
        Ok(Ok(found)) => Ok(addresses(&name, kind, found.answers())),
        Ok(Err(e)) => judge(kind, e, timeout),
    }
}

/// The `kind` records for `name` among `answers`, following the `CNAME`
/// chain from `name` (records of other names and types are left out).
fn addresses(name: &Name, kind: RecordType, answers: &[Record]) -> Answer {
    let mut chain = vec![(name, u32::MAX)];
    for r in answers {
        if let RData::CNAME(target) = &r.data {
            if let Some(&(_, ttl)) = chain.iter().find(|(n, _)| **n == r.name) {
                chain.push((&target.0, ttl.min(r.ttl)));
            }
        }
    }
    let mut addresses = Vec::new();
    let mut least = None::<u32>;
    for r in answers.iter().filter(|r| r.record_type() == kind) {
        let (Some(ip), Some(&(_, via))) =
            (r.data.ip_addr(), chain.iter().find(|(n, _)| **n == r.name))
        else {
            continue;
        };
        addresses.push(ip);
        let ttl = r.ttl.min(via);
        least = Some(least.map_or(ttl, |l| l.min(ttl)));
    }
    Answer {
        addresses,
        ttl: least,
    }
}

/// hickory's error for one record type: NXDOMAIN and no records are an
/// answer with no addresses; anything else an error.
fn judge(kind: RecordType, e: NetError, timeout: Duration) -> Result<Answer, LookupError> {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(none))
            if matches!(
                none.response_code,
                ResponseCode::NoError | ResponseCode::NXDomain
            ) =>
        {
            Ok(Answer {
                addresses: Vec::new(),
                ttl: none.negative_ttl,
            })
        }
        NetError::Dns(DnsError::NoRecordsFound(none)) => Err(LookupError::Server {
            kind,
            rcode: none.response_code,
        }),
        NetError::Dns(DnsError::ResponseCode(rcode)) => Err(LookupError::Server { kind, rcode }),
        NetError::Timeout => Err(LookupError::Timeout(timeout)),
        other => Err(LookupError::Failed {
            kind,
            reason: other.to_string(),
        }),
    }
}

/// Both record types' results as one lookup; see the module documentation.
fn combine(
    a: Result<Answer, LookupError>,
    aaaa: Result<Answer, LookupError>,
) -> Result<Lookup, LookupError> {
    let answers = match (a, aaaa) {
        (Ok(a), Ok(aaaa)) => vec![a, aaaa],
        (Ok(one), Err(e)) | (Err(e), Ok(one)) => {
            if one.addresses.is_empty() {
                return Err(e);
            }
            vec![one]
        }
        (Err(e), Err(_)) => return Err(e),
    };
    let mut addresses: Vec<IpAddr> = answers.iter().flat_map(|a| a.addresses.clone()).collect();
    addresses.sort();
    addresses.dedup();
    // Positive: the least TTL of the types with addresses; negative: of all.
    let ttl = answers
        .iter()
        .filter(|a| addresses.is_empty() || !a.addresses.is_empty())
        .filter_map(|a| a.ttl)
        .min();
    Ok(Lookup {
        addresses,
        ttl: ttl.map(|s| Duration::from_secs(u64::from(s))),
    })
}

/// The usual mnemonic of an RCODE (`SERVFAIL`, `REFUSED`, ...).
fn rcode_name(rcode: ResponseCode) -> String {
    match rcode {
        ResponseCode::FormErr => "FORMERR".into(),
        ResponseCode::ServFail => "SERVFAIL".into(),
        ResponseCode::NXDomain => "NXDOMAIN".into(),
        ResponseCode::NotImp => "NOTIMP".into(),
        ResponseCode::Refused => "REFUSED".into(),
        other => format!("RCODE {}", u16::from(other)),
    }
}
