//! The rewriter: each format's output, the end, the counts, and the same
//! bytes out whatever the chunking (every cut, and any split).

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::continuation::stream_ids;

const CHAT_FIRST: &[u8] = br#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1700000000,"id":"chatcmpl-x","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}"#;
const TEXT_FIRST: &[u8] = br#"{"choices":[{"text":"Hi","index":0,"logprobs":null,"finish_reason":null}],"created":1700000000,"model":"m","system_fingerprint":"b1","object":"text_completion","id":"cmpl-x"}"#;

/// A native stream as llama-server sends it: `tokens` content events, then
/// its last event with timings.
fn native(tokens: &[&str], stop_type: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let e = json!({"index": 0, "content": t, "tokens": [100 + i], "stop": false,
            "id_slot": 0, "tokens_predicted": i + 1, "tokens_evaluated": 9,
            "completion_probabilities": [{"id": 100 + i, "token": t, "logprob": -0.5}]});
        out.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    let n = tokens.len();
    let last = json!({"index": 0, "content": "", "tokens": [], "stop": true, "id_slot": 0,
        "tokens_predicted": n, "tokens_evaluated": 9, "stop_type": stop_type,
        "timings": {"prompt_n": 4, "cache_n": 5, "predicted_n": n, "prompt_ms": 1.0, "predicted_ms": 2.0}});
    out.extend_from_slice(format!("data: {last}\n\n").as_bytes());
    out
}

fn chat_target(tokens_before: u64, logprobs: bool, include_usage: bool) -> Target {
    Target {
        ids: stream_ids(CHAT_FIRST),
        tokens_before,
        logprobs,
        include_usage,
    }
}

fn run(target: &Target, chunks: &[&[u8]]) -> (Vec<u8>, bool, TargetCounts) {
    let mut r = Rewriter::new(target.clone(), 1 << 20);
    let mut out = Vec::new();
    let mut ended = false;
    for c in chunks {
        ended = r.feed(c, &mut out);
    }
    assert_eq!(ended, r.ended());
    (out, ended, r.counts())
}

fn datas(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap())
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn chat_content_then_finish_and_done() {
    let body = native(&[" the", " rest"], "eos");
    let (out, ended, counts) = run(&chat_target(3, false, false), &[&body]);
    assert!(ended);
    let s = String::from_utf8(out.clone()).unwrap();
    assert!(s.ends_with("data: [DONE]\n\n"), "{s}");
    let d = datas(&out);
    assert_eq!(d.len(), 3, "two tokens and the finish chunk: {s}");
    assert_eq!(d[0]["choices"][0]["delta"]["content"], " the");
    assert_eq!(d[1]["choices"][0]["delta"]["content"], " rest");
    assert_eq!(d[2]["choices"][0]["finish_reason"], "stop");
    for e in &d {
        assert_eq!(e["id"], "chatcmpl-x");
        assert_eq!(e["created"], 1_700_000_000);
        assert!(e["choices"][0].get("logprobs").is_none() || e["choices"][0]["logprobs"].is_null());
    }
    assert_eq!(
        counts,
        TargetCounts {
            prompt_n: Some(4),
            cache_n: Some(5),
            predicted_n: Some(2)
        }
    );
}

#[test]
fn a_limit_finishes_with_length_and_logprobs_when_asked() {
    let body = native(&[" a"], "limit");
    let (out, _, _) = run(&chat_target(0, true, false), &[&body]);
    let d = datas(&out);
    assert_eq!(d[0]["choices"][0]["logprobs"]["content"][0]["token"], " a");
    assert_eq!(d.last().unwrap()["choices"][0]["finish_reason"], "length");
}

#[test]
fn usage_only_when_asked_and_counted_across_the_cut() {
    // The target's last event counts its prompt (`tokens_evaluated`, 9:
    // the conversation and the 3 tokens handed back) and what it generated.
    let body = native(&[" a"], "eos");
    let (out, _, _) = run(&chat_target(3, false, false), &[&body]);
    assert!(datas(&out).iter().all(|e| e.get("usage").is_none()));
    let (out, _, _) = run(&chat_target(3, false, true), &[&body]);
    let usage = datas(&out)
        .into_iter()
        .find_map(|e| e.get("usage").cloned())
        .expect("a usage chunk");
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(usage["prompt_tokens"], 6);
}

#[test]
fn text_completion_chunks_keep_the_clients_ids() {
    let target = Target {
        ids: stream_ids(TEXT_FIRST),
        tokens_before: 1,
        logprobs: false,
        include_usage: false,
    };
    let (out, ended, _) = run(&target, &[&native(&[" there"], "eos")]);
    assert!(ended);
    let d = datas(&out);
    assert_eq!(d[0]["choices"][0]["text"], " there");
    assert_eq!(d[0]["id"], "cmpl-x");
    assert_eq!(d[0]["object"], "text_completion");
}

#[test]
fn native_events_count_the_tokens_before() {
    let target = Target {
        ids: None,
        tokens_before: 7,
        logprobs: false,
        include_usage: false,
    };
    let (out, ended, _) = run(&target, &[&native(&[" x"], "eos")]);
    assert!(ended);
    let d = datas(&out);
    assert_eq!(d[0]["tokens_predicted"], 8);
    assert_eq!(d[1]["tokens_predicted"], 8);
    assert_eq!(d[1]["stop"], true);
}

#[test]
fn nothing_after_the_end() {
    let body = native(&[" a"], "eos");
    let mut r = Rewriter::new(chat_target(0, false, false), 1 << 20);
    let mut out = Vec::new();
    assert!(r.feed(&body, &mut out));
    let len = out.len();
    assert!(r.feed(&native(&[" b"], "eos"), &mut out));
    assert_eq!(out.len(), len);
}

#[test]
fn a_stream_without_its_last_event_has_not_ended() {
    let body = native(&[" a", " b"], "eos");
    let cut = body.len() - 10;
    let (out, ended, counts) = run(&chat_target(0, false, false), &[&body[..cut]]);
    assert!(!ended);
    assert_eq!(datas(&out).len(), 2);
    assert_eq!(counts, TargetCounts::default());
}

#[test]
fn every_cut_gives_the_same_bytes() {
    let body = native(&[" one", " two", " three"], "limit");
    for target in [
        chat_target(2, true, true),
        Target {
            ids: None,
            tokens_before: 2,
            logprobs: false,
            include_usage: false,
        },
    ] {
        let (whole, _, counts) = run(&target, &[&body]);
        for at in 0..=body.len() {
            let (out, ended, c) = run(&target, &[&body[..at], &body[at..]]);
            assert_eq!(out, whole, "cut at {at}");
            assert!(ended);
            assert_eq!(c, counts);
        }
    }
}

proptest! {
    #[test]
    fn any_split_gives_the_same_bytes(
        cuts in proptest::collection::vec(0usize..2000, 0..12),
        tokens in proptest::collection::vec("[ -~é。]{0,6}", 0..6),
        native_client in any::<bool>(),
    ) {
        let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let body = native(&tokens, "eos");
        let target = if native_client {
            Target { ids: None, tokens_before: 1, logprobs: false, include_usage: false }
        } else {
            chat_target(1, true, true)
        };
        let (whole, _, _) = run(&target, &[&body]);
        let mut at: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut from = 0;
        for c in at {
            chunks.push(&body[from..c]);
            from = c;
        }
        chunks.push(&body[from..]);
        let (out, ended, _) = run(&target, &chunks);
        prop_assert!(ended);
        prop_assert_eq!(out, whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut r = Rewriter::new(chat_target(0, true, true), 64);
        let mut out = Vec::new();
        r.feed(&bytes, &mut out);
    }
}
