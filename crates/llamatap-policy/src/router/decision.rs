//! The vocabulary of a routing decision: policies, candidates and their
//! load, the request's routing facts, and the decision with its reason and
//! predicted cached prefix.
//!
//! Plain data only; the choice itself is made by [`Router`](super::Router).

use super::chain::Chain;
use std::fmt;

/// How upstreams are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Where the longest prefix of the prompt was sent before, within the
    /// load bound; a new conversation by rendezvous hashing of its anchor.
    #[default]
    PrefixAffinity,
    /// The least loaded upstream (load per unit of weight).
    LeastBusy,
    /// Each upstream in turn.
    RoundRobin,
}

impl Policy {
    /// The configuration and span spelling: `prefix_affinity`,
    /// `least_busy`, `round_robin`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Policy::PrefixAffinity => "prefix_affinity",
            Policy::LeastBusy => "least_busy",
            Policy::RoundRobin => "round_robin",
        }
    }

    /// The policy spelled `name` (see [`Policy::as_str`]); `None` otherwise.
    pub fn parse(name: &str) -> Option<Policy> {
        [
            Policy::PrefixAffinity,
            Policy::LeastBusy,
            Policy::RoundRobin,
        ]
        .into_iter()
        .find(|policy| policy.as_str() == name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an upstream was chosen (a low-cardinality label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// It holds the longest prefix of the chain, beyond the anchor.
    PrefixHit,
    /// Nothing beyond the shared part matched: placed by rendezvous hashing
    /// of the chain's anchor.
    Cold,
    /// The upstream preferred by affinity or session was loaded beyond the
    /// bound, so the least loaded one was taken.
    Overloaded,
    /// Placed by rendezvous hashing of the session key.
    Session,
    /// It was the only eligible upstream.
    OnlyCandidate,
    /// A retry after an attempt failed before reaching an upstream; chosen
    /// among the others by the policy.
    Failover,
    /// Chosen by the `least_busy` or `round_robin` policy, or by load alone
    /// because the request carried no prompt and no session.
    Balanced,
    /// The member holding the request's resumable stream (a replay, a stop,
    /// a follow-up with the same `X-Conversation-Id`).
    Conversation,
    /// A first attempt chosen among the rest while members predicted over
    /// the request's TTFT objective were left out (set by the caller, which
    /// knows why it excluded them).
    TtftSlo,
    /// A first attempt without a TTFT objective chosen among the rest while
    /// members predicted much slower than the fastest were left out
    /// (`routing.ttft_steer_percent`; set by the caller).
    TtftSteer,
}

impl Reason {
    /// The label: `prefix_hit`, `cold`, `overloaded`, `session`,
    /// `only_candidate`, `failover`, `balanced`, `conversation`,
    /// `ttft_slo`, `ttft_steer`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::PrefixHit => "prefix_hit",
            Reason::Cold => "cold",
            Reason::Overloaded => "overloaded",
            Reason::Session => "session",
            Reason::OnlyCandidate => "only_candidate",
            Reason::Failover => "failover",
            Reason::Balanced => "balanced",
            Reason::Conversation => "conversation",
            Reason::TtftSlo => "ttft_slo",
            Reason::TtftSteer => "ttft_steer",
        }
    }

    /// Every reason, in declaration order (to pre-register metric labels).
    pub fn all() -> &'static [Reason] {
        &[
            Reason::PrefixHit,
            Reason::Cold,
            Reason::Overloaded,
            Reason::Session,
            Reason::OnlyCandidate,
            Reason::Failover,
            Reason::Balanced,
            Reason::Conversation,
            Reason::TtftSlo,
            Reason::TtftSteer,
        ]
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One upstream as the caller sees it at decision time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The upstream's position in the router's list of names.
    pub upstream: usize,
    /// Passes its health checks and is not ejected.
    pub healthy: bool,
    /// Serves the request's model.
    pub serves_model: bool,
    /// Its configured weight; 0 takes no traffic.
    pub weight: u32,
    /// Requests llamatap has in flight to it.
    pub in_flight: u32,
    /// Its idle slots (`/slots`), when known: breaks ties in load.
    pub idle_slots: Option<u32>,
    /// Requests waiting in its queue (`llamacpp:requests_deferred`), when
    /// known: added to the load, whoever sent them.
    pub deferred: Option<u32>,
}

impl Candidate {
    /// A healthy upstream serving the model, of weight 1, with nothing in
    /// flight and no slot or queue figures.
    pub fn new(upstream: usize) -> Self {
        Candidate {
            upstream,
            healthy: true,
            serves_model: true,
            weight: 1,
            in_flight: 0,
            idle_slots: None,
            deferred: None,
        }
    }

    /// Its load: in-flight requests plus its queue when known.
    pub fn load(&self) -> u64 {
        u64::from(self.in_flight) + u64::from(self.deferred.unwrap_or(0))
    }

    /// Its load per unit of weight (weight 0 counts as 1).
    pub fn weighted_load(&self) -> f64 {
        self.load() as f64 / f64::from(self.weight.max(1))
    }
}

/// What routing reads from a request.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The prompt's prefix chain (empty when the body was not read).
    pub chain: &'a Chain,
    /// The session key ([`session_key`](super::session_key) of the session
    /// header), when the request carries one.
    pub session: Option<u64>,
    /// Upstreams already tried for this request (failover): never chosen.
    pub exclude: &'a [usize],
}

/// The cached prefix the router expects on the chosen upstream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prediction {
    /// Leading links of the chain sent to that upstream before.
    pub links: usize,
    /// Text bytes in those links.
    pub bytes: u64,
    /// Those bytes in tokens, at the prompt-tokens-per-byte ratio observed
    /// so far; `None` before any observation.
    pub tokens: Option<u64>,
}

/// A routing decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The chosen upstream's position.
    pub upstream: usize,
    /// Why it was chosen.
    pub reason: Reason,
    /// The cached prefix expected there.
    pub prediction: Prediction,
}
