use super::*;

fn raw(exporter: &str) -> RawMetricsExport {
    RawMetricsExport {
        exporter: Some(exporter.to_string()),
        ..RawMetricsExport::default()
    }
}

#[test]
fn off_unless_the_list_names_otlp() {
    for list in ["none", "prometheus", "none,prometheus", " ", "PROMETHEUS"] {
        let r = metrics_export(&raw(list), None, OtlpProtocol::Grpc).unwrap();
        assert_eq!(r, None, "{list:?}");
    }
    let r = metrics_export(&RawMetricsExport::default(), None, OtlpProtocol::Grpc).unwrap();
    assert_eq!(r, None);
    for list in ["otlp", "prometheus,otlp", " otlp , prometheus"] {
        let r = metrics_export(&raw(list), None, OtlpProtocol::Grpc).unwrap();
        assert!(r.is_some(), "{list:?}");
    }
}

#[test]
fn defaults_follow_the_traces_and_opentelemetry() {
    let r = metrics_export(&raw("otlp"), None, OtlpProtocol::Grpc)
        .unwrap()
        .unwrap();
    assert_eq!(r.endpoint, "http://localhost:4317");
    assert_eq!(r.interval, Duration::from_secs(60));
    assert_eq!(r.timeout, Duration::from_secs(30));
    let r = metrics_export(
        &raw("otlp"),
        Some("http://c:4318/"),
        OtlpProtocol::HttpProtobuf,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(r.endpoint, "http://c:4318/v1/metrics");
    let r = metrics_export(&raw("otlp"), Some("http://c:4317"), OtlpProtocol::Grpc)
        .unwrap()
        .unwrap();
    assert_eq!(r.endpoint, "http://c:4317");
}

#[test]
fn the_metrics_variables_win_and_their_endpoint_is_used_as_written() {
    let r = metrics_export(
        &RawMetricsExport {
            endpoint: Some("http://m:9/custom".into()),
            protocol: Some("http/protobuf".into()),
            interval_ms: Some("200".into()),
            timeout_ms: Some("1500".into()),
            ..raw("otlp")
        },
        Some("http://c:4317"),
        OtlpProtocol::Grpc,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.endpoint, "http://m:9/custom");
    assert_eq!(r.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(r.interval, Duration::from_millis(200));
    assert_eq!(r.timeout, Duration::from_millis(1500));
}

#[test]
fn bad_values_are_one_line_errors_naming_the_variable() {
    let cases = [
        (raw("bogus"), "OTEL_METRICS_EXPORTER"),
        (raw("otlp,none"), "OTEL_METRICS_EXPORTER"),
        (
            RawMetricsExport {
                interval_ms: Some("0".into()),
                ..raw("otlp")
            },
            "OTEL_METRIC_EXPORT_INTERVAL",
        ),
        (
            RawMetricsExport {
                interval_ms: Some("1s".into()),
                ..raw("otlp")
            },
            "OTEL_METRIC_EXPORT_INTERVAL",
        ),
        (
            RawMetricsExport {
                timeout_ms: Some("0".into()),
                ..raw("otlp")
            },
            "OTEL_METRIC_EXPORT_TIMEOUT",
        ),
        (
            RawMetricsExport {
                protocol: Some("udp".into()),
                ..raw("otlp")
            },
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ),
        (
            RawMetricsExport {
                endpoint: Some("https://c:4317".into()),
                ..raw("otlp")
            },
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        ),
    ];
    for (r, key) in cases {
        let e = metrics_export(&r, None, OtlpProtocol::Grpc)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
