use std::time::Duration;

use super::*;
use llamatap_policy::answer::Reason;
use llamatap_telemetry::continuation::Continued;
use llamatap_telemetry::record::Outcome;
use llamatap_wire::llama::{Timings, Usage};

/// How a record with its outcome ended, as `logging` settles it.
fn end_of(rec: &RequestRecord) -> End {
    match rec.outcome {
        Outcome::Ok => End::Whole,
        o => End::Answered(o, "test", String::new()),
    }
}

/// The example record (20 prompt and 10 generated tokens in its usage, 10
/// token events) without any count.
fn unreported() -> RequestRecord {
    RequestRecord {
        usage: None,
        timings: None,
        token_events: 0,
        ..RequestRecord::example()
    }
}

fn continued(tokens_before: u64, prompt: (u64, u64), generated: Option<u64>) -> Continued {
    Continued {
        at: Duration::from_millis(100),
        reason: Reason::Preempted,
        result: ContinuationResult::Continued,
        why: None,
        from: Some("a".into()),
        to: Some("b".into()),
        tokens_before,
        reprefilled: Some(prompt.0),
        cached: Some(prompt.1),
        generated,
        pause: Duration::from_millis(5),
    }
}

#[test]
fn a_reported_answer_is_charged_its_counts() {
    assert_eq!(
        tokens(
            &RequestRecord::example(),
            &end_of(&RequestRecord::example()),
            1_000_000
        ),
        30
    );
    let rec = RequestRecord {
        timings: Some(Timings {
            prompt_n: Some(5),
            cache_n: Some(95),
            predicted_n: Some(40),
            ..Timings::default()
        }),
        token_events: 12,
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 140);
}

#[test]
fn counted_token_events_are_a_floor() {
    let rec = RequestRecord {
        usage: Some(Usage {
            input_tokens: Some(20),
            output_tokens: Some(3),
            ..Usage::default()
        }),
        token_events: 50,
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 10), 70);
}

#[test]
fn an_unreported_prompt_is_charged_by_the_bodys_size() {
    // An answer came (200, or tokens were streamed): 4 bytes a token.
    assert_eq!(tokens(&unreported(), &End::Whole, 401), 101);
    let streamed = RequestRecord {
        token_events: 7,
        outcome: Outcome::ClientHangup,
        ..unreported()
    };
    assert_eq!(tokens(&streamed, &end_of(&streamed), 400), 107);
    // Nothing came back: nothing to charge.
    for rec in [
        RequestRecord {
            outcome: Outcome::Rejected,
            status: Some(400),
            ..unreported()
        },
        RequestRecord {
            outcome: Outcome::ClientHangup,
            status: None,
            ..unreported()
        },
        RequestRecord {
            outcome: Outcome::ClientError,
            status: Some(400),
            ..unreported()
        },
        // Tokenizing runs on no slot.
        RequestRecord {
            route: llamatap_wire::request::Route::Tokenize,
            ..unreported()
        },
    ] {
        assert_eq!(tokens(&rec, &end_of(&rec), 4000), 0, "{:?}", rec.outcome);
    }
}

#[test]
fn a_continued_answer_is_charged_before_and_after_its_cuts() {
    // Cut after 30 tokens, went on from a target that prefilled the prompt
    // (20 tokens) and the 30 tokens again, then generated 50: charged as
    // the answer it is, 20 + 80.
    let rec = RequestRecord {
        usage: None,
        token_events: 80,
        continuations: vec![continued(30, (40, 10), Some(50))],
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 100);
    // Cut twice: the second continuation was handed the 30 tokens and the
    // first one's 25 (which counted no `generated` of its own); the events
    // were fewer than the tokens (several tokens in an event).
    let rec = RequestRecord {
        usage: None,
        token_events: 40,
        continuations: vec![
            continued(30, (50, 0), None),
            continued(55, (75, 0), Some(20)),
        ],
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 20 + 75);
    // A native continuation's last event reports the target's own counts:
    // the larger total counts.
    let rec = RequestRecord {
        usage: None,
        timings: Some(Timings {
            prompt_n: Some(50),
            predicted_n: Some(50),
            ..Timings::default()
        }),
        token_events: 80,
        continuations: vec![continued(30, (50, 0), Some(50))],
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 20 + 80);
    // A refused continuation ends the answer: what the client had counts.
    let mut refused = continued(30, (0, 0), None);
    refused.result = ContinuationResult::Failed;
    let rec = RequestRecord {
        usage: None,
        token_events: 30,
        outcome: Outcome::UpstreamError,
        continuations: vec![refused],
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 400), 100 + 30);
}

#[test]
fn a_replays_rest_is_charged_only_what_its_continuation_generated() {
    use llamatap_policy::conversation::Use;
    use llamatap_telemetry::record::ConversationFacts;
    let facts = |usage, from_copy| {
        Some(ConversationFacts {
            usage,
            replayed_bytes: 900,
            unsent_bytes: 0,
            from_copy,
        })
    };
    // The copy held 30 tokens; the rest generated 18 on another member.
    // The observer read all 48, and the usage chunk says 48 generated of
    // a 20-token prompt: none of the copy's, nor the prompt, again.
    let rec = RequestRecord {
        token_events: 48,
        continuations: vec![continued(30, (45, 5), Some(18))],
        conversation: facts(Use::Replay, true),
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 18);
    // A target that reported nothing: the token events past the copy's.
    let rec = RequestRecord {
        token_events: 41,
        continuations: vec![continued(30, (0, 0), None)],
        conversation: facts(Use::Replay, true),
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 11);
    // A rest that could not come: nothing was generated.
    let mut refused = continued(30, (0, 0), None);
    refused.result = ContinuationResult::Failed;
    let rec = RequestRecord {
        token_events: 30,
        outcome: Outcome::UpstreamError,
        continuations: vec![refused],
        conversation: facts(Use::Replay, true),
        ..RequestRecord::example()
    };
    assert_eq!(tokens(&rec, &end_of(&rec), 1_000_000), 0);
    // The same counts on the generation itself are charged whole.
    let rec = RequestRecord {
        token_events: 48,
        continuations: vec![continued(30, (45, 5), Some(18))],
        conversation: facts(Use::Generate, false),
        ..RequestRecord::example()
    };
    assert!(tokens(&rec, &end_of(&rec), 1_000_000) >= 48);
}
