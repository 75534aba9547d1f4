use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::record::{Outcome, UpstreamFacts};
use llamatap_wire::request::RequestFacts;

fn record() -> RequestRecord {
    RequestRecord {
        error_message: Some("secret detail".into()),
        request: RequestFacts {
            model: Some("client-chosen-name".into()),
            ..Default::default()
        },
        received_wall: UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
        first_token_any: Some(Duration::from_micros(30_500)),
        first_token: Some(Duration::from_micros(30_500)),
        sentence_text: Some("The first sentence.".into()),
        response_id: Some("chatcmpl-1".into()),
        finish_reasons: vec!["stop".into()],
        timings: Some(llamatap_wire::llama::Timings {
            prompt_n: Some(4),
            cache_n: Some(6),
            predicted_n: Some(12),
            ..Default::default()
        }),
        usage: None,
        token_events: 12,
        max_token_gap: None,
        client_address: Some("127.0.0.1:5555".into()),
        upstream: Some(UpstreamFacts {
            name: "gpu-a".into(),
            host: "10.0.0.1".into(),
            port: 8081,
            policy: "prefix_affinity",
            reason: "cold",
            failovers: 0,
            predicted_cached_tokens: None,
            prediction: None,
        }),
        queue: None,
        conversation: None,
        ..RequestRecord::example()
    }
}

fn parse(line: &str) -> serde_json::Value {
    assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
    serde_json::from_str(line).unwrap()
}

#[test]
fn a_line_has_every_field() {
    let ids = SpanIds {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        span_id: "00f067aa0ba902b7".into(),
    };
    let v = parse(&line(&record(), "tiny", Some(&ids)));
    let want = serde_json::json!({
        "time": "2023-11-14T22:13:20.250Z",
        "client": "127.0.0.1:5555",
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "route": "chat_completions",
        "model": "tiny",
        "outcome": "ok",
        "error_type": null,
        "upstream": "gpu-a",
        "tenant": "anonymous",
        "priority": null,
        "queued_ms": null,
        "ttft_ms": 30.5,
        "predicted_ttft_ms": null,
        "corrected_ttft_ms": null,
        "ttft_slo_ms": null,
        "ttft_held_ms": null,
        "ttft_sequenced_ms": null,
        "ttft_probe": null,
        "ttft_floor_ms": null,
        "ttft_prefill_beside_tokens": null,
        "ttft_predicted_wait_ms": null,
        "ttft_slot_started_ms": null,
        "first_sentence_ms": 90.0,
        "e2e_ms": 310.0,
        "prompt_tokens": 10,
        "cached_tokens": 6,
        "completion_tokens": 12,
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "cache_break": null,
        "continuations": [],
        "conversation": null,
    });
    assert_eq!(v, want);
}

#[test]
fn no_text_of_the_conversation_and_no_client_model_name() {
    let l = line(&record(), "other", None);
    for secret in [
        "The first sentence",
        "secret detail",
        "client-chosen-name",
        "chatcmpl-1",
    ] {
        assert!(!l.contains(secret), "{secret} in {l}");
    }
    let v = parse(&l);
    assert_eq!(v["model"], "other");
    assert_eq!(v["trace_id"], serde_json::Value::Null);
    assert_eq!(v["span_id"], serde_json::Value::Null);
}

#[test]
fn a_failed_request_says_why_and_has_nulls_for_what_never_happened() {
    let mut r = record();
    r.outcome = Outcome::UpstreamError;
    r.error_type = Some("upstream_unreachable");
    r.status = None;
    r.first_token = None;
    r.first_sentence = None;
    r.timings = None;
    r.upstream = None;
    r.client_address = None;
    let v = parse(&line(&r, "none", None));
    assert_eq!(v["outcome"], "upstream_error");
    assert_eq!(v["error_type"], "upstream_unreachable");
    for k in [
        "status",
        "ttft_ms",
        "first_sentence_ms",
        "prompt_tokens",
        "upstream",
        "client",
    ] {
        assert_eq!(v[k], serde_json::Value::Null, "{k}");
    }
}

#[test]
fn a_path_full_of_quotes_stays_one_valid_line() {
    let mut r = record();
    r.path = "/x\"\n\\\u{1}é".into();
    let v = parse(&line(&r, "none", None));
    assert_eq!(v["path"], "/x\"\n\\\u{1}é");
}

#[test]
fn rfc3339_dates() {
    let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00.000Z");
    assert_eq!(at(951_868_799), "2000-02-29T23:59:59.000Z");
    assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59.000Z");
    assert_eq!(at(4_102_444_800), "2100-01-01T00:00:00.000Z");
    assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00.000Z");
    // Before the epoch (a clock set back) prints the epoch rather than failing.
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
        "1970-01-01T00:00:00.000Z"
    );
    assert!(rfc3339(SystemTime::now()).starts_with("20"));
}

#[test]
fn a_continued_answer_lists_its_cuts() {
    use crate::continuation::Continued;
    use llamatap_policy::answer::{ContinuationResult, Reason};
    let mut r = record();
    r.continuations = vec![Continued {
        at: Duration::from_millis(2000),
        reason: Reason::Stalled,
        result: ContinuationResult::Continued,
        why: None,
        from: Some("gpu-a".into()),
        to: Some("gpu-b".into()),
        tokens_before: 40,
        reprefilled: Some(90),
        cached: None,
        generated: None,
        pause: Duration::from_micros(370_500),
    }];
    let v: serde_json::Value = serde_json::from_str(&line(&r, "m", None)).unwrap();
    assert_eq!(
        v["continuations"],
        serde_json::json!([{"reason": "stalled", "result": "continued", "from": "gpu-a",
            "to": "gpu-b", "tokens_before": 40, "generated_tokens": null, "pause_ms": 370.5}])
    );
}

#[test]
fn the_predicted_ttft_and_the_objective_are_fields() {
    let mut rec = record();
    rec.ttft = Some(crate::record::TtftFacts {
        predicted_ms: Some(420),
        confidence: "high",
        slo_ms: Some(500),
        dispatched: Some(std::time::Duration::from_millis(2)),
        corrected_ms: Some(380),
        progress_events: 2,
        made_room: false,
        probe: true,
        floor_us: Some(4485),
        held_ms: Some(35),
        sequenced_ms: Some(6),
        prefill_beside_tokens: Some(210),
        predicted_wait_ms: Some(150),
        slot_started_ms: Some(171),
    });
    let v = parse(&line(&rec, "tiny", None));
    assert_eq!(v["ttft_held_ms"], 35);
    assert_eq!(v["ttft_sequenced_ms"], 6);
    assert_eq!(v["ttft_probe"], true);
    assert_eq!(v["ttft_floor_ms"], 4.485);
    assert_eq!(v["ttft_prefill_beside_tokens"], 210);
    assert_eq!(v["ttft_predicted_wait_ms"], 150);
    assert_eq!(v["ttft_slot_started_ms"], 171);
    assert_eq!(v["predicted_ttft_ms"], 420);
    assert_eq!(v["corrected_ttft_ms"], 380);
    assert_eq!(v["ttft_slo_ms"], 500);
}
