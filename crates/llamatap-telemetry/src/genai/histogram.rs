//! One explicit-bucket histogram of the OTLP metrics: cumulative bucket
//! counts, sum, min and max, and per bucket the latest sampled
//! observation as an exemplar (its value, moment, trace id and span id).
//!
//! Deliberately not here: which values are observed (the parent module)
//! and their wire encoding (`encode`). Pure: no clock, no I/O.

/// The trace and span ids of a sampled request (the SERVER span's), for an
/// exemplar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpanRef {
    /// The trace id.
    pub trace_id: [u8; 16],
    /// The span id.
    pub span_id: [u8; 8],
}

/// An exemplar: one sampled observation of a bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exemplar {
    /// The value observed.
    pub value: f64,
    /// When it happened, nanoseconds since the Unix epoch.
    pub time_unix_nano: u64,
    /// The request's trace and span.
    pub span: SpanRef,
}

/// A cumulative explicit-bucket histogram. Bucket `i` counts values in
/// `(bounds[i-1], bounds[i]]`; the last one counts values above the last
/// bound (OTLP's rule, upper bounds inclusive).
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    exemplars: Vec<Option<Exemplar>>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            exemplars: vec![None; bounds.len() + 1],
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds `value` (a NaN is ignored); with `exemplar`, the value becomes
    /// its bucket's exemplar, replacing the one before.
    pub fn observe(&mut self, value: f64, exemplar: Option<(SpanRef, u64)>) {
        if value.is_nan() {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < value);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        if let (Some((span, time_unix_nano)), Some(slot)) = (exemplar, self.exemplars.get_mut(i)) {
            *slot = Some(Exemplar {
                value,
                time_unix_nano,
                span,
            });
        }
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// The upper bounds.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Counts per bucket (one more than the bounds).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The exemplars, bucket by bucket.
    pub fn exemplars(&self) -> impl Iterator<Item = &Exemplar> {
        self.exemplars.iter().flatten()
    }

    /// Values observed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The smallest and largest value, once one was observed.
    pub fn min_max(&self) -> Option<(f64, f64)> {
        (self.count > 0).then_some((self.min, self.max))
    }
}
