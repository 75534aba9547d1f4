//! The set of model names allowed as metric labels: what llama-server itself
//! reports (`/v1/models`), refreshed in the background, plus configured
//! aliases. Anything else is labelled `other`; requests with no model `none`.
//!
//! This bounds the `model` label no matter what clients send.

use std::collections::HashSet;
use std::sync::RwLock;

/// Label for names not in the set.
pub const OTHER: &str = "other";
/// Label for requests without any model name.
pub const NONE: &str = "none";
/// At most this many upstream names are kept (a router with thousands of models still has a bounded label).
pub const MAX_MODELS: usize = 256;

/// Allowed model labels.
#[derive(Debug, Default)]
pub struct ModelNames {
    aliases: Vec<String>,
    names: RwLock<HashSet<String>>,
}

impl ModelNames {
    /// A set seeded with configured aliases.
    pub fn new(aliases: Vec<String>) -> Self {
        let names = aliases.iter().take(MAX_MODELS).cloned().collect();
        ModelNames {
            aliases,
            names: RwLock::new(names),
        }
    }

    /// Replaces the upstream-reported names (aliases stay).
    pub fn replace(&self, upstream: impl IntoIterator<Item = String>) {
        let mut set: HashSet<String> = self.aliases.iter().cloned().collect();
        for n in upstream {
            if set.len() >= MAX_MODELS {
                break;
            }
            if !n.is_empty() && n.len() <= 256 {
                set.insert(n);
            }
        }
        if let Ok(mut g) = self.names.write() {
            *g = set;
        }
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
        let mut v: Vec<String> = self
            .names
            .read()
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// Model ids in a `/v1/models` (or llama-server `/models`) JSON body.
pub fn parse_model_list(body: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for key in ["data", "models"] {
        if let Some(items) = v.get(key).and_then(|d| d.as_array()) {
            for item in items {
                for f in ["id", "name", "model"] {
                    if let Some(s) = item.get(f).and_then(|s| s.as_str()) {
                        out.push(s.to_string());
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
