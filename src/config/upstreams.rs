//! The upstreams part of the configuration: which llama-servers llamatap sends to
//! (each `http://host:port[/base]` parsed by [`parse_upstream`])
//! (`upstream`, `[[upstreams]]`, repeated `--upstream`); how it picks one
//! of them is [`super::routing`].
//!
//! Validation only: names are unique and label-safe, weights positive, the
//! fleet bounded (its names become metric labels). Choosing an upstream is
//! [`llamatap_policy::router`]'s job, not this module's.

use serde::Deserialize;

use super::discovery::discover_mode;
use super::{invalid, ConfigError, DEFAULT_UPSTREAM};

/// Most upstreams one llamatap fronts: each name is a metric label value.
pub const MAX_UPSTREAMS: usize = 64;
/// Longest upstream name, bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Largest weight.
pub const MAX_WEIGHT: u32 = 1000;

/// One `[[upstreams]]` entry as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `http://host:port[/prefix]`.
    pub url: String,
    /// Label in metrics and spans; default `host:port`.
    pub name: Option<String>,
    /// Relative share of new conversations (rendezvous weight); default 1.
    pub weight: Option<u32>,
    /// Most generating requests this replica keeps in flight on it, when
    /// `[queue]` is on; default `queue.max_inflight`, else its slot count.
    pub max_inflight: Option<u32>,
    /// `dns`: every address the URL's host name resolves to is a member,
    /// named by its address; `none` (default): the URL is one member.
    pub discover: Option<String>,
}

/// One upstream as given: URL, name, weight, `max_inflight`, `discover`.
type Entry = (String, Option<String>, Option<u32>, Option<u32>, bool);

/// The URL prefix of a flag or `upstream` value whose host name is
/// discovered (`dns+http://llama-server:8080`).
pub const DISCOVER_PREFIX: &str = "dns+";

/// A URL as given on its own: `dns+http://...` is discovered.
fn entry(url: &str) -> Entry {
    match url.trim().strip_prefix(DISCOVER_PREFIX) {
        Some(rest) => (rest.to_string(), None, None, None, true),
        None => (url.to_string(), None, None, None, false),
    }
}

/// Builds the fleet from flags (`--upstream`, repeatable), the file's
/// `upstream` or `[[upstreams]]`, or the default, in that order.
pub fn upstreams(
    flags: &[String],
    single: Option<&str>,
    list: Option<&[RawUpstream]>,
) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let entries: Vec<Entry> = if !flags.is_empty() {
        flags.iter().map(|u| entry(u)).collect()
    } else {
        match (single, list) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "upstreams",
                    "set either upstream or [[upstreams]], not both",
                ))
            }
            (Some(u), None) => vec![entry(u)],
            (None, Some(l)) => l
                .iter()
                .map(|r| {
                    Ok((
                        r.url.clone(),
                        r.name.clone(),
                        r.weight,
                        r.max_inflight,
                        discover_mode(r.discover.as_deref())?,
                    ))
                })
                .collect::<Result<_, ConfigError>>()?,
            (None, None) => vec![entry(DEFAULT_UPSTREAM)],
        }
    };
    if entries.is_empty() {
        return Err(invalid("upstreams", "at least one upstream is needed"));
    }
    if entries.len() > MAX_UPSTREAMS {
        return Err(invalid(
            "upstreams",
            &format!("at most {MAX_UPSTREAMS} upstreams"),
        ));
    }
    // A bad URL names the key it was given under.
    let key = if flags.is_empty() && list.is_some() {
        "upstreams.url"
    } else {
        "upstream"
    };
    let mut out: Vec<UpstreamConfig> = Vec::with_capacity(entries.len());
    for (url, name, weight, max_inflight, discover) in entries {
        let mut u = parse_upstream(url.trim()).map_err(|e| match e {
            ConfigError::Invalid { message, .. } => ConfigError::Invalid { key, message },
            e => e,
        })?;
        if discover {
            check_discovered(&u, name.as_deref())?;
            u.discover = true;
        }
        if let Some(n) = name {
            if n.is_empty()
                || n.len() > MAX_NAME_BYTES
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            {
                return Err(invalid(
                    "upstreams.name",
                    &format!(
                        "{n:?}: 1 to {MAX_NAME_BYTES} characters of letters, digits, '-', '_', '.', ':'"
                    ),
                ));
            }
            u.name = n;
        }
        if let Some(w) = weight {
            if w == 0 || w > MAX_WEIGHT {
                return Err(invalid(
                    "upstreams.weight",
                    &format!("must be between 1 and {MAX_WEIGHT}"),
                ));
            }
            u.weight = w;
        }
        if max_inflight == Some(0) {
            return Err(invalid(
                "upstreams.max_inflight",
                "must be greater than zero",
            ));
        }
        u.max_inflight = max_inflight;
        if out.iter().any(|o| o.name == u.name) {
            return Err(invalid(
                "upstreams",
                &format!(
                    "{:?} appears twice (give each upstream its own name)",
                    u.name
                ),
            ));
        }
        out.push(u);
    }
    Ok(out)
}

/// A discovered entry names a host (an address is one member) and no
/// `name` (its members are named by their addresses).
fn check_discovered(u: &UpstreamConfig, name: Option<&str>) -> Result<(), ConfigError> {
    if u.host.parse::<std::net::IpAddr>().is_ok() {
        return Err(invalid(
            "upstreams.discover",
            &format!(
                "{} is an address, not a name to discover; drop discover or give a DNS name",
                u.address
            ),
        ));
    }
    if name.is_some() {
        return Err(invalid(
            "upstreams.name",
            "a discovered upstream's members are named by their addresses; drop name",
        ));
    }
    Ok(())
}

/// Where one llama-server lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Label in metrics and spans (`host:port` unless configured).
    pub name: String,
    /// Relative share of new conversations.
    pub weight: u32,
    /// `host:port` to connect to.
    pub address: String,
    /// Host name or IP, for `server.address`.
    pub host: String,
    /// Port, for `server.port`.
    pub port: u16,
    /// Path prefix prepended to every request path (empty for none).
    pub base_path: String,
    /// `[[upstreams]] max_inflight`: this replica's slots on it (queue on).
    pub max_inflight: Option<u32>,
    /// Every address the host name resolves to is a member
    /// (`discover = "dns"`); this entry is then their template.
    pub discover: bool,
}

/// Splits `host:port` (IPv6 in brackets); the port defaults to 80.
fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (h, rest) = authority.split_at(close + 1);
        match rest.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if rest.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => 80,
    };
    Some((host, port))
}

/// llama-server's endpoints (and the OpenAI ones it serves under `/v1`):
/// a URL path ending in one is a client's request URL, not a base URL.
const ENDPOINTS: &[&str] = &[
    "/chat/completions",
    "/completions",
    "/completion",
    "/embeddings",
    "/embedding",
    "/models",
    "/responses",
    "/messages",
    "/rerank",
    "/reranking",
    "/infill",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/health",
    "/props",
    "/slots",
    "/metrics",
];

/// The path before the endpoint it ends in, when it ends in one (whole
/// segments: `/my-models` does not end in `/models`).
fn endpoint_of(path: &str) -> Option<&str> {
    ENDPOINTS.iter().find_map(|e| path.strip_suffix(e))
}

/// Parses `http://host:port[/base]`.
pub fn parse_upstream(s: &str) -> Result<UpstreamConfig, ConfigError> {
    let err = |m: &str| ConfigError::Invalid {
        key: "upstream",
        message: format!("{s:?}: {m}"),
    };
    if s.starts_with("https://") {
        return Err(err(
            "https:// is not supported (this build has no TLS); use http://, \
             or a TLS-terminating proxy next to llama-server",
        ));
    }
    if !s.contains("://") && !s.is_empty() {
        return Err(err(&format!(
            "no scheme; did you mean http://{}?",
            s.trim_start_matches('/')
        )));
    }
    let rest = s
        .strip_prefix("http://")
        .ok_or_else(|| err("only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if let Some(prefix) = endpoint_of(path) {
        // A client's full endpoint URL: llama-server would answer
        // /v1/chat/completions/v1/chat/completions with 404.
        let prefix = prefix.strip_suffix("/v1").unwrap_or(prefix);
        let endpoint = path.get(prefix.len()..).unwrap_or(path);
        return Err(err(&format!(
            "ends in the endpoint {endpoint}; give llama-server's base URL (http://{authority}{prefix}), \
             llamatap forwards {endpoint} as the client sent it"
        )));
    }
    if let Some(prefix) = path.strip_suffix("/v1") {
        // The OpenAI base-URL habit: llama-server answers /v1/v1/... with 404.
        return Err(err(&format!(
            "ends in /v1; give llama-server's base URL (http://{authority}{prefix}), \
             llamatap forwards /v1/... as the client sent it"
        )));
    }
    if authority.is_empty()
        || authority.contains('@')
        || path.contains(['?', '#'])
        || path.bytes().any(|b| !b.is_ascii_graphic())
    {
        return Err(err("expected http://host:port[/path]"));
    }
    let (host, port) =
        split_host_port(authority).ok_or_else(|| err("expected http://host:port[/path]"))?;
    let valid = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    if !valid {
        return Err(err("invalid host"));
    }
    Ok(UpstreamConfig {
        name: format!("{host}:{port}"),
        weight: 1,
        address: format!("{host}:{port}"),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        base_path: path.to_string(),
        max_inflight: None,
        discover: false,
    })
}
