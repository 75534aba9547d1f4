use std::time::Instant;

use super::wait::Waiting;
use super::*;
use crate::config::Overrides;
use crate::queue::Arrival;

const BATCH: usize = Priority::Batch as usize;

/// The queue of one upstream, with `batch` holding `max_depth` at most.
fn admission(max_depth: usize) -> Arc<Admission> {
    let o = Overrides {
        upstreams: vec!["http://127.0.0.1:9000".to_string()],
        ..Overrides::default()
    };
    let mut config = Config::from_raw(crate::config::RawConfig::default(), &o).unwrap();
    config.queue.enabled = true;
    config.queue.classes[BATCH].max_depth = Some(max_depth);
    let fleet = Arc::new(Fleet::new(&config));
    Admission::new(
        &config,
        fleet,
        None,
        crate::proxy::moves::Moves::new(),
        None,
    )
}

/// Queues a batch request of `tenant`, as `wait` does.
fn queue(adm: &Admission, tenant: usize) -> Waiting<'_> {
    let (tx, rx) = oneshot::channel();
    let arrival = Arrival {
        class: BATCH,
        tenant,
        weight: 1,
        at: Instant::now(),
    };
    let handle = adm.with(|s| s.enqueue(arrival, tx)).unwrap().unwrap();
    Waiting {
        admission: adm,
        who: (BATCH, tenant),
        handle: Some(handle),
        granted: rx,
        _want: adm.wanted.hold(BATCH, None),
    }
}

#[test]
fn a_displaced_waiter_is_woken_with_its_refusal() {
    let adm = admission(4);
    // The only slot is granted to a request of tenant 9.
    let granted = adm.with(|s| {
        s.set_upstream(0, Some(1), true);
        s.admit_now(BATCH, 9)
    });
    assert_eq!(granted, Some(true));
    // Tenant 1 fills the class; tenant 2 arrives twice, each time in the
    // place of tenant 1's newest, whose waiter is told at once.
    let mut ones: Vec<Waiting<'_>> = (0..4).map(|_| queue(&adm, 1)).collect();
    let _two = queue(&adm, 2);
    let mut fourth = ones.pop().unwrap();
    assert_eq!(fourth.granted.try_recv(), Ok(Verdict::Displaced));
    let _two_again = queue(&adm, 2);
    let third = ones.pop().unwrap();
    // Its waiter ends without reading the verdict (its task was dropped):
    // that gives back no slot, the granted request still holds its own.
    drop(third);
    assert_eq!(adm.with(|s| (s.pending(), s.depth(BATCH))), Some((1, 4)));
    fourth.handle = None;
    drop(fourth);
    // The slot frees: tenant 1's oldest is granted.
    adm.with(|s| {
        s.abandon();
        s.tenant_done(BATCH, 9);
    });
    assert_eq!(ones[0].granted.try_recv(), Ok(Verdict::Granted));
    assert!(
        ones[1].granted.try_recv().is_err(),
        "the next one still waits"
    );
}
