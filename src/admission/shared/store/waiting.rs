//! What a replica's heartbeat tells the others of the requests waiting in
//! its queue: how many per class, and which models they name, so that a
//! replica pauses an answer for a request waiting elsewhere only on an
//! upstream that request could take.
//!
//! Bounded: a model name longer than [`MAX_MODEL_NAME`] or holding a line
//! break, or beyond [`MAX_MODELS`] names in a class, is told as "any" (a
//! client names the model, so its name is never trusted to be short).
//!
//! Deliberately not here: the scripts that store it ([`super`]).

use std::collections::BTreeSet;

/// The models requests of one class wait for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Models {
    /// Some request names no model, or one not told (a name too long or
    /// with a line break, too many names, a replica that does not tell):
    /// any upstream would do for it.
    pub any: bool,
    /// The model names.
    pub names: BTreeSet<String>,
}

/// Longest model name told to the other replicas (a longer one is told as
/// "any").
pub const MAX_MODEL_NAME: usize = 256;
/// Most model names told per class (beyond: "any").
pub const MAX_MODELS: usize = 32;

impl Models {
    /// Adds a request naming `model` (`None`: any).
    pub fn add(&mut self, model: Option<&str>) {
        match model {
            Some(m)
                if m.len() <= MAX_MODEL_NAME
                    && !m.contains(['\n', '\r'])
                    && (self.names.len() < MAX_MODELS || self.names.contains(m)) =>
            {
                self.names.insert(m.to_string());
            }
            _ => self.any = true,
        }
    }

    /// Whether a request naming one of these could take a slot of an
    /// upstream serving what `serves` says.
    pub fn wanted_by(&self, serves: impl Fn(&str) -> bool) -> bool {
        self.any || self.names.iter().any(|m| serves(m))
    }
}

/// A heartbeat's waiting field: `i,d,b` (the counts per class), then one
/// line `<class>:<model>` per model waited for (`<class>:` for "any").
/// Readers that know only the counts read the first line (an older
/// replica reads the last count as 0).
pub(super) fn waiting_field(waiting: [u32; 3], models: &[Models; 3]) -> String {
    let mut out = format!("{},{},{}", waiting[0], waiting[1], waiting[2]);
    for (c, m) in models.iter().enumerate() {
        if m.any {
            out.push_str(&format!("\n{c}:"));
        }
        for name in &m.names {
            out.push_str(&format!("\n{c}:{name}"));
        }
    }
    out
}

/// Adds one replica's waiting field to `counts` and `models`; a class
/// with requests waiting and no model line (an older replica) waits for
/// any.
pub(super) fn read_waiting(field: &str, counts: &mut [u32; 3], models: &mut [Models; 3]) {
    let mut lines = field.split('\n');
    let mut here = [0u32; 3];
    for (slot, n) in here.iter_mut().zip(lines.next().unwrap_or("").split(',')) {
        *slot = n.trim().parse::<u32>().unwrap_or(0);
    }
    let mut told = [false; 3];
    for line in lines {
        let Some((c, name)) = line.split_once(':') else {
            continue;
        };
        let Some(c) = c.parse::<usize>().ok().filter(|c| *c < 3) else {
            continue;
        };
        if let (Some(t), Some(m)) = (told.get_mut(c), models.get_mut(c)) {
            *t = true;
            m.add((!name.is_empty()).then_some(name));
        }
    }
    for (((m, count), n), told) in models.iter_mut().zip(counts.iter_mut()).zip(here).zip(told) {
        if n > 0 && !told {
            m.any = true;
        }
        *count = count.saturating_add(n);
    }
}
