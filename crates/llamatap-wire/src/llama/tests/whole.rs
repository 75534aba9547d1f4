#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Non-streaming bodies, shaped like llama-server's `to_json_*` of
//! `server_task_result_cmpl_final`.

use crate::llama::*;

const TIMINGS: &str = r#"{"cache_n":4,"prompt_n":8,"prompt_ms":9.5,"prompt_per_token_ms":1.1875,"prompt_per_second":842.1052631578947,"predicted_n":5,"predicted_ms":6.25,"predicted_per_token_ms":1.25,"predicted_per_second":800.0}"#;

fn timings() -> Option<Timings> {
    Some(Timings {
        prompt_n: Some(8),
        prompt_ms: Some(9.5),
        predicted_n: Some(5),
        predicted_ms: Some(6.25),
        cache_n: Some(4),
    })
}

fn usage(input: u64, output: u64, cached: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cached_input_tokens: Some(cached),
        reasoning_tokens: None,
    })
}

fn reasons(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn openai_chat_body() {
    let body = format!(
        r#"{{"choices":[{{"finish_reason":"stop","index":0,"message":{{"role":"assistant","content":"Hé 🦙\n","reasoning_content":"hidden thoughts"}}}}],"created":1764493200,"model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{{"completion_tokens":5,"prompt_tokens":12,"total_tokens":17,"prompt_tokens_details":{{"cached_tokens":4}}}},"id":"chatcmpl-abc","timings":{TIMINGS}}}"#
    );
    let facts = parse_response(StreamFormat::OpenAiChat, body.as_bytes());
    assert_eq!(
        facts,
        ResponseFacts {
            finish_reasons: reasons(&["stop"]),
            timings: timings(),
            usage: usage(12, 5, 4),
            model: Some("tiny.gguf".into()),
            response_id: Some("chatcmpl-abc".into()),
            visible_text_chars: 5,
            error: None,
        }
    );
}

#[test]
fn openai_chat_body_with_two_choices_and_a_tool_call() {
    let body = r#"{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"},"id":"x"}]}},{"finish_reason":"length","index":1,"message":{"role":"assistant","content":"abc"}}],"model":"tiny.gguf","object":"chat.completion","id":"chatcmpl-2"}"#;
    let facts = parse_response(StreamFormat::OpenAiChat, body.as_bytes());
    assert_eq!(facts.finish_reasons, reasons(&["tool_calls", "length"]));
    assert_eq!(
        (facts.visible_text_chars, facts.timings, facts.usage),
        (3, None, None)
    );
}

#[test]
fn openai_completion_body() {
    let body = format!(
        r#"{{"choices":[{{"text":" upon a time","index":0,"logprobs":null,"finish_reason":"length"}}],"created":1764493200,"model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"text_completion","usage":{{"completion_tokens":5,"prompt_tokens":12,"total_tokens":17,"prompt_tokens_details":{{"cached_tokens":4}}}},"id":"chatcmpl-c","timings":{TIMINGS}}}"#
    );
    let facts = parse_response(StreamFormat::OpenAiCompletion, body.as_bytes());
    assert_eq!(facts.finish_reasons, reasons(&["length"]));
    assert_eq!(
        (facts.visible_text_chars, facts.timings, facts.usage),
        (12, timings(), usage(12, 5, 4))
    );
}

fn native(content: &str, stop_type: &str) -> String {
    format!(
        r#"{{"index":0,"content":"{content}","tokens":[],"id_slot":0,"stop":true,"model":"tiny.gguf","tokens_predicted":5,"tokens_evaluated":12,"generation_settings":{{"n_predict":5,"samplers":["top_k"]}},"prompt":"<s> Once","has_new_line":false,"truncated":false,"stop_type":"{stop_type}","stopping_word":"","tokens_cached":16,"timings":{TIMINGS}}}"#
    )
}

#[test]
fn native_body_and_multi_prompt_array() {
    let one = native("ab\\u00e9", "eos");
    let facts = parse_response(StreamFormat::Native, one.as_bytes());
    assert_eq!(
        facts,
        ResponseFacts {
            finish_reasons: reasons(&["eos"]),
            timings: timings(),
            usage: usage(12, 5, 4),
            model: Some("tiny.gguf".into()),
            response_id: None,
            visible_text_chars: 3,
            error: None,
        }
    );
    let two = format!("[{},{}]", native("ab", "word"), native("cde", "limit"));
    let facts = parse_response(StreamFormat::Native, two.as_bytes());
    assert_eq!(facts.finish_reasons, reasons(&["word", "limit"]));
    assert_eq!(
        (facts.visible_text_chars, facts.usage),
        (5, usage(24, 10, 8))
    );
}

#[test]
fn anthropic_body() {
    let body = r#"{"id":"chatcmpl-an","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":""},{"type":"text","text":"Hi é"},{"type":"tool_use","id":"t","name":"f","input":{}}],"model":"tiny.gguf","stop_reason":"tool_use","stop_sequence":null,"usage":{"cache_read_input_tokens":3,"input_tokens":9,"output_tokens":7}}"#;
    let facts = parse_response(StreamFormat::AnthropicMessages, body.as_bytes());
    assert_eq!(
        facts,
        ResponseFacts {
            finish_reasons: reasons(&["tool_use"]),
            timings: None,
            usage: usage(12, 7, 3),
            model: Some("tiny.gguf".into()),
            response_id: Some("chatcmpl-an".into()),
            visible_text_chars: 4,
            error: None,
        }
    );
}

#[test]
fn responses_body() {
    let body = r#"{"completed_at":1764493200,"created_at":1764493200,"id":"resp_x","model":"tiny.gguf","object":"response","output":[{"id":"rs_1","summary":[],"type":"reasoning","content":[{"text":"think","type":"reasoning_text"}],"encrypted_content":"","status":"completed"},{"content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Answer!"}],"id":"msg_1","role":"assistant","status":"completed","type":"message"},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{}","call_id":"call_1","name":"f"}],"status":"completed","usage":{"input_tokens":20,"output_tokens":9,"total_tokens":29,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3}}}"#;
    let facts = parse_response(StreamFormat::OpenAiResponses, body.as_bytes());
    assert_eq!(
        facts,
        ResponseFacts {
            finish_reasons: reasons(&["completed"]),
            timings: None,
            usage: Some(Usage {
                reasoning_tokens: Some(3),
                ..usage(20, 9, 2).unwrap()
            }),
            model: Some("tiny.gguf".into()),
            response_id: Some("resp_x".into()),
            visible_text_chars: 7,
            error: None,
        }
    );
    let incomplete = r#"{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#;
    let facts = parse_response(StreamFormat::OpenAiResponses, incomplete.as_bytes());
    assert_eq!(facts.finish_reasons, reasons(&["max_output_tokens"]));
}

#[test]
fn error_bodies_in_every_format() {
    let body = br#"{"error":{"code":400,"message":"request (3000 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3000,"n_ctx":2048}}"#;
    for format in StreamFormat::ALL {
        let facts = parse_response(format, body);
        assert!(
            facts
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with("request (3000 tokens)")),
            "{format}"
        );
        assert!(
            facts.finish_reasons.is_empty() && facts.usage.is_none(),
            "{format}"
        );
    }
    let anthropic =
        br#"{"type":"error","error":{"type":"not_found_error","message":"model missing"}}"#;
    let facts = parse_response(StreamFormat::AnthropicMessages, anthropic);
    assert_eq!(facts.error.as_deref(), Some("model missing"));
}

#[test]
fn streamed_native_body_reads_like_a_whole_one() {
    // A non-streaming client of a streaming-shaped final object still parses.
    let facts = parse_response(
        StreamFormat::Native,
        br#"{"content":"","stop":true,"stop_type":"limit"}"#,
    );
    assert_eq!(
        (facts.finish_reasons, facts.visible_text_chars),
        (reasons(&["limit"]), 0)
    );
}
