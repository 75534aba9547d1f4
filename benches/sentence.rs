//! Benchmarks of the pure per-request work: the first-sentence rule fed
//! token deltas, `traceparent` parsing and request-body inspection.
//!
//! Run: `cargo bench --bench sentence`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llamatap_wire::request::inspect_body;
use llamatap_wire::sentence::{SentenceRule, MAX_SENTENCE_CHARS};
use llamatap_wire::tracecontext::TraceParent;
use std::hint::black_box;
use std::time::Duration;

/// An answer whose first sentence ends after about 20 four-char tokens.
const ANSWER: &str = "Sure, the weather in Paris tomorrow looks mild and mostly sunny all day. \
    Expect a high of 21 degrees in the afternoon, with a light breeze from the west. \
    If you plan to walk along the Seine, bring a light jacket for the evening.";

/// A Chinese answer, streamed one or two characters per token.
const ANSWER_ZH: &str =
    "明天巴黎的天气温和，大部分时间晴朗，下午最高气温二十一度。如果你打算散步，晚上带一件薄外套。";

/// `text` cut into tokens of `chars` characters, as a model streams it.
fn tokens(text: &str, chars: usize) -> Vec<&str> {
    let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
    let mut out = Vec::new();
    for (i, &from) in bounds.iter().enumerate().step_by(chars) {
        let to = bounds.get(i + chars).copied().unwrap_or(text.len());
        out.push(&text[from..to]);
    }
    out
}

/// Feeds deltas until the first sentence; returns how many were fed.
fn first_sentence(deltas: &[&str]) -> (usize, usize) {
    let mut rule = SentenceRule::new();
    for (i, delta) in deltas.iter().enumerate() {
        if let Some(sentence) = rule.push(black_box(delta)) {
            return (i + 1, sentence.chars);
        }
    }
    (deltas.len(), rule.finish().map_or(0, |s| s.chars))
}

fn bench_sentence(c: &mut Criterion) {
    let no_end = "word ".repeat(MAX_SENTENCE_CHARS);
    let workloads = [
        ("english_4_char_tokens", tokens(ANSWER, 4)),
        ("chinese_2_char_tokens", tokens(ANSWER_ZH, 2)),
        ("no_end_until_cap", tokens(&no_end, 4)),
    ];
    let mut group = c.benchmark_group("sentence_rule");
    for (name, deltas) in &workloads {
        let (fed, chars) = first_sentence(deltas);
        let scanned: usize = deltas[..fed].iter().map(|d| d.chars().count()).sum();
        eprintln!("{name}: first sentence of {chars} chars after {fed} deltas, {scanned} chars");
        let fed = u64::try_from(fed).unwrap_or(u64::MAX);
        let scanned = u64::try_from(scanned).unwrap_or(u64::MAX);
        group.throughput(Throughput::Elements(scanned));
        group.bench_with_input(BenchmarkId::new("chars", name), deltas, |b, d| {
            b.iter(|| first_sentence(d))
        });
        group.throughput(Throughput::Elements(fed));
        group.bench_with_input(BenchmarkId::new("deltas", name), deltas, |b, d| {
            b.iter(|| first_sentence(d))
        });
    }
    group.finish();
}

fn bench_traceparent(c: &mut Criterion) {
    let valid = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let invalid = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0X";
    let mut group = c.benchmark_group("traceparent");
    group.bench_function("parse_valid", |b| {
        b.iter(|| TraceParent::parse(black_box(valid)))
    });
    group.bench_function("parse_invalid", |b| {
        b.iter(|| TraceParent::parse(black_box(invalid)))
    });
    group.finish();
}

/// A streaming chat body of about `bytes` bytes, most of it in messages.
fn chat_body(bytes: usize) -> String {
    let turn = r#"{"role":"user","content":"Tell me about the weather in Paris, please, and whether I need an umbrella."},"#;
    let mut messages = turn.repeat(bytes / turn.len());
    messages.pop();
    format!(
        r#"{{"model":"qwen2.5-0.5b-instruct-q4_k_m.gguf","messages":[{messages}],"stream":true,"max_tokens":256,"temperature":0.7,"top_p":0.9,"seed":42}}"#
    )
}

fn bench_inspect_body(c: &mut Criterion) {
    let mut group = c.benchmark_group("inspect_body");
    for (name, size) in [("chat_2kb", 2 * 1024), ("chat_100kb", 100 * 1024)] {
        let body = chat_body(size);
        group.throughput(Throughput::Bytes(u64::try_from(body.len()).unwrap_or(0)));
        group.bench_with_input(BenchmarkId::from_parameter(name), &body, |b, body| {
            b.iter(|| inspect_body(black_box(body.as_bytes())))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_sentence, bench_traceparent, bench_inspect_body
}
criterion_main!(benches);
