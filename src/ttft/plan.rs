//! A request's TTFT state across its attempts, kept in its context: its
//! objective, the members left out for it, its prediction and correction,
//! its place on the board of answers in flight.
//!
//! Plain data; deliberately no behaviour (the proxy's `predict` and
//! `progress` fill it).

use std::time::{Duration, Instant};

#[cfg(doc)]
use super::{progress, prompt_bytes, steer, Flights, Promise, Slots};
use super::{Boarded, Overlap, Predicted, Tally};

/// A request's TTFT state across its attempts: plain data in its context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Its objective, ms (`x-slo-ttft-ms`, else the tenant's or class's
    /// default).
    pub slo_ms: Option<u32>,
    /// Members left out of routing: predicted over the objective.
    pub avoid: Vec<usize>,
    /// No member was predicted within the objective, and an answer of a
    /// less urgent class was told to pause to make room on the one left.
    pub made_room: bool,
    /// A member's bound was over the objective on its recent error alone
    /// (every member's, or that member was left out while another met it),
    /// and the request was sent to it as a probe of that error
    /// ([`Predictor::claim_probe`](super::Predictor::claim_probe)); cleared
    /// on an attempt after a failed one.
    pub probe: bool,
    /// Refused below every member's floor: the lowest floor, ms
    /// ([`Bound::floor_ms`](llamatap_policy::ttft::Bound::floor_ms)).
    pub floor_ms: Option<f64>,
    /// Members left out of this attempt's routing without an objective:
    /// predicted much slower than the fastest ([`steer`]).
    pub steered: Vec<usize>,
    /// The prompt's size in bytes ([`prompt_bytes`]).
    pub prompt_bytes: u64,
    /// The current attempt's prediction.
    pub predicted: Option<Predicted>,
    /// The current attempt's prediction as corrected by its last prompt
    /// progress event ([`progress`]), whole ms from dispatch.
    pub corrected_ms: Option<u64>,
    /// Prompt progress events the current attempt read.
    pub progress_events: u32,
    /// When the current attempt's first prompt progress event was read:
    /// its slot started the prompt.
    pub slot_started: Option<Instant>,
    /// The current attempt on the board of answers in flight
    /// ([`Flights`]), until its body's end is read upstream, `logging`,
    /// or the next attempt.
    pub flight: Option<Boarded>,
    /// The current attempt's generated tokens, shared with its entry on
    /// the board; set after each chunk of its stream.
    pub tally: Option<Tally>,
    /// The member and ticket of the current attempt in the view of its
    /// member's slots ([`Slots`]), until it lands.
    pub slot: Option<(usize, u64)>,
    /// How long the request waited before its dispatch so as not to push
    /// an earlier answer's first token past its objective ([`Promise`]).
    pub held: Option<Duration>,
    /// How long the request waited before it was written upstream for the
    /// prompts dispatched before it to its member to start
    /// (`[ttft] sequence_prompts`).
    pub sequenced: Option<Duration>,
    /// The prompt tokens of other answers that went through the current
    /// attempt's prefill batches, and those it waited for before its slot
    /// started ([`Flights::overlap`]), once it landed.
    pub prefill_beside: Option<Overlap>,
}
