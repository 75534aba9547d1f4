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
mod tests;
