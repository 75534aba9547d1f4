mod membership;
use super::*;
use crate::config::Overrides;

fn fleet(n: usize) -> Fleet {
    let o = Overrides {
        upstreams: (0..n)
            .map(|i| format!("http://127.0.0.1:{}", 9000 + i))
            .collect(),
        ..Overrides::default()
    };
    let config = Config::from_raw(crate::config::RawConfig::default(), &o).unwrap();
    let f = Fleet::new(&config);
    for m in f.members() {
        m.set_address(m.upstream.address.parse().unwrap());
        m.set_health(Ok(()));
    }
    f
}

fn down(f: &Fleet, i: usize, why: &str) {
    f.member(i).unwrap().set_health(Err(why.to_string()));
}

fn models(f: &Fleet, lists: &[&[&str]]) {
    for (i, l) in lists.iter().enumerate() {
        f.set_models(
            &f.member(i).unwrap(),
            l.iter().map(|s| s.to_string()).collect(),
        );
    }
}

#[test]
fn a_model_goes_only_to_the_upstreams_serving_it() {
    let f = fleet(3);
    models(&f, &[&["alpha"], &["alpha"], &["beta"]]);
    let chain = Chain::default();
    for _ in 0..20 {
        let d = f.choose(Some("beta"), &chain, None, &[]).unwrap();
        assert_eq!(d.upstream, 2);
        f.release(d.upstream);
        let d = f.choose(Some("alpha"), &chain, None, &[]).unwrap();
        assert!(d.upstream < 2);
        f.release(d.upstream);
    }
    assert_eq!(
        f.check_model(Some("gamma")),
        Err(NoRoute::UnknownModel {
            available: vec!["alpha".into(), "beta".into()]
        })
    );
    assert_eq!(f.check_model(None), Ok(()));
    assert_eq!(f.models(), ["alpha", "beta"]);
}

#[test]
fn with_one_model_any_name_is_accepted() {
    let f = fleet(2);
    models(&f, &[&["tiny.gguf"], &["tiny.gguf"]]);
    assert_eq!(f.check_model(Some("gpt-4o")), Ok(()));
    assert!(f
        .choose(Some("gpt-4o"), &Chain::default(), None, &[])
        .is_ok());
}

#[test]
fn load_is_counted_and_released() {
    let f = fleet(2);
    let d = f.choose(None, &Chain::default(), None, &[]).unwrap();
    assert_eq!(f.member(d.upstream).unwrap().in_flight(), 1);
    f.release(d.upstream);
    f.release(d.upstream);
    assert_eq!(
        f.member(d.upstream).unwrap().in_flight(),
        0,
        "never below 0"
    );
}

#[test]
fn a_members_queue_counts_only_what_llamataps_own_excess_does_not_explain() {
    let f = fleet(1);
    let m = f.member(0).unwrap();
    m.set_total_slots(Some(2));
    for _ in 0..3 {
        f.choose(None, &Chain::default(), None, &[]).unwrap();
    }
    // Three of llamatap's requests on two slots: the one llama-server
    // queues is llamatap's own, counted already.
    m.set_deferred(Some(1));
    assert_eq!(m.deferred(), Some(0));
    // Two more wait there from other clients.
    m.set_deferred(Some(3));
    assert_eq!(m.deferred(), Some(2));
    // Read while a slot is free: all of it is someone else's.
    f.release(0);
    f.release(0);
    m.set_deferred(Some(1));
    assert_eq!(m.deferred(), Some(1));
    // Slots unknown: nothing can be explained, the gauge is taken whole.
    m.set_total_slots(None);
    m.set_deferred(Some(4));
    assert_eq!(m.deferred(), Some(4));
    m.set_deferred(None);
    assert_eq!(m.deferred(), None);
}

#[test]
fn an_ejected_upstream_is_skipped_until_a_check_passes() {
    let f = fleet(2);
    f.eject(0);
    for _ in 0..10 {
        let d = f.choose(None, &Chain::default(), None, &[]).unwrap();
        assert_eq!(d.upstream, 1);
        f.release(1);
    }
    assert_eq!(
        f.member(0).unwrap().set_health(Ok(())),
        None,
        "it stayed healthy"
    );
    let picked: std::collections::HashSet<usize> = (0..20)
        .map(|_| {
            let d = f.choose(None, &Chain::default(), None, &[]).unwrap();
            f.release(d.upstream);
            d.upstream
        })
        .collect();
    assert!(picked.contains(&0), "a passing check ends the ejection");
}

#[test]
fn when_every_upstream_is_down_they_are_tried_anyway() {
    let f = fleet(2);
    for i in 0..2 {
        down(&f, i, "connection refused");
    }
    assert!(f.choose(None, &Chain::default(), None, &[]).is_ok());
    let why = f.readiness().unwrap_err();
    assert!(why.contains("127.0.0.1:9000: connection refused"), "{why}");
}

#[test]
fn failover_excludes_what_was_tried() {
    let f = fleet(3);
    models(&f, &[&["a"], &["a"], &["b"]]);
    assert!(f.can_fail_over(Some("a"), 0, &[]));
    assert!(
        !f.can_fail_over(Some("a"), 0, &[1]),
        "b's upstream cannot serve a"
    );
    let d = f.choose(Some("a"), &Chain::default(), None, &[0]).unwrap();
    assert_eq!((d.upstream, d.reason.as_str()), (1, "failover"));
    assert!(f
        .choose(Some("a"), &Chain::default(), None, &[0, 1])
        .is_err());
}

#[test]
fn ready_needs_a_healthy_upstream_for_every_model() {
    let f = fleet(2);
    models(&f, &[&["a"], &["b"]]);
    assert_eq!(f.readiness(), Ok(()));
    down(&f, 1, "loading model");
    assert_eq!(
        f.readiness(),
        Err("no healthy upstream for model b".to_string())
    );
}

#[test]
fn ready_needs_a_model_list() {
    let f = fleet(1);
    let why = f.readiness().unwrap_err();
    assert!(why.contains("model list not read yet"), "{why}");
    models(&f, &[&["tiny"]]);
    assert_eq!(f.readiness(), Ok(()));
}

#[test]
fn each_change_of_health_is_reported_once() {
    let f = fleet(1);
    let m = f.member(0).unwrap();
    let fresh = Member::new(m.upstream.clone(), 0, 0, false);
    assert_eq!(
        fresh.set_health(Err("connection refused".into())),
        Some(Transition::Down("connection refused".into())),
        "down from the start"
    );
    assert_eq!(fresh.set_health(Err("no answer in time".into())), None);
    assert_eq!(fresh.set_health(Ok(())), Some(Transition::Up));
    assert_eq!(fresh.set_health(Ok(())), None);
}

#[test]
fn a_model_whose_upstreams_are_down_is_unavailable_and_unlisted() {
    let f = fleet(3);
    models(&f, &[&["a"], &["a"], &["b"]]);
    down(&f, 2, "connection refused");
    assert_eq!(f.servable_models(), ["a"]);
    assert_eq!(f.models(), ["a", "b"], "still known");
    match f.unavailable(Some("b")) {
        Err(NoRoute::Unavailable { why }) => {
            assert_eq!(why, "127.0.0.1:9002: connection refused")
        }
        other => panic!("{other:?}"),
    }
    down(&f, 0, "connection refused");
    assert_eq!(f.unavailable(Some("a")), Ok(()), "one upstream is left");
    assert_eq!(f.unavailable(Some("zeta")), Ok(()), "unknown: 404 instead");
}

#[test]
fn a_member_not_checked_yet_is_not_unavailable() {
    let o = Overrides {
        upstreams: vec![
            "http://127.0.0.1:9000".into(),
            "http://127.0.0.1:9001".into(),
        ],
        ..Overrides::default()
    };
    let config = Config::from_raw(crate::config::RawConfig::default(), &o).unwrap();
    let f = Fleet::new(&config);
    assert_eq!(f.unavailable(None), Ok(()));
    f.member(0).unwrap().set_health(Err("refused".into()));
    assert_eq!(f.unavailable(None), Ok(()), "the other one was not checked");
    f.member(1).unwrap().set_health(Err("refused".into()));
    assert!(f.unavailable(None).is_err());
}

#[test]
fn restart_marks_are_noted() {
    use llamatap_wire::llama::slots::{Marks, SlotState};
    let f = fleet(1);
    let m = f.member(0).unwrap();
    let at = |last| Marks {
        slots: Some(SlotState {
            slots: 2,
            idle: 2,
            last_task: last,
        }),
        decodes: None,
    };
    assert_eq!(m.note_marks(&at(Some(40))), None);
    assert_eq!(m.note_marks(&Marks::default()), None, "unread");
    assert_eq!(m.note_marks(&at(Some(44))), None);
    assert!(m.note_marks(&at(None)).is_some(), "a new process");
    assert_eq!(
        m.note_marks(&at(Some(1))),
        None,
        "now compared with the new one"
    );
}
