//! OpenTelemetry tracing: the tracer provider with OTLP export, and the two
//! spans of each proxied request (SERVER, continuing the caller's W3C trace
//! context, and a CLIENT child for the upstream call).
//!
//! Spans are started when the request arrives and filled once, in `logging`,
//! from the [`RequestRecord`]: events carry their real timestamps (arrival
//! wall time plus monotonic offsets), so nothing touches a span per event.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span, SpanExporter};
use opentelemetry_sdk::Resource;

use super::export::{self, ExportQueue};
use super::metrics::SpanCounts;
use super::semconv as sc;
use crate::record::{Outcome, RequestRecord};
use crate::settings::{OtlpProtocol, Settings};
use attributes::add_events;
use llamatap_wire::tracecontext::{self, TraceParent};

mod attributes;

/// Failure to start tracing.
#[derive(Debug, thiserror::Error)]
#[error("cannot start OTLP export: {0}")]
pub struct TracingError(String);

/// The tracer and its provider.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    capture_content: bool,
    server_address: String,
    server_port: i64,
}

/// The spans of one request.
pub struct RequestSpan {
    server: Span,
    client: Option<Span>,
    tracestate: Option<String>,
}

impl Tracing {
    /// Starts the provider with a bounded OTLP export queue; a request never
    /// routed names `default_server` as its `server.address`/`server.port`.
    pub fn start(
        cfg: &Settings,
        default_server: (&str, u16),
        counts: SpanCounts,
    ) -> Result<Option<Tracing>, TracingError> {
        let Some(endpoint) = &cfg.otlp_endpoint else {
            return Ok(None);
        };
        let err = |e: &dyn std::fmt::Display| TracingError(e.to_string());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("llamatap-otlp-io")
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        let resource = Resource::builder()
            .with_service_name(cfg.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let timeout = Duration::from_secs(10);
        let processor = {
            let _guard = runtime.enter();
            match cfg.otlp_protocol {
                OtlpProtocol::Grpc => {
                    let mut e = opentelemetry_otlp::SpanExporter::builder()
                        .with_tonic()
                        .with_endpoint(endpoint.clone())
                        .with_timeout(timeout)
                        .build()
                        .map_err(|e| err(&e))?;
                    e.set_resource(&resource);
                    ExportQueue::start(e, runtime, cfg.export_queue_size, counts)
                }
                OtlpProtocol::HttpProtobuf => {
                    let mut e = opentelemetry_otlp::SpanExporter::builder()
                        .with_http()
                        .with_endpoint(http_traces_url(endpoint))
                        .with_timeout(timeout)
                        .build()
                        .map_err(|e| err(&e))?;
                    e.set_resource(&resource);
                    ExportQueue::start(e, runtime, cfg.export_queue_size, counts)
                }
            }
            .map_err(|e| err(&e))?
        };
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_sampler(sampler)
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("llamatap");
        Ok(Some(Tracing {
            provider,
            tracer,
            capture_content: cfg.capture_content,
            server_address: default_server.0.to_string(),
            server_port: i64::from(default_server.1),
        }))
    }

    /// Starts the SERVER span at the request's arrival, continuing a valid
    /// caller context (an invalid `traceparent` starts a new trace).
    pub fn start_request(
        &self,
        traceparent: Option<&[u8]>,
        tracestate: Option<&[u8]>,
        received: SystemTime,
    ) -> RequestSpan {
        let parent = traceparent.and_then(TraceParent::parse);
        let state = parent
            .as_ref()
            .and(tracestate)
            .filter(|s| tracecontext::valid_tracestate(s))
            .and_then(|s| std::str::from_utf8(s).ok())
            .map(str::to_string);
        let cx = match &parent {
            Some(p) => {
                let ts = state
                    .as_deref()
                    .and_then(|s| s.parse::<TraceState>().ok())
                    .unwrap_or_default();
                Context::new().with_remote_span_context(SpanContext::new(
                    TraceId::from_bytes(p.trace_id),
                    SpanId::from_bytes(p.parent_id),
                    TraceFlags::new(p.flags & 1),
                    true,
                    ts,
                ))
            }
            None => Context::new(),
        };
        let server = self
            .tracer
            .span_builder("llm")
            .with_kind(SpanKind::Server)
            .with_start_time(whole_micros(received))
            .start_with_context(&self.tracer, &cx);
        RequestSpan {
            server,
            client: None,
            tracestate: state,
        }
    }

    /// Starts the CLIENT span for an upstream attempt and returns the
    /// `traceparent` (and `tracestate`) to send upstream.
    pub fn start_upstream(
        &self,
        span: &mut RequestSpan,
        now: SystemTime,
    ) -> (String, Option<String>) {
        let sc = span.server.span_context().clone();
        let cx = Context::new().with_remote_span_context(sc);
        let client = self
            .tracer
            .span_builder("upstream")
            .with_kind(SpanKind::Client)
            .with_start_time(whole_micros(now))
            .start_with_context(&self.tracer, &cx);
        let c = client.span_context();
        let header = tracecontext::format_traceparent(
            c.trace_id().to_bytes(),
            c.span_id().to_bytes(),
            c.trace_flags().to_u8(),
        );
        if let Some(mut old) = span.client.replace(client) {
            old.end_with_timestamp(whole_micros(now));
        }
        (header, span.tracestate.clone())
    }

    /// Fills and ends both spans from the finished request. True when the
    /// SERVER span was sampled and taken by the export queue: only then may
    /// an exemplar name its trace (a span the full queue dropped never
    /// reaches the collector).
    pub fn finish(&self, mut span: RequestSpan, rec: &RequestRecord) -> bool {
        // Every time of the spans in whole microseconds, so that an event
        // at the very end of its span (a first sentence decided at the
        // terminal event) is not shown after the span's end by a viewer
        // that turns start and duration into microseconds separately.
        let at = |d: Duration| whole_micros(rec.received_wall + d);
        let end = at(rec.end);
        let op = rec.route.operation_name();
        let req_model = rec.request.model.as_deref();
        let name = match (op, req_model) {
            (Some(op), Some(m)) => format!("{op} {m}"),
            (Some(op), None) => op.to_string(),
            (None, _) => format!("{} {}", rec.method, rec.route.as_str()),
        };
        let s = &mut span.server;
        s.update_name(name.clone());
        for kv in self.attributes(rec) {
            s.set_attribute(kv);
        }
        s.set_attribute(KeyValue::new(sc::LLAMATAP_TENANT, rec.tenant().to_string()));
        if let Some(c) = &rec.conversation {
            s.set_attribute(KeyValue::new(
                sc::LLAMATAP_CONVERSATION_USE,
                c.usage.as_str(),
            ));
            let replayed = i64::try_from(c.replayed_bytes).unwrap_or(i64::MAX);
            let unsent = i64::try_from(c.unsent_bytes).unwrap_or(i64::MAX);
            s.set_attribute(KeyValue::new(
                sc::LLAMATAP_CONVERSATION_REPLAYED_BYTES,
                replayed,
            ));
            s.set_attribute(KeyValue::new(
                sc::LLAMATAP_CONVERSATION_UNSENT_BYTES,
                unsent,
            ));
            if c.from_copy {
                s.set_attribute(KeyValue::new(sc::LLAMATAP_CONVERSATION_FROM_COPY, true));
            }
        }
        if let Some(q) = &rec.queue {
            s.set_attribute(KeyValue::new(sc::LLAMATAP_PRIORITY, q.class));
            s.add_event_with_timestamp(
                sc::EVENT_QUEUED,
                at(q.wait),
                vec![KeyValue::new(sc::LLAMATAP_QUEUE_WAIT, q.wait.as_secs_f64())],
            );
        }
        add_events(s, rec, &at, self.capture_content);
        super::cachebreak::add_event(s, rec, &at, self.capture_content);
        super::continuation::add_events(s, rec, &at);
        if let Some(mut c) = span.client.take() {
            c.update_name(name);
            let (address, port) = self.server(rec);
            c.set_attribute(KeyValue::new(sc::SERVER_ADDRESS, address));
            c.set_attribute(KeyValue::new(sc::SERVER_PORT, port));
            c.set_attribute(KeyValue::new(sc::HTTP_REQUEST_METHOD, rec.method.clone()));
            if let Some(op) = op {
                c.set_attribute(KeyValue::new(sc::GEN_AI_OPERATION_NAME, op));
                c.set_attribute(KeyValue::new(
                    sc::GEN_AI_PROVIDER_NAME,
                    sc::PROVIDER_LLAMA_CPP,
                ));
            }
            if let Some(code) = rec.status {
                c.set_attribute(KeyValue::new(
                    sc::HTTP_RESPONSE_STATUS_CODE,
                    i64::from(code),
                ));
            }
            if let Some(h) = rec.upstream_headers {
                c.add_event_with_timestamp(sc::EVENT_UPSTREAM_HEADERS, at(h), vec![]);
            }
            if matches!(rec.outcome, Outcome::UpstreamError) {
                c.set_status(Status::error(rec.error_message.clone().unwrap_or_default()));
            }
            c.end_with_timestamp(end);
        }
        match rec.outcome {
            Outcome::Ok => {}
            Outcome::ClientError => {}
            _ => s.set_status(Status::error(
                rec.error_message
                    .clone()
                    .unwrap_or_else(|| rec.outcome.as_str().to_string()),
            )),
        }
        let id = s.span_context().span_id();
        let _ = export::take_accepted();
        s.end_with_timestamp(end);
        export::take_accepted() == Some(id)
    }

    /// The `traceresponse` value for a request's SERVER span.
    pub fn traceresponse(span: &RequestSpan) -> String {
        let c = span.server.span_context();
        tracecontext::format_traceparent(
            c.trace_id().to_bytes(),
            c.span_id().to_bytes(),
            c.trace_flags().to_u8(),
        )
    }

    /// The trace id of a request, hex.
    pub fn trace_id(span: &RequestSpan) -> String {
        span.server.span_context().trace_id().to_string()
    }

    /// The context of a request's SERVER span.
    pub fn server_context(span: &RequestSpan) -> SpanContext {
        span.server.span_context().clone()
    }

    /// The trace and span ids of a request's SERVER span, as bytes (an
    /// OTLP exemplar's).
    pub fn span_ref(span: &RequestSpan) -> crate::genai::SpanRef {
        let c = span.server.span_context();
        crate::genai::SpanRef {
            trace_id: c.trace_id().to_bytes(),
            span_id: c.span_id().to_bytes(),
        }
    }

    /// The trace and span ids of a request's SERVER span, hex.
    pub fn span_ids(span: &RequestSpan) -> crate::access_line::SpanIds {
        let c = span.server.span_context();
        crate::access_line::SpanIds {
            trace_id: c.trace_id().to_string(),
            span_id: c.span_id().to_string(),
        }
    }

    /// The trace id of a request whose trace is sampled (recorded, and
    /// exported unless the export queue drops it), hex.
    pub fn sampled_trace_id(span: &RequestSpan) -> Option<String> {
        let c = span.server.span_context();
        c.is_sampled().then(|| c.trace_id().to_string())
    }

    /// Exports the queued spans and stops export, giving up after `within`.
    pub fn shutdown(&self, within: Duration) {
        let _ = self.provider.shutdown_with_timeout(within);
    }
}

/// `t` rounded down to a whole microsecond (the resolution of Jaeger and
/// most viewers): rounding every time of a span the same way keeps each
/// event within its span once shown.
pub fn whole_micros(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => {
            SystemTime::UNIX_EPOCH
                + Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        }
        Err(_) => t,
    }
}

/// OTLP/HTTP wants the signal path; a bare base URL gets `/v1/traces`.
fn http_traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

#[cfg(test)]
mod tests;
