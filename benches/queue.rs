//! Benchmarks of the admission queue: one enqueue plus one dispatch (and
//! the release of the slot) with 10,000 requests already queued across three
//! classes and 50 tenants, and one hang-up (removal) at that depth.
//!
//! Run: `cargo bench --bench queue -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use llamatap_policy::queue::{Arrival, ClassRules, Scheduler};
use std::hint::black_box;
use std::time::Instant;

/// Requests queued before measuring.
const QUEUED: usize = 10_000;
/// Tenants the queued requests belong to.
const TENANTS: usize = 50;

fn full(t0: Instant) -> Scheduler<u32> {
    let rules = [
        ClassRules::default(),
        ClassRules::default(),
        ClassRules {
            reserve: 1,
            ..ClassRules::default()
        },
    ];
    let mut s = Scheduler::new(&rules, 4);
    for i in 0..4 {
        s.set_upstream(i, Some(2), true);
    }
    for i in 0..QUEUED {
        let a = Arrival {
            class: i % 3,
            tenant: i % TENANTS,
            weight: 1 + (i % 4) as u32,
            at: t0,
        };
        let _ = s.enqueue(a, i as u32);
    }
    // Every slot taken: the queue holds all of them.
    for i in 0..4 {
        s.set_upstream(i, Some(0), true);
    }
    s
}

fn bench(c: &mut Criterion) {
    let t0 = Instant::now();
    let mut s = full(t0);
    let mut n = 0usize;
    c.bench_function("enqueue+dispatch at 10k queued", |b| {
        b.iter(|| {
            n += 1;
            let a = Arrival {
                class: n % 3,
                tenant: n % TENANTS,
                weight: 1,
                at: t0,
            };
            let _ = s.enqueue(a, n as u32);
            // One slot frees on upstream 0 and the next request takes it.
            s.set_upstream(0, Some(1), true);
            let d = s.dispatch();
            s.bind(0);
            s.release(0);
            s.set_upstream(0, Some(0), true);
            black_box(d)
        })
    });
    let mut s = full(t0);
    c.bench_function("enqueue+remove (hang-up) at 10k queued", |b| {
        b.iter(|| {
            n += 1;
            let a = Arrival {
                class: n % 3,
                tenant: n % TENANTS,
                weight: 1,
                at: t0,
            };
            if let Ok(h) = s.enqueue(a, n as u32) {
                black_box(s.remove(h));
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
