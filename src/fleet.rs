//! The fleet at run time: every llama-server llamatap sends to, with what
//! it knows of each now (address, health, ejection, load, models), and the
//! one [`Router`] that picks among them.
//!
//! Members live in a table of ids (`0..64`): a configured URL is one member
//! for the process's life; a discovered name ([`discovery`]) adds a member
//! per address it resolves to, drains the ones that disappear and frees
//! their ids once they have no request in flight. An id is what the router,
//! the admission queue and a request's context hold; a freed id is reused
//! only by a member that joins later, with an empty index.
//!
//! The watcher ([`watch`]) writes health, addresses, model lists and
//! the marks that reveal a restart; the proxy hooks read them, count
//! in-flight requests and report passive failures. Deciding is
//! [`llamatap_policy::router`]'s pure code, called here under one mutex; nothing here
//! does I/O.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use crate::config::{Config, UpstreamConfig, MAX_UPSTREAMS};
use llamatap_policy::router::{
    Candidate, Chain, Decision, Prediction, Request, RouteConfig, Router,
};

mod affinity;
pub mod discovery;
mod ejection;
mod member;
mod membership;
mod models;
mod probe;
pub mod resolver;
pub mod service;
#[cfg(test)]
mod tests;
pub mod watch;

pub use member::{Health, Member, Transition};

/// Why no upstream can take a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRoute {
    /// The fleet serves several models and none is named so.
    UnknownModel {
        /// The names the fleet serves, sorted.
        available: Vec<String>,
    },
    /// Every upstream that serves it failed its last health check.
    Unavailable {
        /// Why, naming each upstream: `a: connection refused; b: ...`.
        why: String,
    },
    /// Every upstream that could serve it was already tried.
    Exhausted,
}

/// Every upstream and the router.
#[derive(Debug)]
pub struct Fleet {
    /// Members by id; `None`: a free id.
    table: RwLock<Vec<Option<Arc<Member>>>>,
    /// The configured entries, in order: a static one is a member from the
    /// start, a discovered one the template of its members.
    entries: Vec<UpstreamConfig>,
    /// Most members at once: the static count, or [`MAX_UPSTREAMS`] when a
    /// name is discovered.
    capacity: usize,
    /// Every model name the members report, sorted, each once: kept in step
    /// by [`Fleet::set_models`], so a request reads it without rebuilding it.
    models: RwLock<Vec<String>>,
    router: Mutex<Router>,
    policy: &'static str,
    session_header: Option<String>,
    epoch: Instant,
    /// The watcher reads every member's `/slots` even with one upstream:
    /// the admission queue is on, TTFT objectives are configured, or a
    /// request carried one ([`Fleet::read_slots`]).
    reads_slots: AtomicBool,
    /// Per entry, how its name's last lookup went (discovered entries only).
    lookups: Vec<Mutex<Lookup>>,
}

/// How the last lookup of a discovered name went, for `/readyz`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Lookup {
    /// None has ended yet.
    #[default]
    Pending,
    /// It answered (with addresses or none).
    Answered,
    /// It failed, and why (timeout, `SERVFAIL`, no resolver, ...).
    Failed(String),
}

/// Members able to serve a request, with their ids.
type Serving = Vec<(usize, Arc<Member>)>;

/// A discovered address could not join: the fleet holds its most members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl Fleet {
    /// The fleet of `config`: its static members (ids in configuration
    /// order), nothing resolved or healthy yet; discovered names join later.
    pub fn new(config: &Config) -> Self {
        let statics: Vec<&UpstreamConfig> =
            config.upstreams.iter().filter(|u| !u.discover).collect();
        let discovers = statics.len() < config.upstreams.len();
        let capacity = if discovers {
            MAX_UPSTREAMS
        } else {
            statics.len()
        };
        let names: Vec<&str> = statics.iter().map(|u| u.name.as_str()).collect();
        let route = RouteConfig {
            policy: config.routing.policy,
            ..RouteConfig::default()
        };
        let table = config
            .upstreams
            .iter()
            .enumerate()
            .filter(|(_, u)| !u.discover)
            .enumerate()
            .map(|(id, (entry, u))| Some(Arc::new(Member::new(u.clone(), id, entry, false))))
            .collect();
        Fleet {
            table: RwLock::new(table),
            entries: config.upstreams.clone(),
            capacity,
            models: RwLock::new(Vec::new()),
            router: Mutex::new(Router::new(&names, route)),
            policy: config.routing.policy.as_str(),
            session_header: config.routing.session_header.clone(),
            epoch: Instant::now(),
            reads_slots: AtomicBool::new(config.queue.enabled || !config.queue.slo.is_empty()),
            lookups: config.upstreams.iter().map(|_| Mutex::default()).collect(),
        }
    }

    /// The members now (draining ones included), by id.
    pub fn members(&self) -> Vec<Arc<Member>> {
        self.table
            .read()
            .map(|t| t.iter().flatten().cloned().collect())
            .unwrap_or_default()
    }

    /// The member of id `i`, if one holds it now.
    pub fn member(&self, i: usize) -> Option<Arc<Member>> {
        self.table
            .read()
            .ok()
            .and_then(|t| t.get(i).cloned().flatten())
    }

    /// Member `i` answers `/health` with 200 within `within`: its process
    /// and host are alive. llama-server answers `/health` from its HTTP
    /// threads, not its task loop, so a member busy with another request's
    /// long prefill answers, while a stopped, crashed or unreachable one
    /// does not.
    pub async fn answers_health(&self, i: usize, within: std::time::Duration) -> bool {
        let Some(m) = self.member(i) else {
            return false;
        };
        let Some(target) = m.address() else {
            return false;
        };
        let path = format!("{}/health", m.upstream.base_path);
        matches!(
            probe::get(target, &m.upstream.address, &path, within).await,
            Ok((200, _))
        )
    }

    /// The members that take new requests (not draining), by id.
    fn serving(&self) -> Vec<Arc<Member>> {
        let mut all = self.members();
        all.retain(|m| !m.draining());
        all
    }

    /// The configured entries, in order.
    pub fn entries(&self) -> &[UpstreamConfig] {
        &self.entries
    }

    /// How many ids there are: the most members at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// More than one upstream, or a discovered name: routing, body
    /// pre-reads and the merged model list apply. With one configured URL,
    /// llamatap behaves as a plain proxy.
    pub fn is_fleet(&self) -> bool {
        self.entries.len() > 1 || self.entries.iter().any(|u| u.discover)
    }

    /// The watcher reads `/slots` even with one upstream (the queue is on,
    /// or TTFT objectives are in use).
    pub fn reads_slots(&self) -> bool {
        self.reads_slots.load(Ordering::Relaxed)
    }

    /// From now on the watcher reads `/slots` even with one upstream: a
    /// request carried a TTFT objective, and a bound is sure only with the
    /// member's slots known.
    pub fn read_slots(&self) {
        self.reads_slots.store(true, Ordering::Relaxed);
    }

    /// Member `i` may take requests now: healthy, not ejected, not draining.
    pub fn usable(&self, i: usize) -> bool {
        self.member(i)
            .is_some_and(|m| m.healthy() && !m.draining() && !self.ejected(&m))
    }

    /// The policy's name, for spans.
    pub fn policy(&self) -> &'static str {
        self.policy
    }

    /// The session header, lower-cased, if configured.
    pub fn session_header(&self) -> Option<&str> {
        self.session_header.as_deref()
    }

    /// Another member than `failed` and those in `tried` could serve a
    /// request for `model`.
    pub fn can_fail_over(&self, model: Option<&str>, failed: usize, tried: &[usize]) -> bool {
        let filter = self.serves_several_models();
        self.serving().iter().any(|m| {
            m.id != failed
                && !tried.contains(&m.id)
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
        let (serving, candidates) = self.candidates(model, exclude)?;
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
        if let Some((_, m)) = serving.iter().find(|(i, _)| *i == decision.upstream) {
            m.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        Ok(decision)
    }

    /// The members serving `model` (every one when the fleet serves one
    /// model) and their candidates for the router. Health filter: members
    /// that are healthy and not ejected; when none is (outside `exclude`),
    /// every one is tried anyway (a failed check is no proof that the next
    /// connect fails).
    fn candidates(
        &self,
        model: Option<&str>,
        exclude: &[usize],
    ) -> Result<(Serving, Vec<Candidate>), NoRoute> {
        let mut serving: Serving = self.serving().into_iter().map(|m| (m.id, m)).collect();
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
                deferred: match m.deferred.load(Ordering::Relaxed) {
                    u32::MAX => None,
                    n => Some(n),
                },
            })
            .collect();
        Ok((serving, candidates))
    }

    /// Member `i`, chosen because it holds the request's conversation
    /// (whatever its load): counted in its in-flight load as
    /// [`Fleet::choose`] counts.
    pub fn pin(&self, i: usize) -> Option<Decision> {
        let m = self.member(i)?;
        m.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(Decision {
            upstream: i,
            reason: llamatap_policy::router::Reason::Conversation,
            prediction: Prediction::default(),
        })
    }

    /// The usable members that can serve a request for `model` (every
    /// usable one when the fleet serves one model), by id.
    pub fn servers(&self, model: Option<&str>) -> Vec<usize> {
        let filter = self.serves_several_models();
        self.serving()
            .iter()
            .filter(|m| m.healthy() && !self.ejected(m))
            .filter(|m| !filter || model.is_none_or(|name| m.serves(name)))
            .map(|m| m.id)
            .collect()
    }

    /// The request counted by [`Fleet::choose`] on member `i` is over.
    pub fn release(&self, i: usize) {
        if let Some(m) = self.member(i) {
            let _ = m
                .in_flight
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}
