use super::*;

fn slots(json: &str) -> SlotState {
    parse_slots(json.as_bytes()).unwrap()
}

#[test]
fn props_give_the_slot_count_when_slots_are_disabled() {
    let props =
        br#"{"default_generation_settings":{"n_ctx":2048},"total_slots":4,"model_path":"m.gguf"}"#;
    assert_eq!(parse_props_slots(props), Some(4));
    assert_eq!(parse_props_slots(br#"{"total_slots":0}"#), None);
    assert_eq!(parse_props_slots(br#"{"total_slots":-1}"#), None);
    assert_eq!(parse_props_slots(br#"{"model_path":"m.gguf"}"#), None);
    assert_eq!(parse_props_slots(b"not json"), None);
}

#[test]
fn idle_slots_and_the_last_task_are_read() {
    let s = slots(
        r#"[{"id":0,"is_processing":true,"id_task":41},
            {"id":1,"is_processing":false,"id_task":57},
            {"id":2,"is_processing":false}]"#,
    );
    assert_eq!(
        s,
        SlotState {
            slots: 3,
            idle: 2,
            last_task: Some(57)
        }
    );
    assert_eq!(slots("[]").last_task, None);
    assert_eq!(parse_slots(b"{\"error\":1}"), None);
    assert_eq!(parse_slots(b"not json"), None);
}

fn marks(n: usize, last: Option<i64>, decodes: Option<u64>) -> Marks {
    Marks {
        slots: Some(SlotState {
            slots: n,
            idle: n,
            last_task: last,
        }),
        decodes,
    }
}

#[test]
fn a_restart_shows_in_task_ids_counters_or_slot_count() {
    let before = marks(2, Some(500), Some(9000));
    assert_eq!(
        before.restart_evidence(&marks(2, Some(520), Some(9100))),
        None
    );
    assert!(before.restart_evidence(&marks(2, None, None)).is_some());
    assert!(before.restart_evidence(&marks(2, Some(3), None)).is_some());
    assert!(before
        .restart_evidence(&marks(4, Some(600), None))
        .is_some());
    let counters = Marks {
        slots: None,
        decodes: Some(9000),
    };
    assert!(counters
        .restart_evidence(&Marks {
            slots: None,
            decodes: Some(12)
        })
        .is_some());
}

#[test]
fn an_unread_mark_proves_nothing() {
    let before = marks(2, Some(500), Some(9000));
    assert_eq!(before.restart_evidence(&Marks::default()), None);
    assert_eq!(Marks::default().restart_evidence(&before), None);
    // A server that never ran a task has nothing to lose.
    assert_eq!(
        marks(2, None, None).restart_evidence(&marks(2, None, None)),
        None
    );
    let merged = before.merge(&Marks {
        slots: None,
        decodes: Some(9500),
    });
    assert_eq!(merged.slots, before.slots);
    assert_eq!(merged.decodes, Some(9500));
}
