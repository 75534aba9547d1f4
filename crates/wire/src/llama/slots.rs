//! llama-server's `/slots` answer, read for two things: how many slots are
//! idle (a tie-breaker in routing), and marks of the server process's life
//! that tell a restart from a pause ([`Marks`]).
//!
//! A llama-server numbers its tasks from 0 at start, one counter for the
//! process, and each slot reports the id of its current or last task
//! (`id_task`, absent on a slot that never ran one). So the largest
//! `id_task` only grows while the process lives; with `--metrics`,
//! `llamacpp:n_decode_total` does too. A mark that went backwards, or a
//! slot count that changed, means another process answers now: its KV cache
//! is empty. A check that failed for a while proves nothing of the kind (a
//! network blip, a busy host), which is why the router forgets an upstream's
//! prefixes only on such a mark.
//!
//! Pure: parses bytes, no I/O. Deliberately not read: prompts, parameters,
//! anything per slot beyond `is_processing` and `id_task`.

/// What one `/slots` answer says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotState {
    /// Slots listed.
    pub slots: usize,
    /// Slots not processing a task.
    pub idle: usize,
    /// The largest `id_task` of any slot, `None` when no slot ran a task.
    pub last_task: Option<i64>,
}

/// Reads a `/slots` answer (a JSON array of slots); `None` when it is not one.
pub fn parse_slots(body: &[u8]) -> Option<SlotState> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let slots = v.as_array()?;
    let idle = slots
        .iter()
        .filter(|s| s.get("is_processing").and_then(|p| p.as_bool()) == Some(false))
        .count();
    let last_task = slots
        .iter()
        .filter_map(|s| s.get("id_task").and_then(|t| t.as_i64()))
        .filter(|t| *t >= 0)
        .max();
    Some(SlotState {
        slots: slots.len(),
        idle,
        last_task,
    })
}

/// Reads `total_slots` from a `/props` answer (where the slot count is
/// when `/slots` is disabled with `--no-slots`); `None` when absent.
pub fn parse_props_slots(body: &[u8]) -> Option<usize> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let n = v.get("total_slots")?.as_u64()?;
    usize::try_from(n).ok().filter(|n| *n > 0)
}

/// Marks of one llama-server process's life, as last read. Each is `None`
/// when its source was not read (slots disabled, no `--metrics`, a check
/// that failed); an unread mark proves nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// From `/slots`.
    pub slots: Option<SlotState>,
    /// `llamacpp:n_decode_total`, from `/metrics`.
    pub decodes: Option<u64>,
}

impl Marks {
    /// Why `newer` comes from another process than `self` (a restart), or
    /// `None` when nothing says so.
    pub fn restart_evidence(&self, newer: &Marks) -> Option<&'static str> {
        if let (Some(old), Some(new)) = (self.slots, newer.slots) {
            if old.slots != new.slots {
                return Some("its slot count changed");
            }
            match (old.last_task, new.last_task) {
                (Some(_), None) => return Some("its slots lost their task history"),
                (Some(a), Some(b)) if b < a => return Some("its task ids started again"),
                _ => {}
            }
        }
        if let (Some(a), Some(b)) = (self.decodes, newer.decodes) {
            if b < a {
                return Some("its llamacpp:n_decode_total counter went back");
            }
        }
        None
    }

    /// `self` updated with the marks `newer` read; unread ones keep their
    /// last value.
    pub fn merge(&self, newer: &Marks) -> Marks {
        Marks {
            slots: newer.slots.or(self.slots),
            decodes: newer.decodes.or(self.decodes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(json: &str) -> SlotState {
        parse_slots(json.as_bytes()).unwrap()
    }

    #[test]
    fn props_give_the_slot_count_when_slots_are_disabled() {
        let props = br#"{"default_generation_settings":{"n_ctx":2048},"total_slots":4,"model_path":"m.gguf"}"#;
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
}
