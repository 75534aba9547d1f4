//! What one llama-server's slots hold: the prompt chain each slot last took,
//! and llama-server's own rule for choosing a slot, so that the prompt a new
//! request will reuse is the one llama-server keeps, not only what was sent.
//!
//! The [`PrefixIndex`](super::PrefixIndex) records every chain sent to a
//! member. llama-server keeps less. A request goes to the idle slot whose
//! prompt shares the largest part of it (its longest common prefix over its
//! length, above `--slot-prompt-similarity`, 0.1); when that slot keeps at
//! least half of its own prompt (`f_keep ≥ 0.5`), the slot is reused as it
//! is, and its old prompt past the common prefix is lost, not saved to the
//! host-memory prompt cache. Only otherwise (no similar slot: the least
//! recently used one; or a slot keeping less than half) does llama-server
//! save the slot's prompt and restore the best one from that cache. So
//! conversations that share a system prompt, more of them than slots,
//! replace each other down to the system prompt, while the index still
//! holds each whole.
//!
//! [`SlotView::reused`] follows that rule: the chosen slot's common prefix
//! when it keeps half, else what the index holds (the host cache is taken
//! to hold what was sent). [`SlotView::take`] puts a dispatched chain in the
//! slot llama-server would choose for it, busy until
//! [`SlotView::release`]; with every slot busy it waits, as llama-server
//! defers it, and takes a slot when the next one frees. Sizes are text
//! bytes (the chains'); a slot holds its answer too, its tokens counted at
//! its prompt's bytes per token, so that `f_keep` compares what
//! llama-server compares.
//!
//! An approximation: which slot llama-server took is not reported, so the
//! order in which it saw requests and answers end, or the template's tokens
//! that every prompt shares, can make it choose otherwise. Bounded: one
//! chain per slot, and at most [`MAX_WAITING`] waiting. Pure; the caller
//! keeps it behind its own lock.

use std::collections::VecDeque;

use super::Chain;

/// The similarity above which llama-server takes a slot for its prompt
/// (`--slot-prompt-similarity`'s default).
pub const SIMILARITY: f64 = 0.1;
/// The share of its own prompt a slot must keep to be reused without the
/// host-memory prompt cache.
pub const KEEP: f64 = 0.5;
/// Text bytes an answer's token adds to its slot's prompt when its
/// prompt's token count is not known.
pub const ANSWER_BYTES_PER_TOKEN: u64 = 4;
/// Most requests kept waiting for a slot.
pub const MAX_WAITING: usize = 64;

/// One slot: the chain it last took.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// The chain's links.
    links: Vec<u64>,
    /// The slot's whole prompt: the chain's bytes and its answer's.
    total: u64,
    /// The request in it, until released.
    holder: Option<u64>,
    /// When it was last taken or released (a tick of the view): the least
    /// recently released idle slot is llama-server's last resort.
    used: u64,
}

impl Slot {
    /// The bytes it shares with the start of `chain`.
    fn common(&self, chain: &Chain) -> u64 {
        let n = self
            .links
            .iter()
            .zip(chain.links())
            .take_while(|(a, b)| a == b)
            .count();
        chain.bytes(n)
    }

    fn busy(&self) -> bool {
        self.holder.is_some()
    }
}

/// The slots of one member, as llama-server fills them.
#[derive(Clone, Debug, Default)]
pub struct SlotView {
    slots: Vec<Slot>,
    /// Requests dispatched while every slot was busy, in order: llama-server
    /// defers them and places the first when a slot frees.
    waiting: VecDeque<(u64, Chain)>,
    tick: u64,
}

/// The slot llama-server would choose for a chain.
struct Choice {
    slot: usize,
    /// The bytes it shares with the chain.
    common: u64,
    /// Chosen by similarity, keeping at least [`KEEP`] of its own prompt:
    /// reused as it is.
    kept: bool,
}

impl SlotView {
    /// A view of `slots` empty slots.
    pub fn new(slots: usize) -> Self {
        SlotView {
            slots: vec![Slot::default(); slots],
            waiting: VecDeque::new(),
            tick: 0,
        }
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it has no slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Of `chain`, the bytes llama-server will reuse, when `held` of them
    /// are in its caches by what was sent (the index's match): the chosen
    /// slot's common prefix when it is reused as it is, else `held`. Never
    /// more than `held` (a member that restarted holds nothing, and the
    /// index is emptied for it). `held` when the chain is empty or the view
    /// has no slot. With every slot busy, the slot it will get is not
    /// known: the rule runs over all of them.
    pub fn reused(&self, chain: &Chain, held: u64) -> u64 {
        match self.choose(chain, true) {
            Some(c) if c.kept => c.common.min(held),
            _ => held,
        }
    }

    /// `chain` was dispatched: it takes the slot llama-server would choose
    /// for it, busy until released, or, with every slot busy, waits for the
    /// first to free (at most [`MAX_WAITING`] wait; the oldest beyond are
    /// forgotten). Its ticket for [`SlotView::release`]; `None` when the
    /// chain is empty or the view has no slot.
    pub fn take(&mut self, chain: &Chain) -> Option<u64> {
        if chain.is_empty() || self.slots.is_empty() {
            return None;
        }
        self.tick += 1;
        let ticket = self.tick;
        if self.slots.iter().all(Slot::busy) {
            self.waiting.push_back((ticket, chain.clone()));
            while self.waiting.len() > MAX_WAITING {
                self.waiting.pop_front();
            }
        } else {
            self.place(ticket, chain);
        }
        Some(ticket)
    }

    /// The request of `ticket` ended, its prompt of `prompt_tokens` (0 when
    /// not known) followed by `answer_tokens` generated: its slot is free
    /// and holds its answer too, at the prompt's own bytes per token
    /// ([`ANSWER_BYTES_PER_TOKEN`] without a prompt count), and the first
    /// request waiting takes a slot. One still waiting leaves the queue.
    pub fn release(&mut self, ticket: u64, (prompt_tokens, answer_tokens): (u64, u64)) {
        self.tick += 1;
        let tick = self.tick;
        let Some(s) = self.slots.iter_mut().find(|s| s.holder == Some(ticket)) else {
            self.waiting.retain(|(t, _)| *t != ticket);
            return;
        };
        s.holder = None;
        s.used = tick;
        let answer = if prompt_tokens > 0 {
            let per_token = s.total as f64 / prompt_tokens as f64;
            (answer_tokens as f64 * per_token) as u64
        } else {
            answer_tokens.saturating_mul(ANSWER_BYTES_PER_TOKEN)
        };
        s.total = s.total.saturating_add(answer);
        if let Some((t, chain)) = self.waiting.pop_front() {
            self.place(t, &chain);
        }
    }

    /// Puts the request of `ticket` in the idle slot llama-server would
    /// choose for `chain`.
    fn place(&mut self, ticket: u64, chain: &Chain) {
        let Some(slot) = self.choose(chain, false).map(|c| c.slot) else {
            return;
        };
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Slot {
                links: chain.links().to_vec(),
                total: chain.total_bytes(),
                holder: Some(ticket),
                used: self.tick,
            };
        }
    }

    /// Empties every slot (the member restarted).
    pub fn clear(&mut self) {
        let n = self.slots.len();
        *self = SlotView::new(n);
    }

    /// llama-server's choice for `chain`: among idle slots, the one whose
    /// common prefix is the largest share of the chain, above
    /// [`SIMILARITY`]; else the least recently released idle slot. With
    /// every slot busy: `None`, or the same rule over all of them when
    /// `all_when_busy`.
    fn choose(&self, chain: &Chain, all_when_busy: bool) -> Option<Choice> {
        let total = chain.total_bytes();
        if chain.is_empty() || total == 0 {
            return None;
        }
        let any_idle = self.slots.iter().any(|s| !s.busy());
        if !any_idle && !all_when_busy {
            return None;
        }
        let open = |s: &Slot| !(any_idle && s.busy());
        let mut best: Option<(usize, u64)> = None;
        for (i, s) in self.slots.iter().enumerate() {
            if !open(s) || s.links.is_empty() {
                continue;
            }
            let common = s.common(chain);
            let sim = common as f64 / total as f64;
            if sim > SIMILARITY && best.is_none_or(|(_, b)| common > b) {
                best = Some((i, common));
            }
        }
        if let Some((slot, common)) = best {
            let own = self.slots.get(slot).map_or(0, |s| s.total).max(1);
            return Some(Choice {
                slot,
                common,
                kept: common as f64 / own as f64 >= KEEP,
            });
        }
        let slot = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| open(s))
            .min_by_key(|(_, s)| s.used)
            .map(|(i, _)| i)?;
        Some(Choice {
            slot,
            common: 0,
            kept: false,
        })
    }
}

#[cfg(test)]
mod tests;
