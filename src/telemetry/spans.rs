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
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span, SpanExporter};
use opentelemetry_sdk::Resource;

use super::export::{self, ExportQueue};
use super::metrics::SpanCounts;
use super::semconv as sc;
use crate::config::{OtlpProtocol, Telemetry as TelemetryConfig, UpstreamConfig};
use crate::record::{Outcome, RequestRecord};
use crate::tracecontext::{self, TraceParent};

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
    /// Starts the provider with a bounded OTLP export queue.
    pub fn start(
        cfg: &TelemetryConfig,
        upstream: &UpstreamConfig,
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
            server_address: upstream.host.clone(),
            server_port: i64::from(upstream.port),
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
            .with_start_time(received)
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
            .with_start_time(now)
            .start_with_context(&self.tracer, &cx);
        let c = client.span_context();
        let header = tracecontext::format_traceparent(
            c.trace_id().to_bytes(),
            c.span_id().to_bytes(),
            c.trace_flags().to_u8(),
        );
        if let Some(mut old) = span.client.replace(client) {
            old.end_with_timestamp(now);
        }
        (header, span.tracestate.clone())
    }

    /// Fills and ends both spans from the finished request. True when the
    /// SERVER span was sampled and taken by the export queue: only then may
    /// an exemplar name its trace (a span the full queue dropped never
    /// reaches the collector).
    pub fn finish(&self, mut span: RequestSpan, rec: &RequestRecord) -> bool {
        let at = |d: Duration| rec.received_wall + d;
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

    /// `server.address` and `server.port`: the upstream that answered, or
    /// the first configured one when the request was not routed.
    fn server(&self, rec: &RequestRecord) -> (String, i64) {
        match &rec.upstream {
            Some(u) => (u.host.clone(), i64::from(u.port)),
            None => (self.server_address.clone(), self.server_port),
        }
    }

    fn attributes(&self, rec: &RequestRecord) -> Vec<KeyValue> {
        let (address, port) = self.server(rec);
        let mut v = vec![
            KeyValue::new(sc::HTTP_REQUEST_METHOD, rec.method.clone()),
            KeyValue::new(sc::URL_PATH, rec.path.clone()),
            KeyValue::new(sc::URL_SCHEME, "http"),
            KeyValue::new(sc::HTTP_ROUTE, rec.route.as_str()),
            KeyValue::new(sc::LLAMATAP_ROUTE, rec.route.as_str()),
            KeyValue::new(sc::LLAMATAP_OUTCOME, rec.outcome.as_str()),
            KeyValue::new(sc::SERVER_ADDRESS, address),
            KeyValue::new(sc::SERVER_PORT, port),
        ];
        if let Some(u) = &rec.upstream {
            v.push(KeyValue::new(sc::LLAMATAP_UPSTREAM, u.name.clone()));
            v.push(KeyValue::new(sc::LLAMATAP_ROUTE_POLICY, u.policy));
            v.push(KeyValue::new(sc::LLAMATAP_ROUTE_REASON, u.reason));
            v.push(KeyValue::new(
                sc::LLAMATAP_ROUTE_FAILOVERS,
                i64::from(u.failovers),
            ));
            if let Some(t) = u.predicted_cached_tokens {
                v.push(KeyValue::new(
                    sc::LLAMATAP_ROUTE_PREDICTED_CACHED_TOKENS,
                    i64::try_from(t).unwrap_or(i64::MAX),
                ));
            }
            if let Some(p) = u.prediction {
                v.push(KeyValue::new(sc::LLAMATAP_ROUTE_PREDICTION, p));
            }
        }
        let mut put = |k: &'static str, val: Option<Value>| {
            if let Some(val) = val {
                v.push(KeyValue::new(k, val));
            }
        };
        let int = |n: Option<u64>| n.map(|n| Value::I64(i64::try_from(n).unwrap_or(i64::MAX)));
        put(
            sc::CLIENT_ADDRESS,
            rec.client_address.clone().map(Value::from),
        );
        put(
            sc::HTTP_RESPONSE_STATUS_CODE,
            rec.status.map(|s| Value::I64(i64::from(s))),
        );
        put(sc::ERROR_TYPE, rec.error_type.map(Value::from));
        if let Some(op) = rec.route.operation_name() {
            put(sc::GEN_AI_OPERATION_NAME, Some(op.into()));
            put(
                sc::GEN_AI_PROVIDER_NAME,
                Some(sc::PROVIDER_LLAMA_CPP.into()),
            );
            put(
                sc::GEN_AI_REQUEST_STREAM,
                Some(Value::Bool(rec.request.stream.unwrap_or(false))),
            );
        }
        put(
            sc::GEN_AI_REQUEST_MODEL,
            rec.request.model.clone().map(Value::from),
        );
        put(sc::GEN_AI_REQUEST_MAX_TOKENS, int(rec.request.max_tokens));
        put(
            sc::GEN_AI_REQUEST_TEMPERATURE,
            rec.request.temperature.map(Value::F64),
        );
        put(sc::GEN_AI_REQUEST_TOP_P, rec.request.top_p.map(Value::F64));
        put(sc::GEN_AI_REQUEST_SEED, rec.request.seed.map(Value::I64));
        put(
            sc::GEN_AI_RESPONSE_MODEL,
            rec.response_model.clone().map(Value::from),
        );
        put(
            sc::GEN_AI_RESPONSE_ID,
            rec.response_id.clone().map(Value::from),
        );
        if !rec.finish_reasons.is_empty() {
            let arr: Vec<opentelemetry::StringValue> = rec
                .finish_reasons
                .iter()
                .map(|r| r.clone().into())
                .collect();
            put(
                sc::GEN_AI_RESPONSE_FINISH_REASONS,
                Some(Value::Array(arr.into())),
            );
        }
        put(
            sc::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
            rec.first_token_any.map(|d| Value::F64(d.as_secs_f64())),
        );
        put(sc::GEN_AI_USAGE_INPUT_TOKENS, int(rec.input_tokens()));
        put(
            sc::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            int(rec.cached_input_tokens()),
        );
        put(sc::GEN_AI_USAGE_OUTPUT_TOKENS, int(rec.output_tokens()));
        put(
            sc::GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
            int(rec.usage.and_then(|u| u.reasoning_tokens)),
        );
        if let Some(t) = &rec.timings {
            put(sc::LLAMA_PROMPT_N, int(t.prompt_n));
            put(sc::LLAMA_PROMPT_MS, t.prompt_ms.map(Value::F64));
            put(sc::LLAMA_PREDICTED_N, int(t.predicted_n));
            put(sc::LLAMA_PREDICTED_MS, t.predicted_ms.map(Value::F64));
            put(sc::LLAMA_CACHE_N, int(t.cache_n));
        }
        if rec.streamed {
            put(sc::LLAMATAP_TOKEN_EVENTS, int(Some(rec.token_events)));
            put(
                sc::LLAMATAP_MAX_TOKEN_GAP,
                rec.max_token_gap.map(|d| Value::F64(d.as_secs_f64())),
            );
        }
        put(
            sc::LLAMATAP_UPSTREAM_RETRIES,
            rec.upstream_retries.map(|n| Value::I64(i64::from(n))),
        );
        if rec.skipped_events > 0 {
            put(sc::LLAMATAP_SKIPPED_EVENTS, int(Some(rec.skipped_events)));
        }
        super::cachebreak::attributes(rec, &mut v);
        v
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

fn add_events(
    s: &mut Span,
    rec: &RequestRecord,
    at: &dyn Fn(Duration) -> SystemTime,
    capture: bool,
) {
    if let (Some(any), first) = (rec.first_token_any, rec.first_token) {
        if first != Some(any) {
            s.add_event_with_timestamp(sc::EVENT_FIRST_TOKEN_ANY, at(any), vec![]);
        }
    }
    if let Some(t) = rec.first_token {
        s.add_event_with_timestamp(sc::EVENT_FIRST_TOKEN, at(t), vec![]);
    }
    if let Some(t) = rec.first_sentence {
        let mut attrs = vec![KeyValue::new(
            sc::SENTENCE_CHARS,
            i64::try_from(rec.sentence_chars.unwrap_or(0)).unwrap_or(i64::MAX),
        )];
        if capture {
            if let Some(text) = &rec.sentence_text {
                attrs.push(KeyValue::new(sc::SENTENCE_TEXT, text.clone()));
            }
        }
        s.add_event_with_timestamp(sc::EVENT_FIRST_SENTENCE, at(t), attrs);
    }
    if let Some(t) = rec.last_token {
        s.add_event_with_timestamp(sc::EVENT_LAST_TOKEN, at(t), vec![]);
    }
    match rec.outcome {
        Outcome::ClientHangup => {
            let phase = rec
                .hangup_phase
                .map(|p| p.as_str())
                .unwrap_or("before_headers");
            s.add_event_with_timestamp(
                sc::EVENT_CLIENT_HANGUP,
                at(rec.end),
                vec![KeyValue::new(sc::HANGUP_PHASE, phase)],
            );
        }
        Outcome::UpstreamError => {
            let mut attrs = vec![];
            if let Some(t) = rec.error_type {
                attrs.push(KeyValue::new(sc::ERROR_TYPE, t));
            }
            if let Some(m) = &rec.error_message {
                attrs.push(KeyValue::new(sc::ERROR_MESSAGE, m.clone()));
            }
            s.add_event_with_timestamp(sc::EVENT_UPSTREAM_ERROR, at(rec.end), attrs);
        }
        _ => {}
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
