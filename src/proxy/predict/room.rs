//! Admitting a request past its bound: the two ways a request whose
//! objective a member's bound is over may still go to that member.
//! - [`make_room`]: every bound is surely over it, and pausing one answer
//!   of a less urgent preemptible class brings one member's within it.
//! - [`probe`]: a member's bare prediction is within it, its recent error
//!   alone puts it over, and it taught no ratio for a while (it was refused
//!   or left out since), so one request measures whether it recovered.
//!
//! Neither admits to a member whose floor is over the objective.
//!
//! Deliberately not here: the verdict (`crate::ttft::slo`) and the refusal
//! (the parent module).

use super::{Bound, Confidence, Fleet, Moves, Predictor};
use crate::ttft::slo::below_floor;

/// What a request needs room for: its objective, class index, model and
/// the queued requests ahead of it per member.
pub(super) struct Room<'a> {
    pub(super) slo_ms: u32,
    pub(super) class: usize,
    pub(super) model: Option<&'a str>,
    pub(super) queued: u32,
}

/// Every member's bound is surely over the objective: the member whose
/// bound with one of its requests paused is surely within it, fastest
/// first, on which an answer of a less urgent preemptible class was told
/// to pause ([`Moves::preempt_where`]); `None` when pausing one answer
/// would not do, or none can be paused.
pub(super) fn make_room(
    predictor: &Predictor,
    fleet: &Fleet,
    moves: &Moves,
    room: &Room<'_>,
    members: &[(usize, Option<Bound>)],
    sizes: impl Fn(usize) -> (u64, u64),
) -> Option<usize> {
    let slo = f64::from(room.slo_ms);
    let mut fits: Vec<(usize, f64)> = members
        .iter()
        .filter_map(|&(m, _)| {
            let b = predictor.bound(fleet, m, room.model, sizes(m), (room.queued, true))?;
            let within = b.ttft_ms <= slo && !below_floor(room.slo_ms, &b);
            (b.confidence == Confidence::High && within).then_some((m, b.ttft_ms))
        })
        .collect();
    fits.sort_by(|a, b| a.1.total_cmp(&b.1));
    fits.into_iter()
        .find(|&(m, _)| moves.preempt_where(room.class, |at| at == m).is_some())
        .map(|(m, _)| m)
}

/// Of `members`, each bounded over the objective (every member, when no
/// room could be made; else the ones left out): the member, fastest
/// first, whose bare prediction is within it (its recent error alone puts
/// it over) and on which a probe was claimed ([`Predictor::claim_probe`]:
/// it taught no ratio for ten seconds, or longer after slow probes, most
/// likely because it was refused or left out since); `None` if none.
pub(super) fn probe(
    (predictor, fleet): (&Predictor, &Fleet),
    model: Option<&str>,
    slo_ms: u32,
    members: &[(usize, Option<Bound>)],
) -> Option<usize> {
    let slo = f64::from(slo_ms);
    let mut within: Vec<(usize, f64)> = members
        .iter()
        .filter_map(|&(m, b)| {
            b.filter(|b| !below_floor(slo_ms, b))
                .map(|b| (m, b.estimate.ttft_ms))
        })
        .filter(|&(_, ms)| ms <= slo)
        .collect();
    within.sort_by(|a, b| a.1.total_cmp(&b.1));
    within
        .into_iter()
        .find(|&(m, _)| predictor.claim_probe(fleet, m, model))
        .map(|(m, _)| m)
}
