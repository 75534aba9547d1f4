//! The default TTFT objectives: `ttft_slo_ms` of a tenant (`[[auth.keys]]`)
//! and of a class (`[queue.classes.<name>]`), validated.
//!
//! A request's own `x-slo-ttft-ms` header wins over both; a tenant's
//! default wins over its class's. Deliberately not here: predicting,
//! choosing a member or refusing (`crate::ttft`).

use llamatap_policy::tenant::{Priority, TenantId};

use super::tenant::RawKey;
use super::{invalid, ConfigError};

/// Largest `ttft_slo_ms`: ten minutes.
pub const MAX_SLO_MS: u64 = 600_000;

/// Validated default objectives, ms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slos {
    /// Per named tenant, in `[[auth.keys]]` order (its [`TenantId::Named`]).
    pub tenants: Vec<Option<u32>>,
    /// Per class, in [`Priority::ALL`] order.
    pub classes: [Option<u32>; 3],
}

impl Slos {
    /// The default objective of a request from `tenant` in `class`.
    pub fn default_for(&self, tenant: TenantId, class: Priority) -> Option<u32> {
        let own = match tenant {
            TenantId::Named(i) => self.tenants.get(i).copied().flatten(),
            TenantId::Anonymous => None,
        };
        own.or_else(|| self.classes.get(class as usize).copied().flatten())
    }

    /// No default anywhere: only a request's header sets an objective.
    pub fn is_empty(&self) -> bool {
        self.tenants.iter().all(Option::is_none) && self.classes.iter().all(Option::is_none)
    }
}

/// Validates one `ttft_slo_ms` (1 to [`MAX_SLO_MS`]) of `who`, under `key`.
pub fn check(key: &'static str, who: &str, v: Option<u64>) -> Result<Option<u32>, ConfigError> {
    match v {
        None => Ok(None),
        Some(ms @ 1..=MAX_SLO_MS) => Ok(u32::try_from(ms).ok()),
        Some(ms) => Err(invalid(
            key,
            &format!("{who}: ttft_slo_ms {ms} is not between 1 and {MAX_SLO_MS}"),
        )),
    }
}

/// Validates the tenants' `ttft_slo_ms`, in `[[auth.keys]]` order.
pub fn tenants(keys: Option<&[RawKey]>) -> Result<Vec<Option<u32>>, ConfigError> {
    keys.unwrap_or_default()
        .iter()
        .map(|k| {
            check(
                "auth.keys",
                &format!("tenant {:?}", k.name.trim()),
                k.ttft_slo_ms,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
