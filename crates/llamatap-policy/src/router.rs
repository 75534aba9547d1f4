//! Fleet routing: which of several llama-servers should answer a request,
//! preferring the one that already holds the prompt's prefix in its KV cache.
//!
//! Pure and framework-free (no pingora, tokio, tracing, OpenTelemetry or
//! prometheus): the proxy supplies health, load and the request body, and
//! calls the router under its own lock. The parts, one concept each:
//! - [`Chain`]: a prompt as a chain of 64-bit hashes, one link per chat
//!   message or 256-byte prompt block, each link hashing the one before.
//! - [`PrefixIndex`]: per upstream, a bounded LRU set of the links sent
//!   there; a lookup gives the longest indexed prefix of a chain.
//! - [`rendezvous`]: weighted highest-random-weight hashing, which places a
//!   new conversation (by its anchor) or a session (by its key) the same way
//!   in every llamatap process.
//! - [`Router`]: the decision (`prefix_affinity`, `least_busy`,
//!   `round_robin`, bounded load, failover exclusions), with a [`Reason`]
//!   and the [`Prediction`] of the cached prefix.
//! - [`Router::observe`]: learning from llama-server's `cache_n`, and the
//!   [`Accuracy`] counters.
//! - [`SlotView`]: what one llama-server's slots hold, by its own rule for
//!   choosing a slot, for the part of a prompt it will reuse.
//!
//! Stability: link hashes, session keys and upstream identities are XXH3-64
//! with a fixed seed, so separate processes agree (see `hash`).
//!
//! Cost and memory (`benches/route.rs`; figures in `docs/routing.md`): a
//! decision probes each eligible upstream's index once per matched link
//! plus one, and records the chain (one touch per link) in the chosen one.
//! With 3 upstreams and 10,000 indexed conversations of 5 turns it took
//! about 0.28 µs for a next turn and 0.83 µs for a new conversation;
//! building the chain of a 3.5 KB chat body took about 7 µs. Each index
//! holds at most [`DEFAULT_CAPACITY`] links by default, 58 bytes per link
//! when full: 3,801,088 bytes (3.8 MB) per upstream.
//!
//! Not done here: reading bodies, health checks, model lists, load polling,
//! metrics and spans; those belong to the proxy and telemetry layers.

mod chain;
mod choice;
mod decision;
mod hash;
mod index;
mod learn;
pub mod rendezvous;
pub mod slots;
#[cfg(test)]
mod tests;

pub use chain::{Chain, BLOCK_BYTES, COLD_BLOCKS, MESSAGE_BLOCK_BYTES, MESSAGE_FRAME_BYTES};
pub use choice::{RouteConfig, Router};
pub use decision::{Candidate, Decision, Policy, Prediction, Reason, Request};
pub use hash::SEED;
pub use index::{Match, PrefixIndex, DEFAULT_CAPACITY};
pub use learn::{Accuracy, Observation};
pub use rendezvous::{session_key, upstream_id};
pub use slots::SlotView;
