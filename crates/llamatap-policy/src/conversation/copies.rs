//! What llamatap saw of each buffered answer: a bounded copy, so that a
//! replay whose member died or drained can still be served.
//!
//! A copy is the answer's bytes as its client got them (and, after a
//! hang-up, as llamatap read them on), at most [`MAX_COPY`] per answer
//! (llama-server's own buffer) and at most the budget for all of them: a
//! new copy beyond the budget forgets the oldest. A copy lives
//! [`super::KEEP_AFTER_END`] from when it was kept, as llama-server's
//! buffer does.
//!
//! Pure: the caller passes the time.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::KEEP_AFTER_END;

/// Most bytes kept of one answer (llama-server's buffer).
pub const MAX_COPY: usize = 4 * 1024 * 1024;

/// Most bytes kept of all answers, by default.
pub const DEFAULT_BUDGET: usize = 64 * 1024 * 1024;

/// One kept answer.
#[derive(Clone, Debug)]
pub struct Copy {
    /// Its bytes, from the first.
    pub bytes: Arc<Vec<u8>>,
    /// It ended whole (its terminal event was seen); otherwise it was cut.
    pub complete: bool,
    /// The member that generated it.
    pub member: String,
    until: Instant,
    written: u64,
}

/// The copies, bounded by a byte budget.
#[derive(Debug)]
pub struct Copies {
    map: HashMap<String, Copy>,
    order: VecDeque<(u64, String)>,
    next: u64,
    bytes: usize,
    budget: usize,
}

impl Copies {
    /// Copies of at most `budget` bytes in all.
    pub fn new(budget: usize) -> Copies {
        Copies {
            map: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            bytes: 0,
            budget,
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps `bytes` as `id`'s answer, generated on `member`, at `now`
    /// (replacing an earlier one). Nothing is kept beyond [`MAX_COPY`] or
    /// the budget.
    pub fn keep(&mut self, id: &str, member: &str, bytes: Vec<u8>, complete: bool, now: Instant) {
        self.forget(id);
        if bytes.is_empty() || bytes.len() > MAX_COPY || bytes.len() > self.budget {
            return;
        }
        while self.bytes + bytes.len() > self.budget {
            if !self.evict_oldest() {
                return;
            }
        }
        let written = self.next;
        self.next += 1;
        self.bytes += bytes.len();
        self.map.insert(
            id.to_string(),
            Copy {
                bytes: Arc::new(bytes),
                complete,
                member: member.to_string(),
                until: now + KEEP_AFTER_END,
                written,
            },
        );
        self.order.push_back((written, id.to_string()));
    }

    /// `id`'s copy at `now`, if one is kept.
    pub fn get(&mut self, id: &str, now: Instant) -> Option<Copy> {
        if self.map.get(id).is_some_and(|c| c.until <= now) {
            self.forget(id);
        }
        self.map.get(id).cloned()
    }

    /// Forgets `id`'s copy (a stop, or a newer answer).
    pub fn forget(&mut self, id: &str) {
        if let Some(c) = self.map.remove(id) {
            self.bytes -= c.bytes.len();
        }
    }

    fn evict_oldest(&mut self) -> bool {
        while let Some((n, id)) = self.order.pop_front() {
            if self.map.get(&id).is_some_and(|c| c.written == n) {
                self.forget(&id);
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_copy_is_served_until_llama_servers_buffer_would_be_gone() {
        let t0 = Instant::now();
        let mut c = Copies::new(100);
        c.keep("a", "m1", b"data: 1\n\n".to_vec(), true, t0);
        let got = c.get("a", t0 + Duration::from_secs(299)).unwrap();
        assert_eq!(got.bytes.as_slice(), b"data: 1\n\n");
        assert!(got.complete);
        assert_eq!(got.member, "m1");
        assert!(c.get("a", t0 + KEEP_AFTER_END).is_none());
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn the_budget_forgets_the_oldest_and_refuses_what_cannot_fit() {
        let t0 = Instant::now();
        let mut c = Copies::new(10);
        c.keep("a", "m", vec![1; 4], true, t0);
        c.keep("b", "m", vec![2; 4], true, t0);
        c.keep("a", "m", vec![3; 5], false, t0);
        assert_eq!(c.bytes(), 9);
        // b is now the oldest write: it goes, a (written again) stays.
        c.keep("c", "m", vec![4; 4], true, t0);
        assert!(c.get("b", t0).is_none());
        assert!(c.get("a", t0).is_some_and(|a| !a.complete));
        assert_eq!(c.bytes(), 9);
        c.keep("d", "m", vec![5; 11], true, t0);
        assert!(c.get("d", t0).is_none());
        assert_eq!(c.bytes(), 9);
    }

    #[test]
    fn an_answer_over_llama_servers_buffer_is_not_kept() {
        let t0 = Instant::now();
        let mut c = Copies::new(DEFAULT_BUDGET);
        c.keep("a", "m", vec![0; MAX_COPY + 1], true, t0);
        assert!(c.get("a", t0).is_none());
        c.keep("a", "m", vec![0; MAX_COPY], true, t0);
        assert!(c.get("a", t0).is_some());
    }
}
