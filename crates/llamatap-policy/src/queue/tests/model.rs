//! The scheduler against a model of what it holds, under any sequence of
//! arrivals, hang-ups, dispatches, ends and capacity changes.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use proptest::prelude::*;

use super::{arrive, rules};
use crate::queue::{Handle, Scheduler};

#[derive(Clone, Debug)]
enum Op {
    Enqueue { class: usize, tenant: usize },
    Remove(usize),
    Dispatch,
    Release(usize),
    SetCapacity(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 0..4usize).prop_map(|(class, tenant)| Op::Enqueue { class, tenant }),
        2 => (0..64usize).prop_map(Op::Remove),
        3 => Just(Op::Dispatch),
        2 => (0..64usize).prop_map(Op::Release),
        1 => (0..6u32).prop_map(Op::SetCapacity),
    ]
}

proptest! {
    /// Whatever happens: nothing is lost or given twice, capacity is never
    /// exceeded, a dispatched request was of the most urgent class waiting
    /// (up to the reserve; a class held back by its tenant reserve keeps
    /// the slot), within a tenant the order is arrival order, and nothing
    /// goes only when the class whose turn it is has every tenant held back.
    #[test]
    fn nothing_is_lost_and_capacity_holds(ops in proptest::collection::vec(op(), 1..300)) {
        let t0 = Instant::now();
        let mut r = rules(3);
        r[0].tenant_reserve = 1;
        r[1].max_depth = Some(4);
        r[2].reserve = 1;
        let mut s: Scheduler<u32> = Scheduler::new(&r, 1);
        s.set_upstream(0, Some(2), true);
        let mut next = 0u32;
        let mut queued: Vec<(Handle, u32, usize, usize)> = Vec::new();
        let mut seen = HashSet::new();
        // Granted requests bound to the upstream, and their count per
        // (class, tenant).
        let mut bound: Vec<(usize, usize)> = Vec::new();
        let mut running: HashMap<(usize, usize), u32> = HashMap::new();
        for o in ops {
            match o {
                Op::Enqueue { class, tenant } => {
                    let depth = queued.iter().filter(|q| q.2 == class).count();
                    match s.enqueue(arrive(class, tenant, 1 + tenant as u32, t0), next) {
                        Ok(h) => queued.push((h, next, class, tenant)),
                        Err((_, w)) => {
                            prop_assert_eq!(w, next);
                            prop_assert!(r[class].max_depth.is_some_and(|m| depth >= m));
                            prop_assert!(seen.insert(w));
                        }
                    }
                    while let Some(d) = s.displaced() {
                        prop_assert_eq!(d.class, class);
                        let pos = queued.iter().position(|q| q.0 == d.handle).unwrap();
                        let (_, w, _, t) = queued.remove(pos);
                        prop_assert_eq!((w, t), (d.waker, d.tenant));
                        prop_assert!(seen.insert(w));
                    }
                    next += 1;
                }
                Op::Remove(i) => {
                    if !queued.is_empty() {
                        let (h, w, _, _) = queued.remove(i % queued.len());
                        prop_assert_eq!(s.remove(h), Some(w));
                        prop_assert!(seen.insert(w));
                    }
                }
                Op::Dispatch => {
                    let free = s.free();
                    let held = |class: usize, tenant: usize| {
                        r[class].tenant_reserve > 0
                            && free <= r[class].reserve + r[class].tenant_reserve
                            && running.get(&(class, tenant)).is_some_and(|n| *n > 0)
                    };
                    match s.dispatch() {
                        Some(crate::queue::Dispatched { handle: h, waker: w, class, tenant }) => {
                            let pos = queued.iter().position(|q| q.0 == h).unwrap();
                            let (_, qw, qclass, qtenant) = queued.remove(pos);
                            prop_assert_eq!((qw, qclass, qtenant), (w, class, tenant));
                            prop_assert!(seen.insert(w));
                            // No more urgent class had a request waiting.
                            prop_assert!(queued.iter().all(|q| q.2 >= class));
                            prop_assert!(free > r[class].reserve);
                            prop_assert!(!held(class, tenant));
                            // Arrival order within the tenant.
                            prop_assert!(queued.iter().filter(|q| q.2 == class && q.3 == tenant).all(|q| q.1 > w));
                            s.bind(0);
                            bound.push((class, tenant));
                            *running.entry((class, tenant)).or_default() += 1;
                        }
                        None => {
                            let turn = (0..3).find(|c| {
                                free > r[*c].reserve && queued.iter().any(|q| q.2 == *c)
                            });
                            if let Some(c) = turn {
                                prop_assert!(queued.iter().filter(|q| q.2 == c).all(|q| held(c, q.3)));
                            }
                        }
                    }
                }
                Op::Release(i) => {
                    if !bound.is_empty() {
                        let (class, tenant) = bound.remove(i % bound.len());
                        s.release(0);
                        s.tenant_done(class, tenant);
                        if let Some(n) = running.get_mut(&(class, tenant)) {
                            *n -= 1;
                        }
                    }
                }
                Op::SetCapacity(c) => s.set_upstream(0, Some(c), true),
            }
            prop_assert_eq!(s.total_depth(), queued.len());
            prop_assert_eq!(s.upstreams()[0].in_flight as usize, bound.len());
        }
    }
}
