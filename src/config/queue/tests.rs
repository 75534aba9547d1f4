use super::*;

fn parse(text: &str) -> Result<Queue, String> {
    #[derive(Deserialize)]
    struct Wrap {
        queue: RawQueue,
    }
    let w: Wrap = toml::from_str(text).map_err(|e| e.to_string())?;
    queue(w.queue).map_err(|e| e.to_string())
}

#[test]
fn off_by_default_and_nothing_refused() {
    let q = queue(RawQueue::default()).unwrap();
    assert!(!q.enabled);
    assert_eq!(q.classes, [ClassRules::default(); 3]);
}

#[test]
fn classes_are_read_by_name() {
    let q = parse(
        "[queue]\nenabled = true\npriority_header = \"X-Priority\"\nmax_inflight = 2\n\
         [queue.classes.batch]\nmax_wait_ms = 500\nmax_depth = 10\nreserve = 1\n\
         preemptible = true\n",
    )
    .unwrap();
    assert!(q.enabled);
    assert_eq!(q.priority_header.as_deref(), Some("x-priority"));
    assert_eq!(q.max_inflight, Some(2));
    assert_eq!(q.classes[0], ClassRules::default());
    assert_eq!(q.preemptible, [false, false, true]);
    assert_eq!(
        q.classes[2],
        ClassRules {
            max_wait: Some(Duration::from_millis(500)),
            max_depth: Some(10),
            reserve: 1,
            tenant_reserve: 0,
        }
    );
}

#[test]
fn bad_values_are_one_line_errors() {
    for (text, key) in [
        ("[queue.classes.urgent]\n", "queue.classes"),
        ("[queue.classes.batch]\nmax_wait_ms = 0\n", "max_wait_ms"),
        ("[queue.classes.batch]\nmax_depth = 0\n", "max_depth"),
        ("[queue]\nmax_inflight = 0\n", "max_inflight"),
        (
            "[queue.classes.interactive]\npreemptible = true\n",
            "queue.classes.preemptible",
        ),
        ("[queue]\npriority_header = \"a b\"\n", "priority_header"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.contains(key), "{text}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn shared_slots_are_off_by_default_with_their_lease_and_sync() {
    let q = parse("[queue]\nenabled = true\n").unwrap();
    assert!(!q.shared);
    assert_eq!(q.lease, Duration::from_millis(DEFAULT_LEASE_MS));
    assert_eq!(q.sync, Duration::from_millis(DEFAULT_SYNC_MS));
    let q = parse("[queue]\nshared = true\nlease_ms = 1500\nsync_ms = 50\n").unwrap();
    assert!(q.shared);
    assert_eq!(q.lease, Duration::from_millis(1500));
    assert_eq!(q.sync, Duration::from_millis(50));
}

#[test]
fn a_lease_outlives_three_sync_rounds() {
    for (text, key) in [
        ("[queue]\nlease_ms = 100\n", "queue.lease_ms"),
        ("[queue]\nsync_ms = 5\n", "queue.sync_ms"),
        ("[queue]\nlease_ms = 600\nsync_ms = 300\n", "queue.sync_ms"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.contains(key), "{text}: {e}");
    }
    assert!(parse("[queue]\nlease_ms = 600\nsync_ms = 200\n").is_ok());
}
