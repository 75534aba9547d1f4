//! The label sets of llamatap's own metric families. Fields are in
//! alphabetical order: the order labels are written in.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

/// The exemplar of a sampled request: its trace id (32 hex digits), the
/// only label of a Prometheus exemplar, and the SERVER span's ids for the
/// OTLP metrics' exemplars.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct TraceExemplar {
    /// The trace id, lower-case hex.
    pub trace_id: Arc<String>,
    /// The trace and span ids, as bytes.
    pub span: crate::genai::SpanRef,
}

impl EncodeLabelSet for TraceExemplar {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        [("trace_id", self.trace_id.as_str())].encode(encoder)
    }
}

/// `{model}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    /// Bounded model label.
    pub model: String,
}

/// `{model,stage}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// Bounded model label.
    pub model: String,
    /// One of [`STAGES`].
    pub stage: &'static str,
}

/// `{model,outcome,route}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Bounded model label.
    pub model: String,
    /// [`Outcome::as_str`].
    pub outcome: &'static str,
    /// [`Route::as_str`].
    pub route: &'static str,
}

/// `{kind,model}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// `prompt`, `cached` or `completion`.
    pub kind: &'static str,
    /// Bounded model label.
    pub model: String,
}

/// `{model,upstream}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServedLabels {
    /// Bounded model label.
    pub model: String,
    /// The configured upstream name.
    pub upstream: String,
}

/// `{model,phase}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Bounded model label.
    pub model: String,
    /// [`HangupPhase::as_str`].
    pub phase: &'static str,
}

/// `{result}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// A fixed result name.
    pub result: &'static str,
}

/// `{version}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    /// The crate version.
    pub version: &'static str,
}
