//! The answers in flight on each member, as the predictor needs them: each
//! dispatched attempt's prompt tokens still to prefill, and its
//! `max_tokens`, so that a request predicted beside them counts the
//! prompts ahead of it in the member's batches.
//!
//! An attempt boards at dispatch with its prefill estimated from its own
//! prediction (streamed answers only: their progress events and first token
//! say when the prefill is over); each progress event sets what is left; the
//! first token, or a head with no progress to come, sets it to 0; the
//! attempt lands in `logging`, or when another attempt replaces it. The
//! lock is held for one of these steps (a short scan of one member's
//! list), never across an await; nothing here runs per token.
//!
//! Deliberately not here: the tokens the answers have generated (they
//! would be counted per token; the predictor assumes a typical answer),
//! and predicting ([`super::Predictor`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use llamatap_policy::ttft::{InFlight, MAX_SLOTS};

/// Most answers kept per member: those beyond are not in its slots.
const MAX_PER_MEMBER: usize = 4 * MAX_SLOTS;

/// One attempt on the board: its member and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boarded {
    /// The member.
    pub member: usize,
    id: u64,
}

/// The board of answers in flight, per member.
#[derive(Debug, Default)]
pub struct Flights {
    by_member: Mutex<HashMap<usize, Vec<(u64, InFlight)>>>,
    next: AtomicU64,
}

impl Flights {
    /// `flight` boards `member`; `None` when the member's list is full.
    pub fn board(&self, member: usize, flight: InFlight) -> Option<Boarded> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut by = self.by_member.lock().ok()?;
        let list = by.entry(member).or_default();
        if list.len() >= MAX_PER_MEMBER {
            return None;
        }
        list.push((id, flight));
        Some(Boarded { member, id })
    }

    /// What `b` still has to prefill is now `prefill_left` tokens.
    pub fn prefill_left(&self, b: Boarded, prefill_left: u32) {
        if let Ok(mut by) = self.by_member.lock() {
            if let Some(f) = by
                .get_mut(&b.member)
                .and_then(|l| l.iter_mut().find(|(id, _)| *id == b.id))
            {
                f.1.prefill_left = prefill_left;
            }
        }
    }

    /// `b`'s request is now known whole: its `max_tokens`, and, when given,
    /// its prompt tokens still to prefill.
    pub fn describe(&self, b: Boarded, max_tokens: Option<u32>, prefill_left: Option<u32>) {
        if let Ok(mut by) = self.by_member.lock() {
            if let Some(f) = by
                .get_mut(&b.member)
                .and_then(|l| l.iter_mut().find(|(id, _)| *id == b.id))
            {
                f.1.max_tokens = max_tokens.or(f.1.max_tokens);
                if let Some(left) = prefill_left {
                    f.1.prefill_left = left;
                }
            }
        }
    }

    /// `b` is over.
    pub fn land(&self, b: Boarded) {
        if let Ok(mut by) = self.by_member.lock() {
            if let Some(list) = by.get_mut(&b.member) {
                list.retain(|(id, _)| *id != b.id);
                if list.is_empty() {
                    by.remove(&b.member);
                }
            }
        }
    }

    /// Copies `member`'s answers, in boarding order (the first ones hold
    /// its slots), into `out`; how many.
    pub fn of(&self, member: usize, out: &mut [InFlight]) -> usize {
        let Ok(by) = self.by_member.lock() else {
            return 0;
        };
        let Some(list) = by.get(&member) else {
            return 0;
        };
        let n = list.len().min(out.len());
        for (o, (_, f)) in out.iter_mut().zip(list) {
            *o = *f;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flight(prefill_left: u32) -> InFlight {
        InFlight {
            generated: 0,
            max_tokens: Some(64),
            prefill_left,
        }
    }

    #[test]
    fn answers_board_update_and_land_per_member() {
        let f = Flights::default();
        let a = f.board(0, flight(500)).unwrap();
        let b = f.board(0, flight(300)).unwrap();
        let c = f.board(1, flight(100)).unwrap();
        let mut out = [InFlight::default(); 8];
        assert_eq!(f.of(0, &mut out), 2);
        assert_eq!((out[0].prefill_left, out[1].prefill_left), (500, 300));
        f.prefill_left(a, 0);
        assert_eq!(f.of(0, &mut out), 2);
        assert_eq!(out[0].prefill_left, 0);
        f.land(a);
        assert_eq!(f.of(0, &mut out), 1);
        assert_eq!(out[0].prefill_left, 300);
        f.land(b);
        f.land(b);
        assert_eq!(f.of(0, &mut out), 0);
        assert_eq!(f.of(1, &mut out), 1);
        f.land(c);
        assert!(f.by_member.lock().unwrap().is_empty());
        // Updating a landed answer does nothing.
        f.prefill_left(c, 7);
        assert_eq!(f.of(1, &mut out), 0);
    }

    #[test]
    fn a_member_holds_a_bounded_list_and_copies_fit_the_buffer() {
        let f = Flights::default();
        let boarded: Vec<_> = (0..MAX_PER_MEMBER + 3)
            .map(|i| f.board(2, flight(i as u32)))
            .collect();
        assert_eq!(
            boarded.iter().filter(|b| b.is_some()).count(),
            MAX_PER_MEMBER
        );
        let mut small = [InFlight::default(); 4];
        assert_eq!(f.of(2, &mut small), 4);
        assert_eq!(small[3].prefill_left, 3);
    }
}
