//! Members joining, draining and leaving (discovered names), and what two
//! replicas that see the same members decide.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::config::Overrides;
use crate::fleet::*;
use llamatap_wire::request::Route;

/// A fleet with one discovered name and no member yet.
fn discovered() -> Fleet {
    let o = Overrides {
        upstreams: vec!["dns+http://llama.test:8080".to_string()],
        ..Overrides::default()
    };
    let config = Config::from_raw(crate::config::RawConfig::default(), &o).unwrap();
    Fleet::new(&config)
}

fn addr(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], 8080))
}

/// Joins `addr` and marks it healthy.
fn join(f: &Fleet, a: SocketAddr) -> Arc<Member> {
    let m = f.join(0, a).unwrap();
    m.set_health(Ok(()));
    m
}

/// The chain of conversation `id`'s first turn.
fn conversation(id: usize) -> Chain {
    let body = serde_json::json!({
        "model": "tiny",
        "messages": [{"role": "user", "content": format!("conversation {id}: hello there")}]
    });
    Chain::from_json(Route::ChatCompletions, &body)
}

/// Where `f` places conversation `id` (by member name), load released.
fn place(f: &Fleet, id: usize) -> String {
    let d = f.choose(None, &conversation(id), None, &[]).unwrap();
    f.release(d.upstream);
    f.member(d.upstream).unwrap().upstream.name.clone()
}

#[test]
fn a_discovered_name_starts_empty_and_says_so() {
    let f = discovered();
    assert!(f.members().is_empty());
    assert!(
        f.is_fleet(),
        "a discovered name routes even with one member"
    );
    assert_eq!(f.capacity(), MAX_UPSTREAMS);
    let why = f.readiness().unwrap_err();
    assert_eq!(why, "no upstream: llama.test:8080 is not resolved yet");
}

#[test]
fn readiness_tells_a_failed_lookup_from_an_empty_answer() {
    let f = discovered();
    f.note_lookup(0, Lookup::Failed("DNS timeout".into()));
    assert_eq!(
        f.readiness().unwrap_err(),
        "no upstream: llama.test:8080: its lookup failed (DNS timeout)"
    );
    f.note_lookup(0, Lookup::Answered);
    assert_eq!(
        f.readiness().unwrap_err(),
        "no upstream: llama.test:8080 resolves to no address now"
    );
    // A failed lookup keeps members: readiness then follows them.
    let m = f.join(0, addr(7)).unwrap();
    f.note_lookup(0, Lookup::Failed("DNS timeout".into()));
    assert!(f.readiness().unwrap_err().contains("10.0.0.7:8080"));
    drop(m);
}

#[test]
fn members_are_named_by_address_and_join_unchecked() {
    let f = discovered();
    let m = f.join(0, addr(7)).unwrap();
    assert_eq!(m.upstream.name, "10.0.0.7:8080");
    assert_eq!(m.address(), Some(addr(7)));
    assert!(m.discovered);
    assert!(!f.usable(m.id), "not checked yet");
    m.set_health(Ok(()));
    assert!(f.usable(m.id));
}

#[test]
fn a_draining_member_takes_nothing_new_and_keeps_what_it_has() {
    let f = discovered();
    let a = join(&f, addr(1));
    let b = join(&f, addr(2));
    // A request in flight on `a` when it starts draining.
    let d = f.choose(None, &conversation(1), None, &[b.id]).unwrap();
    assert_eq!(d.upstream, a.id);
    a.set_draining(true);
    assert!(!f.usable(a.id));
    for id in 0..50 {
        assert_eq!(place(&f, id), b.upstream.name);
    }
    assert_eq!(a.in_flight(), 1, "its request goes on");
    assert!(
        !f.can_fail_over(None, b.id, &[]),
        "a draining member is no failover"
    );
    f.release(d.upstream);
    assert_eq!(a.in_flight(), 0);
    // Back in the answer: it serves again.
    a.set_draining(false);
    assert!(f.usable(a.id));
}

#[test]
fn a_member_that_left_frees_its_id_and_its_prefixes() {
    let f = discovered();
    let a = join(&f, addr(1));
    let b = join(&f, addr(2));
    let chain = conversation(9);
    let d = f.choose(None, &chain, None, &[b.id]).unwrap();
    f.release(d.upstream);
    assert!(!f.router.lock().unwrap().index(a.id).unwrap().is_empty());
    a.set_draining(true);
    f.leave(&a);
    assert!(a.gone());
    assert!(f.member(a.id).is_none());
    assert_eq!(f.members().len(), 1);
    // A new address takes the freed id, with an empty index.
    let c = join(&f, addr(3));
    assert_eq!(c.id, a.id);
    assert_eq!(f.router.lock().unwrap().index(c.id).unwrap().len(), 0);
    assert_eq!(f.member(c.id).unwrap().upstream.name, "10.0.0.3:8080");
}

#[test]
fn the_fleet_holds_at_most_its_capacity_over_time() {
    let f = discovered();
    let mut members = Vec::new();
    for i in 0..MAX_UPSTREAMS {
        let a = SocketAddr::from(([10, 1, (i / 250) as u8, (i % 250) as u8], 8080));
        members.push(f.join(0, a).unwrap());
    }
    assert!(matches!(f.join(0, addr(200)), Err(Full)));
    // 100 rounds of one leaving and another joining: the table never grows.
    for round in 0..100u8 {
        let m = members.remove(0);
        f.leave(&m);
        members.push(
            f.join(0, SocketAddr::from(([10, 2, 0, round], 8080)))
                .unwrap(),
        );
        assert_eq!(f.members().len(), MAX_UPSTREAMS);
        assert!(f.table.read().unwrap().len() <= MAX_UPSTREAMS);
        assert!(f.router.lock().unwrap().len() <= MAX_UPSTREAMS);
    }
}

#[test]
fn a_member_that_left_no_longer_counts_for_models_or_readiness() {
    let f = discovered();
    let a = join(&f, addr(1));
    let b = join(&f, addr(2));
    f.set_models(&a, vec!["alpha".into()]);
    f.set_models(&b, vec!["beta".into()]);
    assert_eq!(f.models(), ["alpha", "beta"]);
    f.leave(&b);
    assert_eq!(f.models(), ["alpha"]);
    assert_eq!(f.readiness(), Ok(()));
    // Models reported by a member after it left are ignored.
    f.set_models(&b, vec!["gamma".into()]);
    assert_eq!(f.models(), ["alpha"]);
}

/// Two replicas seeing the same members (joined in other orders, so with
/// other ids) place every new conversation on the same member; when one
/// member leaves, only the conversations it held move.
#[test]
fn replicas_agree_and_a_departure_moves_only_its_conversations() {
    let one = discovered();
    let two = discovered();
    let addresses: Vec<SocketAddr> = (1..=5).map(addr).collect();
    for a in &addresses {
        join(&one, *a);
    }
    for a in addresses.iter().rev() {
        join(&two, *a);
    }
    const N: usize = 3000;
    let before: Vec<String> = (0..N).map(|id| place(&one, id)).collect();
    let agree = (0..N).filter(|&id| place(&two, id) == before[id]).count();
    assert_eq!(agree, N, "two replicas must place every conversation alike");
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &before {
        *per.entry(name.as_str()).or_default() += 1;
    }
    assert_eq!(per.len(), 5, "every member gets conversations: {per:?}");
    // 10.0.0.3 leaves both replicas (fresh fleets: no index of the first
    // placement, so the rendezvous draw alone decides).
    let gone = addr(3).to_string();
    let after_fleet = discovered();
    for a in addresses.iter().filter(|a| a.to_string() != gone) {
        join(&after_fleet, *a);
    }
    let fresh = discovered();
    for a in &addresses {
        join(&fresh, *a);
    }
    let mut moved = 0;
    for id in 0..N {
        let was = place(&fresh, id);
        let now = place(&after_fleet, id);
        if was != gone {
            assert_eq!(now, was, "conversation {id} moved off a member that stayed");
        } else {
            moved += 1;
            assert_ne!(now, gone);
        }
    }
    assert_eq!(moved, per[gone.as_str()]);
}
