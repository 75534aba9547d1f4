//! The admission queue's Prometheus families: depth and oldest wait per
//! class, refusals by class and reason, slot use per upstream, and the
//! shared slots' state (replicas, mode, slots leased elsewhere).
//!
//! Every label value comes from a fixed list (the three classes, the two
//! refusal reasons, the configured upstream names), seeded at zero at start
//! (with the queue off too, so that the dashboards' queries show 0). The gauges are set by the admission queue
//! as requests enter and leave the queue; refusals are counted once, in
//! `logging`, from the record. Deliberately no tenant label here: tenants
//! have their own families ([`super::tenant`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::record::{Outcome, RequestRecord};
use llamatap_policy::tenant::Priority;

/// The refusal reasons: `error.type` values of a request the queue refused.
pub const REFUSAL_REASONS: [&str; 3] = ["queue_timeout", "queue_full", "tenant_queue_full"];

/// `{class}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// `interactive`, `default` or `batch`.
    pub class: &'static str,
}

/// `{class,reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// `interactive`, `default` or `batch`.
    pub class: &'static str,
    /// One of [`REFUSAL_REASONS`].
    pub reason: &'static str,
}

/// `{upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabels {
    /// The upstream's configured name.
    pub upstream: String,
}

/// The queue's families.
#[derive(Clone)]
pub struct QueueMetrics {
    /// `llamatap_queue_depth{class}`.
    pub depth: Family<ClassLabels, Gauge>,
    /// `llamatap_queue_oldest_wait_seconds{class}`.
    pub oldest_wait: Family<ClassLabels, Gauge<f64, AtomicU64>>,
    /// `llamatap_queue_refused_total{class,reason}`.
    pub refused: Family<RefusalLabels, Counter>,
    /// `llamatap_queue_slots_in_use{upstream}`.
    pub in_use: Family<SlotLabels, Gauge>,
    /// `llamatap_queue_slots{upstream}`: capacity (-1 when unknown).
    pub capacity: Family<SlotLabels, Gauge>,
    /// `llamatap_queue_affinity_waits_total{result}`.
    pub affinity_waits: Family<AffinityLabels, Counter>,
    /// `llamatap_queue_slots_elsewhere{upstream}`: slots leased by other
    /// replicas (shared slots).
    pub elsewhere: Family<SlotLabels, Gauge>,
    /// `llamatap_queue_replicas`: replicas sharing the slots.
    pub replicas: Gauge,
    /// `llamatap_queue_shared`: 1 while the slots are shared.
    pub shared: Gauge,
    /// `llamatap_queue_lease_conflicts_total`.
    pub lease_conflicts: Counter,
    /// `llamatap_queue_lease_duration_seconds`: one lease round trip.
    pub lease_duration: Histogram,
}

/// Lease round-trip buckets, seconds: 50 µs to the store's longest timeout.
pub const LEASE_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

impl Default for QueueMetrics {
    fn default() -> Self {
        QueueMetrics {
            depth: Family::default(),
            oldest_wait: Family::default(),
            refused: Family::default(),
            in_use: Family::default(),
            capacity: Family::default(),
            affinity_waits: Family::default(),
            elsewhere: Family::default(),
            replicas: Gauge::default(),
            shared: Gauge::default(),
            lease_conflicts: Counter::default(),
            lease_duration: Histogram::new(LEASE_BUCKETS.iter().copied()),
        }
    }
}

/// Results of a wait for the upstream holding a request's prefix.
pub const AFFINITY_RESULTS: [&str; 2] = ["freed", "expired"];

/// `{result}`: `freed` (a slot came free there in time) or `expired` (the
/// request went to another upstream).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AffinityLabels {
    /// One of [`AFFINITY_RESULTS`].
    pub result: &'static str,
}

impl QueueMetrics {
    /// Creates the families and registers them in `r`.
    pub fn register(r: &mut Registry) -> Self {
        let m = QueueMetrics::default();
        r.register(
            "llamatap_queue_depth",
            "Requests waiting in llamatap's admission queue, by class",
            m.depth.clone(),
        );
        r.register(
            "llamatap_queue_oldest_wait_seconds",
            "How long the oldest request of each class has waited in the queue",
            m.oldest_wait.clone(),
        );
        r.register(
            "llamatap_queue_affinity_waits",
            "Dispatched requests that waited for the full upstream holding their prompt's prefix (queue.affinity_wait_ms), by result: freed (a slot came free there in time), expired (sent to another upstream)",
            m.affinity_waits.clone(),
        );
        for result in AFFINITY_RESULTS {
            let _ = m.affinity_waits.get_or_create(&AffinityLabels { result });
        }
        r.register(
            "llamatap_queue_refused",
            "Requests refused by the queue before reaching an upstream, by class and reason (queue_timeout: waited max_wait_ms, 503; queue_full: max_depth reached, 503; tenant_queue_full: max_depth reached and the tenant held more than its share, 429)",
            m.refused.clone(),
        );
        r.register(
            "llamatap_queue_slots_in_use",
            "Requests this replica has in flight on each upstream, as counted by the queue",
            m.in_use.clone(),
        );
        r.register(
            "llamatap_queue_slots",
            "Slots the queue uses on each upstream (max_inflight, else its /slots count; -1: unknown, not limiting)",
            m.capacity.clone(),
        );
        r.register(
            "llamatap_queue_slots_elsewhere",
            "Slots of each upstream leased by other llamatap replicas, as the shared store last showed them (0 without queue.shared)",
            m.elsewhere.clone(),
        );
        r.register(
            "llamatap_queue_replicas",
            "llamatap replicas sharing the upstreams' slots (live heartbeats in the store; 1 without queue.shared)",
            m.replicas.clone(),
        );
        r.register(
            "llamatap_queue_shared",
            "1 while this replica grants slots through the shared store; 0 while it uses its static share (store unreachable) or queue.shared is off",
            m.shared.clone(),
        );
        r.register(
            "llamatap_queue_lease_conflicts",
            "Leases the store refused because another replica took the upstream's last slot after this replica's view was read (the request was routed again, or waited at the head of its class)",
            m.lease_conflicts.clone(),
        );
        r.register(
            "llamatap_queue_lease_duration_seconds",
            "Time a request spent taking its slot's lease in the shared store (queue.shared): one round trip to Redis before it connects",
            m.lease_duration.clone(),
        );
        m.replicas.set(1);
        m
    }

    /// Seeds every series at zero: the classes, reasons and `upstreams`.
    pub fn seed<'a>(&self, upstreams: impl Iterator<Item = &'a str>) {
        for p in Priority::ALL {
            let class = p.as_str();
            let _ = self.depth.get_or_create(&ClassLabels { class });
            let _ = self.oldest_wait.get_or_create(&ClassLabels { class });
            for reason in REFUSAL_REASONS {
                let _ = self.refused.get_or_create(&RefusalLabels { class, reason });
            }
        }
        for u in upstreams {
            self.seed_slots(u);
        }
    }

    /// Creates the slot series of upstream `name` (a member joined).
    pub fn seed_upstream(&self, name: &str) {
        self.seed_slots(name);
    }

    fn seed_slots(&self, name: &str) {
        let l = SlotLabels {
            upstream: name.to_string(),
        };
        let _ = self.in_use.get_or_create(&l);
        let _ = self.elsewhere.get_or_create(&l);
        self.capacity.get_or_create(&l).set(-1);
    }

    /// Removes the slot series of upstream `name` (a member left).
    pub fn forget_upstream(&self, name: &str) {
        let l = SlotLabels {
            upstream: name.to_string(),
        };
        self.in_use.remove(&l);
        self.elsewhere.remove(&l);
        self.capacity.remove(&l);
    }

    /// Counts a refusal of the queue, from the finished request's record.
    pub fn record(&self, rec: &RequestRecord) {
        let (Some(q), Outcome::Rejected) = (&rec.queue, rec.outcome) else {
            return;
        };
        if let Some(reason) = rec
            .error_type
            .and_then(|t| REFUSAL_REASONS.into_iter().find(|r| *r == t))
        {
            self.refused
                .get_or_create(&RefusalLabels {
                    class: q.class,
                    reason,
                })
                .inc();
        }
    }
}
