//! One member of the fleet: a llama-server (configured by URL, or one
//! address of a discovered name) with what llamatap knows of it now
//! (address, health and why, ejection, load, slots, queue, models, the
//! marks of its process's life, whether it drains or left). Plain state behind atomics and
//! locks; the watcher writes it, the hooks read it, nothing here does I/O.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::config::UpstreamConfig;
use llamatap_wire::llama::slots::Marks;

/// What the health checks last found of a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Not checked yet.
    Unknown,
    /// `/health` answered 200.
    Up,
    /// Not usable, and why (`connection refused`, `loading model (503)`, ...).
    Down(String),
}

/// A change of a member's health, for the watcher to log once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// It passes its checks again (or for the first time).
    Up,
    /// It stopped passing them (or failed the first one), and why.
    Down(String),
}

/// One llama-server of the fleet.
#[derive(Debug)]
pub struct Member {
    /// As configured (a discovered member: its entry's, named and addressed
    /// by its address).
    pub upstream: UpstreamConfig,
    /// Its id in the fleet (router, queue and request contexts hold it).
    pub id: usize,
    /// The configured entry it comes from.
    pub entry: usize,
    /// One address of a discovered name: its address never changes.
    pub discovered: bool,
    /// Its address left the name's answer: no new request goes to it.
    draining: AtomicBool,
    /// Since when it drains.
    draining_since: Mutex<Option<Instant>>,
    /// It left the fleet; its loops end.
    gone: AtomicBool,
    pub(super) resolved: RwLock<Option<SocketAddr>>,
    pub(super) healthy: AtomicBool,
    pub(super) health: Mutex<Health>,
    /// Milliseconds since the fleet's start until which the member is ejected.
    pub(super) ejected_until_ms: AtomicU64,
    /// Milliseconds since the fleet's start at which its current ejection
    /// began (renewals while ejected keep it).
    pub(super) ejected_since_ms: AtomicU64,
    pub(super) consecutive_failures: AtomicU32,
    pub(super) in_flight: AtomicU32,
    /// Idle slots from `/slots`, `u32::MAX` when unknown.
    pub(super) idle_slots: AtomicU32,
    /// Slots listed by `/slots`, `u32::MAX` when unknown (read when the
    /// queue is on, or in a fleet).
    pub(super) total_slots: AtomicU32,
    /// Its own queue (`llamacpp:requests_deferred`) beyond llamatap's own
    /// requests over its slots at the read, `u32::MAX` when unknown.
    pub(super) deferred: AtomicU32,
    /// Marks of its process's life, as last read.
    pub(super) marks: Mutex<Marks>,
    /// Restarts its marks showed ([`Member::note_marks`]).
    pub(super) restarts: AtomicU32,
    pub(super) models: RwLock<Vec<String>>,
}

impl Member {
    pub(super) fn new(upstream: UpstreamConfig, id: usize, entry: usize, discovered: bool) -> Self {
        Member {
            upstream,
            id,
            entry,
            discovered,
            draining: AtomicBool::new(false),
            draining_since: Mutex::new(None),
            gone: AtomicBool::new(false),
            resolved: RwLock::new(None),
            healthy: AtomicBool::new(false),
            health: Mutex::new(Health::Unknown),
            ejected_until_ms: AtomicU64::new(0),
            ejected_since_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            in_flight: AtomicU32::new(0),
            idle_slots: AtomicU32::new(u32::MAX),
            total_slots: AtomicU32::new(u32::MAX),
            deferred: AtomicU32::new(u32::MAX),
            marks: Mutex::new(Marks::default()),
            restarts: AtomicU32::new(0),
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

    /// Its address left its name's answer: it finishes what it has and
    /// takes nothing new.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Starts (`true`) or ends (its address came back) its drain.
    pub fn set_draining(&self, draining: bool) {
        if let Ok(mut since) = self.draining_since.lock() {
            *since = match (draining, *since) {
                (true, Some(t)) => Some(t),
                (true, None) => Some(Instant::now()),
                (false, _) => None,
            };
        }
        self.draining.store(draining, Ordering::Relaxed);
    }

    /// How long it has drained, if it does.
    pub fn draining_for(&self) -> Option<Duration> {
        if !self.draining() {
            return None;
        }
        self.draining_since
            .lock()
            .ok()
            .and_then(|g| *g)
            .map(|t| t.elapsed())
    }

    /// It left the fleet.
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    pub(super) fn mark_gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    /// The last `/health` check passed.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// What the last check found.
    pub fn health(&self) -> Health {
        self.health
            .lock()
            .map(|g| g.clone())
            .unwrap_or(Health::Unknown)
    }

    /// Records a check's result (`Err`: why it failed); the transition when
    /// its state changed, so that each change is logged once. A failed first
    /// check is a transition too (down from the start).
    pub fn set_health(&self, result: Result<(), String>) -> Option<Transition> {
        let up = result.is_ok();
        self.healthy.store(up, Ordering::Relaxed);
        if up {
            // An active check that passes ends a passive ejection: the
            // upstream rejoins within one check interval of recovering.
            self.consecutive_failures.store(0, Ordering::Relaxed);
            self.ejected_until_ms.store(0, Ordering::Relaxed);
        }
        let mut g = self.health.lock().ok()?;
        let (now, transition) = match result {
            Ok(()) => (Health::Up, Transition::Up),
            Err(why) => (Health::Down(why.clone()), Transition::Down(why)),
        };
        let changed = std::mem::discriminant(&*g) != std::mem::discriminant(&now);
        *g = now;
        changed.then_some(transition)
    }

    /// Its last check failed (not merely: it was not checked yet).
    pub(super) fn checked_down(&self) -> bool {
        matches!(self.health(), Health::Down(_))
    }

    /// Why it is not ready, in a few words (`ready` when it is).
    pub fn not_ready_reason(&self) -> String {
        match self.health() {
            Health::Unknown => "not checked yet".to_string(),
            Health::Down(why) => why,
            Health::Up if self.models().is_empty() => "model list not read yet".to_string(),
            Health::Up => "ready".to_string(),
        }
    }

    /// Records its queue (`llamacpp:requests_deferred`, just read; `None`:
    /// unknown), less the part llamatap's own requests beyond its slots
    /// explain now: what is left waits there for reasons llamatap does not
    /// count itself (other clients). Kept until the next read, the raw
    /// gauge would count llamatap's own excess requests long after they
    /// got a slot, as a queue ahead of every request routed or predicted
    /// meanwhile; their own count is current.
    pub fn set_deferred(&self, deferred: Option<u32>) {
        let own_excess = match self.total_slots() {
            Some(slots) => self.in_flight().saturating_sub(slots),
            None => 0,
        };
        let beyond = deferred.map(|d| d.saturating_sub(own_excess).min(u32::MAX - 1));
        self.deferred
            .store(beyond.unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// Records the marks just read; the evidence when they show that another
    /// process answers now (see [`Marks::restart_evidence`]).
    pub fn note_marks(&self, newer: &Marks) -> Option<&'static str> {
        let mut g = self.marks.lock().ok()?;
        let evidence = g.restart_evidence(newer);
        *g = if evidence.is_some() {
            self.note_restart();
            *newer
        } else {
            g.merge(newer)
        };
        evidence
    }

    /// Counts a restart (a new process answers: nothing it held is left).
    pub fn note_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts seen since it joined.
    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Requests in flight to it now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// llama-server's `requests_deferred` at the last read beyond
    /// llamatap's own excess requests then ([`Member::set_deferred`]), if
    /// known.
    pub fn deferred(&self) -> Option<u32> {
        match self.deferred.load(Ordering::Relaxed) {
            u32::MAX => None,
            n => Some(n),
        }
    }

    /// Slots listed by its last `/slots` answer, if read.
    pub fn total_slots(&self) -> Option<u32> {
        match self.total_slots.load(Ordering::Relaxed) {
            u32::MAX => None,
            n => Some(n),
        }
    }

    /// Records the slot count read from `/slots` (`None`: unknown).
    pub fn set_total_slots(&self, total: Option<u32>) {
        self.total_slots
            .store(total.unwrap_or(u32::MAX), Ordering::Relaxed);
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
    pub(super) fn set_models(&self, names: Vec<String>) {
        if let Ok(mut g) = self.models.write() {
            *g = names;
        }
    }

    /// `f` of the name that tells apart the models it runs for requests
    /// naming `requested`: with several models reported, the name as given
    /// (none: `""`); with one or none yet, `""` for every name (llama-server
    /// with one model answers whatever name a client gives, and its list is
    /// not read before its first health check). Under its lock, no copy.
    pub fn model_for<R>(&self, requested: Option<&str>, f: impl FnOnce(&str) -> R) -> R {
        let several = self.models.read().map(|g| g.len() > 1).unwrap_or(false);
        f(if several { requested.unwrap_or("") } else { "" })
    }

    /// The model a key's `hash` of [`Member::model_for`] stands for: its
    /// only model, or with several the one whose name hashes to it; `None`
    /// when not known.
    pub fn model_of(&self, hash: u64, hasher: impl Fn(&str) -> u64) -> Option<String> {
        let g = self.models.read().ok()?;
        match g.as_slice() {
            [only] => Some(only.clone()),
            all => all.iter().find(|m| hasher(m) == hash).cloned(),
        }
    }

    pub(super) fn serves(&self, model: &str) -> bool {
        self.models
            .read()
            .map(|g| g.iter().any(|m| m == model))
            .unwrap_or(false)
    }
}
