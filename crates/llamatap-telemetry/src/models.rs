//! The set of model names allowed as metric labels: what the upstreams
//! report (`/v1/models`), refreshed in the background, plus configured
//! aliases. Anything else is labelled `other`; requests with no model `none`.
//!
//! This bounds the `model` label no matter what clients send, and no matter
//! what the upstreams report over time: at most [`MAX_MODELS`] names are held
//! at once (aliases first, then names already held, then new ones in sorted
//! order; the rest are `other`), and a name no upstream serves any more is
//! let go, so its series can be removed ([`ModelChange::removed`]).
//!
//! Deliberately not here: reading the names from a `/v1/models` body
//! (`llamatap_wire::llama::parse_model_list`).

use std::collections::BTreeSet;
use std::sync::RwLock;

#[cfg(test)]
mod tests;

/// Label for names not in the set.
pub const OTHER: &str = "other";
/// Label for requests without any model name.
pub const NONE: &str = "none";
/// At most this many names (aliases included) are labels at once; each
/// costs about 300 series, so `/metrics` stays bounded whatever a router-mode
/// llama-server or a stream of model swaps reports.
pub const MAX_MODELS: usize = 16;
/// Longest name kept as a label, in bytes.
const MAX_NAME_BYTES: usize = 256;

/// What [`ModelNames::replace`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ModelChange {
    /// Names that became labels.
    pub added: Vec<String>,
    /// Names that are labels no more.
    pub removed: Vec<String>,
}

/// Allowed model labels.
#[derive(Debug, Default)]
pub struct ModelNames {
    aliases: Vec<String>,
    names: RwLock<BTreeSet<String>>,
}

fn usable(n: &str) -> bool {
    !n.is_empty() && n.len() <= MAX_NAME_BYTES && n != OTHER && n != NONE
}

impl ModelNames {
    /// A set seeded with configured aliases (the first [`MAX_MODELS`]).
    pub fn new(aliases: Vec<String>) -> Self {
        let aliases: Vec<String> = aliases
            .into_iter()
            .filter(|a| usable(a))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(MAX_MODELS)
            .collect();
        let names = aliases.iter().cloned().collect();
        ModelNames {
            aliases,
            names: RwLock::new(names),
        }
    }

    /// Replaces the upstream-reported names (aliases stay). Names already
    /// held are kept before new ones, so labels do not flap when more than
    /// [`MAX_MODELS`] names are served; names beyond the cap are `other`.
    pub fn replace(&self, upstream: impl IntoIterator<Item = String>) -> ModelChange {
        let served: BTreeSet<String> = upstream.into_iter().filter(|n| usable(n)).collect();
        let Ok(mut held) = self.names.write() else {
            return ModelChange::default();
        };
        let mut next: BTreeSet<String> = self.aliases.iter().cloned().collect();
        let kept = served.iter().filter(|n| held.contains(*n));
        let new = served.iter().filter(|n| !held.contains(*n));
        for n in kept.chain(new) {
            if next.len() >= MAX_MODELS {
                break;
            }
            next.insert(n.clone());
        }
        let change = ModelChange {
            added: next.difference(&held).cloned().collect(),
            removed: held.difference(&next).cloned().collect(),
        };
        *held = next;
        change
    }

    /// Whether `name` is a label now.
    pub fn contains(&self, name: &str) -> bool {
        self.names.read().is_ok_and(|g| g.contains(name))
    }

    /// The label for `name`.
    pub fn label(&self, name: Option<&str>) -> String {
        let Some(name) = name else {
            return NONE.to_string();
        };
        match self.names.read() {
            Ok(g) if g.contains(name) => name.to_string(),
            _ => OTHER.to_string(),
        }
    }

    /// Current names, sorted.
    pub fn list(&self) -> Vec<String> {
        self.names
            .read()
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }
}
