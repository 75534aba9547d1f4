#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use super::*;

fn chat(content: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"index":0,"delta":{"content":content}}],"model":"tiny.gguf","object":"chat.completion.chunk"})
    )
}

#[test]
fn moments_follow_the_events_not_the_chunks() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, true);
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"model\":\"tiny.gguf\"}\n\n";
    o.on_chunk(role.as_bytes(), at(10));
    let reasoning =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n";
    o.on_chunk(reasoning.as_bytes(), at(20));
    o.on_chunk(chat("").as_bytes(), at(25));
    // An event split across two chunks counts when its end arrives.
    let hello = chat("Hello there.");
    let (a, b) = hello.as_bytes().split_at(9);
    o.on_chunk(a, at(30));
    assert!(o.mid_event());
    o.on_chunk(b, at(40));
    assert!(!o.mid_event());
    o.on_chunk(chat(" Next").as_bytes(), at(100));
    o.on_chunk(b"data: [DONE]\n\n", at(110));
    let f = o.finish(at(120), StreamEnd::Complete);
    assert_eq!(
        f.first_token_any,
        Some(at(20)),
        "reasoning is a token on another channel"
    );
    assert_eq!(
        f.first_token,
        Some(at(40)),
        "role-only and empty chunks are not tokens"
    );
    assert_eq!(
        f.first_sentence,
        Some(at(40)),
        "a plain word's period: the sentence was complete when it arrived"
    );
    assert_eq!(f.sentence_chars, Some(12));
    assert_eq!(f.sentence_text.as_deref(), Some("Hello there."));
    assert_eq!(f.last_token, Some(at(100)));
    assert_eq!(f.token_events, 3);
    assert_eq!(f.max_token_gap, Some(Duration::from_millis(60)));
    assert_eq!(f.model.as_deref(), Some("tiny.gguf"));
    assert!(f.done);
}

#[test]
fn whole_text_is_the_sentence_when_the_answer_ends_without_one() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("no end here").as_bytes(), t0);
    assert_eq!(o.facts().first_sentence, None);
    o.on_chunk(b"data: [DONE]\n\n", at(5));
    let f = o.finish(at(9), StreamEnd::Complete);
    assert_eq!(f.first_sentence, Some(at(5)), "at the terminal event");
    assert_eq!(f.sentence_chars, Some(11));
    assert_eq!(f.sentence_text, None, "no text without capture");
}

#[test]
fn a_cut_stream_has_no_first_sentence_unless_one_was_complete_before_the_cut() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // Cut (hang-up, dead upstream) before any sentence end.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("no end").as_bytes(), at(1));
    o.on_chunk(chat(" here").as_bytes(), at(2));
    let f = o.finish(at(9), StreamEnd::Cut);
    assert_eq!(f.first_sentence, None);
    assert_eq!(f.sentence_chars, None);
    assert_eq!(f.last_token, Some(at(2)), "the moments before the cut stay");
    // The body ended at the HTTP level without the terminal event (truncated).
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("no end here").as_bytes(), at(1));
    let f = o.finish(at(9), StreamEnd::Complete);
    assert!(f.truncated());
    assert_eq!(f.first_sentence, None);
    // An in-band error ends the answer: the text before it is no sentence.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("no end here").as_bytes(), at(1));
    o.on_chunk(b"data: {\"error\":{\"message\":\"boom\"}}\n\n", at(2));
    o.on_chunk(b"data: [DONE]\n\n", at(3));
    assert_eq!(o.finish(at(9), StreamEnd::Complete).first_sentence, None);
    // A sentence complete before the cut is kept, at its own moment.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("Done.").as_bytes(), at(1));
    o.on_chunk(chat(" Next").as_bytes(), at(2));
    o.on_chunk(chat(" part").as_bytes(), at(3));
    assert_eq!(o.finish(at(9), StreamEnd::Cut).first_sentence, Some(at(1)));
    // A period not yet followed by anything, then the cut: not known complete.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(chat("Done").as_bytes(), at(1));
    o.on_chunk(chat(".").as_bytes(), at(2));
    assert_eq!(o.finish(at(9), StreamEnd::Cut).first_sentence, None);
}

#[test]
fn the_moment_is_the_period_only_where_the_text_before_it_settles_the_end() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let moment = |pieces: &[&str]| {
        let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, true);
        for (i, p) in pieces.iter().enumerate() {
            o.on_chunk(chat(p).as_bytes(), at(10 * i as u64));
        }
        o.on_chunk(b"data: [DONE]\n\n", at(1000));
        let f = o.finish(at(1001), StreamEnd::Complete);
        (f.first_sentence, f.sentence_text)
    };
    let paris = moment(&["The capital is", " Paris", ".", " It", " is"]);
    assert_eq!(paris, (Some(at(20)), Some("The capital is Paris.".into())));
    // An abbreviation: the moment the next word showed the end.
    let etc = moment(&["Pears, etc", ".", " Then", " more"]);
    assert_eq!(etc, (Some(at(20)), Some("Pears, etc.".into())));
    // A period the next piece continues: the later, real end.
    let glued = moment(&["Use Node", ".", "js", " now", ".", " It"]);
    assert_eq!(glued, (Some(at(40)), Some("Use Node.js now.".into())));
    // The answer is its first sentence: the period, not the terminal event.
    assert_eq!(moment(&["Yes", " indeed", "."]).0, Some(at(20)));
}

#[test]
fn a_complete_body_whose_terminal_event_may_have_been_skipped_ends_its_sentence() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 400, false);
    o.on_chunk(chat("no end").as_bytes(), at(1));
    let big = format!("data: {}\n\n", "x".repeat(1000));
    o.on_chunk(big.as_bytes(), at(2));
    let f = o.finish(at(9), StreamEnd::Complete);
    assert!(!f.truncated(), "not judged");
    assert_eq!(f.first_sentence, Some(at(9)));
}

#[test]
fn in_band_error_is_recorded() {
    let t0 = Instant::now();
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.on_chunk(
        b"data: {\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
        t0,
    );
    let f = o.finish(t0, StreamEnd::Complete);
    assert_eq!(f.error.as_deref(), Some("boom"));
    assert!(!f.done);
    assert_eq!(f.first_token, None);
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../llamatap-wire/tests/fixtures/sse/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn usage_is_merged_across_the_events_of_a_stream() {
    // Anthropic sends the input tokens on `message_start` and only the output
    // tokens on `message_delta`; the others send usage once, at the end.
    let usage = |input, output, cached| Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cached_input_tokens: Some(cached),
        reasoning_tokens: None,
    };
    for (name, format, want) in [
        (
            "anthropic_messages.txt",
            StreamFormat::AnthropicMessages,
            usage(22, 11, 8),
        ),
        (
            "anthropic_tool_use.txt",
            StreamFormat::AnthropicMessages,
            usage(120, 9, 0),
        ),
        (
            "openai_responses.txt",
            StreamFormat::OpenAiResponses,
            usage(18, 10, 0),
        ),
        (
            "openai_completion.txt",
            StreamFormat::OpenAiCompletion,
            usage(6, 8, 0),
        ),
        (
            "native_completion.txt",
            StreamFormat::Native,
            usage(6, 8, 0),
        ),
    ] {
        let bytes = fixture(name);
        for size in [1, 97, bytes.len()] {
            let t0 = Instant::now();
            let mut o = StreamObserver::new(format, 1 << 20, false);
            for chunk in bytes.chunks(size) {
                o.on_chunk(chunk, t0);
            }
            let f = o.finish(t0, StreamEnd::Complete);
            assert_eq!(f.usage, Some(want), "{name} in {size}-byte chunks");
            assert!(f.done, "{name}");
        }
    }
}

#[test]
fn a_stream_without_its_terminal_event_is_truncated() {
    for (name, format) in [
        ("openai_chat.txt", StreamFormat::OpenAiChat),
        ("openai_completion.txt", StreamFormat::OpenAiCompletion),
        ("native_completion.txt", StreamFormat::Native),
        ("anthropic_messages.txt", StreamFormat::AnthropicMessages),
        ("openai_responses.txt", StreamFormat::OpenAiResponses),
    ] {
        let bytes = fixture(name);
        let text = String::from_utf8(bytes).unwrap();
        let events: Vec<&str> = text.split_inclusive("\n\n").collect();
        let observe = |body: &str, max_event_bytes: usize| {
            let t0 = Instant::now();
            let mut o = StreamObserver::new(format, max_event_bytes, false);
            o.on_chunk(body.as_bytes(), t0);
            o.finish(t0, StreamEnd::Complete)
        };
        assert!(!observe(&text, 1 << 20).truncated(), "{name} whole");
        let cut = events[..events.len() - 1].concat();
        assert!(
            observe(&cut, 1 << 20).truncated(),
            "{name} without its last event"
        );
        let half = &text[..text.len() - 3];
        assert!(observe(half, 1 << 20).truncated(), "{name} cut mid-event");
        // With the terminal event too large to read, nothing can be said.
        let last = events.last().unwrap().len();
        let facts = observe(&text, last / 2);
        assert!(facts.skipped_events > 0 && !facts.truncated(), "{name}");
    }
}

#[test]
fn finish_reasons_are_capped_in_number_and_length() {
    let t0 = Instant::now();
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    let reason = "z".repeat(10_000);
    let event = format!(
        "data: {}\n\n",
        serde_json::json!({"choices":[{"finish_reason":reason,"index":0,"delta":{}}]})
    );
    for _ in 0..1_000 {
        o.on_chunk(event.as_bytes(), t0);
    }
    let f = o.finish(t0, StreamEnd::Complete);
    assert_eq!(f.finish_reasons.len(), crate::record::MAX_FINISH_REASONS);
    assert!(f
        .finish_reasons
        .iter()
        .all(|r| r.len() <= crate::record::MAX_NAME_BYTES && r.starts_with("zzz")));
}

#[test]
fn the_transcript_keeps_the_text_sent_at_every_cut() {
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"id\":\"c1\",\"created\":5,\"model\":\"tiny.gguf\"}\n\n";
    let body = format!(
        "{role}{}{}{}",
        chat("Once"),
        chat(" upon"),
        chat(" a \"time\"\n")
    );
    let bytes = body.as_bytes();
    let now = Instant::now();
    // Not kept unless asked.
    let mut plain = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    plain.on_chunk(bytes, now);
    assert!(plain.transcript().is_none());
    // Every cut of the bytes gives the same transcript.
    for cut in 0..=bytes.len() {
        let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
        o.keep_transcript(1 << 20, None);
        o.on_chunk(&bytes[..cut], now);
        o.on_chunk(&bytes[cut..], now);
        let t = o.transcript().unwrap();
        assert_eq!(t.text, "Once upon a \"time\"\n", "cut at {cut}");
        assert_eq!(
            t.first_event.as_deref(),
            Some(&role.as_bytes()[6..role.len() - 2])
        );
        assert!(!t.hidden && !t.overflow);
    }
    // Reasoning tokens mark it; a text over the limit is dropped, marked.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.keep_transcript(6, None);
    o.on_chunk(chat("Once").as_bytes(), now);
    assert_eq!(o.transcript().unwrap().text, "Once");
    o.on_chunk(chat(" upon").as_bytes(), now);
    let t = o.transcript().unwrap();
    assert!(t.overflow && t.text.is_empty());
    let thinking =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
    o.on_chunk(thinking.as_bytes(), now);
    assert!(o.transcript().unwrap().hidden);
}

#[test]
fn the_transcript_keeps_token_ids_at_every_chunk_cut_while_each_event_has_them() {
    use llamatap_wire::continuation::Shape;
    let now = Instant::now();
    let with = |text: &str, id: u32| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"logprobs\":{{\"content\":[{{\"id\":{id},\"token\":\"{text}\"}}]}}}}]}}\n\n"
        )
    };
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n";
    let stream = format!("{role}{}{}", with("Once", 7), with(" upon", 8));
    let bytes = stream.as_bytes();
    for cut in 0..=bytes.len() {
        let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
        o.keep_transcript(1 << 20, Some(Shape::Chat));
        o.on_chunk(&bytes[..cut], now);
        o.on_chunk(&bytes[cut..], now);
        let t = o.transcript().unwrap();
        assert_eq!(t.text, "Once upon", "cut at {cut}");
        assert_eq!(t.ids.as_deref(), Some(&[7, 8][..]), "cut at {cut}");
    }
    // An event with text and no ids: the ids are no longer whole.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.keep_transcript(1 << 20, Some(Shape::Chat));
    o.on_chunk(with("Once", 7).as_bytes(), now);
    o.on_chunk(chat(" upon").as_bytes(), now);
    o.on_chunk(with(" a", 9).as_bytes(), now);
    let t = o.transcript().unwrap();
    assert_eq!((t.text.as_str(), t.ids.as_deref()), ("Once upon a", None));
    // Not asked: none kept.
    let mut o = StreamObserver::new(StreamFormat::OpenAiChat, 1 << 20, false);
    o.keep_transcript(1 << 20, None);
    o.on_chunk(with("Once", 7).as_bytes(), now);
    assert_eq!(o.transcript().unwrap().ids, None);
}
