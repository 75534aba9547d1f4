//! The fleet's affinity book, under the router's mutex: which member holds
//! the longest prefix of a request's chain, how much of it, and what an
//! answer's `cache_n` teaches about it.
//!
//! Deliberately not here: choosing a member ([`Fleet::choose`]) and the
//! book itself ([`llamatap_policy::router`]).

use super::Fleet;
use llamatap_policy::router::{Chain, Observation, Prediction};

impl Fleet {
    /// The member holding the longest prefix of `chain` (for a request
    /// naming `model`), whatever its load: where `prefix_affinity` would
    /// send it if it had a free slot. Nothing is recorded.
    pub fn affine(&self, model: Option<&str>, chain: &Chain) -> Option<usize> {
        let (_, candidates) = self.candidates(model, &[]).ok()?;
        self.router.lock().ok()?.affine(&candidates, chain)
    }

    /// Text bytes of `chain` the affinity book says member `i` holds in
    /// its cache (0 when none, or not known).
    pub fn cached_bytes(&self, i: usize, chain: &Chain) -> u64 {
        let links = self
            .router
            .lock()
            .ok()
            .and_then(|r| r.index(i).map(|index| index.matched(chain.links()).links));
        links.map_or(0, |n| chain.bytes(n))
    }

    /// Learns from an answer: llama-server's `cache_n` against the prefix
    /// the router predicted on member `i`.
    pub fn observe(
        &self,
        i: usize,
        chain: &Chain,
        prediction: &Prediction,
        cached_tokens: u64,
        prompt_tokens: u64,
    ) -> Option<Observation> {
        self.router
            .lock()
            .ok()
            .map(|mut r| r.observe(i, chain, prediction, cached_tokens, prompt_tokens))
    }

    /// Member `i` restarted (its marks say so, see
    /// [`super::Member::note_marks`]): a new llama-server process holds nothing in
    /// its cache, so the router forgets what it sent there. A failed check
    /// alone never calls this: a blip must not cost the fleet its affinity.
    pub fn forget(&self, i: usize) {
        if let Ok(mut r) = self.router.lock() {
            r.forget(i);
        }
    }
}
