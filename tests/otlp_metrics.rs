#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! OTLP metrics where a collector takes them: llamatap sends its GenAI
//! metrics to a real OpenTelemetry Collector (the `jaeger` binary, v2: its
//! `otlp` receiver on gRPC and on HTTP/protobuf, a metrics pipeline whose
//! `otlp` exporter forwards what it received to a gRPC receiver here), and
//! what arrives is checked instrument by instrument: name, unit, temporality,
//! bucket boundaries, attributes, exemplars (traces Jaeger holds), and that
//! counts and sums equal llamatap's own `/metrics` for the same requests.
//! Also: a last export at shutdown, and one-line errors for bad variables.
//!
//! Needs llama-server and the jaeger binary (`scripts/ensure-deps.sh` builds
//! both); fails loudly without them.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::http;
use common::jaeger::Jaeger;
use common::llama::LlamaServer;
use common::otlp::{hex, metrics_grpc_receiver, ReceivedMetrics};
use common::proxy::{metric_sum, Llamatap};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, metric, AggregationTemporality, HistogramDataPoint, Metric,
};
use serde_json::{json, Value};

const CONFIG: &str = "[queue]\nenabled = true\n[models]\naliases = [\"tiny\"]\n";

const DURATION: &str = "gen_ai.server.request.duration";
const TTFT: &str = "gen_ai.server.time_to_first_token";
const TPOT: &str = "gen_ai.server.time_per_output_token";
const TOKENS: &str = "gen_ai.client.token.usage";
const SENTENCE: &str = "llamatap.server.time_to_first_sentence";
const QUEUE: &str = "llamatap.server.queue.duration";

/// A data point's attributes as text (`"chat"`, `8081`).
fn attrs(p: &HistogramDataPoint) -> BTreeMap<String, String> {
    p.attributes
        .iter()
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (a.key.clone(), v)
        })
        .collect()
}

/// The latest point of each (instrument, attribute set), with its
/// instrument's unit, over everything received (the metrics are
/// cumulative: the latest point holds the whole count).
#[derive(Debug, Default)]
struct Latest {
    units: BTreeMap<String, String>,
    points: BTreeMap<(String, Vec<(String, String)>), HistogramDataPoint>,
}

fn latest(received: &ReceivedMetrics) -> Latest {
    let mut out = Latest::default();
    for (service, m) in received.metrics() {
        assert_eq!(service, "llamatap");
        let Metric {
            name, unit, data, ..
        } = m;
        let Some(metric::Data::Histogram(h)) = data else {
            panic!("{name} is not a histogram");
        };
        assert_eq!(
            h.aggregation_temporality,
            AggregationTemporality::Cumulative as i32,
            "{name}"
        );
        out.units.insert(name.clone(), unit);
        for p in h.data_points {
            let key = (name.clone(), attrs(&p).into_iter().collect());
            match out.points.get(&key) {
                Some(old) if old.time_unix_nano >= p.time_unix_nano => {}
                _ => {
                    out.points.insert(key, p);
                }
            }
        }
    }
    out
}

impl Latest {
    fn of(&self, name: &str) -> Vec<&HistogramDataPoint> {
        self.points
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, p)| p)
            .collect()
    }

    fn count(&self, name: &str) -> u64 {
        self.of(name).iter().map(|p| p.count).sum()
    }

    fn sum(&self, name: &str, attr: Option<(&str, &str)>) -> f64 {
        self.of(name)
            .iter()
            .filter(|p| attr.is_none_or(|(k, v)| attrs(p).get(k).is_some_and(|x| x == v)))
            .map(|p| p.sum.unwrap_or(0.0))
            .sum()
    }
}

fn trace_id(n: u64) -> String {
    format!("5bf92f3577b34da6a3ce929d{n:08x}")
}

/// One request through `addr` under a sampled `traceparent`; its status.
fn send(addr: &str, path: &str, n: u64, body: &Value) -> u16 {
    let tp = format!("00-{}-00f067aa0ba902b7-01", trace_id(n));
    let mut r = http::send(
        addr,
        "POST",
        path,
        &[("traceparent", &tp)],
        body.to_string().as_bytes(),
    )
    .unwrap();
    let _ = r.read_all().unwrap();
    r.head.status
}

/// Prometheus' `llamatap_requests_total` for the GenAI routes used here.
fn prometheus_requests(text: &str, needles: &[&str]) -> f64 {
    ["chat_completions", "completions"]
        .iter()
        .map(|route| {
            let route = format!("route=\"{route}\"");
            let mut n: Vec<&str> = needles.to_vec();
            n.push(&route);
            metric_sum(text, "llamatap_requests_total{", &n)
        })
        .sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Sends chats (streamed), a text completion and a failing request through
/// llamatap exporting over `protocol` to Jaeger, then checks what the
/// collector passed on against llamatap's own `/metrics`.
fn metrics_reach_a_collector(protocol: &str) {
    let (forward, received) = metrics_grpc_receiver();
    let jaeger = Jaeger::start_forwarding_metrics(&format!("metrics-{protocol}"), &forward);
    let llama = LlamaServer::start("tiny", &["-np", "2"]);
    let cfg = common::temp_config(&format!("otlp-metrics-{protocol}"), CONFIG);
    let endpoint = match protocol {
        "grpc" => format!("http://{}", jaeger.otlp_grpc),
        _ => format!("http://{}", jaeger.otlp_http),
    };
    let p = Llamatap::start_env(
        &llama.base_url,
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            protocol,
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[
            ("OTEL_METRICS_EXPORTER", "otlp,prometheus"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ],
    );
    let chat = |text: &str| {
        json!({
            "model": "tiny",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 16,
            "temperature": 0,
            "ignore_eos": true,
            "stream": true,
        })
    };
    for (n, text) in [
        (1, "Tell me about the lamp."),
        (2, "And the sea?"),
        (3, "Hi."),
    ] {
        assert_eq!(send(&p.addr(), "/v1/chat/completions", n, &chat(text)), 200);
    }
    let completion = json!({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 8});
    assert_eq!(send(&p.addr(), "/v1/completions", 4, &completion), 200);
    // A request llama-server refuses: a failure with its error.type.
    let bad = json!({"model": "tiny", "messages": "not a list"});
    let status = send(&p.addr(), "/v1/chat/completions", 5, &bad);
    assert!(status >= 400, "{status}");

    // The collector has them once its latest points count all five.
    let mut got = Latest::default();
    let arrived = common::wait_until(Duration::from_secs(60), || {
        got = latest(&received);
        got.count(DURATION) == 5 && got.count(TOKENS) >= 8
    });
    assert!(
        arrived,
        "the collector's latest points: {got:#?}\njaeger:\n{}\nllamatap:\n{}",
        jaeger.log_tail(),
        p.stderr()
    );
    // The Prometheus numbers of the same five requests (the OTLP metrics are
    // recorded last of the one recording: they are all in by now).
    let prom = p.metrics();
    assert_eq!(prometheus_requests(&prom, &[]), 5.0, "{prom}");

    // Every instrument, with its unit.
    let units: Vec<(&str, &str)> = got
        .units
        .iter()
        .map(|(n, u)| (n.as_str(), u.as_str()))
        .collect();
    assert_eq!(
        units,
        [
            (TOKENS, "{token}"),
            (DURATION, "s"),
            (TPOT, "s"),
            (TTFT, "s"),
            (QUEUE, "s"),
            (SENTENCE, "s"),
        ]
    );

    // The attributes: the GenAI ones, the upstream that answered, the
    // bounded model labels, error.type on the failure only.
    let port = llama.port.to_string();
    for ((name, _), point) in &got.points {
        let a = attrs(point);
        assert_eq!(a["gen_ai.provider.name"], "llama.cpp", "{name} {a:?}");
        assert_eq!(a["server.address"], "127.0.0.1", "{name} {a:?}");
        assert_eq!(a["server.port"], port, "{name} {a:?}");
        assert_eq!(a["gen_ai.request.model"], "tiny", "{name} {a:?}");
        assert!(
            ["chat", "text_completion"].contains(&a["gen_ai.operation.name"].as_str()),
            "{name} {a:?}"
        );
        if let Some(m) = a.get("gen_ai.response.model") {
            let label = format!("model=\"{m}\"");
            assert!(
                prometheus_requests(&prom, &[&label]) > 0.0,
                "{m} is no model label"
            );
        }
        let allowed: &[&str] = match name.as_str() {
            TOKENS => &["gen_ai.token.type"],
            _ => &[],
        };
        for k in a.keys() {
            assert!(
                k.starts_with("gen_ai.") && !k.starts_with("gen_ai.token.")
                    || ["server.address", "server.port", "error.type"].contains(&k.as_str())
                    || allowed.contains(&k.as_str()),
                "{name}: unexpected attribute {k}"
            );
        }
    }
    let failed: u64 = got
        .of(DURATION)
        .iter()
        .filter(|p| attrs(p).contains_key("error.type"))
        .map(|p| p.count)
        .sum();
    assert_eq!(
        failed as f64,
        5.0 - prometheus_requests(&prom, &["outcome=\"ok\""])
    );
    assert_eq!(failed, 1);
    let ops: u64 = got
        .of(DURATION)
        .iter()
        .filter(|p| attrs(p)["gen_ai.operation.name"] == "text_completion")
        .map(|p| p.count)
        .sum();
    assert_eq!(ops, 1);

    // The advised boundaries (time to first token stretched to a minute).
    let bounds = |name: &str| got.of(name)[0].explicit_bounds.clone();
    assert_eq!(
        bounds(DURATION),
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
    );
    assert_eq!(
        bounds(TPOT),
        [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
    );
    let ttft = bounds(TTFT);
    assert_eq!(
        ttft[..16],
        [
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0
        ]
    );
    assert_eq!(ttft[16..], [15.0, 20.0, 30.0, 45.0, 60.0]);
    assert_eq!(bounds(TOKENS)[..4], [1.0, 4.0, 16.0, 64.0]);
    for point in got.points.values() {
        assert_eq!(point.bucket_counts.len(), point.explicit_bounds.len() + 1);
        assert_eq!(point.bucket_counts.iter().sum::<u64>(), point.count);
    }

    // Counts and sums equal the Prometheus families for the same requests.
    let prom_count = |stage: &str| {
        metric_sum(
            &prom,
            "llamatap_stage_duration_seconds_count{",
            &[&format!("stage=\"{stage}\"")],
        )
    };
    let prom_sum = |stage: &str| {
        metric_sum(
            &prom,
            "llamatap_stage_duration_seconds_sum{",
            &[&format!("stage=\"{stage}\"")],
        )
    };
    for (name, stage) in [
        (TTFT, "ttft"),
        (SENTENCE, "first_sentence"),
        (QUEUE, "queued"),
    ] {
        assert_eq!(got.count(name) as f64, prom_count(stage), "{name}");
        assert!(close(got.sum(name, None), prom_sum(stage)), "{name}");
    }
    assert!(got.count(TTFT) >= 3 && got.count(QUEUE) == 5);
    assert_eq!(
        got.count(TPOT) as f64,
        metric_sum(&prom, "llamatap_time_per_output_token_seconds_count{", &[])
    );
    assert!(close(
        got.sum(TPOT, None),
        metric_sum(&prom, "llamatap_time_per_output_token_seconds_sum{", &[])
    ));
    for (kind, token_type) in [("prompt", "input"), ("completion", "output")] {
        let want = metric_sum(
            &prom,
            "llamatap_tokens_total{",
            &[&format!("kind=\"{kind}\"")],
        );
        let sum = got.sum(TOKENS, Some(("gen_ai.token.type", token_type)));
        assert_eq!(sum, want, "{token_type} tokens");
        assert!(sum > 0.0);
    }

    // Exemplars name the requests' own traces, and Jaeger holds them.
    let sent: Vec<String> = (1..=5).map(trace_id).collect();
    let mut traces: Vec<String> = Vec::new();
    for ((name, _), point) in &got.points {
        // Every request was sampled: each series has the latest one's.
        assert!(!point.exemplars.is_empty(), "{name}: no exemplar");
        for e in &point.exemplars {
            let id = hex(&e.trace_id);
            assert!(sent.contains(&id), "exemplar of an unknown trace {id}");
            assert_eq!(e.span_id.len(), 8);
            assert!(e.span_id.iter().any(|b| *b != 0));
            assert!(matches!(e.value, Some(exemplar::Value::AsDouble(_))));
            traces.push(id);
        }
    }
    traces.sort();
    traces.dedup();
    // The completion's and the failure's series have theirs; the chats
    // share series and buckets, the latest keeping each bucket.
    assert!(traces.contains(&trace_id(4)) && traces.contains(&trace_id(5)));
    assert!(traces.len() >= 3, "{traces:?}");
    for id in &traces {
        let t = jaeger.trace(id, 1, Duration::from_secs(30));
        let spans = t["data"][0]["spans"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !spans.is_empty(),
            "exemplar trace {id} is not in Jaeger: {t}"
        );
    }
    // The collector's own Prometheus exporter serves the same counts under
    // the names Prometheus users query, with the exemplars (OpenMetrics).
    let prom_addr = jaeger.prometheus.clone().unwrap();
    let mut exposed = String::new();
    let served = common::wait_until(Duration::from_secs(30), || {
        let Ok(mut r) = http::send(
            &prom_addr,
            "GET",
            "/metrics",
            &[
                ("Accept", "application/openmetrics-text; version=1.0.0"),
                ("Connection", "close"),
            ],
            b"",
        ) else {
            return false;
        };
        exposed = String::from_utf8_lossy(&r.read_all().unwrap_or_default()).into_owned();
        metric_sum(
            &exposed,
            "gen_ai_server_request_duration_seconds_count{",
            &[],
        ) == 5.0
    });
    assert!(served, "the collector's /metrics:\n{exposed}");
    assert_eq!(
        metric_sum(
            &exposed,
            "gen_ai_client_token_usage_sum{",
            &["gen_ai_token_type=\"output\""]
        ),
        got.sum(TOKENS, Some(("gen_ai.token.type", "output"))),
        "{exposed}"
    );
    let exemplar_ids: Vec<&str> = exposed
        .lines()
        .filter(|l| l.starts_with("gen_ai_server_request_duration_seconds_bucket{"))
        .filter_map(|l| l.split("trace_id=\"").nth(1))
        .filter_map(|t| t.get(..32))
        .collect();
    assert!(!exemplar_ids.is_empty(), "no exemplar:\n{exposed}");
    assert!(exemplar_ids.iter().all(|id| traces.iter().any(|t| t == id)));
    eprintln!(
        "{protocol}: {} series over {} instruments, {} exemplar traces found in Jaeger",
        got.points.len(),
        got.units.len(),
        traces.len()
    );
}

#[test]
fn metrics_over_otlp_grpc_reach_a_collector_and_equal_prometheus() {
    metrics_reach_a_collector("grpc");
}

#[test]
fn metrics_over_otlp_http_reach_a_collector_and_equal_prometheus() {
    metrics_reach_a_collector("http");
}

#[test]
fn shutdown_exports_a_last_time() {
    let (addr, received) = metrics_grpc_receiver();
    let llama = LlamaServer::start("tiny", &[]);
    let mut p = Llamatap::start_env(
        &llama.base_url,
        &[],
        &[
            ("OTEL_METRICS_EXPORTER", "otlp"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                &format!("http://{addr}"),
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "3600000"),
        ],
    );
    let body = json!({"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 4});
    assert_eq!(send(&p.addr(), "/v1/chat/completions", 9, &body), 200);
    p.wait_metrics(Duration::from_secs(30), |t| {
        prometheus_requests(t, &[]) == 1.0
    });
    assert!(
        received.metrics().is_empty(),
        "exported before the interval"
    );
    p.term();
    assert!(
        p.wait_exit(Duration::from_secs(30)).is_some(),
        "{}",
        p.stderr()
    );
    let got = latest(&received);
    assert_eq!(got.count(DURATION), 1, "{}", p.stderr());
}

#[test]
fn bad_metrics_variables_stop_the_start_with_one_line() {
    for (var, value) in [
        ("OTEL_METRICS_EXPORTER", "bogus"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "udp"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "http://127.0.0.1:1",
            ])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("LLAMATAP_CONFIG")
            .env("OTEL_METRICS_EXPORTER", "otlp")
            .env(var, value)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{var}={value} started");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(var), "{err}");
    }
}

#[test]
fn every_instrument_unit_attribute_and_variable_is_documented() {
    use llamatap_telemetry::genai::Kind;
    use llamatap_telemetry::semconv as sc;
    let telemetry = include_str!("../docs/telemetry.md");
    let section = &telemetry[telemetry.find("## OTLP metrics").unwrap()..];
    let section = &section[..section.find("\n## ").unwrap()];
    for kind in Kind::ALL {
        let i = kind.instrument();
        let row = format!("| `{}` | `{}` |", i.name, i.unit);
        assert!(section.contains(&row), "no row {row}");
    }
    for attr in [
        sc::GEN_AI_OPERATION_NAME,
        sc::GEN_AI_PROVIDER_NAME,
        sc::GEN_AI_REQUEST_MODEL,
        sc::GEN_AI_RESPONSE_MODEL,
        sc::ERROR_TYPE,
        sc::SERVER_ADDRESS,
        sc::SERVER_PORT,
        sc::GEN_AI_TOKEN_TYPE,
        sc::OTEL_METRIC_OVERFLOW,
        sc::ERROR_TYPE_OTHER,
    ] {
        assert!(
            section.contains(&format!("`{attr}")),
            "{attr} not documented"
        );
    }
    assert!(section.contains(&format!("v{}", sc::SEMCONV_VERSION)));
    assert!(section.contains(sc::SCHEMA_URL));
    let configuration = include_str!("../docs/configuration.md");
    for var in [
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_METRIC_EXPORT_INTERVAL",
        "OTEL_METRIC_EXPORT_TIMEOUT",
        "OTEL_SEMCONV_STABILITY_OPT_IN",
    ] {
        assert!(configuration.contains(&format!("| `{var}` |")), "{var}");
        assert!(
            section.contains(var) || var == "OTEL_SEMCONV_STABILITY_OPT_IN",
            "{var}"
        );
    }
}
