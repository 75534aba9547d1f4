//! The series of a model label over its life: created at zero when a name
//! becomes servable (so dashboards and alerts see it before traffic), and
//! removed when no upstream reports it any more, so the series stay bounded
//! over time, not only per snapshot.

use std::collections::BTreeSet;

use super::*;

impl Metrics {
    /// Sets `llamatap_upstream_models` to `served` (upstream name, model
    /// label) pairs, removing the pairs of `before` that are gone. The
    /// caller seeds each model's series first ([`Metrics::seed_model`]): a
    /// scrape that sees a model's gauge sees its series too.
    pub fn set_served(
        &self,
        before: &BTreeSet<(String, String)>,
        served: &BTreeSet<(String, String)>,
    ) {
        for (upstream, model) in before.difference(served) {
            self.upstream_models.remove(&ServedLabels {
                model: model.clone(),
                upstream: upstream.clone(),
            });
        }
        for (upstream, model) in served {
            self.upstream_models
                .get_or_create(&ServedLabels {
                    model: model.clone(),
                    upstream: upstream.clone(),
                })
                .set(1);
        }
    }

    /// The (route, outcome) pairs whose `llamatap_requests_total` series
    /// exist at zero for `model`: those a dashboard reads and a request under
    /// that label really ends in. A named model (and `other`) is read only
    /// from an LLM route's body or answer, and is not seeded `rejected`
    /// (refusals happen before the body is read, but for a chunked body over
    /// the size limit in a fleet, whose series appears when it happens);
    /// `none` takes every outcome on the
    /// LLM routes and, on the other routes, `ok` (their failures appear at
    /// their first occurrence).
    pub fn seeded_requests(model: &str) -> impl Iterator<Item = (Route, Outcome)> + '_ {
        let none = model == crate::models::NONE;
        Route::all().iter().flat_map(move |route| {
            let llm = route.operation_name().is_some();
            Outcome::ALL.into_iter().filter_map(move |outcome| {
                let keep = match (none, llm) {
                    (_, true) => none || outcome != Outcome::Rejected,
                    (true, false) => outcome == Outcome::Ok,
                    (false, false) => false,
                };
                keep.then_some((*route, outcome))
            })
        })
    }

    /// Creates every series a request can be recorded in under one model
    /// label, at zero: each stage histogram, time per output token, the
    /// longest token gap, and the counters ([`Metrics::seeded_requests`]).
    /// A series that exists before the first request makes that request an
    /// increase Prometheus sees (`rate()` needs a sample before it), and
    /// dashboards read 0, not "no data". `other` and `none` are seeded by
    /// [`Metrics::new`].
    pub fn seed_model(&self, model: &str) {
        for stage in STAGES {
            let _ = self.stage.get_or_create(&StageLabels {
                model: model.to_string(),
                stage,
            });
        }
        let by_model = ModelLabels {
            model: model.to_string(),
        };
        let _ = self.tpot.get_or_create(&by_model);
        let _ = self.max_gap.get_or_create(&by_model);
        for (route, outcome) in Self::seeded_requests(model) {
            let _ = self.requests.get_or_create(&RequestLabels {
                model: model.to_string(),
                outcome: outcome.as_str(),
                route: route.as_str(),
            });
        }
        for phase in HangupPhase::ALL {
            let _ = self.cancellations.get_or_create(&PhaseLabels {
                model: model.to_string(),
                phase: phase.as_str(),
            });
        }
        for kind in TOKEN_KINDS {
            let _ = self.tokens.get_or_create(&TokenLabels {
                kind,
                model: model.to_string(),
            });
        }
        let _ = self.wasted.get_or_create(&by_model);
    }

    /// Removes every series of one model label (a name no upstream serves
    /// any more): those seeded and those recorded since, on any route and
    /// outcome.
    pub fn remove_model(&self, model: &str) {
        self.genai.remove_model(model);
        let m = || model.to_string();
        for stage in STAGES {
            self.stage.remove(&StageLabels { model: m(), stage });
        }
        let by_model = ModelLabels { model: m() };
        self.tpot.remove(&by_model);
        self.max_gap.remove(&by_model);
        self.wasted.remove(&by_model);
        for route in Route::all() {
            for outcome in Outcome::ALL {
                self.requests.remove(&RequestLabels {
                    model: m(),
                    outcome: outcome.as_str(),
                    route: route.as_str(),
                });
            }
        }
        for phase in HangupPhase::ALL {
            self.cancellations.remove(&PhaseLabels {
                model: m(),
                phase: phase.as_str(),
            });
        }
        for kind in TOKEN_KINDS {
            self.tokens.remove(&TokenLabels { kind, model: m() });
        }
    }
}
