use std::collections::BTreeMap;
use std::time::Instant;

use proptest::prelude::*;

use crate::queue::{Arrival, ClassRules, Displaced, Handle, Refusal, Scheduler};

/// One class of `max_depth`, one upstream with no free slot.
fn full_at(max_depth: usize) -> Scheduler<u32> {
    let rules = [ClassRules {
        max_depth: Some(max_depth),
        ..ClassRules::default()
    }];
    let mut s = Scheduler::new(&rules, 1);
    s.set_upstream(0, Some(0), true);
    s
}

fn arrive(tenant: usize, weight: u32) -> Arrival {
    Arrival {
        class: 0,
        tenant,
        weight,
        at: Instant::now(),
    }
}

/// Every waker a full fleet of `slots` lets through, in order.
fn drain(s: &mut Scheduler<u32>, slots: u32) -> Vec<u32> {
    s.set_upstream(0, Some(slots), true);
    let mut out = Vec::new();
    while let Some(d) = s.dispatch() {
        s.bind(0);
        out.push(d.waker);
    }
    out
}

#[test]
fn one_tenants_flood_leaves_room_for_another() {
    let mut s = full_at(4);
    // Tenant 1 floods from 8 connections: 4 queued, then the class is full
    // and, alone in it, the queue is the cause.
    let mut handles = Vec::new();
    for n in 0..8 {
        match s.enqueue(arrive(1, 1), n) {
            Ok(h) => handles.push(h),
            Err(e) => assert_eq!(e, (Refusal::Full, n)),
        }
    }
    assert_eq!(handles.len(), 4);
    assert_eq!(s.displaced(), None);
    // Tenant 2 (share 4 × 1/2 = 2) gets in, twice, in the place of tenant
    // 1's newest each time.
    s.enqueue(arrive(2, 1), 100).unwrap();
    assert_eq!(
        s.displaced(),
        Some(Displaced {
            handle: handles[3],
            waker: 3,
            class: 0,
            tenant: 1
        })
    );
    assert_eq!(s.displaced(), None, "one arrival displaces one request");
    assert_eq!(s.remove(handles[3]), None, "it left the queue");
    s.enqueue(arrive(2, 1), 101).unwrap();
    assert_eq!(s.displaced().map(|d| d.waker), Some(2));
    assert_eq!(s.depth(0), 4);
    // Both hold their share now: each is refused for its own.
    assert_eq!(
        s.enqueue(arrive(2, 1), 102),
        Err((Refusal::TenantShare, 102))
    );
    assert_eq!(s.enqueue(arrive(1, 1), 9), Err((Refusal::TenantShare, 9)));
    assert_eq!(s.displaced(), None);
    assert_eq!(drain(&mut s, 4), vec![0, 100, 1, 101]);
}

#[test]
fn weights_set_the_shares() {
    let mut s = full_at(6);
    for n in 0..6 {
        s.enqueue(arrive(1, 1), n).unwrap();
    }
    // Tenant 2 of weight 2: its share is 6 × 2/3 = 4, tenant 1's is 2.
    for n in 0..4 {
        s.enqueue(arrive(2, 2), 100 + n).unwrap();
        assert_eq!(s.displaced().map(|d| d.waker), Some(5 - n));
    }
    assert_eq!(
        s.enqueue(arrive(2, 2), 104),
        Err((Refusal::TenantShare, 104))
    );
    assert_eq!(s.enqueue(arrive(1, 1), 6), Err((Refusal::TenantShare, 6)));
    // A newcomer of weight 1: shares 6 × 1/4 = 1 (tenants 1 and 3) and
    // 6 × 2/4 = 3 (tenant 2). Tenants 1 and 2 are each one over: the tie
    // goes to the lowest key.
    s.enqueue(arrive(3, 1), 200).unwrap();
    assert_eq!(
        s.displaced().map(|d| (d.tenant, d.waker)),
        Some((1, 1)),
        "tenant 1's newest"
    );
    // More newcomers: shares of 6 × 2/5 = 2, 6 × 2/6 = 2, 6 × 2/7 = 1 for
    // tenant 2, 1 for every other.
    for (tenant, waker, theirs) in [(4, 300, 103), (5, 400, 102), (6, 500, 101)] {
        s.enqueue(arrive(tenant, 1), waker).unwrap();
        assert_eq!(
            s.displaced().map(|d| (d.tenant, d.waker)),
            Some((2, theirs))
        );
    }
    // Everyone holds its share of 1 now, nobody more: the class is full.
    assert_eq!(s.enqueue(arrive(7, 1), 600), Err((Refusal::Full, 600)));
    assert_eq!(drain(&mut s, 6), vec![0, 100, 200, 300, 400, 500]);
}

#[test]
fn a_full_class_refuses_with_the_cause() {
    let mut s = full_at(6);
    // Tenant 1 floods: five queued; tenant 2 (weight 2) has one.
    for n in 0..5 {
        s.enqueue(arrive(1, 1), n).unwrap();
    }
    let theirs = s.enqueue(arrive(2, 2), 10).unwrap();
    // Full. Tenant 1's share is 6 × 1/3 = 2: it holds 5, its own cause.
    assert_eq!(s.enqueue(arrive(1, 1), 6), Err((Refusal::TenantShare, 6)));
    // Tenant 2's share is 4: it holds 1, and gets in.
    s.enqueue(arrive(2, 2), 11).unwrap();
    assert_eq!(s.displaced().map(|d| d.waker), Some(4));
    // A newcomer (share 6 × 1/4 = 1, holding 0) gets in too.
    s.enqueue(arrive(3, 1), 20).unwrap();
    assert_eq!(s.displaced().map(|d| d.waker), Some(3));
    // Dispatches and removals keep the counts: tenant 1's oldest goes,
    // tenant 2's first leaves, the rest go; tenant 1 alone fills the class
    // again, and a full class with one tenant is nobody's share.
    assert_eq!(drain(&mut s, 1), vec![0]);
    assert_eq!(s.remove(theirs), Some(10));
    assert_eq!(s.depth(0), 4);
    s.release(0);
    assert_eq!(drain(&mut s, 4), vec![11, 20, 1, 2]);
    for n in 30..36 {
        s.enqueue(arrive(1, 1), n).unwrap();
    }
    assert_eq!(s.enqueue(arrive(1, 1), 36), Err((Refusal::Full, 36)));
}

#[test]
fn a_full_class_settles_instead_of_churning() {
    // Depth 5, two tenants of weight 1: shares of 2 each.
    let mut s = full_at(5);
    for n in 0..5 {
        s.enqueue(arrive(1, 1), n).unwrap();
    }
    s.enqueue(arrive(2, 1), 100).unwrap();
    s.enqueue(arrive(2, 1), 101).unwrap();
    assert_eq!(s.displaced().map(|d| d.waker), Some(4));
    assert_eq!(s.displaced().map(|d| d.waker), Some(3));
    // Tenant 1 holds 3 (one over), tenant 2 its 2: neither displaces the
    // other any more.
    for n in 0..10 {
        assert_eq!(
            s.enqueue(arrive(1, 1), 10 + n).unwrap_err().0,
            Refusal::TenantShare
        );
        assert_eq!(
            s.enqueue(arrive(2, 1), 110 + n).unwrap_err().0,
            Refusal::TenantShare
        );
    }
    assert_eq!(s.displaced(), None);
    // More tenants than room: depth 2, tenants 1 and 2 hold one each; a
    // third (share 1, holding none) finds nobody over a share.
    let mut s = full_at(2);
    s.enqueue(arrive(1, 1), 1).unwrap();
    s.enqueue(arrive(2, 1), 2).unwrap();
    assert_eq!(s.enqueue(arrive(3, 1), 3), Err((Refusal::Full, 3)));
    assert_eq!(s.displaced(), None);
}

#[test]
fn a_paused_answer_is_never_displaced() {
    // Depth 2: tenant 1's two answers paused for more urgent requests and
    // wait to continue; they fill the class.
    let mut s = full_at(2);
    let paused = [
        s.requeue(arrive(1, 1), 1).unwrap(),
        s.requeue(arrive(1, 1), 2).unwrap(),
    ];
    // Tenant 2 (share 1, holding none) finds tenant 1 over its share, but
    // holding only paused answers: the newcomer is refused, they stay.
    assert_eq!(s.enqueue(arrive(2, 1), 100), Err((Refusal::Full, 100)));
    assert_eq!(s.displaced(), None);
    assert_eq!(s.depth(0), 2);
    // Dispatches and removals keep the count of paused answers: one goes,
    // then tenant 1 queues a new request, which tenant 2 may displace.
    assert_eq!(drain(&mut s, 1), vec![2]);
    s.release(0);
    s.set_upstream(0, Some(0), true);
    s.enqueue(arrive(1, 1), 3).unwrap();
    s.enqueue(arrive(2, 1), 101).unwrap();
    assert_eq!(
        s.displaced().map(|d| d.waker),
        Some(3),
        "not the paused one"
    );
    assert_eq!(s.remove(paused[0]), Some(1));
}

#[test]
fn the_next_tenant_over_its_share_gives_way_for_paused_answers() {
    // Depth 4, all of weight 1. Tenant 3 queues two; tenant 1's three
    // paused answers come back.
    let mut s = full_at(4);
    s.enqueue(arrive(3, 1), 30).unwrap();
    s.enqueue(arrive(3, 1), 31).unwrap();
    for n in 0..3 {
        s.requeue(arrive(1, 1), n).unwrap();
    }
    // Tenant 2 arrives (shares of 4 × 1/3 = 1): tenant 1 is most over its
    // share, but with paused answers only; tenant 3's newest gives way.
    s.enqueue(arrive(2, 1), 20).unwrap();
    assert_eq!(s.displaced().map(|d| (d.tenant, d.waker)), Some((3, 31)));
    assert_eq!(s.displaced(), None);
    // Nobody over a share has anything but paused answers now.
    assert_eq!(s.enqueue(arrive(4, 1), 40), Err((Refusal::Full, 40)));
    let mut went = drain(&mut s, 5);
    went.sort_unstable();
    assert_eq!(went, vec![0, 1, 2, 20, 30], "the paused answers all go");
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue(usize),
    Dispatch,
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..5usize).prop_map(Op::Enqueue),
        2 => Just(Op::Dispatch),
        1 => (0..64usize).prop_map(Op::Remove),
    ]
}

fn weight(tenant: usize) -> u32 {
    1 + (tenant % 3) as u32
}

proptest! {
    /// Whatever arrives: below `max_depth` everything is queued; at it, a
    /// tenant under its share is refused only while nobody is over one, a
    /// refusal for its own share falls on a tenant holding it, a displaced
    /// request is the newest of the tenant most over its share, and an
    /// admitted request never takes its tenant over its share.
    #[test]
    fn refusals_fall_on_tenants_at_their_share(
        max_depth in 1..8usize,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let rules = [ClassRules { max_depth: Some(max_depth), ..ClassRules::default() }];
        // One upstream of unknown capacity: each dispatch lets one go.
        let mut s: Scheduler<u32> = Scheduler::new(&rules, 1);
        let mut queued: Vec<(Handle, u32, usize)> = Vec::new();
        let mut next = 0u32;
        for o in ops {
            match o {
                Op::Enqueue(tenant) => {
                    let full = queued.len() >= max_depth;
                    // Each tenant's queued count and share, the arrival's
                    // tenant counted in.
                    let mut live: BTreeMap<usize, usize> = BTreeMap::new();
                    live.insert(tenant, 0);
                    for q in &queued {
                        *live.entry(q.2).or_default() += 1;
                    }
                    let total: u64 = live.keys().map(|t| u64::from(weight(*t))).sum();
                    let share = |t: usize| {
                        ((max_depth as u64 * u64::from(weight(t)) / total) as usize).max(1)
                    };
                    let excess = |t: usize| live[&t] as i64 - share(t) as i64;
                    let over: Vec<usize> =
                        live.keys().copied().filter(|t| *t != tenant && excess(*t) > 0).collect();
                    let result = s.enqueue(arrive(tenant, weight(tenant)), next);
                    let displaced = s.displaced();
                    prop_assert_eq!(s.displaced(), None);
                    match result {
                        Ok(h) => {
                            queued.push((h, next, tenant));
                            if let Some(d) = displaced {
                                prop_assert!(full);
                                prop_assert!(live[&tenant] < share(tenant));
                                prop_assert!(excess(d.tenant) > 0);
                                prop_assert!(over.iter().all(|t| excess(*t) < excess(d.tenant)
                                    || (excess(*t) == excess(d.tenant) && *t >= d.tenant)));
                                let newest = queued.iter().rposition(|q| q.2 == d.tenant).unwrap();
                                prop_assert_eq!(queued[newest].0, d.handle);
                                prop_assert_eq!(queued.remove(newest).1, d.waker);
                            } else {
                                prop_assert!(!full);
                            }
                        }
                        Err((refusal, w)) => {
                            prop_assert_eq!(w, next);
                            prop_assert!(full);
                            prop_assert!(displaced.is_none());
                            let others = live.len() > 1;
                            if refusal == Refusal::TenantShare {
                                prop_assert!(others && live[&tenant] >= share(tenant));
                            } else {
                                prop_assert!(!others || over.is_empty());
                                prop_assert!(!others || live[&tenant] < share(tenant));
                            }
                        }
                    }
                    next += 1;
                }
                Op::Dispatch => {
                    if let Some(d) = s.dispatch() {
                        s.bind(0);
                        let pos = queued.iter().position(|q| q.0 == d.handle).unwrap();
                        prop_assert_eq!(queued.remove(pos).1, d.waker);
                    }
                }
                Op::Remove(i) => {
                    if !queued.is_empty() {
                        let (h, w, _) = queued.remove(i % queued.len());
                        prop_assert_eq!(s.remove(h), Some(w));
                    }
                }
            }
            prop_assert_eq!(s.depth(0), queued.len());
        }
    }
}
