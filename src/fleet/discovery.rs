//! Follows a discovered name (`discover = "dns"`): every address it
//! resolves to is a member, each named by its address (`10.0.3.7:8080`), so
//! that llamatap replicas asking the same DNS place conversations alike.
//!
//! One loop per name looks it up again after the answer's TTL, bounded by
//! `[discovery]` (`min_refresh_ms`, `max_refresh_ms`), through the
//! configured resolver or, without one, with the system's configuration
//! (`/etc/hosts`, whose answers have no TTL: every `min_refresh_ms`, then
//! `/etc/resolv.conf`'s nameservers and search domains; see
//! [`super::resolver`]):
//!
//! - a new address **joins** with an empty index, not yet checked: it takes
//!   requests after its first passing health check (its own two loops, see
//!   [`super::watch`]);
//! - an address that left the answer **drains**: no new request goes to it,
//!   those in flight finish untouched; once it has had none in flight at two
//!   rounds in a row it **leaves**: its id is freed, the router forgets its
//!   prefixes, its metric series go;
//! - an address that comes back while draining simply serves again;
//! - a failed lookup (timeout, `SERVFAIL`, ...) changes nothing: members are
//!   never dropped for a resolver's trouble, only for an answer without them
//!   (`NXDOMAIN` or no records), and only once a second lookup,
//!   `min_refresh_ms` later, confirms it: one empty answer (a record set
//!   briefly empty during an update, a stale negative cache) drains nothing;
//!   while the name stays empty it is looked up every `min_refresh_ms`,
//!   whatever the negative TTL, so members that come back serve at once;
//! - the fleet holds at most 64 members at once: the addresses past that
//!   (in sorted order) are left out and logged, not trusted.
//!
//! Deliberately not: SRV or PTR names (members are named by address), and
//! any scheduling of llama-servers (Kubernetes' job).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::watch::{publish_models, watch_member};
use super::{resolver, Fleet, Full, Lookup, Member};
use crate::config::discovery::Discovery;
use llamatap_telemetry::Telemetry;

/// Longest one lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest between two rounds of drain checks.
const DRAIN_CHECK: Duration = Duration::from_secs(1);

/// One discovered name and the members it gave.
pub struct Discovered {
    fleet: Arc<Fleet>,
    telemetry: Arc<Telemetry>,
    entry: usize,
    settings: Discovery,
    model_refresh: Duration,
    /// Its members by address, and whether each was idle (draining, nothing
    /// in flight) at the last round.
    members: BTreeMap<SocketAddr, (Arc<Member>, bool)>,
    /// Addresses left out at the last answer (the fleet was full).
    left_out: usize,
    /// The last lookup failed, and why (logged once per change).
    failing: Option<String>,
    /// The last answer named no address, and members still served: the
    /// next lookup decides whether they drain.
    empty_once: bool,
    /// The system's DNS configuration, when no resolver is configured.
    system: resolver::SystemSource,
}

/// What one lookup found.
struct Answer {
    addresses: Vec<IpAddr>,
    ttl: Option<Duration>,
}

impl Discovered {
    /// The loop of entry `entry` of `fleet`.
    pub fn new(
        fleet: Arc<Fleet>,
        telemetry: Arc<Telemetry>,
        entry: usize,
        settings: Discovery,
        model_refresh: Duration,
    ) -> Self {
        Discovered {
            fleet,
            telemetry,
            entry,
            settings,
            model_refresh,
            members: BTreeMap::new(),
            left_out: 0,
            failing: None,
            empty_once: false,
            system: resolver::SystemSource::default(),
        }
    }

    fn host(&self) -> (String, u16) {
        self.fleet
            .entries()
            .get(self.entry)
            .map(|u| (u.host.clone(), u.port))
            .unwrap_or_default()
    }

    /// Looks the name up at once, then after each answer's TTL (bounded);
    /// checks draining members every round. Runs until aborted.
    pub async fn run(mut self) {
        let mut loops = JoinSet::new();
        let mut tick = tokio::time::interval(self.settings.min_refresh.min(DRAIN_CHECK));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut next_lookup = Instant::now();
        loop {
            tick.tick().await;
            // Loops of members that left end by themselves: reap them.
            while loops.try_join_next().is_some() {}
            self.check_drains();
            if Instant::now() < next_lookup {
                continue;
            }
            let (host, port) = self.host();
            let wait = match lookup(&self.settings, &mut self.system, &host).await {
                Ok(answer) => {
                    self.fleet.note_lookup(self.entry, Lookup::Answered);
                    if self.failing.take().is_some() {
                        tracing::info!(name = host.as_str(), "upstream name resolves again");
                    }
                    if answer.addresses.is_empty() {
                        self.empty_answer(&host, &mut loops)
                    } else {
                        self.empty_once = false;
                        let addresses = answer
                            .addresses
                            .iter()
                            .map(|ip| SocketAddr::new(*ip, port))
                            .collect();
                        self.apply(addresses, &mut loops);
                        self.settings.next_refresh(answer.ttl)
                    }
                }
                Err(why) => {
                    self.fleet
                        .note_lookup(self.entry, Lookup::Failed(why.clone()));
                    if self.failing.as_deref() != Some(why.as_str()) {
                        tracing::warn!(
                            name = host.as_str(),
                            reason = %why,
                            members = self.members.len(),
                            "upstream name lookup failed: its members are kept"
                        );
                        self.failing = Some(why);
                    }
                    self.settings.min_refresh
                }
            };
            next_lookup = Instant::now() + wait;
        }
    }

    /// An answer with no address: the first one while members serve is
    /// only noted; a second in a row drains them. Either way the name is
    /// looked up again after `min_refresh_ms`.
    fn empty_answer(&mut self, host: &str, loops: &mut JoinSet<()>) -> Duration {
        let serving = self.members.values().filter(|(m, _)| !m.draining()).count();
        if serving > 0 && !self.empty_once {
            self.empty_once = true;
            tracing::info!(
                name = host,
                members = serving,
                "upstream name answered with no address: looked up again before its members drain"
            );
        } else {
            self.empty_once = false;
            self.apply(Vec::new(), loops);
        }
        self.settings.min_refresh
    }

    /// Brings the members in line with an answer: new addresses join,
    /// missing ones drain, returning ones serve again.
    fn apply(&mut self, mut addresses: Vec<SocketAddr>, loops: &mut JoinSet<()>) {
        addresses.sort();
        addresses.dedup();
        let mut left_out = 0;
        for a in &addresses {
            if let Some((m, idle)) = self.members.get_mut(a) {
                if m.draining() {
                    m.set_draining(false);
                    *idle = false;
                    tracing::info!(
                        upstream = m.upstream.name.as_str(),
                        "upstream back in its name's answer: serving again"
                    );
                }
                continue;
            }
            // Another entry (or a configured URL) may hold the address already.
            if self
                .fleet
                .members()
                .iter()
                .any(|m| m.address() == Some(*a) && m.upstream.base_path == self.base_path())
            {
                continue;
            }
            match self.fleet.join(self.entry, *a) {
                Ok(m) => {
                    tracing::info!(
                        upstream = m.upstream.name.as_str(),
                        "upstream joined: its address is in its name's answer"
                    );
                    self.telemetry.upstream_joined(&m.upstream.name);
                    watch_member(
                        loops,
                        &self.fleet,
                        &self.telemetry,
                        m.clone(),
                        self.model_refresh,
                    );
                    self.members.insert(*a, (m, false));
                }
                Err(Full) => left_out += 1,
            }
        }
        if left_out != self.left_out {
            if left_out > 0 {
                tracing::warn!(
                    name = self.host().0.as_str(),
                    addresses = addresses.len(),
                    left_out,
                    "upstream name resolves to more addresses than the fleet holds (64 members): the rest are left out"
                );
            }
            self.left_out = left_out;
        }
        for (a, (m, _)) in &self.members {
            if !m.draining() && addresses.binary_search(a).is_err() {
                m.set_draining(true);
                tracing::info!(
                    upstream = m.upstream.name.as_str(),
                    in_flight = m.in_flight(),
                    "upstream draining: its address left its name's answer"
                );
            }
        }
    }

    fn base_path(&self) -> &str {
        self.fleet
            .entries()
            .get(self.entry)
            .map_or("", |u| u.base_path.as_str())
    }

    /// Members that drained (nothing in flight at two rounds in a row, so
    /// that a request finishing just now records under its name first)
    /// leave the fleet.
    fn check_drains(&mut self) {
        let mut leaving = Vec::new();
        for (a, (m, idle)) in self.members.iter_mut() {
            if !m.draining() || m.in_flight() > 0 {
                *idle = false;
            } else if *idle {
                leaving.push(*a);
            } else {
                *idle = true;
            }
        }
        if leaving.is_empty() {
            return;
        }
        for a in leaving {
            if let Some((m, _)) = self.members.remove(&a) {
                self.fleet.leave(&m);
                self.telemetry.upstream_left(&m.upstream.name);
                tracing::info!(
                    upstream = m.upstream.name.as_str(),
                    "upstream left the fleet (drained)"
                );
            }
        }
        publish_models(&self.fleet, &self.telemetry);
    }
}

/// Looks `host` up: through the configured resolver, else with the
/// system's configuration (read again when it changes); TTLs honoured
/// either way. `Err` says why no answer came.
async fn lookup(
    settings: &Discovery,
    system: &mut resolver::SystemSource,
    host: &str,
) -> Result<Answer, String> {
    let source = match settings.resolver {
        Some(server) => resolver::Source::server(server),
        None => system.current().map_err(|e| e.to_string())?,
    };
    resolver::lookup(&source, host, LOOKUP_TIMEOUT)
        .await
        .map(|l| Answer {
            addresses: l.addresses,
            ttl: l.ttl,
        })
        .map_err(|e| e.to_string())
}
