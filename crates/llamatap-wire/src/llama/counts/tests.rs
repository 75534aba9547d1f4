use super::*;
use crate::llama::{Timings, Usage};

/// A chat answer with logprobs, whose text and nested objects pose as the
/// counting fields.
const CHAT: &str = r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"say \"usage\":{\"prompt_tokens\":1}, \\\"id\\\": and ,\"timings\":{}"},"logprobs":{"content":[{"id":1,"token":"a","logprob":-0.1,"bytes":[97],"usage":{"prompt_tokens":7},"top_logprobs":[{"id":2,"token":"\\","logprob":-2.0}]}]},"usage":{"prompt_tokens":3}}],"created":1700000000,"model":"tiny.gguf","system_fingerprint":"b1-x","object":"chat.completion","usage":{"completion_tokens":229,"prompt_tokens":12,"total_tokens":241,"prompt_tokens_details":{"cached_tokens":4}},"id":"chatcmpl-abc","timings":{"cache_n":4,"prompt_n":8,"prompt_ms":1.5,"predicted_n":229,"predicted_ms":80.25}}"#;

/// A native answer whose `timings` come before its probabilities.
const NATIVE: &str = r#"{"index":0,"content":"x","tokens":[],"id_slot":0,"stop":true,"model":"tiny.gguf","tokens_predicted":100,"tokens_evaluated":9,"generation_settings":{"n_predict":100,"timings":{"predicted_n":1}},"prompt":"<s> \"tokens_predicted\":1","has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":108,"timings":{"cache_n":2,"prompt_n":7,"prompt_ms":1.0,"predicted_n":100,"predicted_ms":20.0},"completion_probabilities":[{"id":1,"token":"x","logprob":-0.5,"top_logprobs":[{"id":3,"token":"}","logprob":-1.0}]}]}"#;

fn scan(chunks: &[&[u8]], format: StreamFormat) -> ResponseFacts {
    let mut s = CountScanner::new();
    for c in chunks {
        s.feed(c);
    }
    s.finish(format)
}

/// The counting facts of a whole answer (what a kept copy would give).
fn counts(
    f: &ResponseFacts,
) -> (
    Option<Usage>,
    Option<Timings>,
    Option<String>,
    Option<String>,
) {
    (f.usage, f.timings, f.model.clone(), f.response_id.clone())
}

#[test]
fn reads_a_chat_answers_counts_at_every_cut() {
    let body = CHAT.as_bytes();
    let want = counts(&parse_response(StreamFormat::OpenAiChat, body));
    assert_eq!(want.0.and_then(|u| u.output_tokens), Some(229));
    assert_eq!(want.1.and_then(|t| t.prompt_n), Some(8));
    for cut in 0..=body.len() {
        let (a, b) = body.split_at(cut);
        let got = scan(&[a, b], StreamFormat::OpenAiChat);
        assert_eq!(counts(&got), want, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(counts(&scan(&bytes, StreamFormat::OpenAiChat)), want);
}

#[test]
fn reads_a_native_answers_counts_before_its_probabilities_at_every_cut() {
    let body = NATIVE.as_bytes();
    let want = counts(&parse_response(StreamFormat::Native, body));
    assert_eq!(want.0.and_then(|u| u.output_tokens), Some(100));
    assert_eq!(want.0.and_then(|u| u.input_tokens), Some(9));
    assert_eq!(want.1.and_then(|t| t.predicted_n), Some(100));
    for cut in 0..=body.len() {
        let (a, b) = body.split_at(cut);
        let got = scan(&[a, b], StreamFormat::Native);
        assert_eq!(counts(&got), want, "cut at {cut}");
    }
    for size in [2, 3, 7, 64] {
        let pieces: Vec<&[u8]> = body.chunks(size).collect();
        assert_eq!(counts(&scan(&pieces, StreamFormat::Native)), want);
    }
}

#[test]
fn a_large_answer_is_read_without_being_kept() {
    // Megabytes of probabilities, then the counts.
    let entry = r#"{"id":1,"token":"\"usage\":{}","logprob":-0.1,"top_logprobs":[]},"#;
    let mut body = br#"{"choices":[{"index":0,"logprobs":{"content":["#.to_vec();
    for _ in 0..40_000 {
        body.extend_from_slice(entry.as_bytes());
    }
    body.extend_from_slice(
        br#"{}]}}],"usage":{"completion_tokens":229,"prompt_tokens":12,"total_tokens":241}}"#,
    );
    let mut s = CountScanner::new();
    for piece in body.chunks(16 * 1024) {
        s.feed(piece);
    }
    assert!(s.kept.iter().flatten().map(Vec::len).sum::<usize>() < MAX_FIELD_BYTES);
    let usage = s.finish(StreamFormat::OpenAiChat).usage;
    assert_eq!(usage.and_then(|u| u.output_tokens), Some(229));
    assert_eq!(usage.and_then(|u| u.input_tokens), Some(12));
}

#[test]
fn an_oversized_or_broken_field_is_left_out_alone() {
    let big = format!(
        r#"{{"model":"{}","usage":{{"completion_tokens":5}},"timings":{{"predicted_n":"#,
        "m".repeat(MAX_FIELD_BYTES)
    );
    let got = scan(&[big.as_bytes()], StreamFormat::OpenAiChat);
    assert_eq!(got.model, None);
    assert_eq!(got.usage.and_then(|u| u.output_tokens), Some(5));
    assert_eq!(got.timings, None);
}

#[test]
fn only_the_top_level_object_is_read() {
    let array = r#"[{"tokens_predicted":4,"tokens_evaluated":2,"stop":true}]"#;
    assert_eq!(
        scan(&[array.as_bytes()], StreamFormat::Native),
        ResponseFacts::default()
    );
    let nested = r#"{"a":{"usage":{"completion_tokens":5}},"b":["usage",{"usage":1}]}"#;
    assert_eq!(
        scan(&[nested.as_bytes()], StreamFormat::OpenAiChat),
        ResponseFacts::default()
    );
    for junk in [
        "",
        "not json",
        "\"usage\":{\"completion_tokens\":5}",
        "}}}]]",
    ] {
        assert_eq!(
            scan(&[junk.as_bytes()], StreamFormat::OpenAiChat),
            ResponseFacts::default(),
            "{junk}"
        );
    }
}

#[test]
fn a_duplicated_field_takes_its_last_value() {
    let body = r#"{"usage":{"completion_tokens":1},"usage":{"completion_tokens":2}}"#;
    let got = scan(&[body.as_bytes()], StreamFormat::OpenAiChat);
    assert_eq!(got.usage.and_then(|u| u.output_tokens), Some(2));
}
