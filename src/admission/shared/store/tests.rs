use super::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn any() -> Models {
    Models {
        any: true,
        ..Models::default()
    }
}

fn named(names: &[&str]) -> Models {
    Models {
        any: false,
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn a_view_sums_the_other_replicas_waiting_per_class() {
    let reply = [
        Value::Int(3),
        Value::Array(vec![bulk("1,0,2"), bulk("0,4,1")]),
        Value::Array(vec![Value::Int(2), Value::Int(0)]),
    ];
    assert_eq!(
        view(&reply).unwrap(),
        SlotView {
            replicas: 3,
            waiting: [1, 4, 3],
            // Replicas that tell no model: any would do.
            models: [any(), any(), any()],
            leases: vec![2, 0],
        }
    );
}

#[test]
fn a_view_of_one_replica_has_nothing_waiting_elsewhere() {
    let reply = [Value::Int(1), Value::Array(vec![]), Value::Array(vec![])];
    assert_eq!(
        view(&reply).unwrap(),
        SlotView {
            replicas: 1,
            ..SlotView::default()
        }
    );
}

#[test]
fn a_malformed_view_is_an_error_not_a_guess() {
    for reply in [
        vec![Value::Int(1)],
        vec![
            Value::Int(1),
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![]),
        ],
        vec![
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![bulk("two")]),
        ],
    ] {
        assert!(view(&reply).is_err(), "{reply:?}");
    }
}

#[test]
fn lease_keys_share_one_hash_tag() {
    let k = lease_key("10.0.0.7:8080");
    assert_eq!(k, "llamatap:{llamatap-slots}:lease:10.0.0.7:8080");
    for other in [REPLICAS_KEY, WAITING_KEY, CHANGED] {
        assert!(other.contains("{llamatap-slots}"), "{other}");
    }
}

#[test]
fn the_models_waited_for_go_through_the_heartbeat() {
    let mut here = [Models::default(), Models::default(), Models::default()];
    here[0].add(Some("qwen-7b"));
    here[0].add(Some("qwen-7b"));
    here[1].add(Some("llama-70b"));
    here[1].add(None);
    let field = waiting_field([2, 2, 0], &here);
    assert_eq!(field, "2,2,0\n0:qwen-7b\n1:\n1:llama-70b");
    // Two replicas tell: one with models, one with counts only (an older
    // one): its class waits for any.
    let reply = [
        Value::Int(3),
        Value::Array(vec![bulk(&field), bulk("0,0,1")]),
        Value::Array(vec![]),
    ];
    let v = view(&reply).unwrap();
    assert_eq!(v.waiting, [2, 2, 1]);
    assert_eq!(v.models[0], named(&["qwen-7b"]));
    assert_eq!(
        v.models[1],
        Models {
            any: true,
            ..named(&["llama-70b"])
        }
    );
    assert_eq!(v.models[2], any());
    assert!(v.models[0].wanted_by(|m| m == "qwen-7b"));
    assert!(!v.models[0].wanted_by(|m| m == "llama-70b"));
    assert!(v.models[1].wanted_by(|_| false), "any upstream");
    // Nothing waits: nothing wanted.
    assert!(!Models::default().wanted_by(|_| true));
}

#[test]
fn a_client_s_model_name_never_grows_the_heartbeat() {
    let mut m = Models::default();
    m.add(Some(&"x".repeat(MAX_MODEL_NAME + 1)));
    m.add(Some("two\nlines"));
    assert_eq!(m, any());
    let mut m = Models::default();
    for i in 0..MAX_MODELS + 5 {
        m.add(Some(&format!("model-{i}")));
    }
    assert_eq!(m.names.len(), MAX_MODELS);
    assert!(m.any);
    // A line the reader does not know is skipped.
    let (mut counts, mut models) = ([0; 3], [any(), any(), any()].map(|_| Models::default()));
    read_waiting("1,0,0\n7:x\nnonsense\n0:a", &mut counts, &mut models);
    assert_eq!((counts, &models[0]), ([1, 0, 0], &named(&["a"])));
}
