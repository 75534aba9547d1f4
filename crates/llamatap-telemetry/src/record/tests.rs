use super::*;

fn record() -> RequestRecord {
    RequestRecord {
        route: Route::ChatCompletions,
        method: "X".repeat(5_000),
        path: format!("/{}", "p".repeat(60_000)),
        status: Some(200),
        outcome: Outcome::UpstreamError,
        error_type: Some("upstream_error_event"),
        error_message: Some("e".repeat(100_000)),
        hangup_phase: None,
        request: RequestFacts::default(),
        streamed: true,
        received_wall: SystemTime::UNIX_EPOCH,
        upstream_headers: None,
        first_token_any: None,
        first_token: None,
        first_sentence: None,
        sentence_chars: None,
        sentence_text: None,
        last_token: None,
        end: Duration::ZERO,
        response_model: Some("r".repeat(10_000)),
        response_id: Some("i".repeat(10_000)),
        finish_reasons: vec!["z".repeat(1_000); 100],
        timings: None,
        usage: None,
        token_events: 0,
        max_token_gap: None,
        skipped_events: 0,
        response_bytes: 0,
        client_address: None,
        upstream: None,
        tenant: None,
        cache_break: None,
        queue: None,
        conversation: None,
        continuations: Vec::new(),
        ttft: None,
    }
}

#[test]
fn bound_cuts_every_client_or_upstream_string() {
    let mut r = record();
    r.bound();
    assert!(r.method.len() <= MAX_NAME_BYTES);
    assert!(r.path.len() <= MAX_PATH_BYTES && r.path.starts_with("/ppp"));
    assert!(r.error_message.unwrap().len() <= MAX_MESSAGE_BYTES);
    assert!(r.response_model.unwrap().len() <= MAX_NAME_BYTES);
    assert!(r.response_id.unwrap().len() <= MAX_NAME_BYTES);
    assert_eq!(r.finish_reasons.len(), MAX_FINISH_REASONS);
    assert!(r.finish_reasons.iter().all(|f| f.len() <= MAX_NAME_BYTES));
    assert!(
        r.path.capacity() <= MAX_PATH_BYTES,
        "the cut frees the rest"
    );
}

#[test]
fn the_ttft_ratio_is_measured_from_dispatch() {
    use std::time::Duration;
    let facts = TtftFacts {
        predicted_ms: Some(400),
        confidence: "high",
        slo_ms: None,
        dispatched: Some(Duration::from_millis(100)),
        corrected_ms: None,
        progress_events: 0,
        made_room: false,
        probe: false,
        floor_us: None,
        held_ms: None,
        sequenced_ms: None,
        prefill_beside_tokens: None,
        predicted_wait_ms: None,
        slot_started_ms: None,
    };
    let ratio = facts.ratio(Some(Duration::from_millis(600))).unwrap();
    assert!((ratio - 1.25).abs() < 1e-9, "{ratio}");
    assert_eq!(facts.ratio(None), None);
    let refused = TtftFacts {
        dispatched: None,
        ..facts
    };
    assert_eq!(refused.ratio(Some(Duration::from_millis(600))), None);
    let zero = TtftFacts {
        predicted_ms: Some(0),
        ..facts
    };
    assert_eq!(zero.ratio(Some(Duration::from_millis(600))), None);
}
