//! Which exposition format `/metrics` answers in, from the scraper's
//! `Accept` header: OpenMetrics 1.0.0 (with exemplars) when the scraper
//! asks for `application/openmetrics-text` at least as strongly as for
//! anything else, the classic Prometheus text format (0.0.4) otherwise.
//!
//! Pure: parses a header value, knows nothing of HTTP servers or encoders.
//! A wildcard (`*/*`, `text/*`) or a missing header means the classic
//! format: OpenMetrics is served only to a scraper that names it.

#[cfg(test)]
mod tests;

/// An exposition format of `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// Prometheus text format 0.0.4: no exemplars. The default.
    Classic,
    /// OpenMetrics text 1.0.0: exemplars on the traced histograms.
    OpenMetrics,
}

impl Exposition {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format to answer a request whose `Accept` header is `accept`.
    /// OpenMetrics wins when its quality is positive and no other listed
    /// type (wildcards included) has a higher one.
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let Some(accept) = accept else {
            return Exposition::Classic;
        };
        let mut openmetrics: f32 = 0.0;
        let mut other: f32 = 0.0;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            let q = parts
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    k.trim().eq_ignore_ascii_case("q").then(|| v.trim())
                })
                .next()
                .map_or(Some(1.0), |v| v.parse::<f32>().ok())
                .filter(|q| q.is_finite())
                .unwrap_or(0.0);
            if media == "application/openmetrics-text" {
                openmetrics = openmetrics.max(q);
            } else {
                other = other.max(q);
            }
        }
        if openmetrics > 0.0 && openmetrics >= other {
            Exposition::OpenMetrics
        } else {
            Exposition::Classic
        }
    }
}
