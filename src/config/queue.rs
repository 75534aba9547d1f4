//! `[queue]`: the admission queue's settings, as written and validated.
//!
//! The queue is off unless `enabled = true`: llamatap is then a drop-in
//! proxy that commits every request to an upstream at once. On, with no
//! other key, it keeps each upstream at its slot count and serves waiting
//! requests first come, first served, refusing none: no class has a wait
//! or depth limit unless configured. Validation only; the queue itself is
//! [`llamatap_policy::queue`] and [`crate::admission`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};
use llamatap_policy::queue::ClassRules;
use llamatap_policy::tenant::Priority;

/// Longest `max_wait_ms`: one hour.
pub const MAX_WAIT_MS: u64 = 3_600_000;
/// Largest `max_depth`.
pub const MAX_DEPTH: usize = 1_000_000;
/// Largest `max_inflight` and `reserve`.
pub const MAX_SLOTS: u32 = 4096;

/// `[queue]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    /// Turn the queue on; default false.
    pub enabled: Option<bool>,
    /// Request header naming a class (`interactive`, `default`, `batch`).
    pub priority_header: Option<String>,
    /// Let the header raise a request above its key's class; default false.
    pub trust_priority_header: Option<bool>,
    /// Slots this replica uses on each upstream; default: its slot count.
    pub max_inflight: Option<u32>,
    /// Longest a dispatched request waits for its prefix's upstream when
    /// that one is full, ms; default 0 (it goes to a free one at once).
    pub affinity_wait_ms: Option<u64>,
    /// Grant slots through leases in `[auth.store]`'s Redis, shared with
    /// every replica using it; default false.
    pub shared: Option<bool>,
    /// How long a lease lives unless renewed, ms; default 3000.
    pub lease_ms: Option<u64>,
    /// How often the shared view (replicas, their queues, leases) is read,
    /// ms; default 100.
    pub sync_ms: Option<u64>,
    /// Per-class rules, by class name.
    #[serde(default)]
    pub classes: BTreeMap<String, RawClass>,
}

/// `[queue.classes.<name>]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClass {
    /// Longest wait in the queue, milliseconds; default: no limit.
    pub max_wait_ms: Option<u64>,
    /// Most requests of this class queued; default: no limit.
    pub max_depth: Option<usize>,
    /// Free slots of the fleet this class may not take; default 0.
    pub reserve: Option<u32>,
    /// Free slots (beyond `reserve`) a tenant of this class that already
    /// has a request granted may not take; default 0.
    pub tenant_reserve: Option<u32>,
    /// A request of a more urgent class that waits with no free slot may
    /// pause a running answer of this class (it continues later); default
    /// false.
    pub preemptible: Option<bool>,
    /// Default TTFT objective of this class's requests, ms ([`super::slo`]).
    pub ttft_slo_ms: Option<u64>,
}

/// Validated `[queue]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The queue is on.
    pub enabled: bool,
    /// Lower-cased header naming a class.
    pub priority_header: Option<String>,
    /// The header may raise a request above its key's class.
    pub trust_priority_header: bool,
    /// Slots used on each upstream without its own `max_inflight`.
    pub max_inflight: Option<u32>,
    /// Longest a dispatched request waits for the upstream holding its
    /// prompt's prefix when that one is full; `None`: it does not wait.
    pub affinity_wait: Option<Duration>,
    /// Rules per class, in [`Priority::ALL`] order.
    pub classes: [ClassRules; 3],
    /// Per class, in [`Priority::ALL`] order: its running answers may be
    /// paused for a more urgent class's request.
    pub preemptible: [bool; 3],
    /// Slots are leased in the shared store (`queue.shared`).
    pub shared: bool,
    /// A lease's life unless renewed.
    pub lease: Duration,
    /// How often the shared view is read.
    pub sync: Duration,
    /// Default TTFT objectives per tenant and class ([`super::slo`]).
    pub slo: super::slo::Slos,
}

/// Default `queue.lease_ms`.
pub const DEFAULT_LEASE_MS: u64 = 3_000;
/// Default `queue.sync_ms`.
pub const DEFAULT_SYNC_MS: u64 = 100;

impl Default for Queue {
    fn default() -> Self {
        Queue {
            enabled: false,
            priority_header: None,
            trust_priority_header: false,
            max_inflight: None,
            affinity_wait: None,
            classes: [ClassRules::default(); 3],
            preemptible: [false; 3],
            shared: false,
            lease: Duration::from_millis(DEFAULT_LEASE_MS),
            sync: Duration::from_millis(DEFAULT_SYNC_MS),
            slo: super::slo::Slos::default(),
        }
    }
}

impl Queue {
    /// This queue with the tenants' default TTFT objectives
    /// ([`super::slo::tenants`]).
    pub fn with_tenant_slos(mut self, tenants: Vec<Option<u32>>) -> Queue {
        self.slo.tenants = tenants;
        self
    }
}

/// Validates `[queue]`.
pub fn queue(raw: RawQueue) -> Result<Queue, ConfigError> {
    let priority_header = match raw.priority_header.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(h) if h.len() <= 128 && h.bytes().all(is_token_byte) => Some(h.to_ascii_lowercase()),
        Some(h) => {
            return Err(invalid(
                "queue.priority_header",
                &format!("{h:?} is not a valid header name"),
            ))
        }
    };
    if raw.max_inflight.is_some_and(|n| n == 0 || n > MAX_SLOTS) {
        return Err(invalid(
            "queue.max_inflight",
            &format!("must be between 1 and {MAX_SLOTS}"),
        ));
    }
    if raw.affinity_wait_ms.is_some_and(|ms| ms > MAX_WAIT_MS) {
        return Err(invalid(
            "queue.affinity_wait_ms",
            &format!("must be between 0 and {MAX_WAIT_MS}"),
        ));
    }
    let lease_ms = raw.lease_ms.unwrap_or(DEFAULT_LEASE_MS);
    if !(500..=600_000).contains(&lease_ms) {
        return Err(invalid("queue.lease_ms", "must be between 500 and 600000"));
    }
    let sync_ms = raw.sync_ms.unwrap_or(DEFAULT_SYNC_MS);
    if !(10..=10_000).contains(&sync_ms) || sync_ms * 3 > lease_ms {
        return Err(invalid(
            "queue.sync_ms",
            "must be between 10 and 10000, and at most a third of queue.lease_ms",
        ));
    }
    let mut classes = [ClassRules::default(); 3];
    let mut preemptible = [false; 3];
    let mut slo = super::slo::Slos::default();
    for (name, c) in raw.classes {
        let Some(p) = Priority::parse(&name) else {
            return Err(invalid(
                "queue.classes",
                &format!("{name:?} is not one of interactive, default, batch"),
            ));
        };
        if c.max_wait_ms.is_some_and(|ms| ms == 0 || ms > MAX_WAIT_MS) {
            return Err(invalid(
                "queue.classes.max_wait_ms",
                &format!("{name}: must be between 1 and {MAX_WAIT_MS}"),
            ));
        }
        if c.max_depth.is_some_and(|d| d == 0 || d > MAX_DEPTH) {
            return Err(invalid(
                "queue.classes.max_depth",
                &format!("{name}: must be between 1 and {MAX_DEPTH}"),
            ));
        }
        if c.reserve.is_some_and(|r| r > MAX_SLOTS) {
            return Err(invalid(
                "queue.classes.reserve",
                &format!("{name}: at most {MAX_SLOTS}"),
            ));
        }
        if c.tenant_reserve.is_some_and(|r| r > MAX_SLOTS) {
            return Err(invalid(
                "queue.classes.tenant_reserve",
                &format!("{name}: at most {MAX_SLOTS}"),
            ));
        }
        if c.preemptible == Some(true) && p == Priority::Interactive {
            return Err(invalid(
                "queue.classes.preemptible",
                "interactive: no class is more urgent, so nothing could pause it",
            ));
        }
        if let Some(slot) = slo.classes.get_mut(p as usize) {
            *slot = super::slo::check("queue.classes.ttft_slo_ms", &name, c.ttft_slo_ms)?;
        }
        if let Some(slot) = preemptible.get_mut(p as usize) {
            *slot = c.preemptible.unwrap_or(false);
        }
        if let Some(slot) = classes.get_mut(p as usize) {
            *slot = ClassRules {
                max_wait: c.max_wait_ms.map(Duration::from_millis),
                max_depth: c.max_depth,
                reserve: c.reserve.unwrap_or(0),
                tenant_reserve: c.tenant_reserve.unwrap_or(0),
            };
        }
    }
    Ok(Queue {
        enabled: raw.enabled.unwrap_or(false),
        priority_header,
        trust_priority_header: raw.trust_priority_header.unwrap_or(false),
        max_inflight: raw.max_inflight,
        affinity_wait: raw
            .affinity_wait_ms
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis),
        classes,
        preemptible,
        shared: raw.shared.unwrap_or(false),
        lease: Duration::from_millis(lease_ms),
        sync: Duration::from_millis(sync_ms),
        slo,
    })
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests;
