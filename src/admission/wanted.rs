//! The models the requests queued here wait for, per class: what the
//! heartbeat tells the other replicas with the counts (shared slots), so
//! that a replica pauses an answer for a request waiting here only on an
//! upstream that request could take.
//!
//! A request is counted from the moment it queues until it leaves the
//! queue (granted, refused, hung up), through the [`Want`] its waiter
//! holds.
//!
//! The same counts tell a TTFT objective how many queued requests a new
//! one would wait behind ([`Wanted::ahead`]).
//!
//! Deliberately not here: the encoding in the store
//! ([`super::shared::store::Models`]) and the pre-emption itself.

use std::collections::HashMap;
use std::sync::Mutex;

use super::shared::store::Models;

/// Per class and model, the requests queued here.
#[derive(Debug, Default)]
pub(super) struct Wanted {
    counts: Mutex<HashMap<(usize, Option<String>), u32>>,
}

/// One queued request's place in [`Wanted`]; it leaves when dropped.
pub(super) struct Want<'a> {
    wanted: &'a Wanted,
    key: (usize, Option<String>),
}

impl Wanted {
    /// A request of class `class` naming `model` queues.
    pub(super) fn hold(&self, class: usize, model: Option<&str>) -> Want<'_> {
        let key = (class, model.map(str::to_string));
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(key.clone()).or_default() += 1;
        }
        Want { wanted: self, key }
    }

    /// The requests queued here that a request of class `class` naming
    /// `model` would wait behind: of its class or a more urgent one, naming
    /// its model, or either naming none.
    pub(super) fn ahead(&self, class: usize, model: Option<&str>) -> u32 {
        let Ok(c) = self.counts.lock() else {
            return 0;
        };
        c.iter()
            .filter(|((ci, m), _)| {
                *ci <= class && (model.is_none() || m.is_none() || m.as_deref() == model)
            })
            .fold(0u32, |sum, (_, n)| sum.saturating_add(*n))
    }

    /// Per class, the models the queued requests name.
    pub(super) fn models(&self) -> [Models; 3] {
        let mut out: [Models; 3] = Default::default();
        if let Ok(c) = self.counts.lock() {
            for ((class, model), _) in c.iter() {
                if let Some(m) = out.get_mut(*class) {
                    m.add(model.as_deref());
                }
            }
        }
        out
    }
}

impl Drop for Want<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.wanted.counts.lock() {
            if let Some(n) = c.get_mut(&self.key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.remove(&self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
