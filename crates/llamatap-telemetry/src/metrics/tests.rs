use std::sync::Arc;

use super::*;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn record() -> RequestRecord {
    RequestRecord {
        usage: Some(llamatap_wire::llama::Usage {
            output_tokens: Some(10),
            ..Default::default()
        }),
        upstream: None,
        queue: None,
        conversation: None,
        ..RequestRecord::example()
    }
}

fn text(m: &Metrics, f: Exposition) -> String {
    String::from_utf8(m.render(f)).unwrap()
}

fn exemplar() -> TraceExemplar {
    TraceExemplar {
        trace_id: Arc::new(TRACE.to_string()),
        span: crate::genai::SpanRef {
            trace_id: [1; 16],
            span_id: [2; 8],
        },
    }
}

#[test]
fn openmetrics_buckets_carry_the_trace_id_of_a_sampled_request() {
    let m = Metrics::new();
    m.record(
        &record(),
        "tiny",
        &RequestModels::default(),
        Some(&exemplar()),
    );
    let om = text(&m, Exposition::OpenMetrics);
    // TTFT 30 ms lands in the 0.04 bucket, stamped with its moment.
    let line = om
        .lines()
        .find(|l| {
            l.starts_with("llamatap_stage_duration_seconds_bucket{")
                && l.contains("stage=\"ttft\"")
                && l.contains("le=\"0.04\"")
                && l.contains("model=\"tiny\"")
        })
        .unwrap_or_else(|| panic!("no ttft bucket:\n{om}"));
    assert!(
        line.ends_with(&format!("# {{trace_id=\"{TRACE}\"}} 0.03 1700000000.03")),
        "{line}"
    );
    for stage in ["first_sentence", "e2e"] {
        assert!(
            om.lines().any(|l| l.contains(&format!("stage=\"{stage}\""))
                && l.contains(&format!("trace_id=\"{TRACE}\""))),
            "{stage}: no exemplar\n{om}"
        );
    }
    // Time per output token: (300 - 30) ms / 9 = 30 ms.
    assert!(
        om.lines().any(
            |l| l.starts_with("llamatap_time_per_output_token_seconds_bucket")
                && l.contains(&format!("trace_id=\"{TRACE}\"}} 0.03"))
        ),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
}

#[test]
fn the_classic_format_has_no_exemplars_and_the_same_names() {
    let m = Metrics::new();
    m.record(
        &record(),
        "tiny",
        &RequestModels::default(),
        Some(&exemplar()),
    );
    let classic = text(&m, Exposition::Classic);
    assert!(!classic.contains(TRACE), "{classic}");
    assert!(!classic.contains("# EOF"));
    for line in [
        "# TYPE llamatap_requests_total counter",
        "# TYPE llamatap_stage_duration_seconds histogram",
        "# TYPE llamatap_hangup_elapsed_seconds_total counter",
        "# HELP llamatap_inflight_requests Requests being proxied now.",
        "llamatap_requests_total{model=\"tiny\",outcome=\"ok\",route=\"chat_completions\"} 1",
        "llamatap_tokens_total{kind=\"completion\",model=\"tiny\"} 10",
        "llamatap_build_info{version=\"0.1.0\"} 1",
        "llamatap_otel_spans_total{result=\"exported\"} 0",
    ] {
        assert!(classic.lines().any(|l| l == line), "{line}\n{classic}");
    }
    // HELP texts end with one period, not two.
    assert!(!classic.contains(".."), "{classic}");
}

#[test]
fn an_unsampled_request_leaves_no_exemplar() {
    let m = Metrics::new();
    m.record(&record(), "tiny", &RequestModels::default(), None);
    let om = text(&m, Exposition::OpenMetrics);
    assert!(!om.contains("trace_id"), "{om}");
    assert!(om.contains(
        "llamatap_requests_total{model=\"tiny\",outcome=\"ok\",route=\"chat_completions\"} 1"
    ));
}

#[test]
fn a_cut_request_records_no_stage_of_an_answers_end() {
    let m = Metrics::new();
    let mut rec = record();
    rec.outcome = Outcome::ClientHangup;
    rec.first_sentence = None;
    m.record(&rec, "tiny", &RequestModels::default(), None);
    let t = text(&m, Exposition::Classic);
    let count = |stage: &str| {
        t.lines()
            .filter(|l| l.starts_with("llamatap_stage_duration_seconds_count"))
            .filter(|l| l.contains(&format!("stage=\"{stage}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    assert_eq!(count("ttft"), 1.0, "{t}");
    for stage in ["first_sentence", "last_token", "e2e"] {
        assert_eq!(count(stage), 0.0, "{stage}\n{t}");
    }
    assert!(!t.contains("llamatap_time_per_output_token_seconds_count{model=\"tiny\"} 1"));
}

#[test]
fn absurd_timings_make_no_stage_and_no_panic() {
    let m = Metrics::new();
    let mut rec = record();
    for (prompt, predicted) in [(1e30, -5.0), (1e308, f64::NAN), (f64::INFINITY, 1e15)] {
        rec.timings = Some(llamatap_wire::llama::Timings {
            prompt_n: Some(u64::MAX),
            prompt_ms: Some(prompt),
            predicted_n: Some(3),
            predicted_ms: Some(predicted),
            cache_n: Some(u64::MAX),
        });
        m.record(&rec, "tiny", &RequestModels::default(), None);
    }
    let t = text(&m, Exposition::Classic);
    assert!(t.contains("llamatap_stage_duration_seconds_count{model=\"tiny\",stage=\"e2e\"} 3"));
    assert!(!t.contains("stage=\"prefill\"} 1"), "{t}");
}

#[test]
fn a_removed_model_leaves_no_series_and_named_models_are_never_seeded_rejected() {
    let m = Metrics::new();
    let empty = text(&m, Exposition::Classic);
    m.seed_model("gone");
    let seeded = text(&m, Exposition::Classic);
    assert!(seeded.contains("model=\"gone\""));
    assert!(!seeded.contains("model=\"gone\",outcome=\"rejected\""));
    assert!(seeded.contains("model=\"none\",outcome=\"rejected\",route=\"chat_completions\""));
    assert!(!seeded.contains("model=\"none\",outcome=\"upstream_error\",route=\"metrics\""));
    m.record(&record(), "gone", &RequestModels::default(), None);
    let mut rec = record();
    rec.route = Route::Other;
    rec.outcome = Outcome::Rejected;
    m.record(&rec, "gone", &RequestModels::default(), None);
    m.remove_model("gone");
    // The model's series are gone; what carries no model label (the
    // tenant's counters) keeps counting.
    let with_model = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.contains("model="))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        with_model(&text(&m, Exposition::Classic)),
        with_model(&empty)
    );
}

#[test]
fn series_come_out_in_the_same_order_whatever_the_order_of_creation() {
    let a = Metrics::new();
    let b = Metrics::new();
    for n in ["m1", "m2", "m3"] {
        a.seed_model(n);
    }
    for n in ["m3", "m1", "m2"] {
        b.seed_model(n);
    }
    assert_eq!(text(&a, Exposition::Classic), text(&b, Exposition::Classic));
    assert_eq!(
        text(&a, Exposition::OpenMetrics),
        text(&b, Exposition::OpenMetrics)
    );
}
