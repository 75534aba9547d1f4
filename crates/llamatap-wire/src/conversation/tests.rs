use super::*;
use proptest::prelude::*;

fn alice() -> Scope {
    Scope::of_tenant("alice")
}

fn bob() -> Scope {
    Scope::of_tenant("bob")
}

#[test]
fn the_prefix_is_short_stable_and_per_tenant() {
    let p = alice().prefix().to_string();
    assert_eq!(p.len(), 19, "{p}");
    assert!(p.starts_with("t-") && p.ends_with('.'));
    assert_eq!(alice(), Scope::of_tenant("alice"));
    assert_ne!(alice().prefix(), bob().prefix());
}

#[test]
fn ids_scope_and_unscope_and_the_model_suffix_survives() {
    let a = alice();
    let scoped = String::from_utf8(a.scope(b"conv-1::org/model")).unwrap();
    assert_eq!(scoped, format!("{}conv-1::org/model", a.prefix()));
    assert_eq!(a.unscope(&scoped), Some("conv-1::org/model"));
    assert_eq!(bob().unscope(&scoped), None);
    assert!(a.scope(b"").is_empty(), "no id stays no id");
}

#[test]
fn an_id_that_spells_another_tenants_scoped_id_stays_in_its_own_scope() {
    let a = alice();
    let b = bob();
    let alices = a.scope(b"secret");
    let forged = b.scope(&alices);
    assert_ne!(forged, alices);
    assert!(forged.starts_with(b.prefix().as_bytes()));
    // Nor is one a prefix of the other's (the lookup's `ID::` match).
    assert!(!alices.starts_with(&forged) && !forged.starts_with(&alices));
}

#[test]
fn the_conv_id_parameter_is_scoped_wherever_and_however_it_is_written() {
    let a = alice();
    let p = a.prefix();
    let cases = [
        (
            "/v1/stream?conv_id=c1&from=7",
            format!("/v1/stream?conv_id={p}c1&from=7"),
        ),
        (
            "/v1/stream?from=7&conv_id=c%3A%3Am",
            format!("/v1/stream?from=7&conv_id={p}c%3A%3Am"),
        ),
        (
            "/v1/stream?conv%5Fid=c+1",
            format!("/v1/stream?conv_id={p}c%201"),
        ),
        (
            "/v1/stream?conv_id=x&conv_id=y#frag",
            format!("/v1/stream?conv_id={p}x&conv_id={p}y#frag"),
        ),
        (
            "/v1/stream?conv_id=&from=1",
            "/v1/stream?conv_id=&from=1".to_string(),
        ),
        ("/v1/stream?conv_id", "/v1/stream?conv_id=".to_string()),
    ];
    for (target, want) in cases {
        let got = a.scope_target(target.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want, "{target}");
    }
    for target in [
        "/v1/stream",
        "/v1/stream?from=1",
        "/v1/stream#?conv_id=x",
        "/x?conv_idx=1",
    ] {
        assert_eq!(a.scope_target(target.as_bytes()), None, "{target}");
    }
}

#[test]
fn the_lookup_route_is_matched_as_llama_server_decodes_it() {
    assert!(is_lookup("POST", b"/v1/streams/lookup"));
    assert!(is_lookup("POST", b"/v1/streams/%6Cookup?x=1"));
    assert!(!is_lookup("GET", b"/v1/streams/lookup"));
    assert!(!is_lookup("POST", b"/v1/streams/lookup/"));
    assert!(!is_lookup("POST", b"/v1/stream"));
}

#[test]
fn a_lookup_asks_only_for_the_tenants_own_ids() {
    let a = alice();
    let p = a.prefix();
    let body = a
        .lookup_request(br#"{"conversation_ids":["c1","","c2::m"],"x":1}"#)
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"conversation_ids": [format!("{p}c1"), format!("{p}c2::m")]})
    );
    for bad in [
        &b"not json"[..],
        b"[]",
        b"{}",
        br#"{"conversation_ids":"c1"}"#,
        br#"{"conversation_ids":["c1",2]}"#,
        b"{\"conversation_ids\":[\"c1\"",
    ] {
        assert_eq!(
            a.lookup_request(bad),
            Err(LookupError::Malformed),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let many: Vec<String> = (0..=MAX_LOOKUP_IDS).map(|i| i.to_string()).collect();
    let body = serde_json::to_vec(&serde_json::json!({ "conversation_ids": many })).unwrap();
    assert_eq!(a.lookup_request(&body), Err(LookupError::TooMany));
}

#[test]
fn a_lookup_answer_keeps_only_the_tenants_entries_unscoped() {
    let a = alice();
    let b = bob();
    let entry = |id: String| {
        serde_json::json!({"conversation_id": id, "is_done": false, "total_bytes": 12,
            "started_at": 1, "completed_at": 0})
    };
    let answer = serde_json::json!([
        entry(format!("{}c1", a.prefix())),
        entry(format!("{}c1", b.prefix())),
        entry("c1".to_string()),
        entry(format!("{}c2::m", a.prefix())),
        entry(a.prefix().to_string()),
        {"total_bytes": 1},
        "junk"
    ]);
    let got = a
        .lookup_answer(&serde_json::to_vec(&answer).unwrap())
        .unwrap();
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(
        got,
        serde_json::json!([entry("c1".into()), entry("c2::m".into())])
    );
    assert_eq!(a.lookup_answer(b"{\"error\":1}"), None);
    assert_eq!(a.lookup_answer(b"not json"), None);
}

proptest! {
    /// Whatever the two tenants and ids, their scoped ids never meet: not
    /// equal, and neither a lookup match (`ID` or `ID::…`) of the other.
    #[test]
    fn scoped_ids_of_two_tenants_never_meet(
        ta in "[a-z0-9._-]{1,12}",
        tb in "[a-z0-9._-]{1,12}",
        ia in proptest::collection::vec(any::<u8>(), 1..24),
        ib in proptest::collection::vec(any::<u8>(), 1..24),
    ) {
        prop_assume!(ta != tb);
        let (a, b) = (Scope::of_tenant(&ta), Scope::of_tenant(&tb));
        let (sa, sb) = (a.scope(&ia), b.scope(&ib));
        prop_assert!(!sa.starts_with(&sb) && !sb.starts_with(&sa));
    }

    /// The rewritten target decodes to the scoped ids and keeps every
    /// other byte.
    #[test]
    fn a_rewritten_target_carries_the_scoped_id(id in proptest::collection::vec(any::<u8>(), 1..24)) {
        let a = alice();
        let target = format!("/v1/stream?from=3&conv_id={}", query::encode(&id));
        let got = a.scope_target(target.as_bytes()).unwrap();
        let value = query::pairs(&got)
            .find(|(k, _)| *k == PARAM)
            .and_then(|(_, v)| v)
            .unwrap();
        prop_assert_eq!(query::decode(value), a.scope(&id));
        prop_assert!(got.starts_with(b"/v1/stream?from=3&"));
    }
}

#[test]
fn the_stream_routes_name_their_first_conv_id() {
    assert_eq!(
        stream_id(b"/v1/stream?conv_id=c%3A%3Am&from=3"),
        Some(b"c::m".to_vec())
    );
    assert_eq!(
        stream_id(b"/v1/%73tream?from=0&conv_id=a&conv_id=b"),
        Some(b"a".to_vec())
    );
    assert_eq!(stream_id(b"/v1/stream?conv_id="), None);
    assert_eq!(stream_id(b"/v1/stream?from=0"), None);
    assert_eq!(stream_id(b"/v1/streams/lookup?conv_id=a"), None);
}

#[test]
fn the_open_scope_keeps_ids_and_every_lookup_entry() {
    let open = Scope::open();
    assert_eq!(open.scope(b"c1"), b"c1".to_vec());
    let body = open
        .lookup_request(br#"{"conversation_ids":["c1",""]}"#)
        .unwrap();
    assert_eq!(body, br#"{"conversation_ids":["c1"]}"#.to_vec());
    let answer = open
        .lookup_answer(br#"[{"conversation_id":"c1","is_done":true}]"#)
        .unwrap();
    let v: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v[0]["conversation_id"], "c1");
}

#[test]
fn the_replay_offset_is_read_as_llama_server_reads_it() {
    assert_eq!(stream_from(b"/v1/stream?conv_id=a"), Some(0));
    assert_eq!(stream_from(b"/v1/stream?conv_id=a&from=12"), Some(12));
    assert_eq!(stream_from(b"/v1/stream?from=x&conv_id=a"), None);
}
