//! The router: one prefix index per upstream, and the choice of one
//! upstream per request.
//!
//! [`Router::route`] filters the candidates (healthy, serving the model,
//! weight above 0, not already tried), then applies the policy:
//! - `prefix_affinity`: a request with a session key goes to the session's
//!   rendezvous upstream (reason `session`). Otherwise the upstream whose
//!   index holds the longest prefix of the chain wins, if that prefix goes
//!   beyond the chain's anchor (`prefix_hit`; ties go to the lower load,
//!   then to the anchor's rendezvous order). A match that stops at or before
//!   the anchor covers only what many conversations share (tools, a system
//!   prompt), so it does not attract: the chain is placed by rendezvous
//!   hashing of its anchor (`cold`), which spreads such conversations over
//!   the fleet and places a new conversation identically in every llamatap
//!   process. A request with neither session nor prompt goes to the least
//!   loaded upstream (`balanced`).
//! - Bounded load, for `session`, `prefix_hit` and `cold`: the preferred
//!   upstream is taken unless its load per unit of weight exceeds the least
//!   loaded candidate's by more than `max(bound_floor, ceil(bound_factor *
//!   mean))`, the mean being over the eligible candidates; then the least
//!   loaded wins (`overloaded`). With the defaults (2 and 0.5) an upstream
//!   may run two requests more than the idlest before affinity yields: a
//!   queued request on a busy llama-server usually waits longer than a
//!   recomputed prefix takes.
//! - `least_busy`: the least load per unit of weight; ties go to more idle
//!   slots, then rotate. `round_robin`: each eligible upstream in turn. Both
//!   report `balanced`.
//! - One eligible upstream: `only_candidate`. A request with upstreams to
//!   exclude is a retry: `failover`, whatever chose it.
//!
//! Every decision records the chain in the chosen upstream's index and
//! reports the prefix predicted there, whatever the policy, so prediction
//! accuracy can be compared across policies. Learning from the answer is in
//! `learn`. The router holds no lock, clock or I/O: the caller serializes
//! calls (one mutex around it) and supplies loads and health.

use super::chain::Chain;
use super::decision::{Candidate, Decision, Policy, Prediction, Reason, Request};
use super::index::{PrefixIndex, DEFAULT_CAPACITY};
use super::learn::Accuracy;
use super::rendezvous::{self, upstream_id};

/// Routing settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouteConfig {
    /// How upstreams are chosen.
    pub policy: Policy,
    /// Links each upstream's index holds at most.
    pub index_capacity: usize,
    /// Extra load per unit of weight, in requests, that affinity always
    /// tolerates over the least loaded candidate.
    pub bound_floor: u32,
    /// Extra load tolerated as a fraction of the mean load, when larger
    /// than the floor.
    pub bound_factor: f64,
}

impl Default for RouteConfig {
    /// `prefix_affinity`, [`DEFAULT_CAPACITY`] links per upstream, a bound
    /// of `max(2, ceil(0.5 * mean))`.
    fn default() -> Self {
        RouteConfig {
            policy: Policy::PrefixAffinity,
            index_capacity: DEFAULT_CAPACITY,
            bound_floor: 2,
            bound_factor: 0.5,
        }
    }
}

/// An upstream's routing state.
#[derive(Debug)]
pub(super) struct UpstreamState {
    /// Rendezvous identity ([`upstream_id`] of its name).
    pub id: u64,
    /// Chains sent to it.
    pub index: PrefixIndex,
    /// Prediction accuracy counters.
    pub accuracy: Accuracy,
}

/// Routes requests over a fixed list of upstreams; see the module docs.
#[derive(Debug)]
pub struct Router {
    config: RouteConfig,
    pub(super) upstreams: Vec<UpstreamState>,
    /// Rotation for `round_robin` and for ties without a key.
    turn: usize,
    /// Prompt tokens over text bytes observed, fleet-wide (token estimates).
    pub(super) observed_tokens: u64,
    pub(super) observed_bytes: u64,
}

impl Router {
    /// A router over upstreams named `names` (their configured names, else
    /// URLs; positions in this list are the candidates' `upstream`), each
    /// with an empty index.
    pub fn new<S: AsRef<str>>(names: &[S], config: RouteConfig) -> Self {
        let upstreams = names
            .iter()
            .map(|name| UpstreamState {
                id: upstream_id(name.as_ref()),
                index: PrefixIndex::new(config.index_capacity),
                accuracy: Accuracy::default(),
            })
            .collect();
        Router {
            config,
            upstreams,
            turn: 0,
            observed_tokens: 0,
            observed_bytes: 0,
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &RouteConfig {
        &self.config
    }

    /// The number of upstreams.
    pub fn len(&self) -> usize {
        self.upstreams.len()
    }

    /// Whether it has no upstream.
    pub fn is_empty(&self) -> bool {
        self.upstreams.is_empty()
    }

    /// Upstream `upstream`'s index; `None` past the end.
    pub fn index(&self, upstream: usize) -> Option<&PrefixIndex> {
        self.upstreams.get(upstream).map(|up| &up.index)
    }

    /// Upstream `upstream`'s prediction accuracy; `None` past the end.
    pub fn accuracy(&self, upstream: usize) -> Option<&Accuracy> {
        self.upstreams.get(upstream).map(|up| &up.accuracy)
    }

    /// Heap bytes held by all indexes (see [`PrefixIndex::memory_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.upstreams
            .iter()
            .map(|up| up.index.memory_bytes())
            .sum()
    }

    /// Empties upstream `upstream`'s index, as when it restarted (its cache
    /// is gone), counting the links dropped; does nothing past the end.
    pub fn forget(&mut self, upstream: usize) {
        if let Some(up) = self.upstreams.get_mut(upstream) {
            let dropped = up.index.clear();
            up.accuracy.forgotten_links = up
                .accuracy
                .forgotten_links
                .saturating_add(u64::try_from(dropped).unwrap_or(u64::MAX));
        }
    }

    /// Puts a new upstream named `name` at position `upstream` (a member
    /// that joined), with an empty index and fresh counters, growing the
    /// list as needed. Its rendezvous identity comes from its name alone, so
    /// routers that place the same names choose alike.
    pub fn place(&mut self, upstream: usize, name: &str) {
        while self.upstreams.len() <= upstream {
            self.upstreams.push(UpstreamState {
                id: 0,
                index: PrefixIndex::new(self.config.index_capacity),
                accuracy: Accuracy::default(),
            });
        }
        if let Some(up) = self.upstreams.get_mut(upstream) {
            *up = UpstreamState {
                id: upstream_id(name),
                index: PrefixIndex::new(self.config.index_capacity),
                accuracy: Accuracy::default(),
            };
        }
    }

    /// Frees position `upstream` (its member left): its index is dropped;
    /// the position waits for the next [`Router::place`].
    pub fn vacate(&mut self, upstream: usize) {
        if let Some(up) = self.upstreams.get_mut(upstream) {
            *up = UpstreamState {
                id: 0,
                index: PrefixIndex::new(0),
                accuracy: Accuracy::default(),
            };
        }
    }

    /// Chooses an upstream among `candidates` (each upstream at most once)
    /// for `request`, records the chain in its index, and returns the
    /// decision; `None` when no candidate is eligible (healthy, serving the
    /// model, weight above 0, known, not excluded).
    pub fn route(&mut self, candidates: &[Candidate], request: &Request<'_>) -> Option<Decision> {
        let eligible: Vec<Candidate> = candidates
            .iter()
            .filter(|c| {
                c.healthy
                    && c.serves_model
                    && c.weight > 0
                    && c.upstream < self.upstreams.len()
                    && !request.exclude.contains(&c.upstream)
            })
            .copied()
            .collect();
        let (upstream, reason) = match eligible.as_slice() {
            [] => return None,
            [only] => (only.upstream, Reason::OnlyCandidate),
            _ => match self.config.policy {
                Policy::PrefixAffinity => self.affinity(&eligible, request)?,
                Policy::LeastBusy => (self.least_loaded(&eligible, None)?, Reason::Balanced),
                Policy::RoundRobin => {
                    let at = self.turn % eligible.len();
                    self.turn = self.turn.wrapping_add(1);
                    (eligible.get(at)?.upstream, Reason::Balanced)
                }
            },
        };
        let reason = if request.exclude.is_empty() {
            reason
        } else {
            Reason::Failover
        };
        let links = request.chain.links();
        let up = self.upstreams.get_mut(upstream)?;
        let matched = up.index.matched(links);
        up.index.insert(links);
        let bytes = request.chain.bytes(matched.links);
        Some(Decision {
            upstream,
            reason,
            prediction: Prediction {
                links: matched.links,
                bytes,
                tokens: self.estimate_tokens(bytes),
            },
        })
    }

    /// `bytes` of text in tokens at the ratio observed so far.
    fn estimate_tokens(&self, bytes: u64) -> Option<u64> {
        if self.observed_bytes == 0 {
            return None;
        }
        let tokens =
            u128::from(bytes) * u128::from(self.observed_tokens) / u128::from(self.observed_bytes);
        Some(u64::try_from(tokens).unwrap_or(u64::MAX))
    }

    /// The `prefix_affinity` choice among two or more eligible candidates;
    /// `None` only when `eligible` is empty.
    fn affinity(
        &mut self,
        eligible: &[Candidate],
        request: &Request<'_>,
    ) -> Option<(usize, Reason)> {
        let chain = request.chain;
        let (preferred, reason, key) = if let Some(session) = request.session {
            (self.rendezvous(eligible, session), Reason::Session, session)
        } else if let Some(hit) = self.best_hit(eligible, chain) {
            (Some(hit), Reason::PrefixHit, chain.cold_key().unwrap_or(0))
        } else if let Some(cold) = chain.cold_key() {
            (self.rendezvous(eligible, cold), Reason::Cold, cold)
        } else {
            return Some((self.least_loaded(eligible, None)?, Reason::Balanced));
        };
        match preferred {
            Some(preferred) if !self.overloaded(&preferred, eligible) => {
                Some((preferred.upstream, reason))
            }
            _ => Some((self.least_loaded(eligible, Some(key))?, Reason::Overloaded)),
        }
    }

    /// The upstream among `candidates` (healthy, serving the model, not
    /// excluded) that holds the longest prefix of `chain` beyond its anchor,
    /// as [`Router::route`] would prefer it under `prefix_affinity` with no
    /// load bound; nothing is recorded. `None`: no such prefix anywhere, or
    /// another policy.
    pub fn affine(&self, candidates: &[Candidate], chain: &Chain) -> Option<usize> {
        if self.config.policy != Policy::PrefixAffinity {
            return None;
        }
        let eligible: Vec<Candidate> = candidates
            .iter()
            .filter(|c| c.healthy && c.serves_model && c.weight > 0)
            .copied()
            .collect();
        self.best_hit(&eligible, chain).map(|c| c.upstream)
    }

    /// The candidate holding the longest prefix of `chain` beyond its
    /// anchor; ties go to the lower load, then the higher rendezvous draw
    /// for the chain's cold key. `None` when no match passes the anchor.
    fn best_hit(&self, eligible: &[Candidate], chain: &Chain) -> Option<Candidate> {
        let anchor = chain.anchor()?;
        let key = chain.cold_key().unwrap_or(0);
        let mut best: Option<(Candidate, usize, u64)> = None;
        for candidate in eligible {
            let Some(up) = self.upstreams.get(candidate.upstream) else {
                continue;
            };
            let links = up.index.matched(chain.links()).links;
            if links <= anchor {
                continue;
            }
            let drawn = rendezvous::draw(up.id, key);
            let better = match &best {
                None => true,
                Some((other, other_links, other_draw)) => {
                    links > *other_links
                        || (links == *other_links
                            && (candidate.weighted_load() < other.weighted_load()
                                || (candidate.weighted_load() == other.weighted_load()
                                    && drawn > *other_draw)))
                }
            };
            if better {
                best = Some((*candidate, links, drawn));
            }
        }
        best.map(|(candidate, _, _)| candidate)
    }

    /// The candidate that wins `key` by weighted rendezvous hashing.
    fn rendezvous(&self, eligible: &[Candidate], key: u64) -> Option<Candidate> {
        rendezvous::pick(eligible, key, |c| (self.id(c.upstream), c.weight)).copied()
    }

    /// Upstream `upstream`'s rendezvous identity (0 past the end).
    fn id(&self, upstream: usize) -> u64 {
        self.upstreams.get(upstream).map_or(0, |up| up.id)
    }

    /// Whether `preferred`'s load per unit of weight exceeds the least
    /// loaded candidate's by more than `max(floor, ceil(factor * mean))`.
    fn overloaded(&self, preferred: &Candidate, eligible: &[Candidate]) -> bool {
        let loads = eligible.iter().map(Candidate::weighted_load);
        let least = loads.clone().fold(f64::INFINITY, f64::min);
        let mean = loads.sum::<f64>() / eligible.len().max(1) as f64;
        let slack =
            f64::from(self.config.bound_floor).max((self.config.bound_factor * mean).ceil());
        preferred.weighted_load() > least + slack
    }

    /// The candidate with the least load per unit of weight; ties go to
    /// more idle slots, then to the rendezvous winner of `key`, or in turn
    /// without a key. `None` only when `eligible` is empty.
    fn least_loaded(&mut self, eligible: &[Candidate], key: Option<u64>) -> Option<usize> {
        let rank = |c: &Candidate| {
            (
                c.weighted_load(),
                std::cmp::Reverse(c.idle_slots.unwrap_or(0)),
            )
        };
        let best = eligible
            .iter()
            .map(rank)
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?;
        let tied: Vec<Candidate> = eligible
            .iter()
            .filter(|c| {
                let r = rank(c);
                r.0.total_cmp(&best.0).is_eq() && r.1 == best.1
            })
            .copied()
            .collect();
        let chosen = match (tied.as_slice(), key) {
            ([only], _) => Some(*only),
            (_, Some(key)) => self.rendezvous(&tied, key),
            (_, None) => {
                let at = self.turn % tied.len().max(1);
                self.turn = self.turn.wrapping_add(1);
                tied.get(at).copied()
            }
        };
        chosen.map(|c| c.upstream)
    }
}
