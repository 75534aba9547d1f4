use super::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
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
