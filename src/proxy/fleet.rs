//! The fleet at run time: every configured llama-server with what llamatap
//! knows of it now (address, health, ejection, load, models), and the one
//! [`Router`] that picks among them.
//!
//! The watcher ([`super::watch`]) writes health, addresses and model lists;
//! the proxy hooks read them, count in-flight requests and report passive
//! failures. Deciding is [`crate::route`]'s pure code, called here under one
//! mutex; nothing here does I/O.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::{Config, Upstream};
use crate::route::{
    Candidate, Chain, Decision, Observation, Prediction, Request, RouteConfig, Router,
};

#[cfg(test)]
mod tests;

/// First passive ejection; doubled per consecutive failure.
const EJECT_BASE: Duration = Duration::from_secs(1);
/// Longest passive ejection.
const EJECT_MAX: Duration = Duration::from_secs(30);

/// Why no upstream can take a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRoute {
    /// The fleet serves several models and none is named so.
    UnknownModel {
        /// The names the fleet serves, sorted.
        available: Vec<String>,
    },
    /// Every upstream that could serve it was already tried.
    Exhausted,
}

/// One llama-server of the fleet.
#[derive(Debug)]
pub struct Member {
    /// As configured.
    pub upstream: Upstream,
    resolved: RwLock<Option<SocketAddr>>,
    healthy: AtomicBool,
    /// Milliseconds since the fleet's start until which the member is ejected.
    ejected_until_ms: AtomicU64,
    consecutive_failures: AtomicU32,
    in_flight: AtomicU32,
    /// Idle slots from `/slots`, `u32::MAX` when unknown.
    idle_slots: AtomicU32,
    models: RwLock<Vec<String>>,
}

impl Member {
    fn new(upstream: Upstream) -> Self {
        Member {
            upstream,
            resolved: RwLock::new(None),
            healthy: AtomicBool::new(false),
            ejected_until_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            in_flight: AtomicU32::new(0),
            idle_slots: AtomicU32::new(u32::MAX),
            models: RwLock::new(Vec::new()),
        }
    }

    /// The address to connect to, once resolved.
    pub fn address(&self) -> Option<SocketAddr> {
        self.resolved.read().ok().and_then(|g| *g)
    }

    /// Records a resolved address (the watcher's job).
    pub fn set_address(&self, a: SocketAddr) {
        if let Ok(mut g) = self.resolved.write() {
            *g = Some(a);
        }
    }

    /// The last `/health` check passed.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Records a `/health` result; true when the member just came back
    /// (was not healthy before).
    pub fn set_healthy(&self, up: bool) -> bool {
        let was = self.healthy.swap(up, Ordering::Relaxed);
        if up {
            // An active check that passes ends a passive ejection: the
            // upstream rejoins within one check interval of recovering.
            self.consecutive_failures.store(0, Ordering::Relaxed);
            self.ejected_until_ms.store(0, Ordering::Relaxed);
        }
        up && !was
    }

    /// Requests in flight to it now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Records idle slots read from `/slots` (`None`: unknown).
    pub fn set_idle_slots(&self, idle: Option<u32>) {
        self.idle_slots
            .store(idle.unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// The model names it reports.
    pub fn models(&self) -> Vec<String> {
        self.models.read().map(|g| g.clone()).unwrap_or_default()
    }

    /// Replaces its model names (through [`Fleet::set_models`], which keeps
    /// the fleet's list in step).
    fn set_models(&self, names: Vec<String>) {
        if let Ok(mut g) = self.models.write() {
            *g = names;
        }
    }

    fn serves(&self, model: &str) -> bool {
        self.models
            .read()
            .map(|g| g.iter().any(|m| m == model))
            .unwrap_or(false)
    }
}

/// Every upstream and the router.
#[derive(Debug)]
pub struct Fleet {
    members: Vec<Member>,
    /// Every model name the members report, sorted, each once: kept in step
    /// by [`Fleet::set_models`], so a request reads it without rebuilding it.
    models: RwLock<Vec<String>>,
    router: Mutex<Router>,
    policy: &'static str,
    session_header: Option<String>,
    epoch: Instant,
}

impl Fleet {
    /// The fleet of `config`, nothing resolved or healthy yet.
    pub fn new(config: &Config) -> Self {
        let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
        let route = RouteConfig {
            policy: config.routing.policy,
            ..RouteConfig::default()
        };
        Fleet {
            members: config.upstreams.iter().cloned().map(Member::new).collect(),
            models: RwLock::new(Vec::new()),
            router: Mutex::new(Router::new(&names, route)),
            policy: config.routing.policy.as_str(),
            session_header: config.routing.session_header.clone(),
            epoch: Instant::now(),
        }
    }

    /// The members, in configuration order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// One member.
    pub fn member(&self, i: usize) -> Option<&Member> {
        self.members.get(i)
    }

    /// More than one upstream: routing, body pre-reads and the merged model
    /// list apply. With one, llamatap behaves as a plain proxy.
    pub fn is_fleet(&self) -> bool {
        self.members.len() > 1
    }

    /// The policy's name, for spans.
    pub fn policy(&self) -> &'static str {
        self.policy
    }

    /// The session header, lower-cased, if configured.
    pub fn session_header(&self) -> Option<&str> {
        self.session_header.as_deref()
    }

    /// Every model name the fleet serves, sorted, each once.
    pub fn models(&self) -> Vec<String> {
        self.models.read().map(|g| g.clone()).unwrap_or_default()
    }

    /// Replaces member `i`'s model names (the watcher's job) and the fleet's list.
    pub fn set_models(&self, i: usize, names: Vec<String>) {
        let Some(m) = self.members.get(i) else {
            return;
        };
        m.set_models(names);
        let mut all: Vec<String> = self.members.iter().flat_map(|m| m.models()).collect();
        all.sort();
        all.dedup();
        if let Ok(mut g) = self.models.write() {
            *g = all;
        }
    }

    /// The fleet serves two or more models: requests are routed by model.
    fn serves_several_models(&self) -> bool {
        self.models.read().map(|g| g.len() > 1).unwrap_or(false)
    }

    /// Some member reports `name`.
    fn knows_model(&self, name: &str) -> bool {
        self.models
            .read()
            .map(|g| g.binary_search_by(|m| m.as_str().cmp(name)).is_ok())
            .unwrap_or(false)
    }

    /// Ready: at least one upstream is healthy, and every model any upstream
    /// reported has a healthy upstream serving it.
    pub fn ready(&self) -> bool {
        if !self.members.iter().any(Member::healthy) {
            return false;
        }
        self.models()
            .iter()
            .all(|model| self.members.iter().any(|m| m.healthy() && m.serves(model)))
    }

    /// `Err(UnknownModel)` when the fleet serves several models and none
    /// named `model` (a request naming no model may go anywhere).
    pub fn check_model(&self, model: Option<&str>) -> Result<(), NoRoute> {
        match model {
            Some(name) if self.serves_several_models() && !self.knows_model(name) => {
                Err(NoRoute::UnknownModel {
                    available: self.models(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Another member than `failed` and those in `tried` could serve a
    /// request for `model`.
    pub fn can_fail_over(&self, model: Option<&str>, failed: usize, tried: &[usize]) -> bool {
        let filter = self.serves_several_models();
        self.members.iter().enumerate().any(|(i, m)| {
            i != failed
                && !tried.contains(&i)
                && (!filter || model.is_none_or(|name| m.serves(name)))
        })
    }

    fn ejected(&self, m: &Member) -> bool {
        let until = m.ejected_until_ms.load(Ordering::Relaxed);
        until > 0 && self.now_ms() < until
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Chooses an upstream for a request naming `model` (or none), with the
    /// prompt's `chain` and an optional session key, never one of `exclude`.
    /// Counts the request in the chosen member's in-flight load.
    ///
    /// Model filter: when the fleet serves two or more models, only members
    /// reporting `model` are candidates, and an unknown name is
    /// [`NoRoute::UnknownModel`]; with one model (or none known yet) every
    /// member is. Health filter: members that are healthy and not ejected;
    /// when none is, every member passing the model filter is tried anyway
    /// (a failed check is no proof that the next connect fails).
    pub fn choose(
        &self,
        model: Option<&str>,
        chain: &Chain,
        session: Option<u64>,
        exclude: &[usize],
    ) -> Result<Decision, NoRoute> {
        let mut serving: Vec<(usize, &Member)> = self.members.iter().enumerate().collect();
        if self.serves_several_models() {
            if let Some(name) = model {
                serving.retain(|(_, m)| m.serves(name));
                if serving.is_empty() {
                    return Err(NoRoute::UnknownModel {
                        available: self.models(),
                    });
                }
            }
        }
        let usable = |m: &Member| m.healthy() && !self.ejected(m);
        let any_usable = serving
            .iter()
            .any(|(i, m)| usable(m) && !exclude.contains(i));
        let candidates: Vec<Candidate> = serving
            .iter()
            .map(|(i, m)| Candidate {
                upstream: *i,
                healthy: !any_usable || usable(m),
                serves_model: true,
                weight: m.upstream.weight,
                in_flight: m.in_flight(),
                idle_slots: match m.idle_slots.load(Ordering::Relaxed) {
                    u32::MAX => None,
                    n => Some(n),
                },
                deferred: None,
            })
            .collect();
        let request = Request {
            chain,
            session,
            exclude,
        };
        let decision = self
            .router
            .lock()
            .ok()
            .and_then(|mut r| r.route(&candidates, &request))
            .ok_or(NoRoute::Exhausted)?;
        if let Some(m) = self.members.get(decision.upstream) {
            m.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Ok(decision)
    }

    /// The request counted by [`Fleet::choose`] on member `i` is over.
    pub fn release(&self, i: usize) {
        if let Some(m) = self.members.get(i) {
            let _ = m
                .in_flight
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// A connect failure, reset or 5xx before any byte: eject member `i` for
    /// an exponentially growing time (1 s, 2 s, ... 30 s) unless an active
    /// check passes first.
    pub fn eject(&self, i: usize) {
        let Some(m) = self.members.get(i) else {
            return;
        };
        let n = m
            .consecutive_failures
            .fetch_add(1, Ordering::Relaxed)
            .min(5);
        let backoff = (EJECT_BASE * 2u32.pow(n)).min(EJECT_MAX);
        let until = self
            .now_ms()
            .saturating_add(u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX));
        m.ejected_until_ms.store(until.max(1), Ordering::Relaxed);
    }

    /// A response arrived from member `i` without a 5xx: its failure streak ends.
    pub fn succeeded(&self, i: usize) {
        if let Some(m) = self.members.get(i) {
            m.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }

    /// Learns from an answer: llama-server's `cache_n` against the prefix
    /// the router predicted on member `i`.
    pub fn observe(
        &self,
        i: usize,
        chain: &Chain,
        prediction: &Prediction,
        cached_tokens: u64,
        prompt_tokens: u64,
    ) -> Option<Observation> {
        self.router
            .lock()
            .ok()
            .map(|mut r| r.observe(i, chain, prediction, cached_tokens, prompt_tokens))
    }

    /// Member `i` came back after failing its checks: a restarted
    /// llama-server holds nothing in its cache, so the router forgets what
    /// it sent there.
    pub fn rejoined(&self, i: usize) {
        if let Ok(mut r) = self.router.lock() {
            r.forget(i);
        }
    }
}
