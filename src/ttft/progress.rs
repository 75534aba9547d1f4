//! The prediction corrected during the prefill: one `prompt_progress` event
//! of the answer (asked for with `return_progress`) against the book.
//!
//! The book's lock is held for one correction (about 0.15 µs), never
//! across an await. Deliberately not here: asking for the events and
//! reading them (the proxy's `progress`).

use std::time::Instant;

use llamatap_policy::ttft::{Prediction, Progress};

use super::{Predicted, Predictor};

impl Predictor {
    /// The prediction `p` corrected by `progress`, read `at`: the TTFT from
    /// dispatch, the time before the slot started and the cached prefix
    /// now known (`NoData` when the member and model learned nothing yet).
    /// The other slots are taken as busy as at dispatch, with `beside`
    /// prompt tokens of theirs still to prefill ([`super::Flights::beside`]).
    pub fn correct(
        &self,
        p: &Predicted,
        progress: &Progress,
        (at, beside): (Instant, u32),
    ) -> Prediction {
        let since_sent_ms = at.saturating_duration_since(p.sent).as_secs_f64() * 1000.0;
        match self.book.lock() {
            Ok(book) => book.correct(&p.key, progress, since_sent_ms, p.busy_others, beside),
            Err(_) => Prediction::NoData,
        }
    }
}
