//! `[discovery]` and `discover = "dns"`: upstream entries whose host name
//! stands for every address it resolves to (a Kubernetes headless Service,
//! Compose's `--scale`, Consul's DNS interface), as written and validated.
//!
//! Validation only: resolving names, members joining and draining are
//! [`crate::fleet::discovery`]'s job.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Shortest `min_refresh_ms`.
pub const MIN_REFRESH_MS: u64 = 100;
/// Longest `max_refresh_ms`: one hour.
pub const MAX_REFRESH_MS: u64 = 3_600_000;

/// `[discovery]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    /// `ip:port` of the DNS server to ask; default: the system's resolver.
    pub resolver: Option<String>,
    /// Shortest time between two lookups of a name, ms; default 1000.
    pub min_refresh_ms: Option<u64>,
    /// Longest time between two lookups of a name, ms; default 30000.
    pub max_refresh_ms: Option<u64>,
}

/// Validated `[discovery]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The DNS server asked, alone; `None`: the system's configuration
    /// (`/etc/hosts`, `/etc/resolv.conf`). Record TTLs are honoured either way.
    pub resolver: Option<SocketAddr>,
    /// Lower bound of the time between lookups (and the period without TTL).
    pub min_refresh: Duration,
    /// Upper bound of the time between lookups.
    pub max_refresh: Duration,
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery {
            resolver: None,
            min_refresh: Duration::from_millis(1000),
            max_refresh: Duration::from_millis(30_000),
        }
    }
}

impl Discovery {
    /// When to look a name up again after an answer with `ttl` (`None`:
    /// unknown): the TTL within the bounds.
    pub fn next_refresh(&self, ttl: Option<Duration>) -> Duration {
        ttl.unwrap_or(self.min_refresh)
            .clamp(self.min_refresh, self.max_refresh)
    }
}

/// Validates `[discovery]`.
pub fn discovery(raw: RawDiscovery) -> Result<Discovery, ConfigError> {
    let d = Discovery::default();
    let resolver = match raw.resolver.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(r) => Some(parse_resolver(r)?),
    };
    let bounded = |key: &'static str, v: Option<u64>, default: Duration| {
        let ms = v.unwrap_or(u64::try_from(default.as_millis()).unwrap_or(u64::MAX));
        if (MIN_REFRESH_MS..=MAX_REFRESH_MS).contains(&ms) {
            Ok(Duration::from_millis(ms))
        } else {
            Err(invalid(
                key,
                &format!("must be between {MIN_REFRESH_MS} and {MAX_REFRESH_MS}"),
            ))
        }
    };
    let min_refresh = bounded(
        "discovery.min_refresh_ms",
        raw.min_refresh_ms,
        d.min_refresh,
    )?;
    let max_refresh = bounded(
        "discovery.max_refresh_ms",
        raw.max_refresh_ms,
        d.max_refresh,
    )?;
    if max_refresh < min_refresh {
        return Err(invalid(
            "discovery.max_refresh_ms",
            "must not be below discovery.min_refresh_ms",
        ));
    }
    Ok(Discovery {
        resolver,
        min_refresh,
        max_refresh,
    })
}

/// `ip:port`, or a bare IP (port 53).
fn parse_resolver(s: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    Err(invalid(
        "discovery.resolver",
        &format!("{s:?} is not ip:port (a DNS server's address, e.g. 10.96.0.10:53)"),
    ))
}

/// How an `[[upstreams]]` entry's host name is used.
pub fn discover_mode(v: Option<&str>) -> Result<bool, ConfigError> {
    match v.map(str::trim) {
        None | Some("none") => Ok(false),
        Some("dns") => Ok(true),
        Some(other) => Err(invalid(
            "upstreams.discover",
            &format!("{other:?} is not one of dns, none"),
        )),
    }
}
