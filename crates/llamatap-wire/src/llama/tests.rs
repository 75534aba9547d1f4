#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod event;
mod fast;
mod whole;

use std::borrow::Cow;

use super::*;
use crate::sse::SseReader;

/// A stream's deltas folded the way the proxy would.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    events: usize,
    visible: String,
    visible_events: usize,
    hidden_tokens: usize,
    finish: Vec<String>,
    timings: Option<Timings>,
    timings_events: usize,
    usage: Option<Usage>,
    model: Option<String>,
    response_id: Option<String>,
    error: Option<String>,
    done: usize,
}

fn summarize(format: StreamFormat, chunks: &[&[u8]]) -> Summary {
    let mut reader = SseReader::new(1 << 20);
    let mut s = Summary::default();
    for chunk in chunks {
        reader.feed(chunk, |event| {
            let d = parse_event(format, event);
            s.events += 1;
            if let Some(v) = &d.visible {
                s.visible.push_str(v);
                s.visible_events += 1;
            }
            s.hidden_tokens += usize::from(d.hidden_token);
            s.finish.extend(d.finish_reason.map(Cow::into_owned));
            if d.timings.is_some() {
                s.timings = d.timings;
                s.timings_events += 1;
            }
            if let Some(u) = d.usage {
                s.usage = Some(s.usage.unwrap_or_default().merge(u));
            }
            s.model = s.model.take().or(d.model.map(Cow::into_owned));
            s.response_id = s.response_id.take().or(d.response_id.map(Cow::into_owned));
            s.error = s.error.take().or(d.error.map(Cow::into_owned));
            s.done += usize::from(d.done);
        });
    }
    assert!(!reader.has_pending(), "fixture ends cleanly");
    s
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/sse/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn timings(
    cache_n: u64,
    prompt_n: u64,
    prompt_ms: f64,
    predicted_n: u64,
    predicted_ms: f64,
) -> Option<Timings> {
    Some(Timings {
        prompt_n: Some(prompt_n),
        prompt_ms: Some(prompt_ms),
        predicted_n: Some(predicted_n),
        predicted_ms: Some(predicted_ms),
        cache_n: Some(cache_n),
    })
}

fn usage(input: u64, output: u64, cached: Option<u64>) -> Option<Usage> {
    Some(Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cached_input_tokens: cached,
        reasoning_tokens: None,
    })
}

/// Checks a fixture whole, byte by byte, and with a 4 KiB-ish odd chunking.
fn check(name: &str, format: StreamFormat, want: Summary) {
    let bytes = fixture(name);
    assert_eq!(summarize(format, &[&bytes]), want, "{name}");
    let bytes_1: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(summarize(format, &bytes_1), want, "{name} byte by byte");
    let odd: Vec<&[u8]> = bytes.chunks(97).collect();
    assert_eq!(summarize(format, &odd), want, "{name} in 97-byte chunks");
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

// === fixtures ===

#[test]
fn openai_chat_stream() {
    check(
        "openai_chat.txt",
        StreamFormat::OpenAiChat,
        Summary {
            events: 14,
            visible: "Hello, world!\n\nCafé 🦙 \"quoted\" tab\tend.".into(),
            visible_events: 11,
            finish: vec!["stop".into()],
            timings: timings(0, 12, 15.432, 11, 13.75),
            timings_events: 1,
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-Zk3mQ8vR2tLw9XcY7bN4pJ6hF1sD0aGe"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn openai_chat_stream_with_reasoning_tools_and_usage() {
    check(
        "openai_chat_tools.txt",
        StreamFormat::OpenAiChat,
        Summary {
            events: 17,
            hidden_tokens: 13,
            finish: vec!["tool_calls".into()],
            timings: timings(160, 21, 30.5, 14, 18.2),
            timings_events: 1,
            usage: usage(181, 14, Some(160)),
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-Rq7TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn openai_chat_stream_with_error() {
    check(
        "openai_chat_error.txt",
        StreamFormat::OpenAiChat,
        Summary {
            events: 4,
            visible: "Partial".into(),
            visible_events: 2,
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-Er8TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            error: some("Failed to decode the batch (n_ctx too small?)"),
            ..Summary::default()
        },
    );
}

#[test]
fn openai_completion_stream() {
    check(
        "openai_completion.txt",
        StreamFormat::OpenAiCompletion,
        Summary {
            events: 10,
            visible: " upon a time, there was a llama".into(),
            visible_events: 8,
            finish: vec!["length".into()],
            timings: timings(0, 6, 7.81, 8, 9.6),
            timings_events: 2,
            usage: usage(6, 8, Some(0)),
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-Cm1TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn native_stream() {
    check(
        "native_completion.txt",
        StreamFormat::Native,
        Summary {
            events: 9,
            visible: " upon a time a llama sang\n".into(),
            visible_events: 8,
            finish: vec!["limit".into()],
            timings: timings(0, 6, 7.4, 8, 10.25),
            timings_events: 2,
            usage: usage(6, 8, Some(0)),
            model: some("tiny.gguf"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn anthropic_stream_with_thinking() {
    check(
        "anthropic_messages.txt",
        StreamFormat::AnthropicMessages,
        Summary {
            events: 17,
            visible: "Hi there! ¿Qué tal?".into(),
            visible_events: 5,
            hidden_tokens: 4,
            finish: vec!["end_turn".into()],
            usage: usage(22, 11, Some(8)),
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-An5TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn anthropic_stream_with_tool_use() {
    check(
        "anthropic_tool_use.txt",
        StreamFormat::AnthropicMessages,
        Summary {
            events: 10,
            visible: "Checking.".into(),
            visible_events: 1,
            hidden_tokens: 3,
            finish: vec!["tool_use".into()],
            usage: usage(120, 9, Some(0)),
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-At6TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            done: 1,
            ..Summary::default()
        },
    );
}

#[test]
fn anthropic_stream_with_error() {
    check(
        "anthropic_error.txt",
        StreamFormat::AnthropicMessages,
        Summary {
            events: 4,
            visible: "Hel".into(),
            visible_events: 1,
            usage: usage(5, 0, Some(0)),
            model: some("tiny.gguf"),
            response_id: some("chatcmpl-Ae7TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            error: some("Failed to decode the batch"),
            ..Summary::default()
        },
    );
}

#[test]
fn responses_stream() {
    check(
        "openai_responses.txt",
        StreamFormat::OpenAiResponses,
        Summary {
            events: 20,
            visible: "The answer is 42.\nDone".into(),
            visible_events: 7,
            hidden_tokens: 3,
            finish: vec!["completed".into()],
            timings: timings(0, 18, 22.0, 9, 11.7),
            timings_events: 2,
            usage: usage(18, 10, Some(0)),
            model: some("tiny.gguf"),
            response_id: some("resp_Rs9TnK2mW9bX4cV8zL1pH5sJ3gF6dA0e"),
            done: 1,
            ..Summary::default()
        },
    );
}
