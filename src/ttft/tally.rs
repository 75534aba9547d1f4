//! An answer's generated tokens as its stream counts them, shared between
//! the request (which writes after each chunk) and the board of answers in
//! flight (which reads when a request is predicted beside it): one relaxed
//! atomic store per chunk, no lock.
//!
//! Deliberately not here: counting the tokens (the stream's observer),
//! and what the count predicts (when a busy slot frees, the policy crate's
//! `wait.rs`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// An answer's generated tokens, shared by its request and the board.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<AtomicU32>);

impl Tally {
    /// The answer has generated `n` tokens.
    pub fn set(&self, n: u64) {
        self.0
            .store(u32::try_from(n).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// Tokens generated so far (0 before the first, or when not counted).
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Two tallies are equal when they are the same answer's.
impl PartialEq for Tally {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
