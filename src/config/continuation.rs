//! `[continuation]`: whether an answer cut by its upstream (a death, a
//! reset, a stall) continues on another llama-server, as written and
//! validated.
//!
//! Validation only: continuing is [`crate::proxy`]'s job (its
//! `continuation` module), what can be continued the wire crate's
//! ([`llamatap_wire::continuation`]).

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Shortest `stall_ms`.
pub const MIN_STALL_MS: u64 = 100;
/// Longest `stall_ms`: ten minutes.
pub const MAX_STALL_MS: u64 = 600_000;
/// Most continuations of one answer.
pub const MAX_PER_ANSWER: u32 = 16;
/// Longest `drain_after_ms`: one hour.
pub const MAX_DRAIN_AFTER_MS: u64 = 3_600_000;

/// `[continuation]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawContinuation {
    /// Continue answers cut by their upstream; default `true`.
    pub enabled: Option<bool>,
    /// Silence after the first token that counts as a stall, ms; default 5000.
    pub stall_ms: Option<u64>,
    /// Most continuations of one answer; default 2.
    pub max_per_answer: Option<u32>,
    /// How long a member drains (its address left the DNS answer, or it is
    /// ejected) before its answers move to another, ms; default 10000.
    pub drain_after_ms: Option<u64>,
    /// Most times one answer may be paused for a more urgent request;
    /// default 1.
    pub max_pauses: Option<u32>,
}

/// Validated `[continuation]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// On.
    pub enabled: bool,
    /// Silence after the first token that counts as a stall.
    pub stall: Duration,
    /// Most continuations of one answer.
    pub max_per_answer: u32,
    /// How long a member drains before its answers move.
    pub drain_after: Duration,
    /// Most pauses (pre-emptions) of one answer.
    pub max_pauses: u32,
}

impl Default for Continuation {
    fn default() -> Self {
        Continuation {
            enabled: true,
            stall: Duration::from_millis(5000),
            max_per_answer: 2,
            drain_after: Duration::from_millis(10_000),
            max_pauses: 1,
        }
    }
}

/// Validates `[continuation]`.
pub fn continuation(raw: RawContinuation) -> Result<Continuation, ConfigError> {
    let d = Continuation::default();
    let stall_ms = raw.stall_ms.unwrap_or(5000);
    if !(MIN_STALL_MS..=MAX_STALL_MS).contains(&stall_ms) {
        return Err(invalid(
            "continuation.stall_ms",
            &format!("must be between {MIN_STALL_MS} and {MAX_STALL_MS}"),
        ));
    }
    let max_per_answer = raw.max_per_answer.unwrap_or(d.max_per_answer);
    if max_per_answer > MAX_PER_ANSWER {
        return Err(invalid(
            "continuation.max_per_answer",
            &format!("must be between 0 and {MAX_PER_ANSWER}"),
        ));
    }
    let drain_after = match raw.drain_after_ms {
        Some(ms) if ms > MAX_DRAIN_AFTER_MS => {
            return Err(invalid(
                "continuation.drain_after_ms",
                &format!("must be between 0 and {MAX_DRAIN_AFTER_MS}"),
            ))
        }
        Some(ms) => Duration::from_millis(ms),
        None => d.drain_after,
    };
    let max_pauses = raw.max_pauses.unwrap_or(d.max_pauses);
    if max_pauses > MAX_PER_ANSWER {
        return Err(invalid(
            "continuation.max_pauses",
            &format!("must be between 0 and {MAX_PER_ANSWER}"),
        ));
    }
    Ok(Continuation {
        enabled: raw.enabled.unwrap_or(d.enabled),
        stall: Duration::from_millis(stall_ms),
        max_per_answer,
        drain_after,
        max_pauses,
    })
}

#[cfg(test)]
mod tests;
