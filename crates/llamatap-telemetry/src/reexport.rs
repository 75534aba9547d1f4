//! Re-exports llama-server's own `llamacpp:*` metrics on llamatap's
//! `/metrics`, each sample with an `upstream` label naming the llama-server
//! it came from: one scrape target for the whole fleet.
//!
//! The upstream watcher (the fleet's watcher) reads each upstream's
//! `/metrics` at its interval and hands the parsed, bounded families
//! ([`llamatap_wire::llama::server_metrics`]) to [`LlamacppSeries::set`]; an upstream that is
//! down, or runs without `--metrics`, has its series removed rather than
//! frozen. Values are exported as last read (at most one check interval
//! old); nothing is aggregated or renamed, except that a counter without
//! `_total` is typed `unknown`.

use std::sync::RwLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use llamatap_wire::llama::server_metrics::{Family, Kind, UPSTREAM_LABEL};

/// The latest families read from each upstream, by configured name.
#[derive(Debug, Default)]
pub struct LlamacppSeries {
    by_upstream: RwLock<Vec<(String, Vec<Family>)>>,
}

impl LlamacppSeries {
    /// Replaces what `upstream` exports.
    pub fn set(&self, upstream: &str, families: Vec<Family>) {
        let Ok(mut g) = self.by_upstream.write() else {
            return;
        };
        match g.iter_mut().find(|(name, _)| name == upstream) {
            Some(entry) => entry.1 = families,
            None => g.push((upstream.to_string(), families)),
        }
    }

    /// Removes what `upstream` exports.
    pub fn clear(&self, upstream: &str) {
        if let Ok(mut g) = self.by_upstream.write() {
            g.retain(|(name, _)| name != upstream);
        }
    }

    /// Samples exported now, all upstreams together.
    pub fn len(&self) -> usize {
        self.by_upstream.read().map_or(0, |g| {
            g.iter()
                .flat_map(|(_, fs)| fs.iter())
                .map(|f| f.samples.len())
                .sum()
        })
    }

    /// Whether nothing is exported now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Unknown => MetricType::Unknown,
    }
}

impl Collector for LlamacppSeries {
    /// One descriptor per family name (the first upstream's help and type
    /// win; a family another upstream types differently is left out there),
    /// then every upstream's samples of it.
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(g) = self.by_upstream.read() else {
            return Ok(());
        };
        let mut order: Vec<&Family> = Vec::new();
        for f in g.iter().flat_map(|(_, fs)| fs.iter()) {
            if !f.samples.is_empty() && !order.iter().any(|o| o.name == f.name) {
                order.push(f);
            }
        }
        for first in order {
            let help = if first.help.is_empty() {
                "llama-server's own metric"
            } else {
                first.help.as_str()
            };
            let mut family =
                encoder.encode_descriptor(&first.name, help, None, metric_type(first.kind))?;
            for (upstream, families) in g.iter() {
                let same = families
                    .iter()
                    .filter(|f| f.name == first.name && f.kind == first.kind);
                for sample in same.flat_map(|f| f.samples.iter()) {
                    let mut labels: Vec<(&str, &str)> = Vec::with_capacity(1 + sample.labels.len());
                    labels.push((UPSTREAM_LABEL, upstream.as_str()));
                    labels.extend(sample.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    let mut m = family.encode_family(&labels)?;
                    match first.kind {
                        Kind::Counter => {
                            m.encode_counter::<NoLabelSet, f64, f64>(&sample.value, None)?
                        }
                        Kind::Gauge | Kind::Unknown => m.encode_gauge(&sample.value)?,
                    }
                }
            }
        }
        Ok(())
    }
}
