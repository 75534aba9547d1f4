//! The tenant part of the configuration: named keys (`[[auth.keys]]`), the
//! flat `auth.api_keys` list (one shared anonymous tenant), and the optional
//! shared store of per-minute counts (`[auth.store]`, Redis).
//!
//! Validation only: names unique and label-safe, keys unique (across both
//! lists) and read from the environment when asked, classes, weights and
//! limits in range. Every failure is one line and names a tenant, never a
//! key. Counting and refusing are [`llamatap_policy::tenant`]'s and the proxy's.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError, Secret};
use llamatap_policy::tenant::{self, Limits, Priority, Tenant, Tenants};
use llamatap_wire::conversation::Scope;

/// Largest fair-share weight.
pub const MAX_WEIGHT: u32 = 1000;
/// Default store timeout, milliseconds.
pub const DEFAULT_STORE_TIMEOUT_MS: u64 = 50;

/// One `[[auth.keys]]` entry as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    /// The tenant's name (the label value).
    pub name: String,
    /// The key itself.
    pub key: Option<String>,
    /// The name of an environment variable holding the key.
    pub key_env: Option<String>,
    /// `interactive`, `default` or `batch`.
    pub priority: Option<String>,
    /// Fair-share weight, 1 to 1000.
    pub weight: Option<u32>,
    /// Requests per one-minute window.
    pub requests_per_minute: Option<u64>,
    /// Prompt plus completion tokens per one-minute window.
    pub tokens_per_minute: Option<u64>,
    /// Requests in flight at once.
    pub max_concurrent: Option<u32>,
    /// The key may use llama-server's administrative routes.
    pub admin: Option<bool>,
    /// Default TTFT objective of its requests, ms ([`super::slo`]).
    pub ttft_slo_ms: Option<u64>,
}

impl std::fmt::Debug for RawKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawKey {{ name: {:?}, .. }}", self.name)
    }
}

/// `[auth.store]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS);
    /// empty or absent: no store (limits per replica).
    pub url: Option<String>,
    /// Longest wait for the store on a request, milliseconds.
    pub timeout_ms: Option<u64>,
    /// `allow` or `deny`: what happens when the store fails or is slow.
    pub on_error: Option<String>,
    /// The name of an environment variable holding the store's password
    /// (a Kubernetes Secret, say), used instead of one in the URL.
    pub password_env: Option<String>,
}

/// What a request meets when the store cannot answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnError {
    /// Fail open: this replica's own counts decide (limits per replica).
    #[default]
    Allow,
    /// Fail closed: a limited tenant's requests are refused with 503.
    Deny,
}

impl OnError {
    /// The configuration value.
    pub fn as_str(&self) -> &'static str {
        match self {
            OnError::Allow => "allow",
            OnError::Deny => "deny",
        }
    }
}

/// The validated shared store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// The URL as written, credentials included: never logged.
    pub url: Secret,
    /// `host:port` of the Redis server, for log lines.
    pub address: String,
    /// Longest wait for it on a request.
    pub timeout: Duration,
    /// What happens when it fails.
    pub on_error: OnError,
    /// The password read from `password_env` (for the URL's user, else the
    /// default one); `None`: the URL's own, if any. Never logged.
    pub password: Option<Secret>,
}

/// Builds the tenants from the flat list and `[[auth.keys]]`; `env` reads
/// an environment variable.
pub fn tenants(
    flat: Vec<Secret>,
    keys: Option<Vec<RawKey>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Tenants, ConfigError> {
    let keys = keys.unwrap_or_default();
    if keys.len() > tenant::MAX_TENANTS {
        return Err(ConfigError::Invalid {
            key: "auth.keys",
            message: format!(
                "{} tenants is too many: at most {}",
                keys.len(),
                tenant::MAX_TENANTS
            ),
        });
    }
    let mut named: Vec<Tenant> = Vec::with_capacity(keys.len());
    for k in keys {
        let t = one(k, env)?;
        if named.iter().any(|o| o.name == t.name) {
            return Err(bad(format!("tenant name {:?} is used twice", t.name)));
        }
        if let Some(o) = named.iter().find(|o| o.key == t.key) {
            return Err(bad(format!(
                "tenants {:?} and {:?} have the same key",
                o.name, t.name
            )));
        }
        if flat.contains(&t.key) {
            return Err(bad(format!(
                "tenant {:?} has the same key as an entry of auth.api_keys",
                t.name
            )));
        }
        named.push(t);
    }
    // Each tenant's resumable streams are kept apart by a prefix derived
    // from its name: two names with the same one (a 64-bit hash collision)
    // would share them.
    for (i, t) in named.iter().enumerate() {
        let scope = Scope::of_tenant(&t.name);
        let others = named[..i].iter().map(|o| o.name.as_str());
        if let Some(o) = others
            .chain([tenant::ANONYMOUS])
            .find(|o| Scope::of_tenant(o) == scope)
        {
            return Err(bad(format!(
                "tenants {o:?} and {:?} have the same conversation prefix; rename one",
                t.name
            )));
        }
    }
    for (i, k) in flat.iter().enumerate() {
        if flat[..i].contains(k) {
            return Err(invalid("auth.api_keys", "the same key is listed twice"));
        }
    }
    Ok(Tenants::new(named, flat))
}

fn one(k: RawKey, env: &dyn Fn(&str) -> Option<String>) -> Result<Tenant, ConfigError> {
    let name = k.name.trim().to_string();
    if !tenant::valid_name(&name) {
        return Err(bad(format!(
            "tenant name {name:?}: 1 to {} letters, digits, '-', '_' or '.', and not {:?}",
            tenant::MAX_NAME_BYTES,
            tenant::ANONYMOUS
        )));
    }
    let key = match (k.key, k.key_env) {
        (Some(key), None) => key,
        (None, Some(var)) => env(var.trim()).ok_or_else(|| {
            bad(format!(
                "tenant {name:?}: environment variable {} is not set",
                var.trim()
            ))
        })?,
        _ => {
            return Err(bad(format!(
                "tenant {name:?}: set exactly one of key and key_env"
            )))
        }
    };
    let key = key.trim().to_string();
    if key.len() < 8 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(format!(
            "tenant {name:?}: the key must be at least 8 printable ASCII characters without spaces"
        )));
    }
    let priority = match k.priority.as_deref() {
        None => Priority::Default,
        Some(p) => Priority::parse(p).ok_or_else(|| {
            bad(format!(
                "tenant {name:?}: priority {p:?} is not one of interactive, default, batch"
            ))
        })?,
    };
    let weight = k.weight.unwrap_or(1);
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(bad(format!(
            "tenant {name:?}: weight {weight} is not between 1 and {MAX_WEIGHT}"
        )));
    }
    let positive = |what: &str, v: Option<u64>| match v {
        Some(0) => Err(bad(format!("tenant {name:?}: {what} must be at least 1"))),
        v => Ok(v),
    };
    let limits = Limits {
        requests_per_minute: positive("requests_per_minute", k.requests_per_minute)?,
        tokens_per_minute: positive("tokens_per_minute", k.tokens_per_minute)?,
        max_concurrent: positive("max_concurrent", k.max_concurrent.map(u64::from))?
            .and_then(|v| u32::try_from(v).ok()),
    };
    Ok(Tenant {
        name,
        key: Secret::new(key),
        priority,
        weight,
        limits,
        admin: k.admin.unwrap_or(false),
    })
}

/// Validates `[auth.store]`; `None` when no URL is set. The password of
/// `password_env` is read from the process's environment.
pub fn store(raw: Option<RawStore>) -> Result<Option<Store>, ConfigError> {
    store_with(raw, &|v| std::env::var(v).ok())
}

/// [`store`], with `env` reading an environment variable.
pub fn store_with(
    raw: Option<RawStore>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Store>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let on_error = match raw.on_error.as_deref() {
        None | Some("allow") => OnError::Allow,
        Some("deny") => OnError::Deny,
        Some(other) => {
            return Err(ConfigError::Invalid {
                key: "auth.store.on_error",
                message: format!("{other:?} is not one of allow, deny"),
            })
        }
    };
    let ms = raw.timeout_ms.unwrap_or(DEFAULT_STORE_TIMEOUT_MS);
    if !(1..=10_000).contains(&ms) {
        return Err(invalid(
            "auth.store.timeout_ms",
            "must be between 1 and 10000",
        ));
    }
    let url = raw.url.unwrap_or_default();
    let url = url.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let err = |why: &str| ConfigError::Invalid {
        key: "auth.store.url",
        message: format!(
            "{:?}: {why}; expected redis://[user:password@]host[:port][/db] or rediss://…",
            redact(url)
        ),
    };
    if !url.starts_with("redis://") && !url.starts_with("rediss://") {
        return Err(err("not a redis:// or rediss:// URL"));
    }
    // The crate's own reason (a fixed sentence: never the URL's text).
    let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| {
        let why = e.to_string();
        err(why.split(" - ").next().unwrap_or("it does not parse"))
    })?;
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => (host, port),
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => {
            return Err(err("TLS without certificate checks is not supported"))
        }
        redis::ConnectionAddr::TcpTls { host, port, .. } => (host, port),
        _ => return Err(err("not a TCP address")),
    };
    let address = match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    let password = match raw.password_env.as_deref().map(str::trim) {
        None => None,
        Some(var) => {
            let bad = |why: String| ConfigError::Invalid {
                key: "auth.store.password_env",
                message: why,
            };
            if info.redis_settings().password().is_some() {
                return Err(bad(
                    "the URL holds a password too; give it in one place".into()
                ));
            }
            let password = env(var).filter(|p| !p.is_empty()).ok_or_else(|| {
                bad(format!(
                    "the environment variable {var:?} is not set or empty"
                ))
            })?;
            Some(Secret::new(password))
        }
    };
    Ok(Some(Store {
        url: Secret::new(url.to_string()),
        address,
        timeout: Duration::from_millis(ms),
        on_error,
        password,
    }))
}

/// `url` with everything between the scheme and its last `@` (the user and
/// password, however they are written) replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return match url.rfind('@') {
            Some(at) => format!("***{}", &url[at..]),
            None => url.to_string(),
        };
    };
    match rest.rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_string(),
    }
}

fn bad(message: String) -> ConfigError {
    ConfigError::Invalid {
        key: "auth.keys",
        message,
    }
}

/// `auth.api_keys`, trimmed, each at least 8 printable ASCII characters.
pub(super) fn api_keys(keys: Option<Vec<String>>) -> Result<Vec<Secret>, ConfigError> {
    let keys: Vec<String> = keys
        .unwrap_or_default()
        .into_iter()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .collect();
    if keys
        .iter()
        .any(|k| k.len() < 8 || !k.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(invalid(
            "auth.api_keys",
            "each key must be at least 8 printable ASCII characters without spaces",
        ));
    }
    Ok(keys.into_iter().map(Secret::new).collect())
}

#[cfg(test)]
mod tests;
