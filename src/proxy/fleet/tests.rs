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
        m.set_healthy(true);
    }
    f
}

fn models(f: &Fleet, lists: &[&[&str]]) {
    for (i, l) in lists.iter().enumerate() {
        f.set_models(i, l.iter().map(|s| s.to_string()).collect());
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
fn an_ejected_upstream_is_skipped_until_a_check_passes() {
    let f = fleet(2);
    f.eject(0);
    for _ in 0..10 {
        let d = f.choose(None, &Chain::default(), None, &[]).unwrap();
        assert_eq!(d.upstream, 1);
        f.release(1);
    }
    assert!(!f.member(0).unwrap().set_healthy(true), "it stayed healthy");
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
    for m in f.members() {
        m.set_healthy(false);
    }
    assert!(f.choose(None, &Chain::default(), None, &[]).is_ok());
    assert!(!f.ready());
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
    assert!(f.ready());
    f.member(1).unwrap().set_healthy(false);
    assert!(!f.ready(), "b has no healthy upstream");
}
