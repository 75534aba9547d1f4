//! Tenants: who a request comes from, and what that caller may use.
//!
//! A tenant is a named API key (`[[auth.keys]]`) with a priority class, a
//! fair-share weight and optional limits; the keys of the flat
//! `auth.api_keys` list are one shared tenant, [`ANONYMOUS`], which also
//! stands for requests without a key (no key configured, a public route, or
//! a stranger refused with 401). Label values are therefore the configured
//! names plus [`ANONYMOUS`]: no client can add one.
//!
//! Pure: key lookup without timing leaks ([`Tenants::identify`]) and the
//! tables the proxy reads. The limit arithmetic is [`window`]'s. This module
//! deliberately never holds a key anywhere but in a [`Secret`], whose
//! `Debug` hides it, and never formats one into a string.

use crate::secret::Secret;

mod inflight;
pub mod window;

pub use inflight::InFlight;

/// The tenant label of the flat `auth.api_keys` list and of requests without
/// a (valid) key.
pub const ANONYMOUS: &str = "anonymous";

/// Most named tenants: each name is a metric label value.
pub const MAX_TENANTS: usize = 256;

/// Longest tenant name, bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// The priority class a tenant's requests may use (read by the saturation
/// queue; parsed and validated now).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Priority {
    /// Live traffic: a person waits for it.
    Interactive,
    /// Everything else.
    #[default]
    Default,
    /// Background work that may wait.
    Batch,
}

impl Priority {
    /// Every class, most urgent first.
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Default, Priority::Batch];

    /// The configuration and label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Default => "default",
            Priority::Batch => "batch",
        }
    }

    /// Parses a configuration value.
    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// A tenant's limits; `None`: unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Requests admitted per one-minute window.
    pub requests_per_minute: Option<u64>,
    /// Prompt plus completion tokens per one-minute window, charged when an
    /// answer's usage is known.
    pub tokens_per_minute: Option<u64>,
    /// Requests in flight at once.
    pub max_concurrent: Option<u32>,
}

impl Limits {
    /// Whether any per-minute limit is set (those the shared store holds).
    pub fn per_minute(&self) -> bool {
        self.requests_per_minute.is_some() || self.tokens_per_minute.is_some()
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.per_minute() || self.max_concurrent.is_some()
    }
}

/// One named tenant.
#[derive(Clone, Debug)]
pub struct Tenant {
    /// Its name: the label value in metrics, spans and the access log.
    pub name: String,
    /// Its key.
    pub key: Secret,
    /// Its priority class.
    pub priority: Priority,
    /// Its fair-share weight (1..=1000).
    pub weight: u32,
    /// Its limits.
    pub limits: Limits,
    /// Its key may use llama-server's administrative routes
    /// (`llamatap_wire::request::AdminRoute`).
    pub admin: bool,
}

/// Who a request is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TenantId {
    /// The named tenant at this index of [`Tenants::list`].
    Named(usize),
    /// The shared [`ANONYMOUS`] value.
    #[default]
    Anonymous,
}

/// The outcome of a key check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A known key (a named tenant or one of the flat list).
    Known(TenantId),
    /// No key configured at all: every request is [`ANONYMOUS`].
    Open,
    /// Keys are configured and this one (or its absence) matches none.
    Stranger,
}

/// Every tenant and anonymous key.
#[derive(Clone, Debug, Default)]
pub struct Tenants {
    named: Vec<Tenant>,
    anonymous_keys: Vec<Secret>,
}

impl Tenants {
    /// The named tenants (validated by the configuration) and the flat list.
    pub fn new(named: Vec<Tenant>, anonymous_keys: Vec<Secret>) -> Self {
        Tenants {
            named,
            anonymous_keys,
        }
    }

    /// The named tenants, in configuration order.
    pub fn list(&self) -> &[Tenant] {
        &self.named
    }

    /// Whether any named key is configured (tenants are told apart: the
    /// administrative routes need an admin key, and resumable streams are
    /// kept apart per tenant).
    pub fn named(&self) -> bool {
        !self.named.is_empty()
    }

    /// Whether `id` may use llama-server's administrative routes: a named
    /// tenant marked `admin`, or anyone when no named key is configured.
    pub fn may_administer(&self, id: TenantId) -> bool {
        !self.named() || self.get(id).is_some_and(|t| t.admin)
    }

    /// Whether requests need a key (some key is configured).
    pub fn auth_required(&self) -> bool {
        !self.named.is_empty() || !self.anonymous_keys.is_empty()
    }

    /// The named tenant, if `id` is one.
    pub fn get(&self, id: TenantId) -> Option<&Tenant> {
        match id {
            TenantId::Named(i) => self.named.get(i),
            TenantId::Anonymous => None,
        }
    }

    /// The label value of `id`.
    pub fn name(&self, id: TenantId) -> &str {
        self.get(id).map(|t| t.name.as_str()).unwrap_or(ANONYMOUS)
    }

    /// Every label value: the configured names, then [`ANONYMOUS`].
    pub fn label_values(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.named.iter().map(|t| t.name.as_str()).collect();
        v.push(ANONYMOUS);
        v
    }

    /// The limits of `id` (none for [`ANONYMOUS`]).
    pub fn limits(&self, id: TenantId) -> Limits {
        self.get(id).map(|t| t.limits).unwrap_or_default()
    }

    /// Finds the key `presented` belongs to. Every configured key is compared,
    /// each without an early exit on the first differing byte, and the loop
    /// does not stop at a match: the time taken depends on the number and
    /// lengths of the configured keys, not on which one (if any) matched.
    pub fn identify(&self, presented: Option<&str>) -> Identity {
        if !self.auth_required() {
            return Identity::Open;
        }
        let Some(p) = presented else {
            return Identity::Stranger;
        };
        let mut found: Option<TenantId> = None;
        for (i, t) in self.named.iter().enumerate() {
            if same(&t.key, p) && found.is_none() {
                found = Some(TenantId::Named(i));
            }
        }
        for k in &self.anonymous_keys {
            if same(k, p) && found.is_none() {
                found = Some(TenantId::Anonymous);
            }
        }
        match found {
            Some(id) => Identity::Known(id),
            None => Identity::Stranger,
        }
    }
}

/// Compares in constant time (the `subtle` crate, whose operations the
/// optimiser cannot shorten): every byte of the key is compared whatever
/// the presented key's length or content, so the time taken tells nothing
/// of how much of a guess was right, nor of whether its length was.
pub fn same(key: &Secret, presented: &str) -> bool {
    use subtle::ConstantTimeEq;
    let (a, b) = (key.expose().as_bytes(), presented.as_bytes());
    let lengths = u64::try_from(a.len()).unwrap_or(u64::MAX);
    let mut equal = lengths.ct_eq(&u64::try_from(b.len()).unwrap_or(u64::MAX));
    for (i, x) in a.iter().enumerate() {
        equal &= x.ct_eq(b.get(i).unwrap_or(&0));
    }
    equal.into()
}

/// Whether `name` may be a tenant name: 1 to [`MAX_NAME_BYTES`] letters,
/// digits, `-`, `_` or `.`, and not [`ANONYMOUS`].
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name != ANONYMOUS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
