//! Tenant limits in the proxy: admission in `request_filter`, the
//! `x-ratelimit-*` headers in `response_filter`, the release of the
//! concurrency slot and the token charge in `logging`.
//!
//! Counts live in this process ([`Window`] per tenant, an atomic in-flight
//! count) and, with `[auth.store]`, in Redis ([`crate::store`]), which then
//! decides the per-minute limits for every replica. The concurrency limit is
//! always per replica. When the store fails, `on_error = "allow"` lets this
//! replica's own counts decide; `"deny"` refuses limited tenants with 503.
//! The arithmetic is [`llamatap_policy::tenant::window`]'s; this module only gathers
//! the counts and applies the decision.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use pingora::proxy::Session;

use crate::config::{Config, OnError};
use llamatap_policy::tenant::window::{self, Quota, Refusal, Usage, Window};
use llamatap_policy::tenant::{InFlight, TenantId, Tenants};
use llamatap_telemetry::record::{Outcome, RequestRecord};
use llamatap_telemetry::tenant::STORE_LIMIT;
use llamatap_telemetry::Telemetry;

use super::answer::End;
use super::context::RequestCtx;
use super::reply::{write_error_with, ErrorReply};
use crate::store::Store;

/// What admission decided.
#[derive(Debug)]
pub enum Admission {
    /// Admitted; the quota for the `x-ratelimit-*` headers (empty when the
    /// tenant has no per-minute limit).
    Admitted(Quota, Option<InFlight>),
    /// Over a limit: 429.
    Refused(Refusal),
    /// The store failed and `on_error = "deny"`: 503.
    StoreDown,
}

/// Per-tenant counts and the optional shared store.
pub struct Limiter {
    tenants: Tenants,
    windows: Vec<Mutex<Window>>,
    inflight: Vec<Arc<AtomicU32>>,
    store: Option<Arc<Store>>,
}

/// Milliseconds since the epoch, now.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Limiter {
    /// The shared store, when `[auth.store]` is configured (the queue's
    /// shared slots use it too).
    pub fn store(&self) -> Option<Arc<Store>> {
        self.store.clone()
    }

    /// Counters for `config`'s tenants; `store_up` follows the store's state.
    pub fn new(config: &Config, store_up: prometheus_client::metrics::gauge::Gauge) -> Self {
        let n = config.tenants.list().len();
        Limiter {
            tenants: config.tenants.clone(),
            windows: (0..n).map(|_| Mutex::new(Window::default())).collect(),
            inflight: (0..n).map(|_| Arc::new(AtomicU32::new(0))).collect(),
            store: config.store.clone().map(|s| {
                let limits = config.tenants.list().iter().any(|t| t.limits.per_minute());
                Arc::new(Store::new(s, store_up).with_limits(limits))
            }),
        }
    }

    /// The tenants.
    pub fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    /// Decides whether a request of `id` may go on, and counts it if so.
    pub async fn admit(&self, id: TenantId) -> Admission {
        let limits = self.tenants.limits(id);
        let TenantId::Named(i) = id else {
            return Admission::Admitted(Quota::default(), None);
        };
        let (Some(window), Some(inflight)) = (self.windows.get(i), self.inflight.get(i)) else {
            return Admission::Admitted(Quota::default(), None);
        };
        if !limits.any() {
            return Admission::Admitted(Quota::default(), None);
        }
        let (before, slot) = InFlight::enter(inflight);
        let now = now_ms();
        let local = |w: &Mutex<Window>| w.lock().map(|mut w| w.used(now)).unwrap_or((0, 0));
        if limits.max_concurrent.is_some_and(|m| before >= m) || !limits.per_minute() {
            let (requests, tokens) = local(window);
            let used = Usage {
                requests,
                tokens,
                concurrent: before,
            };
            return match window::decide(&limits, used, now) {
                Ok(q) => Admission::Admitted(q, Some(slot)),
                Err(r) => Admission::Refused(r),
            };
        }
        let name = self.tenants.name(id);
        if let Some(store) = &self.store {
            match store.admit(name, window::window(now)).await {
                Ok((requests, tokens)) => {
                    let used = Usage {
                        requests: requests.saturating_sub(1),
                        tokens,
                        concurrent: before,
                    };
                    return match window::decide(&limits, used, now) {
                        Ok(q) => {
                            if let Ok(mut w) = window.lock() {
                                w.admit(now);
                            }
                            Admission::Admitted(q, Some(slot))
                        }
                        Err(r) => {
                            // Not admitted: take back the count.
                            self.spawn_add(name, window::window(now), "req", -1);
                            Admission::Refused(r)
                        }
                    };
                }
                Err(_) if store.config().on_error == OnError::Deny => {
                    return Admission::StoreDown;
                }
                Err(_) => {}
            }
        }
        let Ok(mut w) = window.lock() else {
            return Admission::Admitted(Quota::default(), Some(slot));
        };
        let (requests, tokens) = w.used(now);
        let used = Usage {
            requests,
            tokens,
            concurrent: before,
        };
        match window::decide(&limits, used, now) {
            Ok(q) => {
                w.admit(now);
                Admission::Admitted(q, Some(slot))
            }
            Err(r) => Admission::Refused(r),
        }
    }

    /// Charges a finished request's `tokens` (prompt, cached included, plus
    /// completion: [`super::charge::tokens`]) to its tenant's window, here
    /// and in the store.
    pub fn charge(&self, id: TenantId, tokens: u64) {
        let limits = self.tenants.limits(id);
        let TenantId::Named(i) = id else {
            return;
        };
        if limits.tokens_per_minute.is_none() {
            return;
        }
        if tokens == 0 {
            return;
        }
        let now = now_ms();
        if let Some(Ok(mut w)) = self.windows.get(i).map(|w| w.lock()) {
            w.charge(now, tokens);
        }
        self.spawn_add(
            self.tenants.name(id),
            window::window(now),
            "tok",
            i64::try_from(tokens).unwrap_or(i64::MAX),
        );
    }

    /// Sends a count change to the store from a task of its own, off the
    /// request's path (a failure is the store's state change, logged there).
    fn spawn_add(&self, tenant: &str, window: u64, kind: &'static str, delta: i64) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let tenant = tenant.to_string();
        rt.spawn(async move {
            let _ = store.add(&tenant, window, kind, delta).await;
        });
    }
}

// === hooks ===

/// Applies the tenant's limits in `request_filter`: keeps the quota and the
/// concurrency slot on the context, or answers the refusal itself. Whether
/// the request was answered (refused).
pub async fn admit(
    session: &mut Session,
    ctx: &mut RequestCtx,
    limiter: &Limiter,
    telemetry: &Telemetry,
) -> bool {
    let (reply_status, kind, code, message, headers, limit) =
        match limiter.admit(ctx.who.tenant).await {
            Admission::Admitted(quota, slot) => {
                ctx.who.quota = quota;
                ctx.who.slot = slot;
                return false;
            }
            Admission::Refused(r) => (
                429,
                "rate_limit_error",
                "rate_limit_exceeded",
                window::message(limiter.tenants().name(ctx.who.tenant), &r),
                window::refusal_headers(&r),
                r.limit.as_str(),
            ),
            Admission::StoreDown => (
                503,
                "server_error",
                "rate_limit_store_unavailable",
                format!(
                    "tenant \"{}\": the shared rate-limit store is unavailable; retry in 1 s",
                    limiter.tenants().name(ctx.who.tenant)
                ),
                vec![
                    ("retry-after", "1".to_string()),
                    ("retry-after-ms", "1000".to_string()),
                ],
                STORE_LIMIT,
            ),
        };
    if telemetry.metrics_enabled {
        telemetry
            .metrics
            .tenants
            .rate_limited(limiter.tenants().name(ctx.who.tenant), limit);
    }
    ctx.seen.ended = Some(Instant::now());
    ctx.seen.failure = Some((Outcome::Rejected, code, message.clone()));
    let reply = ErrorReply {
        status: reply_status,
        kind,
        code,
        message: &message,
    };
    write_error_with(session, ctx, reply, &headers).await;
    true
}

/// In `logging`: names the tenant on the record, releases its concurrency
/// slot and charges the answer's tokens.
pub fn finish(limiter: &Limiter, ctx: &mut RequestCtx, rec: &mut RequestRecord, end: &End) {
    rec.tenant = match ctx.who.tenant {
        TenantId::Named(_) => Some(Arc::from(limiter.tenants().name(ctx.who.tenant))),
        TenantId::Anonymous => None,
    };
    drop(ctx.who.slot.take());
    limiter.charge(
        ctx.who.tenant,
        super::charge::tokens(rec, end, ctx.asked.request_bytes),
    );
}

#[cfg(test)]
mod tests;
