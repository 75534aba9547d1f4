//! Each member's slots as llama-server fills them ([`SlotView`]), for the
//! part of a prompt the member will reuse: what the affinity book says it
//! was sent, less what llama-server's choice of slot loses.
//!
//! A member's view is made at its first prediction with its slot count
//! known (`/slots`), made again when that count changes, and emptied when
//! the member restarted ([`crate::fleet::Member::restarts`]: a new
//! process holds nothing). The lock is held for one lookup or one change
//! (a comparison of a chain's links with each slot's), never across an
//! await; nothing here runs per chunk.
//!
//! Deliberately not here: the affinity book ([`Fleet::cached_bytes`]),
//! and the rule itself (the policy crate's `router::slots`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::fleet::Fleet;
use llamatap_policy::router::{Chain, SlotView};

/// Each member's [`SlotView`], by member id, with the member's restart
/// count it was made or emptied at.
#[derive(Debug, Default)]
pub struct Slots(Mutex<HashMap<usize, (u32, SlotView)>>);

impl Slots {
    /// Of `chain`, the bytes `member` will reuse when the affinity book
    /// says it holds `held` ([`SlotView::reused`]); `held` while the
    /// member's slots are not known.
    pub fn reused(&self, fleet: &Fleet, member: usize, chain: &Chain, held: u64) -> u64 {
        let Ok(mut views) = self.0.lock() else {
            return held;
        };
        view(&mut views, fleet, member).map_or(held, |v| v.reused(chain, held))
    }

    /// Puts `chain`, dispatched to `member`, in the slot llama-server
    /// would choose (or in line for one); its ticket, to
    /// [`Slots::release`] when its answer ends.
    pub fn take(&self, fleet: &Fleet, member: usize, chain: &Chain) -> Option<u64> {
        let mut views = self.0.lock().ok()?;
        view(&mut views, fleet, member)?.take(chain)
    }

    /// The answer of `ticket` on `member` ended: its prompt's tokens (0
    /// when not known) and its answer's ([`SlotView::release`]).
    pub fn release(&self, member: usize, ticket: u64, tokens: (u64, u64)) {
        if let Some((_, v)) = self.0.lock().ok().as_mut().and_then(|m| m.get_mut(&member)) {
            v.release(ticket, tokens);
        }
    }
}

/// `member`'s view, made (or made again) for its slot count and emptied
/// after a restart; `None` while that count is not known.
fn view<'a>(
    views: &'a mut HashMap<usize, (u32, SlotView)>,
    fleet: &Fleet,
    member: usize,
) -> Option<&'a mut SlotView> {
    let m = fleet.member(member)?;
    let slots = usize::try_from(m.total_slots()?).ok().filter(|&n| n > 0)?;
    let restarts = m.restarts();
    let (seen, v) = views
        .entry(member)
        .or_insert_with(|| (restarts, SlotView::new(slots)));
    if v.len() != slots {
        *v = SlotView::new(slots);
    } else if *seen != restarts {
        v.clear();
    }
    *seen = restarts;
    Some(v)
}
