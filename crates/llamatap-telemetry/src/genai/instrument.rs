//! The OTLP instruments: each one's name, unit, description and explicit
//! bucket boundaries (the GenAI conventions' advised ones, time to first
//! token stretched to a minute), and the [`Kind`]s a request is recorded as.
//!
//! Deliberately not here: which value of a request each kind takes (the
//! parent module). Pure: constants and a table.

use crate::semconv as sc;

/// `gen_ai.server.request.duration` boundaries, seconds (the conventions').
pub const REQUEST_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// `gen_ai.server.time_to_first_token` boundaries, seconds: the
/// conventions' (up to 10 s), stretched to a minute (15, 20, 30, 45, 60 s)
/// so that long prompts do not all land above the last bound. Also the
/// first sentence's and the queue wait's.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 45.0, 60.0,
];

/// `gen_ai.server.time_per_output_token` boundaries, seconds (the conventions').
pub const TPOT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// `gen_ai.client.token.usage` boundaries, tokens (the conventions': powers of 4).
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// One instrument: its name, unit, description and boundaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instrument {
    /// The metric name.
    pub name: &'static str,
    /// Its unit (UCUM).
    pub unit: &'static str,
    /// What it measures.
    pub description: &'static str,
    /// The explicit bucket boundaries.
    pub bounds: &'static [f64],
}

/// Index of each instrument's histogram in a [`Series`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `gen_ai.server.request.duration`.
    RequestDuration,
    /// `gen_ai.server.time_to_first_token`.
    TimeToFirstToken,
    /// `gen_ai.server.time_per_output_token`.
    TimePerOutputToken,
    /// `gen_ai.client.token.usage`, `gen_ai.token.type=input`.
    InputTokens,
    /// `gen_ai.client.token.usage`, `gen_ai.token.type=output`.
    OutputTokens,
    /// `llamatap.server.time_to_first_sentence`.
    TimeToFirstSentence,
    /// `llamatap.server.queue.duration`.
    QueueDuration,
}

impl Kind {
    /// Every kind, in export order.
    pub const ALL: [Kind; 7] = [
        Kind::RequestDuration,
        Kind::TimeToFirstToken,
        Kind::TimePerOutputToken,
        Kind::InputTokens,
        Kind::OutputTokens,
        Kind::TimeToFirstSentence,
        Kind::QueueDuration,
    ];

    /// The instrument it is a part of.
    pub fn instrument(self) -> Instrument {
        let (name, unit, description, bounds) = match self {
            Kind::RequestDuration => (
                sc::GEN_AI_SERVER_REQUEST_DURATION,
                sc::UNIT_SECONDS,
                "Time from the request's arrival at llamatap to the end of its answer (or its failure)",
                REQUEST_DURATION_BUCKETS,
            ),
            Kind::TimeToFirstToken => (
                sc::GEN_AI_SERVER_TIME_TO_FIRST_TOKEN,
                sc::UNIT_SECONDS,
                "Time from the request's arrival to its first visible content token",
                TTFT_BUCKETS,
            ),
            Kind::TimePerOutputToken => (
                sc::GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN,
                sc::UNIT_SECONDS,
                "Per answer: (last token - first token) / (output tokens - 1)",
                TPOT_BUCKETS,
            ),
            Kind::InputTokens | Kind::OutputTokens => (
                sc::GEN_AI_CLIENT_TOKEN_USAGE,
                sc::UNIT_TOKENS,
                "Tokens per request: input (all prompt tokens, cached included) and output",
                TOKEN_BUCKETS,
            ),
            Kind::TimeToFirstSentence => (
                sc::LLAMATAP_SERVER_TIME_TO_FIRST_SENTENCE,
                sc::UNIT_SECONDS,
                "Time from the request's arrival to the end of the first sentence of visible text",
                TTFT_BUCKETS,
            ),
            Kind::QueueDuration => (
                sc::LLAMATAP_SERVER_QUEUE_DURATION,
                sc::UNIT_SECONDS,
                "Time a request waited in llamatap's admission queue (arrival to dispatch)",
                TTFT_BUCKETS,
            ),
        };
        Instrument {
            name,
            unit,
            description,
            bounds,
        }
    }

    /// `gen_ai.token.type`, for the token kinds.
    pub fn token_type(self) -> Option<&'static str> {
        match self {
            Kind::InputTokens => Some(sc::TOKEN_TYPE_INPUT),
            Kind::OutputTokens => Some(sc::TOKEN_TYPE_OUTPUT),
            _ => None,
        }
    }
}
