//! The prediction corrected during the prefill, from llama-server's
//! progress event (`return_progress`): the wait is then known, the cached
//! tokens are llama-server's own count, and the prefill's measured speed so
//! far scales what is left.
//!
//! Deliberately not here: the prediction before dispatch (`member.rs`) and
//! reading the event (the proxy's).

use super::super::input::Progress;
use super::super::{Confidence, Estimate, Prediction};
use super::{Rates, CONFIDENT_AFTER, MIN_RATIO_TOKENS};

impl Rates {
    /// The prediction corrected by a progress event that arrived
    /// `since_sent_ms` after the request was sent, with `busy_others` other
    /// slots busy and `prefill_others` tokens still to prefill in them.
    pub(in super::super) fn correct(
        &self,
        p: &Progress,
        since_sent_ms: f64,
        busy_others: u32,
        prefill_others: u32,
    ) -> Prediction {
        if self.prefill.weight() <= 0.0 || !since_sent_ms.is_finite() {
            return Prediction::NoData;
        }
        let total = p.total.max(1);
        let cache = p.cache.min(total - 1);
        let own = f64::from(total - cache);
        let done = f64::from(p.processed.saturating_sub(cache)).min(own);
        let new = own + f64::from(prefill_others);
        let c = f64::from(cache);
        let bend = self.prefill_bend.at(busy_others) * self.level.exp();
        let whole = self.prefill.at(new, c) * bend;
        let (left, speed) = if done > 0.0 {
            let so_far = self.prefill.at(done, c) * bend;
            let elapsed = p.time_ms as f64;
            // How fast this prefill really runs, trusted the more the more
            // of it is done.
            let speed = if done >= f64::from(MIN_RATIO_TOKENS) && so_far > 0.0 && elapsed > 0.0 {
                let r = (elapsed / so_far).clamp(0.25, 4.0);
                (done / (done + 256.0) * r.ln()).exp()
            } else {
                1.0
            };
            // The batches left read the cache and what is done of the
            // prompt: its read grows by the tokens done.
            let read = (self.prefill.at(0.0, c + done) - self.prefill.at(0.0, c)) * bend;
            ((whole - so_far).max(0.0) + read, speed)
        } else {
            (whole, 1.0)
        };
        let remaining = left * speed;
        let tail = match (self.overhead.get_cost(), self.lead.get()) {
            (Some(o), Some(l)) => (o - l).max(0.0),
            _ => 0.0,
        };
        let spent = p.time_ms as f64;
        // The event cannot arrive before the slot's own elapsed time.
        let since = since_sent_ms.max(spent);
        Prediction::Estimate(Estimate {
            ttft_ms: since + remaining + tail,
            wait_ms: (since - spent).max(0.0),
            prefill_ms: spent + remaining,
            overhead_ms: tail,
            prompt_tokens: total,
            ahead_tokens: prefill_others,
            confidence: if self.observations >= CONFIDENT_AFTER && self.lead.get().is_some() {
                Confidence::High
            } else {
                Confidence::Low
            },
        })
    }
}
