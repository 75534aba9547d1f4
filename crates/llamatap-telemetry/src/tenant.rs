//! Per-tenant Prometheus families: requests by outcome, tokens by kind, and
//! refusals by the limit that refused them.
//!
//! The `tenant` label's values are the configured names plus
//! [`llamatap_policy::tenant::ANONYMOUS`] (the flat key list, requests without a key,
//! refused strangers), all seeded at zero at start: no client can add a
//! series, whatever bearer token it sends. Recording happens once per
//! request, in `logging`, from the [`RequestRecord`]; a refusal is counted
//! where it is answered. Never a key, only a tenant's name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::record::{Outcome, RequestRecord};
use llamatap_policy::tenant::window::LimitKind;

/// The `limit` value of a refusal because the shared store failed
/// (`auth.store.on_error = "deny"`).
pub const STORE_LIMIT: &str = "store";

/// `{outcome,tenant}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantOutcome {
    /// [`Outcome::as_str`].
    pub outcome: &'static str,
    /// Tenant name.
    pub tenant: String,
}

/// `{kind,tenant}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantKind {
    /// `prompt`, `cached` or `completion`.
    pub kind: &'static str,
    /// Tenant name.
    pub tenant: String,
}

/// `{limit,tenant}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLimit {
    /// [`LimitKind::as_str`] or [`STORE_LIMIT`].
    pub limit: &'static str,
    /// Tenant name.
    pub tenant: String,
}

/// The per-tenant families.
#[derive(Clone, Default)]
pub struct TenantMetrics {
    /// `llamatap_tenant_requests_total{outcome,tenant}`.
    pub requests: Family<TenantOutcome, Counter>,
    /// `llamatap_tenant_tokens_total{kind,tenant}`.
    pub tokens: Family<TenantKind, Counter>,
    /// `llamatap_tenant_rate_limited_total{limit,tenant}`.
    pub rate_limited: Family<TenantLimit, Counter>,
    /// `llamatap_rate_limit_store_up`: 1 while the shared store answers
    /// (and when none is configured), 0 after a failed call.
    pub store_up: Gauge,
}

impl TenantMetrics {
    /// Creates the families and registers them in `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = TenantMetrics::default();
        r.register(
            "llamatap_tenant_requests",
            "Requests by tenant and outcome (rejected: refused by llamatap, a rate limit included)",
            m.requests.clone(),
        );
        r.register(
            "llamatap_tenant_tokens",
            "Tokens by tenant and kind: prompt (all input tokens, cached included), cached, completion",
            m.tokens.clone(),
        );
        r.register(
            "llamatap_tenant_rate_limited",
            "Requests refused by a tenant limit: requests, tokens, concurrency, or store (the shared store failed with on_error = deny)",
            m.rate_limited.clone(),
        );
        m.store_up.set(1);
        r.register(
            "llamatap_rate_limit_store_up",
            "1 while the shared rate-limit store (auth.store) answered its last call, or none is configured; 0 after a failed or slow call",
            m.store_up.clone(),
        );
        m
    }

    /// Creates every series of each tenant label value at zero.
    pub fn seed(&self, tenants: &[&str]) {
        for t in tenants {
            for outcome in Outcome::ALL {
                let _ = self.requests.get_or_create(&TenantOutcome {
                    outcome: outcome.as_str(),
                    tenant: t.to_string(),
                });
            }
            for kind in ["prompt", "cached", "completion"] {
                let _ = self.tokens.get_or_create(&TenantKind {
                    kind,
                    tenant: t.to_string(),
                });
            }
            for limit in LimitKind::ALL
                .iter()
                .map(|l| l.as_str())
                .chain([STORE_LIMIT])
            {
                let _ = self.rate_limited.get_or_create(&TenantLimit {
                    limit,
                    tenant: t.to_string(),
                });
            }
        }
    }

    /// Records one finished request under its tenant.
    pub fn record(&self, rec: &RequestRecord) {
        let tenant = rec.tenant();
        self.requests
            .get_or_create(&TenantOutcome {
                outcome: rec.outcome.as_str(),
                tenant: tenant.to_string(),
            })
            .inc();
        for (kind, n) in [
            ("prompt", rec.input_tokens()),
            ("cached", rec.cached_input_tokens()),
            ("completion", rec.output_tokens()),
        ] {
            if let Some(n) = n {
                self.tokens
                    .get_or_create(&TenantKind {
                        kind,
                        tenant: tenant.to_string(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts a refusal of `tenant` by `limit`.
    pub fn rate_limited(&self, tenant: &str, limit: &'static str) {
        self.rate_limited
            .get_or_create(&TenantLimit {
                limit,
                tenant: tenant.to_string(),
            })
            .inc();
    }
}
