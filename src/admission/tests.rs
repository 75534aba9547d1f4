use std::time::Instant;

use super::wait::Waiting;
use super::*;
use crate::config::Overrides;
use llamatap_policy::queue::Arrival;

const BATCH: usize = Priority::Batch as usize;

/// Running answers as the queue sees them: how many are pausing, and the
/// pauses asked for (class, model).
#[derive(Default)]
struct Answers {
    pausing: std::sync::atomic::AtomicUsize,
    told: Mutex<Vec<(usize, Option<String>)>>,
}

impl Pauses for Answers {
    fn pausing(&self) -> usize {
        self.pausing.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn pause(&self, class: usize, model: Option<&str>) {
        self.told
            .lock()
            .unwrap()
            .push((class, model.map(str::to_string)));
    }

    fn pause_where(&self, class: usize, _takes: &dyn Fn(usize) -> bool) {
        self.told.lock().unwrap().push((class, None));
    }
}

/// The config of a queue over one upstream.
fn config() -> Config {
    let o = Overrides {
        upstreams: vec!["http://127.0.0.1:9000".to_string()],
        ..Overrides::default()
    };
    let mut config = Config::from_raw(crate::config::RawConfig::default(), &o).unwrap();
    config.queue.enabled = true;
    config
}

/// The queue of one upstream, with `batch` holding `max_depth` at most.
fn admission(max_depth: usize) -> Arc<Admission> {
    let mut config = config();
    config.queue.classes[BATCH].max_depth = Some(max_depth);
    let fleet = Arc::new(Fleet::new(&config));
    Admission::new(&config, fleet, None, Arc::new(Answers::default()), None)
}

/// Queues a batch request of `tenant`, as `wait` does.
fn queue(adm: &Admission, tenant: usize) -> Waiting<'_> {
    queue_at(adm, BATCH, tenant)
}

/// Queues a request of class `class` and `tenant`, as `wait` does.
fn queue_at(adm: &Admission, class: usize, tenant: usize) -> Waiting<'_> {
    let (tx, rx) = oneshot::channel();
    let arrival = Arrival {
        class,
        tenant,
        weight: 1,
        at: Instant::now(),
    };
    let handle = adm.with(|s| s.enqueue(arrival, tx)).unwrap().unwrap();
    Waiting {
        admission: adm,
        who: (class, tenant),
        handle: Some(handle),
        granted: rx,
        _want: adm.wanted.hold(class, None),
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

#[test]
fn a_waiting_request_pauses_an_answer_only_of_a_preemptible_class_below() {
    let mut config = config();
    let fleet = Arc::new(Fleet::new(&config));
    let answers = Arc::new(Answers::default());
    // Nothing preemptible: no pause, however many wait.
    let adm = Admission::new(&config, fleet.clone(), None, answers.clone(), None);
    adm.with(|s| s.set_upstream(0, Some(0), true));
    let _waits = queue_at(&adm, 0, 1);
    adm.preempt_for(0, Some("m"));
    assert!(answers.told.lock().unwrap().is_empty());
    // Batch is preemptible: an interactive request pauses one, a batch
    // request none (no class below it).
    config.queue.preemptible[BATCH] = true;
    let adm = Admission::new(&config, fleet, None, answers.clone(), None);
    adm.with(|s| s.set_upstream(0, Some(0), true));
    let _waits = queue_at(&adm, 0, 1);
    adm.preempt_for(BATCH, None);
    assert!(answers.told.lock().unwrap().is_empty());
    adm.preempt_for(Priority::Interactive as usize, Some("m"));
    // One upstream serves one model: the model is not asked for.
    assert_eq!(*answers.told.lock().unwrap(), vec![(0, None)]);
    // As many pausing as wait: none more.
    answers
        .pausing
        .store(1, std::sync::atomic::Ordering::SeqCst);
    adm.preempt_for(Priority::Interactive as usize, Some("m"));
    assert_eq!(answers.told.lock().unwrap().len(), 1);
}

#[test]
fn the_priority_header_lowers_a_class_and_a_misspelt_one_is_refused() {
    let mut config = config();
    config.queue.priority_header = Some("x-priority".to_string());
    let fleet = Arc::new(Fleet::new(&config));
    let adm = Admission::new(&config, fleet, None, Arc::new(Answers::default()), None);
    let mut req = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    assert_eq!(
        adm.class_of(&req, TenantId::Anonymous),
        Ok(Priority::Default)
    );
    req.insert_header("x-priority", " BATCH ").unwrap();
    assert_eq!(adm.class_of(&req, TenantId::Anonymous), Ok(Priority::Batch));
    req.insert_header("x-priority", "urgent").unwrap();
    assert_eq!(
        adm.class_of(&req, TenantId::Anonymous),
        Err("urgent".to_string())
    );
}

#[test]
fn queued_ahead_counts_the_waiters_of_the_same_or_a_more_urgent_class() {
    let adm = admission(4);
    assert_eq!(adm.queued_ahead(Priority::Batch, None), 0);
    let _one = queue(&adm, 1);
    let two = queue_at(&adm, Priority::Interactive as usize, 2);
    assert_eq!(adm.queued_ahead(Priority::Interactive, None), 1);
    assert_eq!(adm.queued_ahead(Priority::Default, Some("m")), 1);
    assert_eq!(adm.queued_ahead(Priority::Batch, None), 2);
    drop(two);
    assert_eq!(adm.queued_ahead(Priority::Batch, None), 1);
    // With the queue off, nothing waits in it.
    let mut off = config();
    off.queue.enabled = false;
    let fleet = Arc::new(Fleet::new(&off));
    let off = Admission::new(&off, fleet, None, Arc::new(Answers::default()), None);
    let _three = off.wanted.hold(0, None);
    assert_eq!(off.queued_ahead(Priority::Batch, None), 0);
}
