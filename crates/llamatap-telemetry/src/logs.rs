//! Log lines: `tracing` with `tracing-subscriber`, one line per event on
//! stderr, and the trace of the request in flight on every line written
//! inside it.
//!
//! Each traced request gets a `tracing` span, `request`, which
//! `tracing-opentelemetry` bridges to the request's SERVER span
//! ([`request_span`]): its OpenTelemetry context is that span's, so an
//! event inside it is written with ` trace_id=… span_id=…`. The bridge uses
//! a no-op tracer on purpose: the exported spans stay the ones
//! [`super::spans::Tracing`] builds from the finished request, with their
//! documented names, attributes and exact start, event and end times (a
//! span exported by the bridge would be stamped when it is created and when
//! it is last exited, and would add a third span per request).
//!
//! Pingora's own lines (the `log` crate) come through the same writer,
//! except those that would repeat one of llamatap's for the same event: its
//! server lifecycle lines ([`QUIET_PINGORA_SERVER`]). `RUST_LOG` sets the filter
//! (default [`DEFAULT_FILTER`]).

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

#[cfg(test)]
mod tests;

use super::spans::{RequestSpan, Tracing};

/// The filter without `RUST_LOG`: warnings and errors, and llamatap's own
/// `info` lines: start, shutdown, and upstreams turning healthy or
/// restarting.
pub const DEFAULT_FILTER: &str = "warn,llamatap=info";

/// Added to any filter unless it names this target itself: Pingora's server
/// lifecycle lines (`Bootstrap starting`, `Server starting`, `SIGTERM
/// received, gracefully exiting`, `Graceful shutdown: grace period 10s
/// starts`, ...) repeat llamatap's own start and shutdown lines, and the
/// grace period they announce is not the one llamatap applies.
const QUIET_PINGORA_SERVER: &str = "pingora_core::server=warn";

/// Installs the global subscriber: the `RUST_LOG` filter (default
/// [`DEFAULT_FILTER`], plus [`QUIET_PINGORA_SERVER`]), the line writer on
/// stderr, the OpenTelemetry bridge, and the bridge from the `log` crate.
/// A second call does nothing.
pub fn init() {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(Line);
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::filter::filter_fn(no_header_dump))
        .with(lines)
        .with(tracing_opentelemetry::layer())
        .try_init();
}

/// The filter for `RUST_LOG`'s value (`None` or invalid: the default).
fn filter(rust_log: Option<&str>) -> EnvFilter {
    let spec = rust_log
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_FILTER);
    let mut filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    if !spec.contains("pingora_core::server") {
        if let Ok(d) = QUIET_PINGORA_SERVER.parse() {
            filter = filter.add_directive(d);
        }
    }
    filter
}

/// Leaves out the events that dump a whole request head (Pingora's proxy
/// writes one at `trace`, `Authorization` included), so that no log level
/// puts a client's key in a line.
fn no_header_dump(meta: &tracing::Metadata<'_>) -> bool {
    !(*meta.level() == tracing::Level::TRACE && meta.target().starts_with("pingora_proxy"))
}

/// The `request` span of a traced request, bridged to its SERVER span.
/// Enabled at every level but `off`, so the ids are there whatever the
/// filter lets through.
pub fn request_span(span: &RequestSpan) -> tracing::Span {
    let s = tracing::error_span!("request");
    let cx = Context::new().with_remote_span_context(Tracing::server_context(span));
    let _ = s.set_parent(cx);
    s
}

/// `TIME LEVEL target: message fields[ trace_id=… span_id=…]`.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A `log` record's own target and level, not "log".
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        write!(
            writer,
            "{} {:>5} {}: ",
            crate::access_line::rfc3339(std::time::SystemTime::now()),
            meta.level(),
            meta.target()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        if let Some((trace_id, span_id)) = ids(ctx) {
            write!(writer, " trace_id={trace_id} span_id={span_id}")?;
        }
        writeln!(writer)
    }
}

/// The ids of the innermost span around the event that is bridged to a
/// valid trace.
fn ids<S, N>(ctx: &FmtContext<'_, S, N>) -> Option<(String, String)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let spans: Vec<tracing::span::Id> = ctx.event_scope()?.map(|s| s.id()).collect();
    tracing::dispatcher::get_default(|dispatch| {
        spans.iter().find_map(|id| {
            let cx = tracing_opentelemetry::get_otel_context(id, dispatch)?;
            let sc = cx.span().span_context().clone();
            sc.is_valid()
                .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
        })
    })
}
