//! Publishing which models the upstreams serve: the allowed `model` labels
//! ([`super::models::ModelNames`]), each label's series (created at zero
//! when a name arrives, removed when it goes), and
//! `llamatap_upstream_models{model,upstream}`.
//!
//! Series are bounded over time, not only per snapshot: a name let go has
//! its series removed at once and again at the next publication (a request
//! labelled just before the change may have written one back since).
//! Deliberately not here: reading `/v1/models` (the upstream watcher does).

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::metrics::Metrics;
use super::models::ModelNames;

/// What the last publication left behind.
#[derive(Debug, Default)]
pub struct Served {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Names let go at the last publication.
    retired: Vec<String>,
    /// The (upstream, model) pairs of `llamatap_upstream_models`.
    pairs: BTreeSet<(String, String)>,
}

impl Served {
    /// Publishes `served` (each upstream's name and the model names it
    /// reports). Nothing changes when no upstream reports any name (a
    /// fleet whose lists failed to read keeps its labels).
    pub fn publish(&self, names: &ModelNames, metrics: &Metrics, served: &[(String, Vec<String>)]) {
        if served.iter().all(|(_, m)| m.is_empty()) {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let change = names.replace(served.iter().flat_map(|(_, m)| m.iter().cloned()));
        for n in &change.added {
            metrics.seed_model(n);
        }
        let pairs: BTreeSet<(String, String)> = served
            .iter()
            .flat_map(|(u, models)| {
                models
                    .iter()
                    .filter(|m| names.contains(m))
                    .map(move |m| (u.clone(), m.clone()))
            })
            .collect();
        metrics.set_served(&state.pairs, &pairs);
        state.pairs = pairs;
        for n in state.retired.iter().chain(&change.removed) {
            if !names.contains(n) {
                metrics.remove_model(n);
            }
        }
        state.retired = change.removed;
    }
}
