//! Watches every upstream in the background, each on its own schedule, so
//! that a slow or dead member never delays another's checks:
//!
//! - the **health loop** of a member re-resolves its address (a bounded
//!   lookup, one at a time) and checks `/health` every [`HEALTH_INTERVAL`],
//!   each check bounded by [`HEALTH_TIMEOUT`]: readiness,
//!   `llamatap_upstream_up`, and one log line per change of state, naming
//!   the upstream and the reason;
//! - the **info loop** of a member, while it is healthy, reads its idle
//!   slots and the marks of its process's life (`/slots`: fleets, the
//!   admission queue, or TTFT objectives in use; [`Fleet::reads_slots`]), its
//!   own `llamacpp:*` metrics (`/metrics`, when it runs with `--metrics`;
//!   re-exported by [`llamatap_telemetry::reexport`]) and its model list
//!   (`/v1/models`, else llama-server's router-mode `/models`), each read
//!   bounded by `INFO_TIMEOUT` (3 s). It reads the model list at once when the
//!   member turns healthy. A mark that went backwards (see
//!   [`llamatap_wire::llama::slots::Marks`]) means the member restarted: the
//!   router forgets its prefixes. A failed check alone does not.
//!
//! A discovered name has a third loop, [`super::discovery`], which adds and
//! drains members as its answer changes; each member it adds gets its own
//! two loops, which end when the member leaves.
//!
//! Every request goes through `probe`, the proxy's own HTTP/1
//! client. Never on a request's path: a slow DNS server or a dead upstream
//! never holds a request up.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::probe::{self, ProbeError};
use super::{Fleet, Member, Transition};
use llamatap_telemetry::Telemetry;
use llamatap_wire::llama::{parse_model_list, server_metrics, slots};

/// How often each upstream's `/health` is checked. A recovered upstream
/// rejoins within one interval and one check's timeout.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// Longest a `/health` check may take, connect included.
pub const HEALTH_TIMEOUT: Duration = Duration::from_millis(1500);
/// Longest a name lookup may take before the last known address is used.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest each of the other reads (`/slots`, `/metrics`, models) may take.
const INFO_TIMEOUT: Duration = Duration::from_secs(3);

/// The first address `host:port` resolves to (a blocking lookup).
fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok().and_then(|mut a| a.next())
}

/// What the two loops of one member share.
struct Watched {
    fleet: Arc<Fleet>,
    telemetry: Arc<Telemetry>,
    member: Arc<Member>,
    /// Woken when the member turns healthy: read its models at once.
    healthy_again: Notify,
    /// A name lookup is running (a stuck resolver gets one thread, not one
    /// per check).
    resolving: AtomicBool,
}

impl Watched {
    fn name(&self) -> &str {
        &self.member.upstream.name
    }

    /// Re-resolves the member's address, waiting at most [`RESOLVE_TIMEOUT`]
    /// (the last address stays in use meanwhile).
    async fn resolve(self: &Arc<Self>) {
        let m = &self.member;
        // A discovered member is one address: nothing to resolve.
        if m.discovered || self.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let address = m.upstream.address.clone();
        let lookup = tokio::task::spawn_blocking(move || {
            let found = resolve(&address);
            me.resolving.store(false, Ordering::Release);
            found
        });
        if let Ok(Ok(Some(a))) = tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
            m.set_address(a);
        }
    }

    /// One health check: `Err` says why the member is not usable.
    async fn check_health(self: &Arc<Self>) -> Result<(), String> {
        self.resolve().await;
        let m = &self.member;
        let Some(target) = m.address() else {
            return Err(format!("{} does not resolve", m.upstream.address));
        };
        let path = format!("{}/health", m.upstream.base_path);
        match probe::get(target, &m.upstream.address, &path, HEALTH_TIMEOUT).await {
            Ok((200, _)) => Ok(()),
            // llama-server's answer while it loads its model.
            Ok((503, _)) => Err("loading model (/health answered 503)".to_string()),
            Ok((status, _)) => Err(format!("{path} answered {status}")),
            Err(ProbeError::TimedOut) => Err(format!(
                "/health did not answer within {} ms",
                HEALTH_TIMEOUT.as_millis()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Checks `/health` every [`HEALTH_INTERVAL`] and logs each change.
    async fn health_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(HEALTH_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            tick.tick().await;
            if self.member.gone() {
                return;
            }
            let result = self.check_health().await;
            let m = &self.member;
            match m.set_health(result) {
                Some(Transition::Up) => {
                    tracing::info!(upstream = self.name(), "upstream healthy");
                    self.healthy_again.notify_one();
                }
                Some(Transition::Down(why)) if first => {
                    tracing::warn!(upstream = self.name(), reason = %why, "upstream unreachable at start");
                }
                Some(Transition::Down(why)) => {
                    tracing::warn!(upstream = self.name(), reason = %why, "upstream down");
                }
                None => {}
            }
            first = false;
        }
    }

    /// Reads slots, metrics and models while the member is healthy.
    async fn info_loop(self: Arc<Self>, model_refresh: Duration) {
        let mut tick = tokio::time::interval(HEALTH_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut models_read: Option<Instant> = None;
        // An upstream without `--metrics` answers /metrics with an error:
        // it is asked again only with its model list, not every round.
        let mut serves_metrics = true;
        let mut published_metrics = false;
        loop {
            let woken = tokio::select! {
                _ = tick.tick() => false,
                () = self.healthy_again.notified() => true,
            };
            let m = &self.member;
            if m.gone() {
                return;
            }
            let Some(target) = m.address().filter(|_| m.healthy()) else {
                if published_metrics {
                    self.telemetry.metrics.llamacpp.clear(&m.upstream.name);
                    published_metrics = false;
                }
                m.set_deferred(None);
                serves_metrics = true;
                continue;
            };
            let models_due = woken || models_read.is_none_or(|t| t.elapsed() >= model_refresh);
            let mut marks = slots::Marks::default();
            if self.fleet.is_fleet() || self.fleet.reads_slots() {
                let state = match self.get(target, "/slots").await {
                    Some((200, body)) => slots::parse_slots(&body),
                    _ => None,
                };
                m.set_idle_slots(state.map(|s| u32::try_from(s.idle).unwrap_or(u32::MAX)));
                let total = match state {
                    Some(s) => Some(s.slots),
                    // `--no-slots`: the count is in /props, read with the
                    // model list (it changes only with a restart).
                    None if self.fleet.reads_slots() && models_due => {
                        match self.get(target, "/props").await {
                            Some((200, body)) => slots::parse_props_slots(&body),
                            _ => None,
                        }
                    }
                    None => m.total_slots().map(|n| n as usize),
                };
                m.set_total_slots(total.map(|n| u32::try_from(n).unwrap_or(u32::MAX)));
                marks.slots = state;
            }
            if serves_metrics || models_due {
                let families = match self.get(target, "/metrics").await {
                    Some((200, body)) => Some(server_metrics::parse(&body)),
                    _ => None,
                };
                serves_metrics = families.is_some();
                let value = |name| {
                    families
                        .as_deref()
                        .and_then(|f| server_metrics::value(f, name))
                };
                m.set_deferred(value("llamacpp:requests_deferred").map(|v| v.min(1e9) as u32));
                marks.decodes = value("llamacpp:n_decode_total").map(|v| v.min(1e18) as u64);
                match families {
                    Some(f) => {
                        // Not for a member that left meanwhile: its series are gone.
                        published_metrics = self.fleet.if_present(m, || {
                            self.telemetry.metrics.llamacpp.set(&m.upstream.name, f);
                        });
                    }
                    None if published_metrics => {
                        self.telemetry.metrics.llamacpp.clear(&m.upstream.name);
                        published_metrics = false;
                    }
                    None => {}
                }
            }
            if let Some(evidence) = m.note_marks(&marks) {
                // Forgotten before the line says so: a reader of the log
                // (an operator, a test) may act on it at once.
                self.fleet.forget(m.id);
                tracing::info!(
                    upstream = self.name(),
                    evidence,
                    "upstream restarted: its cached prefixes are forgotten"
                );
            }
            if models_due && self.read_models(target).await {
                models_read = Some(Instant::now());
            }
        }
    }

    /// Reads the member's model list; true when it got one.
    async fn read_models(&self, target: SocketAddr) -> bool {
        for path in ["/v1/models", "/models"] {
            if let Some((200, body)) = self.get(target, path).await {
                let names = parse_model_list(&body);
                if !names.is_empty() {
                    self.fleet.set_models(&self.member, names);
                    self.publish_models();
                    return true;
                }
            }
        }
        false
    }

    /// Publishes the fleet's model names as the allowed `model` labels.
    fn publish_models(&self) {
        publish_models(&self.fleet, &self.telemetry);
    }

    /// `GET {base}{path}` on the member, bounded by `INFO_TIMEOUT` (3 s).
    async fn get(&self, target: SocketAddr, path: &str) -> Option<(u16, Vec<u8>)> {
        let m = &self.member;
        let path = format!("{}{path}", m.upstream.base_path);
        probe::get(target, &m.upstream.address, &path, INFO_TIMEOUT)
            .await
            .ok()
    }
}

/// Publishes the fleet's model names as the allowed `model` labels (and
/// the served pairs of `llamatap_upstream_models`).
pub(super) fn publish_models(fleet: &Fleet, telemetry: &Telemetry) {
    let served: Vec<(String, Vec<String>)> = fleet
        .members()
        .iter()
        .map(|m| (m.upstream.name.clone(), m.models()))
        .collect();
    telemetry.publish_models(&served);
}

/// Starts the two loops of `member` in `loops`; they end when it leaves.
pub(super) fn watch_member(
    loops: &mut JoinSet<()>,
    fleet: &Arc<Fleet>,
    telemetry: &Arc<Telemetry>,
    member: Arc<Member>,
    model_refresh: Duration,
) {
    let watched = Arc::new(Watched {
        fleet: fleet.clone(),
        telemetry: telemetry.clone(),
        member,
        healthy_again: Notify::new(),
        resolving: AtomicBool::new(false),
    });
    loops.spawn(watched.clone().health_loop());
    loops.spawn(watched.info_loop(model_refresh));
}
