//! Recording one finished request, once, in the proxy's `logging`: its
//! count, its stages (each exemplar stamped with the moment the stage
//! happened), tokens, time per output token, its longest gap, a hang-up's
//! phase and wasted time, then the upstream, tenant, cache-break and queue
//! families, and last the OTLP metrics ([`crate::genai`]).
//!
//! Deliberately not here: the families themselves (the parent module) and
//! the model label's bound ([`super::super::models`]).

use super::*;

impl Metrics {
    /// Records one finished request under `model` (already a bounded label),
    /// in the Prometheus families and, when on, the OTLP metrics (under
    /// `models`, the request's and the answer's model labels); `exemplar` is
    /// the trace of a sampled request.
    pub fn record(
        &self,
        rec: &RequestRecord,
        model: &str,
        models: &RequestModels,
        exemplar: Option<&TraceExemplar>,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                model: model.to_string(),
                outcome: rec.outcome.as_str(),
                route: rec.route.as_str(),
            })
            .inc();
        let mut key = StageLabels {
            model: model.to_string(),
            stage: "",
        };
        let at = |d: Duration| rec.received_wall + d;
        // Each stage's exemplar is stamped with the moment it happened.
        let mut stage = |name: &'static str, d: Duration, moment: Duration| {
            key.stage = name;
            observe(&self.stage.get_or_create(&key), d, exemplar, at(moment));
        };
        // Moments reached before any cut are stages of every request; the
        // stages of an answer's end only of an answer that arrived whole.
        let answered = rec.answered();
        for (name, d) in [
            ("queued", rec.queue.map(|q| q.wait)),
            ("upstream_headers", rec.upstream_headers),
            ("first_token_any", rec.first_token_any),
            ("ttft", rec.first_token),
            ("first_sentence", rec.first_sentence),
            ("last_token", rec.last_token.filter(|_| answered)),
        ] {
            if let Some(d) = d {
                stage(name, d, d);
            }
        }
        if answered && rec.route.operation_name().is_some() {
            stage("e2e", rec.end, rec.end);
        }
        if let Some(t) = &rec.timings {
            // Durations, not moments: their exemplars are stamped with the end.
            for (name, d) in [("prefill", t.prefill()), ("decode", t.decode())] {
                if let Some(d) = d {
                    stage(name, d, rec.end);
                }
            }
        }
        let mut tokens = TokenLabels {
            kind: "",
            model: model.to_string(),
        };
        for (kind, n) in [
            ("prompt", rec.input_tokens()),
            ("cached", rec.cached_input_tokens()),
            ("completion", rec.output_tokens()),
        ] {
            if let Some(n) = n {
                tokens.kind = kind;
                self.tokens.get_or_create(&tokens).inc_by(n);
            }
        }
        let by_model = ModelLabels {
            model: model.to_string(),
        };
        if let Some(t) = rec.time_per_output_token().filter(|_| answered) {
            let end = rec.last_token.unwrap_or(rec.end);
            observe(&self.tpot.get_or_create(&by_model), t, exemplar, at(end));
        }
        if let Some(g) = rec.max_token_gap {
            self.max_gap
                .get_or_create(&by_model)
                .observe(g.as_secs_f64());
        }
        if rec.outcome == Outcome::ClientHangup {
            let phase = rec
                .hangup_phase
                .map(|p| p.as_str())
                .unwrap_or("before_headers");
            self.cancellations
                .get_or_create(&PhaseLabels {
                    model: model.to_string(),
                    phase,
                })
                .inc();
            self.wasted
                .get_or_create(&by_model)
                .inc_by(rec.end.as_secs_f64());
        }
        if rec.skipped_events > 0 {
            self.skipped_events.inc_by(rec.skipped_events);
        }
        self.upstreams.record(rec, exemplar);
        self.tenants.record(rec);
        self.cachebreak.record(rec);
        self.queue.record(rec);
        self.continuation.record(rec);
        self.conversation.record(rec);
        self.ttft.record(rec, model);
        self.genai.record(rec, models, exemplar.map(|e| e.span));
    }
}
