//! How an answer ends or is moved: the typed causes the proxy decides by
//! and telemetry records.
//!
//! - [`Reason`]: why an answer was cut and continued (its upstream died,
//!   stalled or drained, or a more urgent request took its slot).
//! - [`ContinuationResult`]: what became of it (continued, not continuable,
//!   failed).
//!
//! Each has a fixed list ([`Reason::ALL`], [`ContinuationResult::ALL`]) and
//! a label value (`as_str`), so a metric can seed every series at start and
//! no request can mint one.
//!
//! Deliberately not here: doing anything. Cutting, moving and continuing an
//! answer are the proxy's; counting them is telemetry's.

#[cfg(test)]
mod tests;

/// Why an answer was continued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The upstream closed or reset the connection mid-stream, or ended
    /// the body without the stream's terminal event.
    UpstreamDied,
    /// The upstream sent nothing for `continuation.stall_ms` after the
    /// first token.
    Stalled,
    /// Its member drained (its address left the DNS answer, or it was
    /// ejected) for `continuation.drain_after_ms`: the answer moved.
    Drained,
    /// A more urgent request took its slot; the answer waited in its
    /// class's queue, then went on.
    Preempted,
}

impl Reason {
    /// Every reason, in label order.
    pub const ALL: [Reason; 4] = [
        Reason::UpstreamDied,
        Reason::Stalled,
        Reason::Drained,
        Reason::Preempted,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UpstreamDied => "upstream_died",
            Reason::Stalled => "stalled",
            Reason::Drained => "drained",
            Reason::Preempted => "preempted",
        }
    }
}

/// How a continuation went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContinuationResult {
    /// The answer went on from another upstream.
    Continued,
    /// The request could not be continued in meaning (tools, a grammar, a
    /// schema, several choices, reasoning text, a cut inside an event, no
    /// body kept): the client got the error event.
    NotContinuable,
    /// No other upstream, or the continuation's own exchange failed: the
    /// client got the error event.
    Failed,
}

impl ContinuationResult {
    /// Every result, in label order.
    pub const ALL: [ContinuationResult; 3] = [
        ContinuationResult::Continued,
        ContinuationResult::NotContinuable,
        ContinuationResult::Failed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ContinuationResult::Continued => "continued",
            ContinuationResult::NotContinuable => "not_continuable",
            ContinuationResult::Failed => "failed",
        }
    }
}
