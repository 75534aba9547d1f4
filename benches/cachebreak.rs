//! Benchmarks of the cache-break diagnosis, against the routing decision's
//! cost (`benches/route.rs`): building a prompt's digest from the parsed
//! body, judging a turn against a book of 10,000 conversations, and the one
//! parse of the request body on the one-upstream path (the facts alone,
//! against the facts with the prompt's fields kept as a tree, and the facts
//! with the prompt digested as it is parsed, which the proxy does).
//!
//! `large`: two 1 MiB chat bodies read as the proxy reads them with one
//! upstream (the facts and the prompt's digest), next to the same bytes on
//! `/v1/completions` (the facts alone): one of long messages, and one whose
//! `tools` is 330,000 zeros (the most JSON values per byte).
//!
//! Run: `cargo bench --bench cachebreak -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use llamatap_policy::cachebreak::{self, Book, Observed, PromptDigest, DEFAULT_BUDGET_BYTES};
use llamatap_policy::router::Chain;
use llamatap_wire::request::{self, Route};
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Duration;

/// Conversations in the book before measuring.
const CONVERSATIONS: usize = 10_000;
/// Turns each conversation has had.
const TURNS: usize = 5;
/// Distinct system prompts shared by the conversations.
const SYSTEMS: usize = 20;

/// Turn `turn` (0-based) of conversation `id`, as in `benches/route.rs`.
fn body(id: usize, turn: usize) -> Value {
    let system = format!(
        "You are assistant number {}. {}",
        id % SYSTEMS,
        "Answer briefly and cite the forecast. ".repeat(15)
    );
    let mut messages = vec![json!({"role": "system", "content": system})];
    for at in 0..=2 * turn {
        let (role, text) = if at % 2 == 0 {
            ("user", format!("Conversation {id}, question {}: ", at / 2))
        } else {
            (
                "assistant",
                format!("Conversation {id}, answer {}: ", at / 2),
            )
        };
        let padding = "what will the weather be like tomorrow in Paris? ".repeat(3 + (id + at) % 3);
        messages.push(json!({"role": role, "content": text + &padding}));
    }
    json!({"model": "qwen2.5-0.5b-instruct", "messages": messages, "stream": true})
}

/// Zeros in the pathological body's `tools`.
const ZEROS: usize = 330_000;
/// The proxy's default inspection limit (`telemetry.max_inspect_bytes`).
const MIB: usize = 1 << 20;

/// A chat body of one user message whose `tools` is `zeros` zeros.
fn zeros_body(zeros: usize) -> Vec<u8> {
    let mut b = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[0"#.to_vec();
    for _ in 1..zeros {
        b.extend_from_slice(b", 0");
    }
    b.extend_from_slice(b"]}");
    b
}

/// A chat body of 64 long messages, just under 1 MiB.
fn long_messages_body() -> Vec<u8> {
    let text = "The forecast for tomorrow: light rain in the morning, then sun. ".repeat(250);
    let messages: Vec<Value> = (0..64)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("{i}: {text}")})
        })
        .collect();
    serde_json::to_vec(&json!({"model": "m", "messages": messages, "stream": true}))
        .unwrap_or_default()
}

/// What the proxy does with a complete chat body on one upstream
/// (`proxy::cachebreak::inspect`): the facts and the prompt's digest, in
/// one pass.
fn chat_path(body: &[u8]) -> (request::RequestFacts, Option<PromptDigest>) {
    cachebreak::inspect(Route::ChatCompletions, body, false)
}

fn large(c: &mut Criterion) {
    let mut group = c.benchmark_group("cachebreak_1mib");
    for (name, body) in [
        ("long_messages", long_messages_body()),
        ("tools_330k_zeros", zeros_body(ZEROS)),
    ] {
        assert!(body.len() <= MIB, "{name}: {} bytes", body.len());
        eprintln!("{name}: {} bytes", body.len());
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{name}/completions_facts"), |b| {
            b.iter(|| request::inspect_body(black_box(&body)))
        });
        group.bench_function(format!("{name}/chat_facts_and_digest"), |b| {
            b.iter(|| chat_path(black_box(&body)))
        });
    }
    group.finish();
}

/// Where the time goes: the prompt kept as a `Value` tree (how the chat
/// path read it before it digested the prompt as it parsed it), and the
/// digest of that tree; and on the fleet's path (bodies of at most 64 KiB,
/// parsed whole into a `Value` for the chain and the digest).
fn breakdown(c: &mut Criterion) {
    let mut group = c.benchmark_group("cachebreak_parts");
    let zeros = zeros_body(ZEROS);
    let (_, prompt) = request::inspect_body_and_prompt(&zeros);
    group.bench_function("tools_330k_zeros/prompt_parse", |b| {
        b.iter(|| request::inspect_body_and_prompt(black_box(&zeros)))
    });
    group.bench_function("tools_330k_zeros/digest_of_parsed", |b| {
        b.iter(|| PromptDigest::from_json(Route::ChatCompletions, black_box(&prompt), false))
    });
    // The fleet's pre-read: at most 64 KiB, a sixteenth of the zeros.
    let small = zeros_body(ZEROS / 16);
    eprintln!("fleet body: {} bytes", small.len());
    let value: Value = serde_json::from_slice(&small).unwrap_or_default();
    group.bench_function("fleet_64kib_zeros/inspect_body", |b| {
        b.iter(|| request::inspect_body(black_box(&small)))
    });
    group.bench_function("fleet_64kib_zeros/value_parse", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&small)).is_ok())
    });
    group.bench_function("fleet_64kib_zeros/chain_from_json", |b| {
        b.iter(|| Chain::from_json(Route::ChatCompletions, black_box(&value)))
    });
    group.bench_function("fleet_64kib_zeros/digest_from_json", |b| {
        b.iter(|| PromptDigest::from_json(Route::ChatCompletions, black_box(&value), false))
    });
    group.finish();
}

fn digest(id: usize, turn: usize) -> PromptDigest {
    PromptDigest::from_json(Route::ChatCompletions, &body(id, turn), false).unwrap_or_default()
}

/// What llama-server reports for turn `turn`: the previous prompt reused.
fn observed(turn: usize) -> Observed {
    let tokens = 200 + 100 * turn as u64;
    Observed {
        cache_n: Some(tokens.saturating_sub(100)),
        prompt_n: Some(100),
        prompt_ms: Some(50.0),
        upstream: Some(1),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cachebreak");
    group.throughput(Throughput::Elements(1));
    let sixth = body(7, TURNS);
    let bytes = serde_json::to_vec(&sixth).unwrap_or_default();
    eprintln!("the 6th turn's body: {} bytes", bytes.len());

    group.bench_function("digest_from_json", |b| {
        b.iter(|| PromptDigest::from_json(Route::ChatCompletions, black_box(&sixth), false))
    });
    group.bench_function("chain_from_json", |b| {
        b.iter(|| Chain::from_json(Route::ChatCompletions, black_box(&sixth)))
    });
    group.bench_function("inspect_body", |b| {
        b.iter(|| request::inspect_body(black_box(&bytes)))
    });
    group.bench_function("inspect_body_and_prompt", |b| {
        b.iter(|| request::inspect_body_and_prompt(black_box(&bytes)))
    });
    group.bench_function("inspect_chat", |b| b.iter(|| chat_path(black_box(&bytes))));

    let mut book = Book::new(DEFAULT_BUDGET_BYTES * 4);
    for turn in 0..TURNS {
        for id in 0..CONVERSATIONS {
            black_box(book.diagnose(digest(id, turn), observed(turn)));
        }
    }
    eprintln!(
        "book: {} conversations in {} accounted bytes",
        book.len(),
        book.bytes()
    );
    let next: Vec<PromptDigest> = (0..1000).map(|id| digest(id * 7, TURNS)).collect();
    let mut at = 0;
    group.bench_function("diagnose_next_turn", |b| {
        b.iter_batched(
            || {
                at = (at + 1) % next.len();
                next[at].clone()
            },
            |d| black_box(book.diagnose(d, observed(TURNS))),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench, large, breakdown
}
criterion_main!(benches);
