use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use super::*;
use crate::config::{OnError, Secret, Store as StoreConfig};

/// Shared slots over a store nothing listens at (no call is made here).
fn shared(members: usize) -> Shared {
    let cfg = StoreConfig {
        url: Secret::new("redis://127.0.0.1:1".to_string()),
        address: "127.0.0.1:1".to_string(),
        timeout: Duration::from_millis(50),
        on_error: OnError::Allow,
        password: None,
    };
    let store = Arc::new(Store::new(cfg, Gauge::default()).with_limits(false));
    Shared::new(
        store,
        Duration::from_secs(6),
        Duration::from_millis(500),
        members,
    )
}

#[test]
fn shared_capacity_is_the_slots_not_leased_elsewhere() {
    let s = shared(2);
    if let Ok(mut st) = s.state.lock() {
        st.others[1] = 3;
        st.replicas = 3;
    }
    assert_eq!(s.capacity(0, Some(4)), Some(4));
    assert_eq!(s.capacity(1, Some(4)), Some(1));
    assert_eq!(s.capacity(1, Some(2)), Some(0), "never below none");
    assert_eq!(s.capacity(0, None), None, "unknown is never limiting");
}

#[test]
fn the_static_share_divides_by_the_replicas_last_seen() {
    let s = shared(1);
    if let Ok(mut st) = s.state.lock() {
        st.others[0] = 3;
        st.replicas = 3;
        st.elsewhere = [1, 0, 2];
    }
    s.fall_back("test");
    assert!(!s.is_shared());
    assert_eq!(s.capacity(0, Some(7)), Some(2));
    assert_eq!(s.capacity(0, Some(2)), Some(1), "at least one");
    assert_eq!(s.elsewhere(), [0; 3], "nothing counted elsewhere");
}

#[test]
fn the_status_line_names_the_replicas_or_the_static_share() {
    let s = SharedSlots::new(Arc::new(shared(1)));
    assert_eq!(
        s.status(),
        SlotStatus {
            shared: true,
            replicas: 1
        }
    );
    assert_eq!(
        s.status().to_string(),
        "slots: shared by 1 replica through the store"
    );
    let three = SlotStatus {
        shared: true,
        replicas: 3,
    };
    assert_eq!(
        three.to_string(),
        "slots: shared by 3 replicas through the store"
    );
    let fallen = SlotStatus {
        shared: false,
        replicas: 3,
    };
    assert_eq!(
        fallen.to_string(),
        "slots: static share, 1/3 of each upstream (the store is unreachable)"
    );
}

#[test]
fn a_replica_id_names_the_process() {
    let id = replica_id();
    assert!(id.contains(&format!("-{}-", std::process::id())), "{id}");
}
