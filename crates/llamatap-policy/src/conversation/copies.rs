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
//! A copy may keep its generation's request ([`Kept`], the body as
//! continuation keeps it), so that the rest of a cut copy can be
//! generated on another member for the replay that finds it; one replay
//! at a time takes that rest ([`Copies::take_rest`]), and the copy it
//! grows replaces this one ([`Copies::keep`]).
//!
//! Pure: the caller passes the time.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::KEEP_AFTER_END;
use llamatap_wire::request::Route;

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
    /// The request that started it, when it was kept.
    pub kept: Option<Arc<Kept>>,
    until: Instant,
    written: u64,
    /// A replay is generating its rest now.
    taken: bool,
}

/// The request of a kept answer, for its rest: its route and its body
/// (bounded by the caller: `telemetry.max_inspect_bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The generation's route.
    pub route: Route,
    /// Its body as received.
    pub body: Vec<u8>,
}

impl Copy {
    fn size(&self) -> usize {
        self.bytes.len() + self.kept.as_ref().map_or(0, |k| k.body.len())
    }
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
    /// `kept`: the request that started it (counted in the budget).
    pub fn keep(
        &mut self,
        id: &str,
        member: &str,
        answer: (Vec<u8>, bool),
        kept: Option<Arc<Kept>>,
        now: Instant,
    ) {
        let (bytes, complete) = answer;
        self.forget(id);
        let size = bytes.len() + kept.as_ref().map_or(0, |k| k.body.len());
        if bytes.is_empty() || bytes.len() > MAX_COPY || size > self.budget {
            return;
        }
        while self.bytes + size > self.budget {
            if !self.evict_oldest() {
                return;
            }
        }
        let written = self.next;
        self.next += 1;
        self.bytes += size;
        self.map.insert(
            id.to_string(),
            Copy {
                bytes: Arc::new(bytes),
                complete,
                member: member.to_string(),
                kept,
                until: now + KEEP_AFTER_END,
                written,
                taken: false,
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

    /// Takes the rest of `id`'s cut copy for one replay: `true` when the
    /// copy is cut, its request kept, and no other replay has taken it
    /// (until [`Copies::keep`] replaces the copy or
    /// [`Copies::give_back`] returns it).
    pub fn take_rest(&mut self, id: &str, now: Instant) -> bool {
        if self.get(id, now).is_none() {
            return false;
        }
        match self.map.get_mut(id) {
            Some(c) if !c.complete && c.kept.is_some() && !c.taken => {
                c.taken = true;
                true
            }
            _ => false,
        }
    }

    /// The rest of `id`'s copy was not generated: another replay may take it.
    pub fn give_back(&mut self, id: &str) {
        if let Some(c) = self.map.get_mut(id) {
            c.taken = false;
        }
    }

    /// A replay is generating the rest of `id`'s copy now.
    pub fn rest_taken(&self, id: &str) -> bool {
        self.map.get(id).is_some_and(|c| c.taken)
    }

    /// Forgets `id`'s copy (a stop, or a newer answer).
    pub fn forget(&mut self, id: &str) {
        if let Some(c) = self.map.remove(id) {
            self.bytes -= c.size();
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
        c.keep("a", "m1", (b"data: 1\n\n".to_vec(), true), None, t0);
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
        c.keep("a", "m", (vec![1; 4], true), None, t0);
        c.keep("b", "m", (vec![2; 4], true), None, t0);
        c.keep("a", "m", (vec![3; 5], false), None, t0);
        assert_eq!(c.bytes(), 9);
        // b is now the oldest write: it goes, a (written again) stays.
        c.keep("c", "m", (vec![4; 4], true), None, t0);
        assert!(c.get("b", t0).is_none());
        assert!(c.get("a", t0).is_some_and(|a| !a.complete));
        assert_eq!(c.bytes(), 9);
        c.keep("d", "m", (vec![5; 11], true), None, t0);
        assert!(c.get("d", t0).is_none());
        assert_eq!(c.bytes(), 9);
    }

    #[test]
    fn an_answer_over_llama_servers_buffer_is_not_kept() {
        let t0 = Instant::now();
        let mut c = Copies::new(DEFAULT_BUDGET);
        c.keep("a", "m", (vec![0; MAX_COPY + 1], true), None, t0);
        assert!(c.get("a", t0).is_none());
        c.keep("a", "m", (vec![0; MAX_COPY], true), None, t0);
        assert!(c.get("a", t0).is_some());
    }

    fn kept(n: usize) -> Option<Arc<Kept>> {
        Some(Arc::new(Kept {
            route: Route::ChatCompletions,
            body: vec![b'{'; n],
        }))
    }

    #[test]
    fn the_kept_request_counts_in_the_budget() {
        let t0 = Instant::now();
        let mut c = Copies::new(10);
        c.keep("a", "m", (vec![1; 4], false), kept(6), t0);
        assert_eq!(c.bytes(), 10);
        c.keep("b", "m", (vec![1; 4], false), kept(7), t0);
        assert!(c.get("b", t0).is_none(), "4 + 7 bytes exceed the budget");
        assert_eq!(c.bytes(), 10);
        c.forget("a");
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn one_replay_at_a_time_takes_the_rest_of_a_cut_copy_with_its_request() {
        let t0 = Instant::now();
        let mut c = Copies::new(100);
        c.keep("whole", "m", (vec![1; 4], true), kept(2), t0);
        c.keep("bare", "m", (vec![1; 4], false), None, t0);
        c.keep("cut", "m", (vec![1; 4], false), kept(2), t0);
        assert!(!c.take_rest("whole", t0), "a whole copy has no rest");
        assert!(!c.take_rest("bare", t0), "no request kept: no rest");
        assert!(!c.take_rest("none", t0));
        assert!(c.take_rest("cut", t0));
        assert!(c.rest_taken("cut"));
        assert!(!c.take_rest("cut", t0), "a second replay waits its turn");
        c.give_back("cut");
        assert!(c.take_rest("cut", t0));
        // The grown copy replaces it, free again.
        c.keep("cut", "m2", (vec![1; 8], true), kept(2), t0);
        assert!(!c.rest_taken("cut"));
        assert!(c
            .get("cut", t0)
            .is_some_and(|x| x.complete && x.member == "m2"));
        assert!(!c.take_rest("cut", t0 + KEEP_AFTER_END), "expired");
    }
}
