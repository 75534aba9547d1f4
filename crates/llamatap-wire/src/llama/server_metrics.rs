//! llama-server's own metrics: reads the `llamacpp:*` families of its
//! `/metrics` answer (Prometheus text format 0.0.4, served when it runs with
//! `--metrics`) into bounded plain data, for llamatap to re-export with an
//! `upstream` label.
//!
//! Pure: parses bytes, no I/O and no metrics library. Deliberately not a
//! general exposition parser: only counter, gauge and untyped families
//! whose names start with `llamacpp:` are kept (llama-server has no
//! histograms), and everything is bounded ([`MAX_FAMILIES`],
//! [`MAX_SAMPLES`], [`MAX_LABELS`], [`MAX_STRING_BYTES`]), so a strange or
//! hostile upstream cannot grow llamatap's `/metrics`.

use std::collections::HashMap;

#[cfg(test)]
mod tests;

/// The prefix of the families kept.
pub const PREFIX: &str = "llamacpp:";
/// Most families kept from one answer.
pub const MAX_FAMILIES: usize = 64;
/// Most samples kept from one answer.
pub const MAX_SAMPLES: usize = 256;
/// Most labels of one sample (a sample with more is dropped).
pub const MAX_LABELS: usize = 8;
/// Longest metric name, label name, label value or help text kept, bytes
/// (a longer name or label drops its sample; a longer help text is cut).
pub const MAX_STRING_BYTES: usize = 256;
/// The label llamatap adds; an upstream's own label of that name is
/// renamed to `exported_upstream`, as Prometheus does.
pub const UPSTREAM_LABEL: &str = "upstream";

/// How a family is re-exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A counter whose samples end in `_total`.
    Counter,
    /// A gauge.
    Gauge,
    /// Untyped, or a counter whose name lacks `_total` (llama-server's
    /// `llamacpp:n_tokens_max`): kept under its own name, typed `unknown`,
    /// so that no name changes and OpenMetrics stays valid.
    Unknown,
}

/// One sample: its labels (as sent) and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Label pairs in the upstream's order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// One family.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name to register: a counter's without `_total` (encoders add it),
    /// any other's as sent.
    pub name: String,
    /// Help text (may be empty).
    pub help: String,
    /// Type.
    pub kind: Kind,
    /// Samples, in the order sent.
    pub samples: Vec<Sample>,
}

impl Family {
    /// The name samples are exposed under (`_total` back on counters).
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            _ => self.name.clone(),
        }
    }
}

/// The value of the unlabelled sample named `sample_name` (as exposed:
/// `llamacpp:n_decode_total`, `llamacpp:requests_deferred`), if present.
pub fn value(families: &[Family], sample_name: &str) -> Option<f64> {
    families
        .iter()
        .find(|f| f.sample_name() == sample_name)
        .and_then(|f| f.samples.iter().find(|s| s.labels.is_empty()))
        .map(|s| s.value)
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// The `llamacpp:*` families of a `/metrics` body, bounded.
pub fn parse(body: &[u8]) -> Vec<Family> {
    let text = String::from_utf8_lossy(body);
    let mut help: HashMap<&str, &str> = HashMap::new();
    let mut types: HashMap<&str, &str> = HashMap::new();
    let mut out: Vec<Family> = Vec::new();
    let mut samples = 0;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('#') {
            let mut words = rest.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(name), text) => {
                    help.insert(name, text.unwrap_or(""));
                }
                (Some("TYPE"), Some(name), Some(kind)) => {
                    types.insert(name, kind.trim());
                }
                _ => {}
            }
            continue;
        }
        if !line.starts_with(PREFIX) || samples >= MAX_SAMPLES {
            continue;
        }
        let Some((name, sample)) = parse_sample(line) else {
            continue;
        };
        let declared = types.get(name).copied().or_else(|| {
            // `x_bucket`, `x_sum`, `x_count` of a histogram or summary `x`.
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .and_then(|base| types.get(base).copied())
        });
        let kind = match declared.unwrap_or("untyped") {
            "counter" if name.ends_with("_total") => Kind::Counter,
            "counter" | "untyped" | "unknown" => Kind::Unknown,
            "gauge" => Kind::Gauge,
            // Histograms and summaries: llama-server has none; not re-exported.
            _ => continue,
        };
        if kind == Kind::Counter && !(sample.value.is_finite() && sample.value >= 0.0) {
            continue;
        }
        let base = match kind {
            Kind::Counter => name.trim_end_matches("_total"),
            _ => name,
        };
        let i = match out.iter().position(|f| f.name == base) {
            Some(i) => i,
            None if out.len() < MAX_FAMILIES => {
                let text = help.get(name).copied().unwrap_or("");
                out.push(Family {
                    name: base.to_string(),
                    help: crate::text::bounded(text, MAX_STRING_BYTES),
                    kind,
                    samples: Vec::new(),
                });
                out.len() - 1
            }
            None => continue,
        };
        // A label set sent twice would be a duplicate series: the first wins.
        if let Some(f) = out
            .get_mut(i)
            .filter(|f| f.samples.iter().all(|s| s.labels != sample.labels))
        {
            f.samples.push(sample);
            samples += 1;
        }
    }
    out
}

/// `name{labels} value [timestamp]`: the name and the sample, or `None` for
/// anything malformed or over a bound.
fn parse_sample(line: &str) -> Option<(&str, Sample)> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.len() > MAX_STRING_BYTES || name.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    let mut rest = line[name_end..].trim_start();
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after)?;
        labels = parsed;
        rest = tail;
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some((name, Sample { labels, value }))
}

/// Label pairs up to the closing `}`, and what follows it.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels: Vec<(String, String)> = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(tail) = s.strip_prefix('}') {
            return Some((labels, tail));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        let valid = !key.is_empty()
            && key.len() <= MAX_STRING_BYTES
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !key.as_bytes()[0].is_ascii_digit();
        if !valid {
            return None;
        }
        let (value, tail) = parse_quoted(s[eq + 1..].trim_start())?;
        if labels.len() >= MAX_LABELS || value.len() > MAX_STRING_BYTES {
            return None;
        }
        let key = if key == UPSTREAM_LABEL {
            "exported_upstream"
        } else {
            key
        };
        labels.push((key.to_string(), value));
        s = tail.trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// A double-quoted label value with `\\`, `\"` and `\n` escapes, and what
/// follows its closing quote.
fn parse_quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}
