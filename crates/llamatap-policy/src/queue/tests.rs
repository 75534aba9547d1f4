use std::time::{Duration, Instant};

use super::handles::COMPACT_MIN;
use super::*;

mod model;

fn rules(n: usize) -> Vec<ClassRules> {
    vec![ClassRules::default(); n]
}

fn arrive(class: usize, tenant: usize, weight: u32, at: Instant) -> Arrival {
    Arrival {
        class,
        tenant,
        weight,
        at,
    }
}

/// One upstream of `slots` slots, `classes` classes.
fn one(slots: u32, classes: usize) -> Scheduler<u32> {
    let mut s = Scheduler::new(&rules(classes), 1);
    s.set_upstream(0, Some(slots), true);
    s
}

/// Dispatches everything a full fleet lets through, binding each to 0.
fn drain(s: &mut Scheduler<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(crate::queue::Dispatched { waker: w, .. }) = s.dispatch() {
        s.bind(0);
        out.push(w);
    }
    out
}

#[test]
fn a_header_only_lowers_the_class_unless_trusted() {
    use crate::tenant::Priority::{Batch, Default, Interactive};
    assert_eq!(class(None, None, false), Default);
    assert_eq!(class(Some(Interactive), None, false), Interactive);
    assert_eq!(class(Some(Interactive), Some(Batch), false), Batch);
    assert_eq!(class(Some(Batch), Some(Interactive), false), Batch);
    assert_eq!(class(None, Some(Interactive), false), Default);
    assert_eq!(class(None, Some(Interactive), true), Interactive);
    assert_eq!(class(Some(Batch), Some(Interactive), true), Interactive);
    assert_eq!(class(Some(Interactive), Some(Default), true), Default);
}

#[test]
fn first_come_first_served_in_one_class() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    for i in 0..5 {
        s.enqueue(arrive(0, 0, 1, t0), i).unwrap();
    }
    assert_eq!(s.dispatch(), None, "no slot: nothing goes");
    s.set_upstream(0, Some(5), true);
    assert_eq!(drain(&mut s), vec![0, 1, 2, 3, 4]);
    assert_eq!(s.total_depth(), 0);
}

#[test]
fn a_more_urgent_class_goes_first() {
    let t0 = Instant::now();
    let mut s = one(0, 3);
    s.enqueue(arrive(2, 0, 1, t0), 20).unwrap();
    s.enqueue(arrive(1, 0, 1, t0), 10).unwrap();
    s.enqueue(arrive(0, 0, 1, t0), 0).unwrap();
    s.enqueue(arrive(2, 0, 1, t0), 21).unwrap();
    s.set_upstream(0, Some(4), true);
    assert_eq!(drain(&mut s), vec![0, 10, 20, 21]);
}

#[test]
fn tenants_take_turns_by_weight() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    // Tenant 1 floods first, tenant 2 arrives later.
    for i in 0..6 {
        s.enqueue(arrive(0, 1, 1, t0), 100 + i).unwrap();
    }
    for i in 0..3 {
        s.enqueue(arrive(0, 2, 2, t0), 200 + i).unwrap();
    }
    s.set_upstream(0, Some(9), true);
    assert_eq!(
        drain(&mut s),
        vec![100, 200, 201, 101, 202, 102, 103, 104, 105]
    );
}

#[test]
fn the_reserve_keeps_the_last_slots_for_more_urgent_classes() {
    let t0 = Instant::now();
    let mut r = rules(2);
    r[1].reserve = 1;
    let mut s = Scheduler::new(&r, 1);
    s.set_upstream(0, Some(3), true);
    for i in 0..5 {
        s.enqueue(arrive(1, 0, 1, t0), i).unwrap();
    }
    assert_eq!(drain(&mut s), vec![0, 1], "batch leaves the last slot");
    assert_eq!(s.free(), 1);
    s.enqueue(arrive(0, 0, 1, t0), 99).unwrap();
    assert_eq!(drain(&mut s), vec![99], "an interactive turn takes it");
    s.release(0);
    s.release(0);
    assert_eq!(drain(&mut s), vec![2], "batch again, one slot kept");
}

#[test]
fn a_removed_request_never_goes_and_its_handle_goes_stale() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    let a = s.enqueue(arrive(0, 0, 1, t0), 1).unwrap();
    let _b = s.enqueue(arrive(0, 0, 1, t0), 2).unwrap();
    assert_eq!(s.remove(a), Some(1));
    assert_eq!(s.remove(a), None);
    assert_eq!(s.depth(0), 1);
    let c = s.enqueue(arrive(0, 0, 1, t0), 3).unwrap();
    assert_ne!(a, c, "a reused slot gets a new generation");
    assert_eq!(s.remove(a), None);
    s.set_upstream(0, Some(5), true);
    assert_eq!(drain(&mut s), vec![2, 3]);
}

#[test]
fn max_depth_refuses() {
    let t0 = Instant::now();
    let mut r = rules(1);
    r[0].max_depth = Some(2);
    let mut s: Scheduler<u32> = Scheduler::new(&r, 1);
    s.set_upstream(0, Some(0), true);
    s.enqueue(arrive(0, 0, 1, t0), 1).unwrap();
    s.enqueue(arrive(0, 0, 1, t0), 2).unwrap();
    assert_eq!(s.enqueue(arrive(0, 0, 1, t0), 3), Err((Refusal::Full, 3)));
}

#[test]
fn capacity_is_counted_per_upstream_and_a_down_upstream_has_none() {
    let t0 = Instant::now();
    let mut s: Scheduler<u32> = Scheduler::new(&rules(1), 2);
    s.set_upstream(0, Some(1), true);
    s.set_upstream(1, Some(2), true);
    assert_eq!(s.free(), 3);
    assert!(s.admit_now(0, 0));
    assert_eq!(s.free(), 2, "pending counts");
    s.bind(1);
    assert_eq!(s.open_upstreams().collect::<Vec<_>>(), vec![0, 1]);
    assert!(s.admit_now(0, 0));
    s.bind(1);
    assert_eq!(s.open_upstreams().collect::<Vec<_>>(), vec![0]);
    s.set_upstream(0, Some(1), false);
    assert_eq!(s.free(), 0);
    assert!(!s.admit_now(0, 0));
    s.enqueue(arrive(0, 0, 1, t0), 7).unwrap();
    assert!(!s.admit_now(0, 0), "never ahead of a queued request");
    s.release(1);
    assert_eq!(s.dispatch().map(|d| d.waker), Some(7));
    s.unbind(1);
    assert_eq!(s.pending(), 2);
    s.abandon();
    s.abandon();
    assert_eq!(s.pending(), 0);
}

#[test]
fn unknown_capacity_never_limits() {
    let t0 = Instant::now();
    let mut s: Scheduler<u32> = Scheduler::new(&rules(1), 1);
    for i in 0..100 {
        s.enqueue(arrive(0, 0, 1, t0), i).unwrap();
    }
    assert_eq!(drain(&mut s).len(), 100);
}

#[test]
fn oldest_wait_skips_requests_that_left() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    let a = s.enqueue(arrive(0, 0, 1, t0), 1).unwrap();
    s.enqueue(arrive(0, 0, 1, t0 + Duration::from_millis(300)), 2)
        .unwrap();
    let now = t0 + Duration::from_secs(1);
    assert_eq!(s.oldest_wait(0, now), Some(Duration::from_secs(1)));
    s.remove(a);
    assert_eq!(s.oldest_wait(0, now), Some(Duration::from_millis(700)));
    s.set_upstream(0, Some(1), true);
    drain(&mut s);
    assert_eq!(s.oldest_wait(0, now), None);
}

#[test]
fn many_hangups_leave_nothing_behind() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    let hs: Vec<Handle> = (0..10_000)
        .map(|i| s.enqueue(arrive(0, i % 7, 1, t0), i as u32).unwrap())
        .collect();
    for h in hs {
        assert!(s.remove(h).is_some());
    }
    assert_eq!(s.total_depth(), 0);
    let c = &s.classes[0];
    assert!(c.arrivals.len() <= COMPACT_MIN + 2, "{}", c.arrivals.len());
    assert!(c.tenants.values().map(|t| t.queue.len()).sum::<usize>() <= COMPACT_MIN + 2);
}

#[test]
fn a_slot_awaited_on_an_upstream_is_left_to_its_waiter() {
    let mut s: Scheduler<u32> = Scheduler::new(&rules(1), 2);
    s.set_upstream(0, Some(1), true);
    s.set_upstream(1, Some(1), true);
    assert!(s.admit_now(0, 0));
    s.bind(0);
    // A granted request waits for upstream 0 (its prefix is there).
    assert!(s.admit_now(0, 0));
    s.await_slot(0);
    assert_eq!(s.free(), 0, "its grant holds the fleet's last slot");
    s.release(0);
    // Upstream 0's slot is its waiter's: another request goes to 1.
    assert_eq!(s.free(), 1);
    assert_eq!(s.open_upstreams().collect::<Vec<_>>(), vec![1]);
    assert!(s.admit_now(0, 0));
    s.bind(1);
    // The waiter takes its slot.
    s.unawait(0);
    assert_eq!(s.open_upstreams().collect::<Vec<_>>(), vec![0]);
    s.bind(0);
    assert_eq!(s.free(), 0);
    assert_eq!(s.pending(), 0);
}

#[test]
fn a_tenant_reserve_keeps_the_last_slots_for_a_tenant_with_none() {
    let t0 = Instant::now();
    let mut r = rules(1);
    r[0].tenant_reserve = 1;
    let mut s: Scheduler<u32> = Scheduler::new(&r, 1);
    s.set_upstream(0, Some(0), true);
    for n in 0..5 {
        s.enqueue(arrive(0, 1, 1, t0), n).unwrap();
    }
    s.set_upstream(0, Some(3), true);
    // Tenant 1 takes two of three slots; the last is kept.
    let mut granted = Vec::new();
    while let Some(d) = s.dispatch() {
        assert_eq!((d.class, d.tenant), (0, 1));
        s.bind(0);
        granted.push(d.waker);
    }
    assert_eq!(granted, vec![0, 1]);
    assert_eq!(s.free(), 1);
    // Tenant 2, with nothing running, gets it at once despite the backlog.
    s.enqueue(arrive(0, 2, 1, t0), 10).unwrap();
    let d = s.dispatch().unwrap();
    assert_eq!((d.waker, d.tenant), (10, 2));
    s.bind(0);
    // One of tenant 1's ends: it still runs one, so the freed slot waits
    // for a tenant with none.
    s.release(0);
    s.tenant_done(0, 1);
    assert_eq!(s.dispatch(), None);
    assert!(!s.admit_now(0, 3), "a queued backlog goes first");
    // Both of tenant 1's end: nothing of it runs, it takes the slot.
    s.release(0);
    s.tenant_done(0, 1);
    assert_eq!(s.dispatch().map(|d| d.waker), Some(2));
}

#[test]
fn a_tenant_reserve_applies_to_admission_without_queueing() {
    let mut r = rules(1);
    r[0].tenant_reserve = 1;
    let mut s: Scheduler<u32> = Scheduler::new(&r, 1);
    s.set_upstream(0, Some(2), true);
    assert!(s.admit_now(0, 1));
    assert!(
        !s.admit_now(0, 1),
        "the last slot is kept from a running tenant"
    );
    assert!(s.admit_now(0, 2), "a tenant with none takes it");
    s.tenant_done(0, 1);
    s.tenant_done(0, 2);
    s.abandon();
    s.abandon();
    assert!(s.admit_now(0, 1));
}

#[test]
fn a_class_held_back_by_its_tenant_reserve_keeps_the_slot_from_less_urgent_ones() {
    let t0 = Instant::now();
    let mut r = rules(3);
    r[0].tenant_reserve = 1;
    let mut s: Scheduler<u32> = Scheduler::new(&r, 1);
    s.set_upstream(0, Some(2), true);
    // Interactive tenant 1 runs a request and has another queued, which the
    // tenant reserve holds back; a batch request waits too.
    assert!(s.admit_now(0, 1));
    s.bind(0);
    s.enqueue(arrive(0, 1, 1, t0), 1).unwrap();
    s.enqueue(arrive(2, 2, 1, t0), 20).unwrap();
    assert_eq!(s.free(), 1);
    assert_eq!(
        s.dispatch(),
        None,
        "batch takes no slot while interactive waits"
    );
    // The slot is kept for an interactive tenant with none running.
    s.enqueue(arrive(0, 3, 1, t0), 3).unwrap();
    assert_eq!(s.dispatch().map(|d| (d.waker, d.tenant)), Some((3, 3)));
    s.bind(0);
    // Tenant 1's running request ends: its queued one goes, still first.
    s.release(0);
    s.tenant_done(0, 1);
    assert_eq!(s.dispatch().map(|d| d.waker), Some(1));
    s.bind(0);
    // With no interactive request queued, batch takes the next slot.
    s.release(0);
    s.tenant_done(0, 3);
    assert_eq!(s.dispatch().map(|d| d.waker), Some(20));
}

#[test]
fn dispatches_leave_the_arrivals_bounded_by_the_depth() {
    let t0 = Instant::now();
    // Nothing reads the oldest wait (as with the metrics off), and nobody
    // hangs up: only dispatches.
    let mut s = one(1, 1);
    let step = |s: &mut Scheduler<u32>, tenant: usize, n: u32| {
        s.enqueue(arrive(0, tenant, 1 + (tenant % 2) as u32, t0), n)
            .unwrap();
        let d = s.dispatch().unwrap();
        s.bind(0);
        s.release(0);
        s.tenant_done(0, d.tenant);
    };
    // One tenant: dispatch order is arrival order, the arrivals are exactly
    // what is queued.
    for n in 0..10 {
        s.enqueue(arrive(0, 0, 1, t0), n).unwrap();
    }
    for n in 10..10_010 {
        step(&mut s, 0, n);
    }
    assert_eq!(s.depth(0), 10);
    assert_eq!(s.classes[0].arrivals.len(), 10);
    // Three tenants in turns: dispatch order is not arrival order; stale
    // handles are compacted once they outnumber the live ones.
    let mut most = 0;
    for n in 20_000..30_000 {
        step(&mut s, n as usize % 3, n);
        most = most.max(s.classes[0].arrivals.len());
    }
    assert_eq!(s.depth(0), 10);
    assert!(most <= 10 + COMPACT_MIN + 1, "{most}");
}

#[test]
fn a_paused_request_goes_first_of_its_class_and_is_never_refused() {
    let t0 = Instant::now();
    let mut s = Scheduler::new(
        &[
            ClassRules::default(),
            ClassRules {
                max_depth: Some(2),
                ..ClassRules::default()
            },
        ],
        1,
    );
    s.set_upstream(0, Some(0), true);
    // Tenants 1 and 2 wait in class 1, which is full.
    s.enqueue(arrive(1, 1, 1, t0), 10).unwrap();
    s.enqueue(arrive(1, 2, 1, t0), 20).unwrap();
    assert!(s.enqueue(arrive(1, 2, 1, t0), 21).is_err(), "full");
    // Tenant 2's paused answer comes back, and an urgent request waits.
    s.requeue(arrive(1, 2, 1, t0), 22).unwrap();
    s.enqueue(arrive(0, 3, 1, t0), 30).unwrap();
    assert_eq!(s.depth(1), 3, "a requeued request is never refused");
    s.set_upstream(0, Some(4), true);
    assert_eq!(
        drain(&mut s),
        vec![30, 22, 10, 20],
        "the urgent class first, then the paused answer, then the turns"
    );
}

#[test]
fn a_requeued_request_of_a_new_tenant_takes_the_next_turn() {
    let t0 = Instant::now();
    let mut s = one(0, 1);
    s.enqueue(arrive(0, 1, 1, t0), 10).unwrap();
    s.requeue(arrive(0, 2, 3, t0), 20).unwrap();
    s.set_upstream(0, Some(2), true);
    assert_eq!(drain(&mut s), vec![20, 10]);
}

#[test]
fn requests_waiting_elsewhere_keep_slots_from_less_urgent_classes() {
    let t0 = Instant::now();
    // Two slots; one interactive request waits in another replica's queue.
    let mut s = one(2, 3);
    s.set_elsewhere(&[1, 0, 0]);
    for i in 0..3 {
        assert!(s.enqueue(arrive(2, 7, 1, t0), i).is_ok());
    }
    // Batch takes one slot: the other is kept for the interactive request.
    assert_eq!(drain(&mut s), vec![0]);
    // Interactive here is not held back by interactive elsewhere.
    assert!(s.enqueue(arrive(0, 1, 1, t0), 9).is_ok());
    assert_eq!(drain(&mut s), vec![9]);
    // Both slots end; nothing waits elsewhere now: batch takes both.
    s.set_elsewhere(&[0, 0, 0]);
    s.release(0);
    s.release(0);
    assert_eq!(drain(&mut s), vec![1, 2]);
}

#[test]
fn waiting_elsewhere_counts_against_admit_now_and_adds_to_the_reserve() {
    let mut r = rules(3);
    if let Some(batch) = r.get_mut(2) {
        batch.reserve = 1;
    }
    let mut s = Scheduler::<u32>::new(&r, 1);
    s.set_upstream(0, Some(3), true);
    s.set_elsewhere(&[1, 1, 0]);
    // Three free, one interactive and one default wait elsewhere, batch
    // keeps one more: none for batch.
    assert!(!s.admit_now(2, 1));
    // Default sees one interactive ahead: two left for it.
    assert!(s.admit_now(1, 1));
    assert!(s.admit_now(1, 1));
    assert!(!s.admit_now(1, 1));
    // Interactive takes what is left regardless.
    s.set_elsewhere(&[5, 5, 5]);
    assert!(s.admit_now(0, 1));
}
